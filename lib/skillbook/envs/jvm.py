"""Shared machinery of the two Java-backed benchmarks: one JVM reused, restarted when it dies."""
from __future__ import annotations

import json
import shutil
import threading
from importlib.metadata import version
from abc import abstractmethod

from ..io import atomic_write_json
from .base import SPLITS, EnvError, StepResult, Task, TaskIdError, check_split, parse_task_id

JAVA_MISSING = ("Java (a JRE >= 11) is required by ScienceWorld and TextWorldExpress but `java` is not on PATH. "
                "Install it, e.g. `sudo apt-get install -y default-jre-headless` (Debian/Ubuntu) or "
                "`brew install openjdk` (macOS), then retry.")


def require_java() -> None:
    if shutil.which("java") is None:
        raise EnvError(JAVA_MISSING)


class JavaEnv:
    """Base of ScienceWorld and TextWorldExpress adapters.

    Subclasses provide `_launch()` (a new simulator), `_split_ids(task_type, split)` (the official
    variation numbers / seeds), `_load(task)` and `_raw_step(action)`. Every call into the JVM goes
    through `_guard`, which turns a dead JVM into one EnvError for the episode in flight and starts a
    fresh JVM for the next one.
    """

    name = ""
    conversational = False
    gold_depends_on_history = False
    TASK_TEXT = "instruction+observation"
    TASK_TYPES: tuple[str, ...] = ()

    def __init__(self, step_limit: int = 1000):
        require_java()
        self.step_limit = step_limit
        self._sim = None
        self._lock = threading.Lock()
        self._split_cache: dict[tuple[str, str], list[int]] = {}
        self.current: Task | None = None
        self._instruction = ""
        self._valid: list[str] = []
        self.restarts = 0
        self.errors: list[str] = []

    # -- subclass hooks ---------------------------------------------------------------------------
    @abstractmethod
    def _launch(self): ...

    @abstractmethod
    def _split_ids(self, task_type: str, split: str) -> list[int]: ...

    @abstractmethod
    def _load(self, task: Task) -> tuple[str, dict]: ...

    @abstractmethod
    def _raw_step(self, action: str) -> StepResult: ...

    @abstractmethod
    def _gold(self, task: Task) -> list[str]: ...

    # -- JVM lifecycle ----------------------------------------------------------------------------
    @property
    def sim(self):
        if self._sim is None:
            self._sim = self._launch()
        return self._sim

    def _guard(self, what: str, fn, *args):
        try:
            return fn(*args)
        except Exception as e:  # py4j raises several types when the JVM is gone
            msg = f"{self.name}: {what} failed ({type(e).__name__}: {e}); JVM restarted, episode lost"
            self.errors.append(msg)
            self._restart()
            raise EnvError(msg) from e

    def _restart(self) -> None:
        old, self._sim = self._sim, None
        self.restarts += 1
        try:
            if old is not None:
                old.close()
        except Exception:
            pass  # the old JVM is already dead

    def close(self) -> None:
        if self._sim is not None:
            try:
                self._sim.close()
            finally:
                self._sim = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- tasks ------------------------------------------------------------------------------------
    def task_types(self) -> list[str]:
        return list(self.TASK_TYPES)

    def _check_type(self, task_type: str) -> str:
        if task_type not in self.TASK_TYPES:
            raise TaskIdError(f"unknown {self.name} task type {task_type!r}; valid: {', '.join(self.TASK_TYPES)}")
        return task_type

    _PACKAGE = ""  # the PyPI distribution whose official splits these are

    def _splits_file(self):
        from ..io import cache_dir
        return cache_dir() / "splits" / f"{self.name}-{version(self._PACKAGE)}-{self._config_tag()}.json"

    def _config_tag(self) -> str:
        return "default"

    def split_ids(self, task_type: str, split: str) -> list[int]:
        """Official variation numbers / seeds of a split; listed once per package version, then read from disk."""
        key = (self._check_type(task_type), check_split(split))
        if key in self._split_cache:
            return self._split_cache[key]
        path = self._splits_file()
        stored = json.loads(path.read_text()) if path.exists() else {}
        name = "/".join(key)
        if name not in stored:
            with self._lock:
                stored[name] = list(self._guard("listing tasks", self._split_ids, *key))
            atomic_write_json(path, stored)
        self._split_cache[key] = stored[name]
        return stored[name]

    def tasks(self, split: str, task_types: list[str] | None = None) -> list[Task]:
        check_split(split)
        out = []
        for tt in task_types or self.TASK_TYPES:
            out += [Task(self.name, tt, split, i, nid) for i, nid in enumerate(self.split_ids(tt, split))]
        return out

    def task(self, task_id: str) -> Task:
        env, tt, split, index = parse_task_id(task_id)
        if env != self.name:
            raise TaskIdError(f"task id {task_id!r} belongs to env {env!r}, not {self.name!r}")
        ids = self.split_ids(tt, split)
        if not 0 <= index < len(ids):
            raise TaskIdError(f"task index {index} out of range for {self.name}/{tt}/{split}: valid 0..{len(ids) - 1}")
        return Task(self.name, tt, split, index, ids[index])

    def _as_task(self, task: Task | str) -> Task:
        return self.task(task) if isinstance(task, str) else task

    # -- episodes ---------------------------------------------------------------------------------
    def reset(self, task: Task | str) -> str:
        task = self._as_task(task)
        with self._lock:
            obs, info = self._guard(f"reset({task.id})", self._load, task)
        self.current = task
        self._instruction = info.get("instruction", "")
        self._valid = info.get("valid", [])
        return obs

    def step(self, action: str) -> StepResult:
        if self.current is None:
            raise RuntimeError(f"{self.name}: step() before reset()")
        with self._lock:
            r = self._guard(f"step({action!r})", self._raw_step, action)
        self._valid = r.info.get("valid", self._valid)
        return r

    def valid_actions(self) -> list[str]:
        return list(self._valid)

    def action_templates(self) -> list[str]:
        """Action forms of this benchmark, for prompts when the valid-action list is too long to show."""
        return []

    @property
    def instruction(self) -> str:
        return self._instruction

    def gold_actions(self, task: Task | str) -> list[str]:
        """The benchmark's own gold action sequence for a task (resets the simulator to it)."""
        task = self._as_task(task)
        with self._lock:
            gold = self._guard(f"gold({task.id})", self._gold, task)
        self.current = None
        return gold


__all__ = ["JavaEnv", "require_java", "JAVA_MISSING", "SPLITS"]
