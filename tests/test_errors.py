"""Bad input gets a clear error naming what is wrong (file and line, parameter, valid choices) before any
model time (issue 14 §7)."""
import json

import pytest

from skillbook.book import ProfileError, execute, load_profile
from skillbook.skills.library import SkillLibrary


@pytest.mark.parametrize("params, message", [
    ({"twx_params": 5}, r"parameter 'twx_params' of chapter 01_agents must be a dict"),
    ({"task_types": 5}, r"parameter 'task_types' of chapter 01_agents must be a str"),
    ({"max_steps": True}, r"parameter 'max_steps' of chapter 01_agents must be a int"),
    ({"max_stepz": 5}, r"unknown parameter\(s\) \['max_stepz'\] for chapter\(s\) 00_laboratory, 01_agents; their"),
])
def test_wrong_chapter_parameters_fail_before_anything_runs(tmp_path, params, message):
    with pytest.raises(ProfileError, match=message):
        execute("smoke", ["00_laboratory", "01_agents"], output_root=tmp_path, extra_params=params)
    assert not list(tmp_path.iterdir())          # not even chapter 00 ran


def test_a_typo_in_a_profile_override_is_an_error(tmp_path):
    root = tmp_path / "proj"
    import shutil

    from skillbook.book import project_root
    shutil.copytree(project_root() / "chapters", root / "chapters")
    shutil.copy(project_root() / "_toc.yml", root / "_toc.yml")
    (root / "profiles").mkdir()
    (root / "profiles" / "p.yml").write_text("chapters:\n  01_agents:\n    n_taskz: 2\n")
    with pytest.raises(ProfileError, match=r"profile p: unknown parameter\(s\) \['n_taskz'\]"):
        execute("p", ["01_agents"], output_root=tmp_path / "out", root=root)
    (root / "profiles" / "q.yml").write_text("backend: [unclosed\n")
    with pytest.raises(ProfileError, match=r"q\.yml:2:1: not a valid YAML profile"):
        load_profile("q", root)


def test_library_files_with_duplicate_ids_or_bad_json_name_the_file(tmp_path):
    skill = {"id": "s0001", "description": "d", "body": "b"}
    path = tmp_path / "lib.json"
    path.write_text(json.dumps({"format": 1, "skills": [skill, skill]}))
    with pytest.raises(ValueError, match=r"lib\.json: duplicate skill id\(s\) \['s0001'\]"):
        SkillLibrary.load(path)
    path.write_text('{"format": 1,\n "skills": [}')
    with pytest.raises(ValueError, match=r"lib\.json:2:\d+: malformed skill library"):
        SkillLibrary.load(path)
    path.write_text(json.dumps({"format": 1, "skills": [{**skill, "colour": "red"}]}))
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['colour'\]"):
        SkillLibrary.load(path)
