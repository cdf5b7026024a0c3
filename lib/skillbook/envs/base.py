"""One Env protocol for every benchmark, stable task ids, and the errors bad input gets."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

SPLITS = ("train", "dev", "test")


class EnvError(RuntimeError):
    """An environment failure: it ends the episode in flight, not the run.

    `infrastructure` says whose failure it was. False (this class): the benchmark itself refused or failed
    on this episode (e.g. the simulator raised an exception on the agent's input), as it would again.
    """

    infrastructure: bool = False


class SimulatorError(EnvError):
    """The simulator process failed: its JVM died, hung past the call deadline, lost its connection, could
    not start, or answered from an uninitialised game. Not the agent's doing: the episode in flight is lost,
    the simulator is replaced for the next one, and a resumed run retries the episode (`infrastructure`)."""

    infrastructure = True


class TaskIdError(ValueError):
    """A task id, env, task type, split or index that does not exist; the message names the valid ones."""


@dataclass(frozen=True)
class Task:
    """One benchmark task. `id` = '<env>/<task_type>/<split>/<index>', index = position in the official split."""
    env: str
    task_type: str
    split: str
    index: int
    native_id: int  # ScienceWorld variation number / TextWorldExpress seed

    @property
    def id(self) -> str:
        return f"{self.env}/{self.task_type}/{self.split}/{self.index}"

    def __str__(self) -> str:
        return self.id


@dataclass
class StepResult:
    observation: str
    score: float          # in [0, 1], from the benchmark's own scorer
    done: bool
    info: dict = field(default_factory=dict)

    def __iter__(self):  # allows `obs, score, done, info = env.step(a)`
        return iter((self.observation, self.score, self.done, self.info))


_TASK_ID = re.compile(r"^(?P<env>[a-z0-9_]+)/(?P<type>[A-Za-z0-9_\-]+)/(?P<split>[a-z]+)/(?P<index>-?\d+)$")


def parse_task_id(task_id: str) -> tuple[str, str, str, int]:
    """Split a task id into (env, task_type, split, index), checking only its shape and the split."""
    m = _TASK_ID.match(task_id.strip()) if isinstance(task_id, str) else None
    if not m:
        raise TaskIdError(f"malformed task id {task_id!r}: expected '<env>/<task_type>/<split>/<index>', "
                          "e.g. 'sciworld/boil/dev/3' or 'twx/cookingworld/test/17'")
    split = m["split"]
    if split not in SPLITS:
        raise TaskIdError(f"unknown split {split!r} in {task_id!r}; valid splits: {', '.join(SPLITS)}")
    return m["env"], m["type"], split, int(m["index"])


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise TaskIdError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    return split


@runtime_checkable
class Env(Protocol):
    """What an agent needs from a benchmark. One instance holds one simulator (one JVM) and is reused.

    `conversational` is True for benchmarks whose episode is a conversation with a simulated user
    (τ²-bench); such an env also provides the `Conversational` methods below. `TASK_TEXT` says what
    stands for a task when it is compared with skills: an instruction alone does not identify the task
    when it is one sentence per task type (TextWorldExpress) or one policy per domain (τ²-bench), so the
    first observation is part of it."""

    name: str
    conversational: bool
    gold_depends_on_history: bool   # the gold path of a task changes with what the simulator ran before
    options: dict                   # the constructor options (make_env(name, **options) makes an equal env)
    TASK_TEXT: str                  # how a task is named for retrieval:
                                    # "instruction+observation" | "observation+instruction"
    TASK_TYPES: tuple[str, ...]     # the task types, on the class: task ids are checked before an env opens

    def task_types(self) -> list[str]: ...
    def tasks(self, split: str, task_types: list[str] | None = None) -> list[Task]: ...
    def task(self, task_id: str) -> Task: ...
    def reset(self, task: Task | str) -> str: ...
    def step(self, action: str) -> StepResult: ...
    def valid_actions(self) -> list[str]: ...
    def action_templates(self) -> list[str]: ...
    def gold_actions(self, task: Task | str) -> list[str]: ...
    @property
    def instruction(self) -> str: ...
    def close(self) -> None: ...


@runtime_checkable
class Conversational(Protocol):
    """What a conversational benchmark adds (declared by `conversational = True`)."""

    user_calls: list   # the simulated user's model completions since the last look (the agent records them)

    def bind_llm(self, llm) -> None: ...             # the simulated user answers with this model (and its cache)
    def match_action(self, action: str, valid: list[str] | None = None) -> str | None: ...  # free-form actions
    def conversation(self) -> list[dict]: ...        # the full conversation, for the records
