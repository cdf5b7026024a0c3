"""The worked examples of docs/HOWTO.md, run as tests: a benchmark and a paper added the way the page says.

The benchmark is a TOY defined here ("lights": switch on every lamp, then say done), the model the FAKE
scripted one (tests/fakes.py): they test that the plug-in points work end to end, never an agent.
"""
import re

import pytest

from fakes import FakeModel
from skillbook import envs, papers
from skillbook.envs import SPLITS, StepResult, Task, TaskIdError, parse_task_id, register_env


# -- How to add a benchmark (docs/HOWTO.md, first example) ----------------------------------------------------
class Lights:
    """Switch on every lamp of the room, then say done. One task type, `lamps`; task index i has 1 + i % 3
    lamps. The Env protocol (`skillbook.envs.base.Env`) is all a benchmark implements."""
    name = "lights"
    conversational = False             # no simulated user
    gold_depends_on_history = False    # the gold path is a function of the task alone
    TASK_TEXT = "instruction+observation"
    TASK_TYPES = ("lamps",)            # on the class: task ids are checked before an env opens
    N = 10                             # tasks per split

    def __init__(self, **options):
        self.options = dict(options)   # make_env("lights", **options) makes an equal env
        self.current, self.on = None, 0

    # tasks
    def task_types(self):
        return list(self.TASK_TYPES)

    def split_ids(self, task_type, split):
        return list(range(self.N))

    def tasks(self, split, task_types=None):
        return [self.task(f"lights/lamps/{split}/{i}") for i in range(self.N)]

    def task(self, task_id):
        env, task_type, split, index = parse_task_id(task_id)
        if env != self.name or task_type != "lamps" or not 0 <= index < self.N:
            raise TaskIdError(f"unknown lights task {task_id!r}; valid: lights/lamps/<split>/0..{self.N - 1}")
        return Task(self.name, task_type, split, index, index + 100 * SPLITS.index(split))

    def _lamps(self):
        return 1 + self.current.index % 3

    # episodes
    def reset(self, task):
        self.current = self.task(task) if isinstance(task, str) else task
        self.on = 0
        return f"The room has {self._lamps()} lamps, all off."

    @property
    def instruction(self):
        return "Switch on every lamp, then say done." if self.current else ""

    def valid_actions(self):
        return ["switch on a lamp", "look around", "say done"]

    def action_templates(self):
        return []

    def step(self, action):
        if action == "switch on a lamp":
            self.on = min(self.on + 1, self._lamps())
            return StepResult(f"{self.on} of {self._lamps()} lamps are on.", 0.0, False, {})
        if action == "say done":
            ok = self.on == self._lamps()
            return StepResult("Done." if ok else "Some lamps are still off.", float(ok), True, {"success": ok})
        return StepResult(f"{self.on} of {self._lamps()} lamps are on.", 0.0, False, {})

    def gold_actions(self, task):
        self.current = self.task(task) if isinstance(task, str) else task
        return ["switch on a lamp"] * self._lamps() + ["say done"]

    def close(self):
        pass


def lights_policy(observation: str) -> str:
    """The fake model's executor policy for the toy benchmark (control flow only)."""
    mine = observation.rpartition("(End of example.)")[2]         # not the example's own turns
    counts = re.findall(r"(\d+) of (\d+) lamps are on", mine)
    return "say done" if counts and counts[-1][0] == counts[-1][1] else "switch on a lamp"


@pytest.fixture
def lights(monkeypatch):
    monkeypatch.setattr(envs, "ENVS", dict(envs.ENVS))   # the registration ends with the test
    register_env("lights")(Lights)
    yield


def test_a_new_benchmark_registers_and_runs_the_first_papers_pipeline(lights, tmp_path):
    from skillbook.agent import AgentConfig
    from skillbook.envs import sample_tasks
    from skillbook.papers.breakdown import TransferSettings, run_transfer
    stream = sample_tasks("lights/lamps", "dev", 4, seed=0)
    settings = TransferSettings(stream=stream, conditions=["subtask-none", "subtask-text"],
                                agent=AgentConfig(max_steps=8, max_subtask_steps=5, n_examples=1), env_options={},
                                prompt_level="L3", k=5, threshold=0.0, task_types="lights/lamps", split="dev",
                                n_tasks=4, seed=0, backend="fake:scripted")
    run = run_transfer(tmp_path / "transfer", FakeModel(policy=lights_policy), settings)
    episodes = run.df
    assert len(episodes) == 8 and episodes.success.all()
    assert len(run.libraries["subtask-text"]) >= 1                 # skills were induced from its subtasks


def test_a_benchmark_name_is_checked_when_it_registers(lights):
    with pytest.raises(ValueError, match="registered already"):
        register_env("lights")(type("Other", (Lights,), {}))
    with pytest.raises(ValueError, match="lowercase letters"):
        register_env("Lights-2")
    with pytest.raises(ValueError, match="registered as 'lamps'"):
        register_env("lamps")(Lights)


# -- How to add a paper (docs/HOWTO.md, second example) -----------------------------------------------------------
def test_a_new_paper_registers_its_chapters_and_chapter_10_groups_its_claims(monkeypatch):
    from skillbook.book.findings import paper_titles
    from skillbook.book.rerun import shared_records
    monkeypatch.setattr(papers, "PAPERS", dict(papers.PAPERS))
    monkeypatch.setattr("skillbook.book.findings.PAPERS", papers.PAPERS)
    monkeypatch.setattr("skillbook.book.rerun.PAPERS", papers.PAPERS)
    papers.register_paper(papers.Paper("lamplighter", "Lamplighter", ("12_lamps",), {"12_lamps": ("transfer",)}))
    assert papers.paper_of("12_lamps") == "lamplighter" and paper_titles()["lamplighter"] == "Lamplighter"
    assert shared_records("12_lamps") == ["transfer"]
    with pytest.raises(ValueError, match="belong to paper 'breakdown'"):
        papers.register_paper(papers.Paper("again", "Again", ("04_transfer",)))
    with pytest.raises(ValueError, match="registered already"):
        papers.register_paper(papers.Paper("assay", "Assay", ("13_x",)))


def test_the_registry_holds_the_four_papers_and_their_chapters():
    assert list(papers.PAPERS) == ["breakdown", "assay", "skillrl", "skillc"]
    assert papers.paper_of("06_assay") == "assay" and papers.paper_of("10_findings") == ""


# -- How to add a model backend (docs/HOWTO.md, third example) ------------------------------------------------
def test_a_new_backend_kind_registers_and_answers_through_the_one_chat_interface():
    """A toy kind, `toy:<answer>`, whose server this process starts: a FAKE OpenAI-compatible server that
    always answers <answer> (control flow only)."""
    from fakes import FakeOpenAIServer
    from skillbook.llm import (
        LLM,
        BackendError,
        BackendKind,
        BackendSpec,
        ResponseCache,
        backends,
        parse_backend,
        register_backend,
    )

    class ToyServer:
        def __init__(self, answer: str):
            self.fake = FakeOpenAIServer(answer=answer)

        def ensure(self) -> str:          # start if needed; the OpenAI-compatible base URL
            return self.fake.url

        def stop(self) -> None:
            self.fake.close()

    def parse(rest: str, backend: str) -> BackendSpec:
        if not rest.isalpha():
            raise BackendError(f"toy backend {backend!r} needs an answer of letters; {backends.usage()}")
        return BackendSpec("toy", rest)

    register_backend(BackendKind("toy", parse, ("'toy:<answer>' (a test's toy)",),
                                 identity=lambda spec: f"toy:{spec.model}",
                                 server=lambda spec, **options: ToyServer(spec.model)))
    try:
        llm = LLM("toy:hello", ResponseCache())
        assert llm.identity == "toy:hello"
        assert llm.chat([{"role": "user", "content": "hi"}], max_tokens=5).text == "hello"
        with pytest.raises(BackendError, match=r"'toy:<answer>' \(a test's toy\)"):
            parse_backend("nope:x")
        with pytest.raises(ValueError, match="registered already"):
            register_backend(BackendKind("toy", parse, (), identity=str))
    finally:
        backends.BACKEND_KINDS.pop("toy", None)          # the registration ends with the test
        from skillbook.llm import servers
        for key in [k for k in servers._SERVERS if k.startswith("toy:")]:
            servers._SERVERS.pop(key).stop()
