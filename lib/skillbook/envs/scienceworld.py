"""ScienceWorld (Wang et al., 2022): 30 task types, official train/dev/test variations, score 0–100."""
from __future__ import annotations

from .base import StepResult, Task
from .jvm import CALL_TIMEOUT_S, LAUNCH_TIMEOUT_S, JavaEnv, Simulator

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

    def __init__(self, step_limit: int = 1000, simplifications: str = "",
                 call_timeout_s: float = CALL_TIMEOUT_S, launch_timeout_s: float = LAUNCH_TIMEOUT_S):
        super().__init__(step_limit, call_timeout_s, launch_timeout_s)
        self.simplifications = simplifications

    @property
    def options(self) -> dict:
        return {"step_limit": self.step_limit, "simplifications": self.simplifications,
                "call_timeout_s": self.call_timeout_s, "launch_timeout_s": self.launch_timeout_s}

    def _launch(self):
        from scienceworld import ScienceWorldEnv
        return ScienceWorldEnv("", envStepLimit=self.step_limit)

    # Every call that needs a task loads it on `sim`, so a fresh JVM never plays an unloaded one.
    def _split_ids(self, sim: Simulator, task_type: str, split: str) -> list[int]:
        h = sim.handle
        h.load(task_type, 0, self.simplifications)
        sim.loaded = (task_type, 0)
        return list({"train": h.get_variations_train, "dev": h.get_variations_dev,
                     "test": h.get_variations_test}[split]())

    def _load(self, sim: Simulator, task: Task) -> tuple[str, dict]:
        h = sim.handle
        h.load(task.task_type, task.native_id, self.simplifications)
        sim.loaded = (task.task_type, task.native_id)
        obs, info = h.reset()
        return obs, {"instruction": h.get_task_description(), "valid": list(info["valid"])}

    def action_templates(self) -> list[str]:
        # The simulator's own templates; 'go OBJ' is written 'go to OBJ' everywhere else in ScienceWorld.
        templates = self._call("listing action templates", lambda sim: list(sim.handle.get_possible_actions()),
                               task=self.current, keeps_episode=True)
        return [t.replace("go OBJ", "go to OBJ") for t in templates if t not in ("reset task", "wait1", "task")]

    def _raw_step(self, sim: Simulator, action: str) -> StepResult:
        h = sim.handle
        obs, _reward, done, info = h.step(action)
        if obs.startswith("Ambiguous request"):
            # ScienceWorld then waits for a number; take its first reading, as its own agents do.
            obs, _reward, done, info = h.step("0")
            obs = "(ambiguous action; took the first reading) " + obs
        raw = info["score"]
        # ScienceWorld reports -100 for a failed task (e.g. focusing the wrong object); [0,1] keeps 0.
        score = max(0.0, min(1.0, raw / 100.0))
        return StepResult(obs, score, bool(done), {"raw_score": raw, "valid": list(info["valid"]),
                                                   "success": raw >= 100, "moves": info.get("moves")})

    def _gold(self, sim: Simulator, task: Task) -> list[str]:
        h = sim.handle
        h.load(task.task_type, task.native_id, self.simplifications, generateGoldPath=True)
        sim.loaded = (task.task_type, task.native_id)
        return list(h.get_gold_action_sequence())
