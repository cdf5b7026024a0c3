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
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
        return [self.task(f"{self.name}/{t}/{split}/{i}") for t in (task_types or self.TASK_TYPES)
                for i in range(self.N)]

    def task(self, task_id):
        env, tt, split, index = parse_task_id(task_id)
        if env != self.name or tt not in self.TASK_TYPES:
            raise TaskIdError(f"unknown {self.name} task {task_id!r}; valid types: {', '.join(self.TASK_TYPES)}")
        if not 0 <= index < self.N:
            raise TaskIdError(f"task index {index} out of range: valid 0..{self.N - 1}")
        return Task(self.name, tt, split, index, index + 1000 * SPLITS.index(split))

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

    def chat(self, messages, *, temperature=0.0, max_tokens=256, seed=None, stop=None, top_p=None,
             role="") -> Completion:
        with self._lock:
            self.calls.append([dict(m) for m in messages])    # as sent: the loop extends its lists later
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
        if "Subtask just worked on" in last or "has ended. Write the progress" in last:
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


def solve_count_only(observation: str) -> str:
    """A policy that solves "count" tasks and never "fetch" ones (it only looks around): for pipelines
    that need successes and failures of different categories."""
    return solve(observation) if "Goal" in observation else "look around"


FAKE_SKILLS = {  # what FakeTeacher writes for each fake category
    "count": [{"title": "Count To The Goal", "principle": "Say add one until the counter shows the goal.",
               "when_to_apply": "the counter shows less than the goal"},
              {"title": "Say Done At The Goal", "principle": "Say done as soon as the counter shows the goal.",
               "when_to_apply": "the counter shows the goal"}],
    "fetch": [{"title": "Take The Key First", "principle": "Take the key before you try to open the locked door.",
               "when_to_apply": "a key lies in the room and the door is locked"}],
}


class FakeTeacher(FakeModel):
    """FakeModel that also answers SkillRL's teacher prompts (papers/skillrl/prompts) with well-formed JSON:
    task-specific skills of the category asked for (FAKE_SKILLS), general skills, a lesson naming the
    failed task's category, and evolution proposals for the first category offered. Records the kind
    of every teacher prompt in `teacher_prompts`."""

    backend = identity = "fake:teacher"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.teacher_prompts: list[str] = []

    def reply(self, messages) -> str:
        first = messages[0]
        last = first["content"] if len(messages) > 1 and first["role"] == "user" else messages[-1]["content"]
        m = re.search(r"one kind of task: (\w+)\.", last)
        if m:
            self.teacher_prompts.append("specific")
            return json.dumps(FAKE_SKILLS.get(m.group(1), []))
        if "general skills that would help on every kind of task" in last:
            self.teacher_prompts.append("general")
            return json.dumps([{"title": "Read The Observation", "principle": "Read the whole observation first.",
                                "when_to_apply": "before every action"}])
        if last.startswith("An agent failed this task."):
            self.teacher_prompts.append("lesson")
            cat = re.search(r"Task \((\w+)\)", last).group(1)
            return json.dumps({"failure_point": f"look around ({cat})", "wrong_reasoning": "It waited.",
                               "what_should_have_been_done": "Act on the objects in view.",
                               "general_principle": "Looking around twice changes nothing."})
        m = re.search(r"one of: ([\w, ]+), or \"general\"", last)
        if last.startswith("Below are failed runs") and m:
            self.teacher_prompts.append("evolve")
            cat = m.group(1).split(",")[0].strip()
            return json.dumps([{**s, "category": cat} for s in FAKE_SKILLS.get(cat, [])])
        return super().reply(messages)


class OtherFakeWorld(FakeWorld):
    """A second fake benchmark, env "fake2" (same rules), for code that must route each task to its own env."""
    name = "fake2"


@pytest.fixture
def two_fake_envs(fake_env, monkeypatch):
    """Register FakeWorld as 'fake' and OtherFakeWorld as 'fake2'."""
    from skillbook import envs
    monkeypatch.setitem(envs.ENVS, "fake2", OtherFakeWorld)
    return FakeWorld, OtherFakeWorld


class ScriptedModel:
    """A FAKE model that answers with canned replies in order (then `then`), recording the prompts it saw:
    for parsing and control-flow tests of one component (a judge, a teacher, a split, a simulated user)."""

    backend = identity = "fake:scripted-replies"
    seed = 0
    deterministic = True

    def __init__(self, replies=(), then: str | None = None, cached: bool = False):
        self.replies, self.then, self.cached = list(replies), then, cached
        self.prompts: list[str] = []
        self.cache = None

    def chat(self, messages, **kw) -> Completion:
        self.prompts.append(messages[-1]["content"] if len(messages) == 1 else messages[0]["content"])
        if not self.replies and self.then is None:
            raise AssertionError("ScriptedModel ran out of replies")
        text = self.replies.pop(0) if self.replies else self.then
        return Completion(text=text, prompt_tokens=10, completion_tokens=5, latency_s=0.1, cached=self.cached)


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


class WorkerDied(RuntimeError):
    """What LocalPool reports as a dead worker (Ray's RayActorError)."""


class LocalExecutor:
    """A FAKE of Ray's transport for control-flow tests of `run.distributed`: the real EpisodeWorker and
    the real `dispatch`, with workers in threads of this process. `die`: {(stream, position): times} whose
    episode kills its worker that many times, before the episode starts. `pickle`: send the agent factory as
    cloudpickled bytes, as Ray does (its LLMs then become worker LLMs with worker caches)."""

    def __init__(self, actors=None, die=(), episode_timeout_s=3600.0, cancel_grace_s=60.0, pickle=False):
        self.actors, self.die = actors, dict(die)
        self.episode_timeout_s, self.cancel_grace_s, self.pickle = episode_timeout_s, cancel_grace_s, pickle
        self.pools: list = []

    def start(self, make_agent, env_options, n, cache):
        if self.pickle:
            import cloudpickle
            make_agent = cloudpickle.dumps(make_agent)
        self.pools.append(LocalPool(self, make_agent, env_options, n))
        return self.pools[-1]


class LocalPool:
    def __init__(self, executor, make_agent, env_options, n):
        from concurrent.futures import ThreadPoolExecutor

        from skillbook.run.distributed import EpisodeWorker
        self.executor, self.args = executor, (make_agent, env_options)
        self.new = lambda: EpisodeWorker(*self.args)  # noqa: E731
        self.workers = [self.new() for _ in range(n)]
        self.started = n
        self.threads = ThreadPoolExecutor(max_workers=n + 8)
        self.submitted: list[tuple] = []   # (worker index, stream, position, state given?)
        self.closed = False

    def hello(self, env_options, mode, workers=None, envs=()):
        return [w.hello(env_options, mode, envs) for w in (self.workers if workers is None else workers)]

    def submit(self, worker, stream, position, task_id, state, keep):
        self.submitted.append((self.workers.index(worker), stream, position, state is not None))
        return self.threads.submit(self._run, worker, stream, position, task_id, state, keep)

    def _run(self, worker, stream, position, task_id, state, keep):
        if self.executor.die.get((stream, position)):
            self.executor.die[(stream, position)] -= 1
            raise WorkerDied(f"worker for {stream}#{position} was killed")
        return worker.run(stream, position, task_id, state, keep)

    def wait(self, handles, timeout):
        from concurrent.futures import FIRST_COMPLETED, wait
        done, _ = wait(handles, timeout=timeout, return_when=FIRST_COMPLETED)
        out = []
        for f in done:
            e = f.exception()
            out.append((f, ("ok", f.result()) if e is None else
                        ("died" if isinstance(e, WorkerDied) else "error", f"{type(e).__name__}: {e}")))
        return out

    def cancel(self, worker):
        worker.cancel()

    def replace(self, worker):
        worker.cancel()   # a thread cannot be killed: the abandoned one ends at its next model call
        new = self.new()
        self.started += 1
        self.workers = [new if w is worker else w for w in self.workers]
        return new

    def close(self):
        for w in self.workers:
            w.close()
        self.threads.shutdown(wait=False, cancel_futures=True)
        self.closed = True


class FakeOpenAIServer:
    """A FAKE OpenAI-compatible chat server on 127.0.0.1 for HTTP control flow only: the first `failures`
    requests get `status`, the others `answer` (after `delay_s`). `requests` counts what it received; `close()` stops it
    (later requests to it are refused, as by a dead server)."""

    def __init__(self, failures: int = 0, status: int = 500, answer: str = "fake answer", delay_s: float = 0.0):
        self.failures, self.status, self.requests, self.answer = failures, status, 0, answer
        self.delay_s = delay_s
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                with outer.lock:
                    outer.requests += 1
                    n = outer.requests
                time.sleep(outer.delay_s)
                if n <= outer.failures:
                    self.send_response(outer.status)
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "fake failure"}}')
                    return
                body = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "fake",
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": outer.answer}}],
                                   "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.backend = f"openai:{self.url}#fake"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_server_factory():
    servers = []

    def make(**kw):
        servers.append(FakeOpenAIServer(**kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()
