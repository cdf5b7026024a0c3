"""Agent Skills (SKILL.md folders) out of and into the book (issue 39): the committed libraries of each
paper round-trip, and a bad folder is refused whole, each fault named with its file and rule."""
import os
from pathlib import Path

import pytest

from skillbook.libraries import export_run, libraries_in, main
from skillbook.memory import content_hash
from skillbook.profiles import project_root
from skillbook.skills.agentskills import AgentSkillsError, export_skills, import_skills, skill_name
from skillbook.skills.record import Skill

RUNS = project_root() / "runs" / "workshop"
PAPER_RUNS = {"breakdown": RUNS / "transfer", "assay": RUNS / "06_assay", "skillrl": RUNS / "07_skillrl"}


@pytest.mark.parametrize("paper", sorted(PAPER_RUNS))
def test_every_library_a_paper_recorded_exports_and_imports_as_the_same_skills(paper, tmp_path):
    found = libraries_in(PAPER_RUNS[paper])
    assert found, f"no library found in {PAPER_RUNS[paper]}"
    folders = export_run(PAPER_RUNS[paper], tmp_path / "out")
    for name, skills in found.items():
        back = import_skills(tmp_path / "out" / name)
        # the same records, so the same fingerprint: a memory over the imported library replays the
        # episodes recorded with the original (`memory.content_hash` of the skills is in its settings)
        assert [s.to_dict() for s in back] == [s.to_dict() for s in skills]
        assert content_hash([s.to_dict() for s in back]) == content_hash([s.to_dict() for s in skills])
        assert len(folders[name]) == len(skills)
    text = next((tmp_path / "out").rglob("SKILL.md")).read_text()
    assert f'"paper": "{paper}"' in text
    assert f'"run": "runs/workshop/{PAPER_RUNS[paper].name}"' in text.replace("\n    ", " ")   # no machine's path


def test_code_skills_are_scripts_and_names_follow_the_format():
    taken = set()
    assert skill_name("Subtask_Code/Open The Door!!", taken) == "subtask-code-open-the-door"
    assert skill_name("Subtask_Code/Open The Door!!", taken) == "subtask-code-open-the-door-2"
    assert len(skill_name("x" * 200, taken)) == 64 and skill_name("---", taken) == "skill"


def test_a_code_skill_keeps_its_function_under_scripts(tmp_path):
    code = Skill("open_door", "Open a door by name.",
                 "def open_door(env, name):\n    return env.step(f'open {name}')\n", format="code")
    export_skills([code], tmp_path / "lib")
    assert (tmp_path / "lib" / "open-a-door-by-name" / "scripts" / "open_a_door_by_name.py").read_text() == code.body
    assert import_skills(tmp_path / "lib")[0].to_dict() == code.to_dict()


def write(folder: Path, name: str, front: str, body: str = "Do it.\n") -> Path:
    d = folder / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "SKILL.md").write_text(f"---\n{front}---\n\n{body}", encoding="utf-8")
    return d


def test_a_hand_written_skill_imports_as_a_text_skill(tmp_path):
    write(tmp_path, "find-the-coin", "name: find-the-coin\ndescription: Look in every room for the coin.\n",
          "1. Open doors.\n2. Take the coin.\n")
    [s] = import_skills(tmp_path)
    assert (s.id, s.format, s.description, s.body) == ("find-the-coin", "text", "Look in every room for the coin.",
                                                       "1. Open doors.\n2. Take the coin.")


def test_a_bad_folder_is_refused_whole_with_every_fault_named(tmp_path):
    good = write(tmp_path, "good-one", "name: good-one\ndescription: Fine.\n")
    write(tmp_path, "no-front", "", "")
    (tmp_path / "no-front" / "SKILL.md").write_text("no front matter here\n")
    write(tmp_path, "Bad_Name", "name: Bad_Name\ndescription: x\n")
    write(tmp_path, "other-dir", "name: not-the-dir\ndescription: x\n")
    write(tmp_path, "too-long", f"name: too-long\ndescription: {'a' * 1100}\n")
    write(tmp_path, "extra", "name: extra\ndescription: x\nauthor: me\n")
    (tmp_path / "empty").mkdir()
    latin = tmp_path / "latin"
    latin.mkdir()
    (latin / "SKILL.md").write_bytes("---\nname: latin\ndescription: caf\xe9\n---\n".encode("latin-1"))
    huge = write(tmp_path, "huge", "name: huge\ndescription: x\n", "y" * 300_000)
    outside = tmp_path.parent / f"{tmp_path.name}-secret.txt"
    outside.write_text("secret")
    os.symlink(outside, good / "notes.md")
    with pytest.raises(AgentSkillsError) as e:
        import_skills(tmp_path)
    text = str(e.value)
    for needle in ("no-front/SKILL.md: SKILL.md must start with YAML frontmatter",
                   "Bad_Name/SKILL.md: Skill name 'Bad_Name' must be lowercase",
                   "Directory name 'other-dir' must match skill name 'not-the-dir'",
                   "Description exceeds 1024 character limit",
                   "Unexpected fields in frontmatter: author",
                   "empty: no SKILL.md",
                   "latin/SKILL.md: not UTF-8 text",
                   f"huge/SKILL.md: {huge.joinpath('SKILL.md').stat().st_size:,} bytes",
                   "good-one/notes.md: a symbolic link out of the folder",
                   "nothing was imported"):
        assert needle in text, needle
    assert (huge / "SKILL.md").exists()                               # refused, not touched


def test_the_command_line_lists_exports_and_checks(tmp_path, capsys):
    main(["list", str(PAPER_RUNS["skillrl"])])
    assert "bank/round0: 13 skills (text)" in capsys.readouterr().out
    main(["export", str(PAPER_RUNS["skillrl"] / "bank" / "round0.json"), str(tmp_path / "bank")])
    main(["check", str(tmp_path / "bank")])
    assert "13 valid Agent Skills" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="exists: export writes a new folder"):
        main(["export", str(PAPER_RUNS["skillrl"]), str(tmp_path / "bank")])
    with pytest.raises(SystemExit, match="no skill library found"):
        main(["export", str(tmp_path / "bank"), str(tmp_path / "again")])


def test_a_folder_of_agent_skills_runs_as_a_memory_condition_and_replays(fake_env, tmp_path):
    """The first paper's pipeline with `subtask-skills`: the hand-written skill is retrieved into the
    agent's prompt, the run replays with no model call, and a bad folder is refused before any."""
    from fakes import FakeModel
    from skillbook.agent import AgentConfig
    from skillbook.envs import sample_tasks
    from skillbook.papers.breakdown import TransferSettings, interleave, load_transfer, run_transfer
    write(tmp_path / "mine", "count-to-the-goal",
          "name: count-to-the-goal\ndescription: Make the counter show the goal then say done.\n",
          "1. Say add one until the counter shows the goal.\n2. Say done.\n")
    stream = interleave(sample_tasks("fake/count,fake/fetch", "dev", 1, seed=0), seed=0)

    def settings(folder):
        return TransferSettings(stream=stream, conditions=["subtask-none", "subtask-skills"],
                                agent=AgentConfig(max_steps=6, max_subtask_steps=3, n_examples=0), env_options={},
                                prompt_level="L3", k=5, threshold=0.0, task_types="fake/count,fake/fetch",
                                split="dev", n_tasks=1, seed=0, backend="fake:scripted", skills_folder=folder)
    llm = FakeModel()
    t = run_transfer(tmp_path / "run" / "transfer", llm, settings(str(tmp_path / "mine")))
    shown = [m["content"] for messages in llm.calls for m in messages
             if "Say add one until the counter" in m["content"]]
    assert shown, "the imported skill never reached a prompt"
    assert [s.id for s in t.libraries["subtask-skills"]] == ["count-to-the-goal"]
    n = len(llm.calls)
    again = run_transfer(tmp_path / "run" / "transfer", llm, settings(str(tmp_path / "mine")))
    assert len(llm.calls) == n
    assert load_transfer(tmp_path / "run" / "transfer").settings.skills_folder == str(tmp_path / "mine")
    write(tmp_path / "bad", "Bad", "name: Bad\ndescription: x\n")
    with pytest.raises(AgentSkillsError, match="must be lowercase"):
        run_transfer(tmp_path / "run2" / "transfer", llm, settings(str(tmp_path / "bad")))
    assert len(llm.calls) == n and again.settings == t.settings


def test_a_chapter_over_records_without_a_library_says_so(tmp_path):
    from skillbook.libraries import export_preview
    assert export_preview(tmp_path / "nothing", None, "runs/ci/calibration") == \
        "No skill library was recorded under `runs/ci/calibration`."


def test_a_skillc_macro_library_round_trips_with_its_function_as_a_script(tmp_path):
    # the workshop's macro library is empty; a macro as SKILLC writes it (`macros.macro_skill`), kept in
    # library.json as `run_skillc` keeps it
    import json

    from skillbook.papers.skillc.macros import Macro, macro_skill
    from skillbook.skills.library import SkillLibrary
    macro = Macro("open_and_take", "Open the fridge and take the milk.", ["item"], "the fridge is closed",
                  ["open fridge", "take {item}"], credit=[0.4, 0.6])
    library = SkillLibrary()
    library.add(macro_skill(macro, "macro_0001", {"source_task": "twx/cookingworld/train/3"}))
    run = tmp_path / "08_credit"
    run.mkdir()
    (run / "library.json").write_text(json.dumps({"library": library.state(), "log": [], "source": "x"}))
    found = libraries_in(run)
    assert list(found) == ["library"]
    export_run(run, tmp_path / "out")
    [back] = import_skills(tmp_path / "out" / "library")
    [orig] = found["library"]
    assert back.to_dict() == orig.to_dict() and back.format == "code"
    script = next((tmp_path / "out" / "library").rglob("scripts/*.py")).read_text()
    assert script == orig.body and "def open_and_take(env, item):" in script
    text = next((tmp_path / "out" / "library").rglob("SKILL.md")).read_text()
    assert '"paper": "skillc"' in text
