"""TextWorldExpress (Jansen & Côté, 2022): 8 games, 1,000 train / dev / test seeds each."""
from __future__ import annotations

import hashlib
import json

from .base import SimulatorError, StepResult, Task, TaskIdError
from .jvm import CALL_TIMEOUT_S, LAUNCH_TIMEOUT_S, JavaEnv, Simulator

GAMES = ("cookingworld", "twc", "coin", "mapreader", "arithmetic", "sorting", "simonsays", "peckingorder")

# Each game's own gold agent (the Scala class the package's `mkGameWithGoldPath` uses).
GOLD_AGENTS = {"cookingworld": "CookingWorldGoldAgent", "twc": "TWCGoldAgent", "coin": "CoinGoldAgent",
               "mapreader": "MapReaderGoldAgent", "arithmetic": "ArithmeticGoldAgent",
               "sorting": "SortingGoldAgent", "simonsays": "SimonSaysGoldAgent",
               "peckingorder": "PeckingOrderGoldAgent"}
GOLD_ATTEMPTS = 50         # as the package: a gold agent whose random walk fails is run again
# Bumped whenever the gold paths this adapter returns change: per-user caches of facts derived from them
# (gold lengths, the games of seeds) are kept under it, so old and new paths never mix.
GOLD_VERSION = "seeded1"


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

    def __init__(self, step_limit: int = 1000, game_params: dict[str, str | dict] | None = None,
                 call_timeout_s: float = CALL_TIMEOUT_S, launch_timeout_s: float = LAUNCH_TIMEOUT_S):
        super().__init__(step_limit, call_timeout_s, launch_timeout_s)
        self.game_params = _param_strings(game_params or {})
        unknown = set(self.game_params) - set(GAMES)
        if unknown:
            raise TaskIdError(f"game_params for unknown games {sorted(unknown)}; valid: {', '.join(GAMES)}")

    @property
    def options(self) -> dict:
        return {"step_limit": self.step_limit, "game_params": dict(self.game_params),
                "call_timeout_s": self.call_timeout_s, "launch_timeout_s": self.launch_timeout_s}

    @staticmethod
    def canonical_options(options: dict) -> dict:
        """game_params in the benchmark's string form, whichever form the caller used."""
        if options.get("game_params"):
            options["game_params"] = _param_strings(options["game_params"])
        return options

    def _config_tag(self) -> str:
        tag = hashlib.sha256(json.dumps(self.game_params, sort_keys=True).encode()).hexdigest()[:10]
        return f"{tag}-{GOLD_VERSION}"

    def _launch(self):
        from textworld_express import TextWorldExpressEnv  # deferred: needed only to start a simulator (a JVM)
        return TextWorldExpressEnv(envStepLimit=self.step_limit)

    def _ensure_game(self, sim: Simulator, game: str) -> None:
        # `sim.loaded` belongs to this JVM: a fresh one starts with nothing loaded, so it always loads.
        want = (game, self.game_params.get(game, ""))
        if sim.loaded != want:
            sim.handle.load(*want)
            sim.loaded = want

    def _split_ids(self, sim: Simulator, task_type: str, split: str) -> list[int]:
        self._ensure_game(sim, task_type)
        h = sim.handle
        return list({"train": h.getValidSeedsTrain, "dev": h.getValidSeedsDev, "test": h.getValidSeedsTest}[split]())

    def _reset(self, sim: Simulator, task: Task, gold: bool):
        self._ensure_game(sim, task.task_type)
        obs, info = sim.handle.reset(seed=task.native_id, gameFold=task.split, generateGoldPath=gold)
        _check_initialised(obs)
        return obs, info

    def _load(self, sim: Simulator, task: Task) -> tuple[str, dict]:
        obs, info = self._reset(sim, task, gold=False)
        return obs, {"instruction": info["taskDescription"], "valid": list(info["validActions"])}

    def _raw_step(self, sim: Simulator, action: str) -> StepResult:
        obs, _reward, done, info = sim.handle.step(action)
        _check_initialised(obs)
        score = max(0.0, min(1.0, float(info["score"])))
        return StepResult(obs, score, bool(done), {
            "raw_score": info["scoreRaw"], "valid": list(info["validActions"]),
            "success": bool(info["tasksuccess"]), "failure": bool(info["taskfailure"]),
            "moves": info.get("numMoves")})

    def _gold(self, sim: Simulator, task: Task) -> list[str]:
        return self._seeded_gold(sim, task, task.native_id)

    def _seeded_gold(self, sim: Simulator, task: Task, walk_seed: int) -> list[str]:
        """The game's own gold agent, with its random walk seeded by `walk_seed`.

        The package's gold path is not a function of the seed: for every game but cookingworld,
        `mkGameWithGoldPath` seeds the gold agent's random walk from the clock (`new Random()`), so the
        same coin game got ['look around', 'move east', 'take coin'] in one call and a path with four
        detours in the next, and every prompt that shows a gold example changed from run to run. Here
        the same agent runs the same way (a fresh game per attempt, up to 50 attempts) with
        `scala.util.Random(walk_seed)`; with `walk_seed` = the task's seed this is exactly what the
        package does for cookingworld. The simulator is left reset to the task."""
        self._ensure_game(sim, task.task_type)
        jvm = sim.handle._gateway.jvm
        generator = sim.handle.server.gameGenerator()
        walk = jvm.scala.util.Random(int(walk_seed))
        agent_class = getattr(jvm.textworldexpress.goldagent, GOLD_AGENTS[task.task_type])
        path: list[str] = []
        for _ in range(GOLD_ATTEMPTS):
            result = agent_class(generator.mkGame(int(task.native_id), task.split)).mkGoldPath(walk)
            if result._1:
                path = list(result._2)
                break
        if not path:
            raise SimulatorError(f"{task.id}: the gold agent found no path in {GOLD_ATTEMPTS} attempts")
        self._reset(sim, task, gold=False)
        return path

    def game_gold(self, task: Task | str) -> list[str]:
        """The gold path of the task's game with a walk seed that does not depend on the task's seed
        (0): two seeds that generate the same game get the same path (`envs.units` compares them)."""
        task = self._as_task(task)
        return list(self._call("gold path", self._seeded_gold, task, 0, task=task))


_UNINITIALISED = "ERROR: Game generator is not initialized"


def _check_initialised(obs: str) -> None:
    """TextWorldExpress answers a reset or step on a JVM with no game loaded with an observation, not an
    error; playing on would score 0 as if the agent had failed."""
    if obs.startswith(_UNINITIALISED):
        raise SimulatorError(f"the simulator has no game loaded ({obs.strip()!r})")
