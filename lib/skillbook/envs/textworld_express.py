"""TextWorldExpress (Jansen & Côté, 2022): 8 games, 1,000 train / dev / test seeds each."""
from __future__ import annotations

import json

from .base import StepResult, Task, TaskIdError
from .jvm import JavaEnv

GAMES = ("cookingworld", "twc", "coin", "mapreader", "arithmetic", "sorting", "simonsays", "peckingorder")


def _param_string(game: str, params) -> str:
    """TextWorldExpress's 'key=value,...' string; a mapping is joined in its order."""
    if isinstance(params, str):
        return params
    if not isinstance(params, dict):
        raise ValueError(f"game_params[{game!r}]: a 'key=value,...' string or a mapping, not {type(params).__name__}")
    bad = [k for k, v in params.items() if not isinstance(v, (int, str)) or any(c in f"{k}{v}" for c in ",= ")]
    if bad:
        raise ValueError(f"game_params[{game!r}]: keys {bad} need plain names and int or word values")
    return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in params.items())


def _param_strings(game_params: dict) -> dict[str, str]:
    return {g: _param_string(g, p) for g, p in game_params.items()}


class TextWorldExpress(JavaEnv):
    """Adapter over `textworld_express.TextWorldExpressEnv`; task index i = i-th seed of the official fold.

    `game_params` maps a game to its TextWorldExpress parameters, as the benchmark's string
    ('numLocations=1,numIngredients=2') or as a mapping ({'numLocations': 1, 'numIngredients': 2}, the
    form a papermill parameters cell can declare); games not named use the benchmark's defaults.
    """

    name = "twx"
    TASK_TYPES = GAMES
    _PACKAGE = "textworld-express"

    def __init__(self, step_limit: int = 1000, game_params: dict[str, str | dict] | None = None):
        super().__init__(step_limit)
        self.game_params = _param_strings(game_params or {})
        unknown = set(self.game_params) - set(GAMES)
        if unknown:
            raise TaskIdError(f"game_params for unknown games {sorted(unknown)}; valid: {', '.join(GAMES)}")
        self._loaded: str | None = None

    @property
    def options(self) -> dict:
        return {"step_limit": self.step_limit, "game_params": dict(self.game_params)}

    @staticmethod
    def canonical_options(options: dict) -> dict:
        """game_params in the benchmark's string form, whichever form the caller used."""
        if options.get("game_params"):
            options["game_params"] = _param_strings(options["game_params"])
        return options

    def _config_tag(self) -> str:
        import hashlib
        return hashlib.sha256(json.dumps(self.game_params, sort_keys=True).encode()).hexdigest()[:10]

    def _launch(self):
        from textworld_express import TextWorldExpressEnv
        self._loaded = None
        return TextWorldExpressEnv(envStepLimit=self.step_limit)

    def _ensure_game(self, game: str) -> None:
        if self._loaded != game:
            self.sim.load(game, self.game_params.get(game, ""))
            self._loaded = game

    def _split_ids(self, task_type: str, split: str) -> list[int]:
        self._ensure_game(task_type)
        return {"train": self.sim.getValidSeedsTrain, "dev": self.sim.getValidSeedsDev,
                "test": self.sim.getValidSeedsTest}[split]()

    def _reset(self, task: Task, gold: bool):
        self._ensure_game(task.task_type)
        return self.sim.reset(seed=task.native_id, gameFold=task.split, generateGoldPath=gold)

    def _load(self, task: Task) -> tuple[str, dict]:
        obs, info = self._reset(task, gold=False)
        return obs, {"instruction": info["taskDescription"], "valid": list(info["validActions"])}

    def _raw_step(self, action: str) -> StepResult:
        obs, _reward, done, info = self.sim.step(action)
        score = max(0.0, min(1.0, float(info["score"])))
        return StepResult(obs, score, bool(done), {
            "raw_score": info["scoreRaw"], "valid": list(info["validActions"]),
            "success": bool(info["tasksuccess"]), "failure": bool(info["taskfailure"]),
            "moves": info.get("numMoves")})

    def _gold(self, task: Task) -> list[str]:
        self._reset(task, gold=True)
        return list(self.sim.getGoldActionSequence())
