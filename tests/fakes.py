"""FAKES for tests of control flow only (runner, memory hooks, pipelines): a tiny deterministic world and a
scripted model. No claim about agents or models is ever tested with them.

    FakeWorld   env "fake": task type "count" — say "add one" until the counter shows the goal, then
                "say done"; task type "fetch" — "take key", then "open door". Registered with `fake_env`.
    FakeModel   an LLM stand-in answering by the kind of prompt (executor, planner, summarizer, induction,
                judge, teacher, macro), with the same `chat(...) -> Completion` interface, counting calls.
"""
from __future__ import annotations

import json
import re
import threading

import pytest

from skillbook.envs.base import SPLITS, EnvError, StepResult, Task, TaskIdError, check_split, parse_task_id
from skillbook.llm import Completion, ResponseCache


class FakeWorld:
    name = "fake"
    conversational = False
    gold_depends_on_history = False
    TASK_TEXT = "instruction+observation"
    TASK_TYPES = ("count", "fetch")
    N = 40                               # tasks per type and split
    crash = {}                           # class-wide: task id → step index at which the "simulator" dies
    hang = set()

    def __init__(self, **options):
        self.options = dict(options)
        self.current: Task | None = None
        self.closed = False

    @staticmethod
    def canonical_options(options: dict) -> dict:
        return dict(options)

    # -- tasks
    def task_types(self):
        return list(self.TASK_TYPES)

    def split_ids(self, task_type, split):
        check_split(split)
        return list(range(self.N))

    def tasks(self, split, task_types=None):
        return [self.task(f"fake/{t}/{split}/{i}") for t in (task_types or self.TASK_TYPES) for i in range(self.N)]

    def task(self, task_id):
        env, tt, split, index = parse_task_id(task_id)
        if env != "fake" or tt not in self.TASK_TYPES:
            raise TaskIdError(f"unknown fake task {task_id!r}; valid types: {', '.join(self.TASK_TYPES)}")
        if not 0 <= index < self.N:
            raise TaskIdError(f"task index {index} out of range: valid 0..{self.N - 1}")
        return Task("fake", tt, split, index, index + 1000 * SPLITS.index(split))

    def _goal(self, task: Task) -> int:
        return 1 + task.index % 3

    # -- episodes
    def reset(self, task):
        task = self.task(task) if isinstance(task, str) else task
        self.current, self.counter, self.steps, self.has_key = task, 0, 0, False
        if task.task_type == "count":
            return f"The counter shows 0. Goal {self._goal(task)}. Room {task.index}."
        return f"You are in room {task.index}. A key lies here. The door is locked."

    @property
    def instruction(self):
        if self.current is None:
            return ""
        if self.current.task_type == "count":
            return "Make the counter show the goal, then say done."
        return "Take the key and open the door."

    def valid_actions(self):
        if self.current.task_type == "count":
            return ["add one", "look around", "say done"]
        return ["take key", "open door", "look around"]

    def action_templates(self):
        return []

    def step(self, action):
        if self.current is None:
            raise RuntimeError("step() before reset()")
        if self.crash.get(self.current.id) == self.steps:
            raise EnvError(f"fake simulator died at step {self.steps} of {self.current.id}")
        self.steps += 1
        t = self.current
        if t.task_type == "count":
            if action == "add one":
                self.counter += 1
                return StepResult(f"The counter shows {self.counter}.", 0.0, False, {})
            if action == "say done":
                ok = self.counter == self._goal(t)
                return StepResult("Done." if ok else "Wrong count.", float(ok), True, {"success": ok})
            return StepResult(f"The counter shows {self.counter}. Goal {self._goal(t)}.", 0.0, False, {})
        if action == "take key":
            self.has_key = True
            return StepResult("You take the key.", 0.5, False, {})
        if action == "open door" and self.has_key:
            return StepResult("The door opens.", 1.0, True, {"success": True})
        return StepResult("Nothing happens.", 0.5 if self.has_key else 0.0, False, {})

    def gold_actions(self, task):
        task = self.task(task) if isinstance(task, str) else task
        if task.task_type == "count":
            return ["add one"] * self._goal(task) + ["say done"]
        return ["take key", "open door"]

    def close(self):
        self.closed = True


@pytest.fixture
def fake_env(monkeypatch):
    """Register FakeWorld as env 'fake' for the duration of a test."""
    from skillbook import envs
    monkeypatch.setitem(envs.ENVS, "fake", FakeWorld)
    monkeypatch.setattr(FakeWorld, "crash", {})
    return FakeWorld


class FakeModel:
    """Scripted replies by prompt kind. `policy(observation_text) -> action` decides the executor's action;
    the default solves both fake task types. `deterministic` like the real client (serial workers)."""

    backend = "fake:scripted"
    identity = "fake:scripted"

    def __init__(self, policy=None, seed: int = 0, deterministic: bool = True, fail_on: str | None = None):
        self.policy = policy or solve
        self.seed, self.deterministic = seed, deterministic
        self.cache = ResponseCache()
        self.calls: list[list[dict]] = []
        self.fail_on = fail_on
        self._lock = threading.Lock()

    def chat(self, messages, *, temperature=0.0, max_tokens=256, seed=None, stop=None, top_p=None) -> Completion:
        with self._lock:
            self.calls.append(messages)
        text = self.reply(messages)
        if self.fail_on and self.fail_on in messages[-1]["content"]:
            from skillbook.llm import LLMError
            raise LLMError("fake server failure")
        return Completion(text=text, prompt_tokens=sum(len(m["content"].split()) for m in messages),
                          completion_tokens=len(text.split()), latency_s=0.01, model=self.backend,
                          temperature=temperature, seed=seed, max_tokens=max_tokens)

    def reply(self, messages) -> str:
        last = messages[-1]["content"]
        if "break a task into short subtasks" in last:
            return "Subtask: DONE" if "Progress so far: done" in last else "Subtask: finish the task"
        if "Subtask just worked on" in last:
            return "Summary: done"
        if "Write ONE reusable skill" in last:
            return ("Description: finish a fake task\nSkill: 1. read the goal 2. act until it is reached "
                    "3. say done")
        if "p_a" in last:
            return '{"p_a": 0.9, "p_b": 0.2}'
        if '"steps"' in last and "macro" in last.lower():
            return '{"name": "take_and_open", "description": "take the key then open the door", "inputs": [], ' \
                   '"preconditions": "", "steps": ["take key", "open door"]}'
        if "JSON" in last:
            return json.dumps([{"title": "Be brief", "principle": "Act", "when_to_apply": "always"}])
        observation = "\n".join(m["content"] for m in messages if m["role"] == "user")
        return f"Thought: go on\nAction: {self.policy(observation)}"

    def describe(self):
        return {"backend": self.backend, "calls": len(self.calls), "live_calls": len(self.calls)}


def solve(observation: str) -> str:
    """The default policy: solves both fake task types from what was observed so far."""
    goal = re.findall(r"Goal (\d+)", observation)
    if goal:
        shown = re.findall(r"counter shows (\d+)", observation)
        return "say done" if shown and shown[-1] == goal[0] else "add one"
    return "open door" if "You take the key" in observation else "take key"


class FakeCoder(FakeModel):
    """FakeModel that also answers code-skill induction prompts: with a function named `names[i]` for the
    i-th code induction (the last name repeats), so a test decides which writes share a function name
    (an overwrite). The function takes the key and opens the door. Text induction and everything else
    as FakeModel."""

    def __init__(self, names=("finish_task",), **kw):
        super().__init__(**kw)
        self.names, self.code_inductions = list(names), 0

    def reply(self, messages) -> str:
        last = messages[-1]["content"]
        if "Write ONE reusable skill" in last and "def <name>(env" in last:
            name = self.names[min(self.code_inductions, len(self.names) - 1)]
            self.code_inductions += 1
            return (f"Description: {name.replace('_', ' ')} in a fake world\n```python\n"
                    f"def {name}(env):\n    env.step('take key')\n    return env.step('open door')\n```")
        return super().reply(messages)
