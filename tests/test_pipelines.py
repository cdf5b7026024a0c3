"""Every paper's pipeline has one shape (docs/HOWTO.md, "A paper"): `run_<paper>(run_dir, llm, settings, *, …)`,
`settings` one typed dataclass with `validate()` that holds the agent as an `AgentConfig`, never a dict; what
a record holds of the settings does not change (attribution.json's knobs, experiment.json read back). No
simulator, no model: every refusal comes before the first model call."""
import inspect
import json

import pytest

from fakes import FakeModel
from skillbook import papers
from skillbook.agent import AgentConfig
from skillbook.papers.assay.pipeline import AssaySettings, run_assay
from skillbook.papers.breakdown import TransferSettings, run_transfer
from skillbook.papers.skillc.gold import GoldSettings, gold_study
from skillbook.papers.skillc.pipeline import SkillCSettings, run_skillc
from skillbook.papers.skillrl.pipeline import SkillRLSettings, run_skillrl

AGENT_DICT = {"max_steps": 6, "n_examples": 0}     # what the pipelines took before issue 38
TASKS = {s: [f"fake/count/{s}/0", f"fake/fetch/{s}/0"] for s in ("train", "dev", "test")}


def transfer_settings(**kw) -> TransferSettings:
    return TransferSettings(**{"stream": ["fake/count/dev/0", "fake/fetch/dev/0"], "conditions": ["subtask-none"],
                               "agent": AgentConfig(max_steps=6), "env_options": {}, "prompt_level": "L3", "k": 5,
                               "threshold": 0.3, "task_types": "fake/count,fake/fetch", "split": "dev",
                               "n_tasks": 1, "seed": 0, "backend": "fake:scripted", **kw})


@pytest.mark.parametrize("key", list(papers.PAPERS))
def test_every_registered_pipeline_has_the_one_shape(key):
    paper = papers.PAPERS[key]
    run = paper.run()
    assert inspect.isfunction(run), f"{key}: {paper.pipeline} is not a function"
    params = list(inspect.signature(run).parameters.values())
    assert [p.name for p in params[:3]] == ["run_dir", "llm", "settings"], key
    assert all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params[:3]), key
    assert all(p.kind is p.KEYWORD_ONLY for p in params[3:]), \
        f"{key}: {[p.name for p in params[3:] if p.kind is not p.KEYWORD_ONLY]} are not keyword-only"
    cls = paper.settings_class()
    assert inspect.isclass(cls) and callable(getattr(cls, "validate", None)), key
    assert run.__name__ == f"run_{'transfer' if key == 'breakdown' else key}"


def test_the_registry_names_each_papers_pipeline_and_settings():
    assert {k: (p.run(), p.settings_class()) for k, p in papers.PAPERS.items()} == {
        "breakdown": (run_transfer, TransferSettings), "assay": (run_assay, AssaySettings),
        "skillrl": (run_skillrl, SkillRLSettings), "skillc": (run_skillc, SkillCSettings)}
    bare = papers.Paper("lamplighter", "Lamplighter", ("12_lamps",))
    with pytest.raises(LookupError, match="'lamplighter' has no pipeline registered"):
        bare.run()
    with pytest.raises(LookupError, match="'lamplighter' has no settings registered"):
        bare.settings_class()


# -- the agent is an AgentConfig ---------------------------------------------------------------------------
CHECKS = {   # settings holding the agent dict, how they check themselves, and the pipeline that must refuse them
    "transfer": (lambda agent: transfer_settings(agent=agent), "validate",
                 lambda d, llm, s: run_transfer(d, llm, s)),
    "assay": (lambda agent: AssaySettings(tasks=TASKS, agent=agent, env="twx"), "validate_run",
              lambda d, llm, s: run_assay(d, llm, s)),
    "skillc": (lambda agent: SkillCSettings(tasks=TASKS, agent=agent), "validate_run",
               lambda d, llm, s: run_skillc(d, llm, s, progress=False)),
    "skillrl": (lambda agent: SkillRLSettings(tasks=TASKS, agent=agent), "validate",
                lambda d, llm, s: run_skillrl(d, llm, s)),
    "gold": (lambda agent: GoldSettings(agent=agent, task_ids=["twx/twc/train/0"]), "validate",
             lambda d, llm, s: gold_study(d, llm, s, progress=False)),
}


@pytest.mark.parametrize("name", list(CHECKS))
def test_settings_refuse_an_agent_dict_before_any_model_call(name, tmp_path):
    make, check, pipeline = CHECKS[name]
    with pytest.raises(TypeError, match="AgentConfig"):
        getattr(make(dict(AGENT_DICT)), check)()
    llm = FakeModel()
    with pytest.raises(TypeError, match="AgentConfig"):
        pipeline(tmp_path / "run", llm, make(dict(AGENT_DICT)))
    assert llm.calls == [] and not (tmp_path / "run").exists()
    getattr(make(AgentConfig(max_steps=6, n_examples=0)), check)()      # the same agent as an AgentConfig


@pytest.mark.parametrize("name", ["assay", "skillc", "skillrl", "gold"])
def test_the_task_level_papers_refuse_an_agent_of_another_level(name, tmp_path):
    make, check, pipeline = CHECKS[name]
    with pytest.raises(ValueError, match=r"task-level agent; got AgentConfig\(level='subtask'\)"):
        getattr(make(AgentConfig(level="subtask")), check)()
    llm = FakeModel()
    with pytest.raises(ValueError, match="task-level agent"):
        pipeline(tmp_path / "run", llm, make(AgentConfig(level="subtask")))
    assert llm.calls == [] and not (tmp_path / "run").exists()


def test_check_agent_names_the_paper_and_validates_the_config():
    with pytest.raises(TypeError, match="Assay: `agent` must be an AgentConfig.*got dict"):
        papers.check_agent({"max_steps": 3}, "task", "Assay")
    with pytest.raises(ValueError, match="max_steps must be a positive integer"):
        papers.check_agent(AgentConfig(max_steps=0), "task", "Assay")
    config = AgentConfig(max_steps=3)
    assert papers.check_agent(config, "task", "Assay") is config


# -- what the records hold -------------------------------------------------------------------------------
def test_assay_records_the_twelve_method_knobs_in_their_order():
    """attribution.json holds `settings.method()` beside the masks: the run's fields (tasks, agent, env, …)
    added to AssaySettings must not change what it holds, nor the order of its keys."""
    knobs = ["K", "f", "outcome", "tau_split", "max_split", "tau_retire", "tau_merge", "temperature", "k_nearest",
             "min_keep", "k", "threshold"]
    assert list(AssaySettings().method()) == knobs
    s = AssaySettings(K=6, tasks=TASKS, agent=AgentConfig(max_steps=9), env="sciworld", seed=3)
    assert s.method() == {**AssaySettings().method(), "K": 6}
    assert AssaySettings().method() == {"K": 12, "f": 0.4, "outcome": "score", "tau_split": 0.5, "max_split": 3,
                                        "tau_retire": 0.05, "tau_merge": 0.85, "temperature": 0.1,
                                        "k_nearest": None, "min_keep": 1, "k": 5, "threshold": 0.3}
    # the committed records: the settings they hold, read into AssaySettings, are recorded as the same text
    from skillbook.profiles import project_root
    recorded = sorted((project_root() / "runs" / "workshop" / "06_assay").glob("*/attribution.json"))
    assert recorded
    for path in recorded:
        saved = json.loads(path.read_text())["settings"]
        assert json.dumps(AssaySettings(**saved).method()) == json.dumps(saved), path


def test_an_old_experiment_json_agent_reads_as_the_agent_config_its_fields_make():
    """Before issue 38, experiment.json held the agent dict as the chapter wrote it: only some fields."""
    old = {"max_steps": 30, "max_subtasks": 15, "max_subtask_steps": 10}
    record = {**transfer_settings().record(), "agent": dict(old)}
    s = TransferSettings.from_record(record)
    assert isinstance(s.agent, AgentConfig)
    assert s.agent == AgentConfig(max_steps=30, max_subtasks=15, max_subtask_steps=10)
    assert s.validate() is s
    assert {k: v for k, v in record.items() if k != "agent"} == {k: v for k, v in s.record().items() if k != "agent"}


def test_experiment_json_records_the_agent_whole_without_its_level_and_reads_back_equal():
    s = transfer_settings(agent=AgentConfig(max_steps=7, n_examples=0, prompts="v2"))
    record = s.record()
    assert record["agent"] == {k: v for k, v in s.agent.record().items() if k != "level"}
    assert record["agent"]["prompts"] == "v2" and "level" not in record["agent"]
    assert "skills_folder" not in record                                   # only when set
    assert TransferSettings.from_record(record) == s
    assert TransferSettings.from_record(transfer_settings(skills_folder="x").record()).skills_folder == "x"


def test_the_committed_workshop_transfer_record_reads_back():
    from skillbook.profiles import project_root
    path = project_root() / "runs" / "workshop" / "transfer" / "experiment.json"
    s = TransferSettings.from_record(json.loads(path.read_text()))
    assert s.agent == AgentConfig(max_steps=30, max_subtasks=15, max_subtask_steps=10) and s.validate() is s
