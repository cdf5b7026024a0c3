"""ScienceWorld (Wang et al., 2022): 30 task types, official train/dev/test variations, score 0–100."""
from __future__ import annotations

import functools
import threading

from .base import StepResult, Task
from .jvm import CALL_TIMEOUT_S, LAUNCH_TIMEOUT_S, JavaEnv, Simulator

# ScienceWorld lists a container's objects in the order of their JVM identity hash codes, and HotSpot's
# default hash is a per-thread pseudo-random sequence: the same task listed its three wood cups in another
# order after other tasks had run in that JVM (re-executing chapter 01 live diverged there), and resetting
# the same task twice in one JVM already changed it. `hashCode=2` makes every identity hash the same constant,
# so the listing is the insertion order, whatever the JVM ran before. It also changes gold paths (the planner
# walks the same collections), so it is part of every record's settings (SIMULATOR_REVISION below).
JVM_OPTIONS = ("-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2")

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
    # 1: the JVM's default identity hashes (object order depended on the JVM's history); 2: JVM_OPTIONS.
    # Records made under another revision are refused (run.streams.settings_of, envs.simulator_revisions).
    SIMULATOR_REVISION = 2
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
        # deferred: only starting a simulator (a JVM) needs the simulator's package
        import scienceworld.scienceworld as package
        from scienceworld import ScienceWorldEnv
        _with_jvm_options(package)
        return ScienceWorldEnv("", envStepLimit=self.step_limit)

    def _config_tag(self) -> str:
        # gold paths (and so the cached gold lengths) depend on the simplifications and the JVM options
        return f"r{self.SIMULATOR_REVISION}-{self.simplifications.replace(',', '+') or 'none'}"

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


def _with_jvm_options(package) -> None:
    """Start the package's JVMs with JVM_OPTIONS: it has no parameter for them, so its module-level
    `launch_gateway` is wrapped (once; the wrapper adds the options to any the package passes itself)."""
    with _WRAP_LOCK:   # JVMs start in worker threads
        launch = package.launch_gateway
        if getattr(launch, "skillbook_jvm_options", None) == JVM_OPTIONS:
            return

        @functools.wraps(launch)
        def launch_gateway(*args, javaopts=None, **kwargs):
            return launch(*args, javaopts=[*JVM_OPTIONS, *(javaopts or [])], **kwargs)

        launch_gateway.skillbook_jvm_options = JVM_OPTIONS
        package.launch_gateway = launch_gateway


_WRAP_LOCK = threading.Lock()
