"""Chapters: clean sources (nbdev-style), real execution under the ci profile (the smoke profile made
cheaper, profiles/ci.yml), the -W book build."""
import json
import re
from pathlib import Path

import nbformat
import pytest

from skillbook.book import (
    ProfileError,
    declared_parameters,
    execute,
    load_profile,
    profiles,
    project_root,
    toc_chapters,
)
from skillbook.llm.cache import export_files, read_export

ROOT = project_root()
# chapters that only read other chapters' records: no model call, so no summary and no cache to export
NO_MODEL_CALLS = {"03_retrieval", "10_findings", "11_ceiling"}
# chapters that read a background run's records (`make ceiling`): before its first games there is no claim
CLAIMS_ONCE_RECORDED = {"11_ceiling"}
SOURCES = sorted((ROOT / "chapters").glob("*.ipynb"))


def test_every_toc_chapter_has_a_source_and_every_source_is_in_the_toc():
    assert {p.stem for p in SOURCES} == set(toc_chapters())


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.stem)
def test_chapter_sources_are_clean_and_parameterised(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "strip outputs from chapter sources"
    assert "parameters" in code[0].metadata.get("tags", []), "the first code cell must be tagged 'parameters'"
    assert nb.metadata["kernelspec"]["name"] == "python3"
    params = code[0].source
    for name in ("backend", "seed", "profile", "runs_root"):
        assert re.search(rf"^{name}\s*=", params, re.M), f"parameter {name!r} missing"
    assert any("lab.finish()" in c.source for c in code), "a chapter ends by stating model, cache hits and wall time"
    # papermill's own parser skips a line with two '=' and then warns "unknown parameter" for it
    from papermill.translators import PythonTranslator
    seen = {p.name for p in PythonTranslator.inspect(code[0])}
    assert seen == set(declared_parameters(path)), f"papermill cannot read {set(declared_parameters(path)) - seen}"


def test_profiles_exist_and_unknown_ones_are_named():
    assert {"smoke", "workshop", "paper"} <= set(profiles())
    with pytest.raises(ProfileError, match="valid profiles: .*smoke"):
        load_profile("laptop")
    with pytest.raises(ProfileError, match="chapters in _toc.yml: 00_laboratory"):
        execute("smoke", ["99_nope"])


def test_a_profile_that_extends_another_overrides_it_key_by_key(tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "base.yml").write_text(
        "n_tasks: 1\nmax_steps: 4\nchapters:\n  09_study: {study_profile: base, run: true}\n"
        "  07_skillrl: {train_base: ''}\nstudy:\n  n_tasks: 2\n  max_steps: 4\n")
    (tmp_path / "profiles" / "lean.yml").write_text(
        "extends: base\nmax_steps: 2\nchapters:\n  09_study: {study_profile: lean}\nstudy:\n  max_steps: 2\n")
    lean = load_profile("lean", tmp_path)
    assert lean["n_tasks"] == 1 and lean["max_steps"] == 2 and "extends" not in lean
    assert lean["chapters"] == {"09_study": {"study_profile": "lean", "run": True}, "07_skillrl": {"train_base": ""}}
    assert lean["study"] == {"n_tasks": 2, "max_steps": 2}
    assert load_profile("base", tmp_path)["max_steps"] == 4          # the base is not changed
    (tmp_path / "profiles" / "loop.yml").write_text("extends: loop2\n")
    (tmp_path / "profiles" / "loop2.yml").write_text("extends: loop\n")
    with pytest.raises(ProfileError, match="goes round in a circle"):
        load_profile("loop", tmp_path)
    (tmp_path / "profiles" / "orphan.yml").write_text("extends: nope\n")
    with pytest.raises(ProfileError, match="unknown profile 'nope'; valid profiles: base"):
        load_profile("orphan", tmp_path)


CI_PROFILE = "ci"


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory):
    """Every chapter executed in book order into one folder (later chapters read earlier chapters' records)."""
    root = tmp_path_factory.mktemp("ci")
    return root, dict(zip(toc_chapters(), execute(CI_PROFILE, output_root=root)))


@pytest.mark.integration
@pytest.mark.parametrize("chapter", toc_chapters())
def test_chapter_executes_under_the_ci_profile(chapter, ci_run):
    tmp_path, outputs = ci_run
    nb = nbformat.read(outputs[chapter], as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert nb.metadata.papermill.input_path == f"chapters/{chapter}.ipynb"  # no machine's path in a committed run
    source = nbformat.read(ROOT / "chapters" / f"{chapter}.ipynb", as_version=4)
    if any("lab.claims(" in c.source for c in source.cells if c.cell_type == "code") \
            and chapter not in CLAIMS_ONCE_RECORDED:                                     # recorded for chapter 10
        record = json.loads((tmp_path / chapter / "claims.json").read_text())
        assert record["chapter"] == chapter and record["claims"]
    if chapter in NO_MODEL_CALLS:      # it reads records only: no summary, no cache to export
        return
    found = list(tmp_path.rglob(f"summary-{chapter}.json"))
    if not found:   # the real case: 05 under ci made 18 calls, all answered from the cache 04 filled
        closing = [o for c in nb.cells if c.cell_type == "code" and "lab.finish()" in c.source for o in c.outputs]
        assert closing and ", 0 live;" in closing[0]["data"]["text/html"], "no summary, yet live model calls"
        return
    summary_path, = found
    summary = json.loads(summary_path.read_text())
    assert summary["backend"] == load_profile(CI_PROFILE)["backend"]
    assert summary["errors"] == 0
    exported = export_files(summary_path.parent)   # the cache's text form: responses/NNNNNN.jsonl.gz
    assert exported and sum(1 for p in exported for _ in read_export(p)) >= summary["live_calls"]


@pytest.mark.integration
def test_book_builds_with_warnings_as_errors_and_loads_nothing_remote(workshop_html):
    html = workshop_html
    pages = list(Path(html).rglob("*.html"))
    assert (Path(html) / "index.html").exists() and len(pages) >= 2
    remote = re.compile(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=[\"']?(?:https?:)?//", re.I)
    offenders = {p.name: remote.findall(p.read_text()) for p in pages if remote.search(p.read_text())}
    assert not offenders
    lab = (Path(html) / "runs" / "workshop" / "00_laboratory.html").read_text()
    assert "_static/mathjax/tex-chtml.js" in lab
    assert "_static/require.js" in lab and "_static/html-manager/embed-amd.js" in lab  # widget runtime, local
    assert (Path(html) / "_static" / "mathjax" / "tex-chtml.js").exists()


def test_every_profile_key_is_a_parameter_of_some_chapter():
    from skillbook.book import declared_parameters
    by_chapter = {p.stem: set(declared_parameters(p)) for p in SOURCES}
    declared = set().union(*by_chapter.values())
    for name in profiles():
        params = load_profile(name)
        from skillbook.profiles import DESIGN_SECTIONS
        unknown = set(params) - declared - {"chapters", *DESIGN_SECTIONS}   # the studies' designs
        assert not unknown, f"profiles/{name}.yml sets parameters no chapter declares: {sorted(unknown)}"
        for chapter, scoped in (params.get("chapters") or {}).items():
            assert chapter in by_chapter, f"profiles/{name}.yml has a section for unknown chapter {chapter!r}"
            assert not set(scoped) - by_chapter[chapter], (f"profiles/{name}.yml: {chapter} does not declare "
                                                           f"{sorted(set(scoped) - by_chapter[chapter])}")
