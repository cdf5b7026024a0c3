"""ScienceWorld (Wang et al., 2022): 30 task types, official train/dev/test variations, score 0–100."""
from __future__ import annotations

from .base import StepResult, Task
from .jvm import JavaEnv

TASK_TYPES = (
    'boil', 'change-the-state-of-matter-of', 'chemistry-mix', 'chemistry-mix-paint-secondary-color',
    'chemistry-mix-paint-tertiary-color', 'find-animal', 'find-living-thing', 'find-non-living-thing',
    'find-plant', 'freeze', 'grow-fruit', 'grow-plant', 'identify-life-stages-1', 'identify-life-stages-2',
    'inclined-plane-determine-angle', 'inclined-plane-friction-named-surfaces',
    'inclined-plane-friction-unnamed-surfaces', 'lifespan-longest-lived',
    'lifespan-longest-lived-then-shortest-lived', 'lifespan-shortest-lived',
    'measure-melting-point-known-substance', 'measure-melting-point-unknown-substance', 'melt',
    'mendelian-genetics-known-plant', 'mendelian-genetics-unknown-plant', 'power-component',
    'power-component-renewable-vs-nonrenewable-energy', 'test-conductivity',
    'test-conductivity-of-unknown-substances', 'use-thermometer')


class ScienceWorld(JavaEnv):
    """Adapter over `scienceworld.ScienceWorldEnv`; task index i = i-th variation of the official split.

    `simplifications` is ScienceWorld's own option string ('' = the benchmark as published; 'easy'
    = teleport, open doors, no electrical actions, self-watering); it applies to every task.
    """

    name = "sciworld"
    # Measured: the gold path of sciworld/find-non-living-thing/train/0 names 'painting' in a fresh JVM and
    # 'cupboard' or 'cup containing nothing' after other tasks were loaded (the simulator's random state).
    gold_depends_on_history = True
    TASK_TYPES = TASK_TYPES
    _PACKAGE = "scienceworld"

    def __init__(self, step_limit: int = 1000, simplifications: str = ""):
        super().__init__(step_limit)
        self.simplifications = simplifications

    @property
    def options(self) -> dict:
        return {"step_limit": self.step_limit, "simplifications": self.simplifications}

    def _launch(self):
        from scienceworld import ScienceWorldEnv
        return ScienceWorldEnv("", envStepLimit=self.step_limit)

    def _split_ids(self, task_type: str, split: str) -> list[int]:
        self.sim.load(task_type, 0, self.simplifications)
        return {"train": self.sim.get_variations_train, "dev": self.sim.get_variations_dev,
                "test": self.sim.get_variations_test}[split]()

    def _load(self, task: Task) -> tuple[str, dict]:
        self.sim.load(task.task_type, task.native_id, self.simplifications)
        obs, info = self.sim.reset()
        return obs, {"instruction": self.sim.get_task_description(), "valid": list(info["valid"])}

    def action_templates(self) -> list[str]:
        # The simulator's own templates; 'go OBJ' is written 'go to OBJ' everywhere else in ScienceWorld.
        templates = self._guard("listing action templates", self.sim.get_possible_actions)
        return [t.replace("go OBJ", "go to OBJ") for t in templates if t not in ("reset task", "wait1", "task")]

    def _raw_step(self, action: str) -> StepResult:
        obs, _reward, done, info = self.sim.step(action)
        if obs.startswith("Ambiguous request"):
            # ScienceWorld then waits for a number; take its first reading, as its own agents do.
            obs, _reward, done, info = self.sim.step("0")
            obs = "(ambiguous action; took the first reading) " + obs
        raw = info["score"]
        # ScienceWorld reports -100 for a failed task (e.g. focusing the wrong object); [0,1] keeps 0.
        score = max(0.0, min(1.0, raw / 100.0))
        return StepResult(obs, score, bool(done), {"raw_score": raw, "valid": list(info["valid"]),
                                                   "success": raw >= 100, "moves": info.get("moves")})

    def _gold(self, task: Task) -> list[str]:
        self.sim.load(task.task_type, task.native_id, self.simplifications, generateGoldPath=True)
        return list(self.sim.get_gold_action_sequence())
