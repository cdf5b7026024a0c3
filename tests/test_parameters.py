"""The pre-flight check of every chapter's parameters (issue 33, item 11).

A misspelt backend, task type, split or condition, a negative `n_tasks` or `workers=0` used to fail only
inside the chapter that used them, after the earlier chapters had run live. `execution_plan` (what
`make book`, `execute` and `rerun` run first) now checks every value against the declared domain of its
parameter (`book.parameters.SCHEMA`) and names the chapter, the parameter, the value and the valid
choices — before any chapter executes. Nothing here runs a chapter: the plans are only computed.
"""
import shutil
from pathlib import Path

import pytest

from skillbook.book import ProfileError, execute, execution_plan, parameter_defaults
from skillbook.book.parameters import SCHEMA, check_values
from skillbook.profiles import profiles

ROOT = Path(__file__).parents[1]
CHAPTERS = sorted(p.stem for p in (ROOT / "chapters").glob("*.ipynb"))


@pytest.mark.parametrize("chapter, name, value, valid", [
    ("01_agents", "backend", "embeded:qwen2.5-coder-1.5b", "embedded:qwen2.5-coder-1.5b"),
    ("07_skillrl", "teacher_backend", "openai:gpu-box:8000#m", "openai:<base_url>#<model>"),
    ("01_agents", "task_types", "twx/simonsay,twx/twc", "simonsays"),
    ("08_credit", "gold_task_types", "sciworld/boil,textworld/coin", "valid envs: sciworld, twx, tau2"),
    ("01_agents", "split", "tset", "valid splits: train, dev, test"),
    ("05_utility", "catalogue_splits", "train,devv", "valid splits: train, dev, test"),
    ("02_induction", "conditions", "task-none,task-txt", "subtask-placebo"),
    ("07_skillrl", "train_conditions", "base,sft-grpo", "sft+grpo"),
    ("02_induction", "prompt_level", "L4", "L1, L2, L3"),
    ("00_laboratory", "envs", "sciworld,textworld", "sciworld, twx, tau2"),
    ("06_assay", "assay_envs", "twx,sciworld", "twx, tau2"),
    ("06_assay", "outcome", "sucess", "score, success"),
    ("06_assay", "tau2_domain", "retial", "retail, airline"),
    ("07_skillrl", "retrieval_mode", "embeddings", "embedding, template"),
    ("07_skillrl", "train_base", "qwen2.5-coder-7b", "hf:<model id>"),
    ("08_credit", "credit_source", "judges", "judge, replay"),
    ("05_utility", "catalogue_types", "everything", "'stream', 'all'"),
    ("05_utility", "task_text", "instructions", "instruction+observation"),
    ("00_laboratory", "demo_tasks", "twx/coin/tset/0", "valid splits"),
    ("09_study", "study_profile", "studdy", "study"),
    ("01_agents", "n_tasks", -3, "a positive integer"),
    ("02_induction", "workers", 0, "a positive integer"),
    ("06_assay", "K", 1, "an integer ≥ 2"),
    ("06_assay", "f", 1.5, "in (0, 1)"),
    ("05_utility", "catalogue_n", -1, "a non-negative integer"),
    ("05_utility", "catalogue_sizes", [500, 0], "positive integers"),
    ("01_agents", "seed", -1, "a non-negative integer"),
])
def test_a_misspelt_value_is_refused_naming_chapter_parameter_value_and_choices(chapter, name, value, valid):
    with pytest.raises(ProfileError) as e:
        execution_plan("workshop", [chapter], extra_params={name: value})
    message = str(e.value)
    for part in (chapter, repr(name), repr(value), valid):
        assert part in message, (part, message)


def test_none_is_no_escape_from_a_domain():
    """The type check lets None through for every parameter; a count or a backend must still be one."""
    with pytest.raises(ProfileError, match="'n_tasks' = None.*a positive integer"):
        execution_plan("workshop", ["01_agents"], extra_params={"n_tasks": None})
    execution_plan("workshop", ["06_assay"], extra_params={"k_nearest": None})   # None: every dev task


def test_the_valid_values_the_book_uses_pass():
    """Every committed profile (and the exercises' changes, checked when they load) plans without error,
    and every chapter's own defaults lie in their domains."""
    for profile in profiles(ROOT):
        execution_plan(profile)
    execution_plan("workshop", ["01_agents"], extra_params={
        "backend": "openai:http://a:8000/v1,http://b:8000/v1#Qwen/Qwen2.5-7B-Instruct", "split": "dev"})
    for chapter in CHAPTERS:
        assert check_values(chapter, parameter_defaults(ROOT / "chapters" / f"{chapter}.ipynb"), ROOT) == []


def test_every_chapter_parameter_has_a_declared_domain():
    """A new parameter is declared in the schema (its domain, or `anything` saying none is checked)."""
    missing = {c: sorted(set(parameter_defaults(ROOT / "chapters" / f"{c}.ipynb")) - set(SCHEMA))
               for c in CHAPTERS}
    assert not any(missing.values()), missing


@pytest.fixture
def book_copy(tmp_path, monkeypatch):
    """The book's chapters, profiles and table of contents in a folder of their own; executing is recorded,
    never done."""
    import skillbook.book.execution as execution
    for name in ("_toc.yml", "chapters", "profiles"):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copyfile
        copy(ROOT / name, tmp_path / name)
    ran = []
    monkeypatch.setattr(execution, "_execute_plans", lambda plans, *a: ran.append(plans) or [])
    return tmp_path, ran


def test_a_misspelt_profile_stops_the_book_before_its_first_chapter(book_copy):
    """`make book` with a profile whose last chapter has a typo: nothing executes, and every problem of every
    chapter is named at once (each value once, with the chapters it reaches)."""
    root, ran = book_copy
    (root / "profiles" / "typo.yml").write_text(
        'extends: workshop\nsplit: "tset"\nchapters:\n  08_credit:\n    credit_source: "judges"\n')
    with pytest.raises(ProfileError) as e:
        execute("typo", root=root)
    assert not ran
    message = str(e.value)
    assert "'split' = 'tset' (profile typo; chapters 01_agents, 02_induction)" in message
    assert "'credit_source' = 'judges' (profile typo, chapters: 08_credit; chapter 08_credit)" in message


def test_a_misspelt_rerun_is_refused_before_any_record_is_copied(book_copy):
    from skillbook.book.rerun import rerun
    root, ran = book_copy
    with pytest.raises(ProfileError, match=r"'split' = 'tset' \(given with --set; chapter 01_agents\)"):
        rerun("01_agents", "workshop", "mine", {"split": "tset"}, root=root)
    assert not ran and not (root / "runs" / "mine").exists()
