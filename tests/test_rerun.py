"""`python -m skillbook.book rerun`: one chapter, changed parameters, a run folder of one's own.

End to end on a tiny project: a chapter-like notebook asks a FAKE OpenAI-compatible server (a few lines
of http.server in this process) four questions and groups the answers into `n_buckets` buckets. Its
recorded run is the "workshop" profile; an analysis-only change (n_buckets) is re-executed into
runs/mine/ from a copy of the records with no model call; a change of the questions is found to need
the model before any call is made.
"""
import hashlib
import http.server
import json
import threading
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from skillbook.book import ProfileError, execute
from skillbook.book.rerun import ReplayNeedsModel, parse_sets, rerun, stage_overlay
from skillbook.llm import LLM, ReplayMiss, ResponseCache

PARAMS = '''backend = "openai:http://127.0.0.1:9/v1#fake-model"
question = "Say a number"
n_buckets = 2
label = "default"
seed = 0
profile = "workshop"
runs_root = None'''
BODY = '''from skillbook.book import Lab

lab = Lab("90_tiny", profile=profile, backend=backend, seed=seed, runs_root=runs_root)
answers = [lab.llm.chat([{"role": "user", "content": f"{question} {i}"}]).text
           for i in range(4)]
buckets = [answers[i::n_buckets] for i in range(n_buckets)]
print(f"{label}: {n_buckets} buckets {buckets}")'''


class FakeOpenAI(http.server.BaseHTTPRequestHandler):
    """A FAKE chat-completions endpoint: answers '<n>' for the n-th request and counts them."""
    calls = 0

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).calls += 1
        body = json.dumps({"id": f"c{self.calls}", "object": "chat.completion", "created": 0, "model": "fake-model",
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": str(self.calls)}}],
                           "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_server():
    FakeOpenAI.calls = 0
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"openai:http://127.0.0.1:{httpd.server_address[1]}/v1#fake-model"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def project(tmp_path, fake_server):
    """A tiny book: one chapter, a workshop profile (with a per-chapter override) pointing at the fake server."""
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: index\nchapters:\n  - file: runs/workshop/90_tiny\n")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "workshop.yml").write_text(
        f'backend: "{fake_server}"\nn_buckets: 2\nchapters:\n  90_tiny:\n    label: "the override"\n')
    (tmp_path / "chapters").mkdir()
    nb = new_notebook(cells=[new_markdown_cell("# Tiny\n\nWhat this page is about."),
                             new_code_cell(PARAMS, metadata={"tags": ["parameters"]}),
                             new_code_cell(BODY), new_code_cell("lab.finish()")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "chapters" / "90_tiny.ipynb")
    # the recorded run (4 live calls), in the tiny project's own runs/workshop/
    execute("workshop", ["90_tiny"], root=tmp_path, output_root=tmp_path / "runs" / "workshop")
    assert FakeOpenAI.calls == 4
    return tmp_path


def digest(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def printed(notebook: Path) -> str:
    nb = nbformat.read(notebook, as_version=4)
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


@pytest.mark.integration
def test_a_chapter_executes_over_ipc_with_no_unencrypted_tcp_warning(project, capfd):
    """The real case: every kernel start printed 'Kernel is running over TCP without encryption'."""
    from skillbook.book import execute
    execute("workshop", ["90_tiny"], root=project, output_root=project / "runs" / "other")
    assert "without encryption" not in capfd.readouterr().err


def test_an_analysis_only_change_reruns_from_the_records_with_no_model_call(project):
    workshop = digest(project / "runs" / "workshop")
    said = []
    out = rerun("90_tiny", "workshop", "mine", parse_sets(["n_buckets=4"]), root=project, say=said.append)
    assert out == project / "runs" / "mine" / "90_tiny.ipynb"
    assert "the override: 4 buckets [['1'], ['2'], ['3'], ['4']]" in printed(out)   # the recorded answers
    assert FakeOpenAI.calls == 4                                     # no model call
    assert digest(project / "runs" / "workshop") == workshop          # the profile's records untouched
    assert any("n_buckets 2 -> 4" in s for s in said)                # says what changes, up front ...
    assert any("4 live model calls" in s for s in said)              # ... and what the recorded run cost
    assert json.loads((project / "runs" / "mine" / "rerun.json").read_text())["chapters"]["90_tiny"] == \
        {"from": "workshop", "set": {"n_buckets": 4}}
    nb = nbformat.read(out, as_version=4)
    assert 'runs_root = "../runs/mine"' in nb.cells[1].source          # no machine's path in the page

    # the book with it: runs/mine's chapter replaces the profile's, with a note on what changed
    stage = stage_overlay("workshop", "mine", project)
    page = nbformat.read(stage / "runs" / "workshop" / "90_tiny.ipynb", as_version=4)
    assert "re-executed into `runs/mine/` with `n_buckets = 4`" in page.cells[1].source
    assert page.cells[0].source == "# Tiny"                           # the note right under the title,
    assert page.cells[2].source == "What this page is about."         # then the page's introduction

    # a change that needs new answers is found before any model call, with the recorded cost
    with pytest.raises(ReplayNeedsModel, match=r"needs new model answers; .*4 live model calls"):
        rerun("90_tiny", "workshop", "mine", {"question": "Say a word"}, root=project, say=said.append)
    assert FakeOpenAI.calls == 4
    # --live runs it (here against the fake server)
    out = rerun("90_tiny", "workshop", "mine", {"question": "Say a word"}, live=True, root=project,
                say=said.append)
    assert FakeOpenAI.calls == 8 and "the override: 2 buckets" in printed(out)
    assert digest(project / "runs" / "workshop") == workshop


def test_rerun_refuses_a_profiles_folder_and_unknown_parameters_before_anything(tmp_path):
    root = tmp_path
    (root / "_toc.yml").write_text("format: jb-book\nroot: index\nchapters:\n  - file: runs/workshop/90_tiny\n")
    (root / "profiles").mkdir()
    (root / "profiles" / "workshop.yml").write_text("n_buckets: 2\n")
    (root / "profiles" / "smoke.yml").write_text("n_buckets: 1\n")
    (root / "chapters").mkdir()
    nb = new_notebook(cells=[new_code_cell(PARAMS, metadata={"tags": ["parameters"]})])
    nbformat.write(nb, root / "chapters" / "90_tiny.ipynb")
    with pytest.raises(ProfileError, match="must not write.*smoke"):
        rerun("90_tiny", "workshop", "smoke", {"n_buckets": 3}, root=root)
    with pytest.raises(ProfileError, match="chapters in _toc.yml: 90_tiny"):
        rerun("91_nope", "workshop", "mine", {}, root=root)
    with pytest.raises(ProfileError, match=r"unknown parameter\(s\) \['n_bucket'\].*n_buckets"):
        rerun("90_tiny", "workshop", "mine", {"n_bucket": 3}, root=root)
    with pytest.raises(ProfileError, match="must be a int"):
        rerun("90_tiny", "workshop", "mine", {"n_buckets": "four"}, root=root)
    assert not (root / "runs" / "mine").exists()                      # nothing copied, nothing run
    with pytest.raises(ProfileError, match="name=value"):
        parse_sets(["n_buckets"])
    assert parse_sets(["n_buckets=4", "tau=0.2", "run=true", "split=dev"]) == \
        {"n_buckets": 4, "tau": 0.2, "run": True, "split": "dev"}


def test_a_replay_miss_stops_a_run_instead_of_being_recorded_as_an_outcome(tmp_path, fake_env, monkeypatch):
    """SKILLBOOK_REPLAY_ONLY: a request not in the cache raises ReplayMiss; the runner does not record the
    episode as the agent's own failure (it would be, as `llm_rejected`, for an ordinary refused request)."""
    from skillbook.agent import AgentConfig
    from skillbook.run import Condition, run_condition
    monkeypatch.setenv("SKILLBOOK_REPLAY_ONLY", "1")
    llm = LLM("openai:http://127.0.0.1:9/v1#fake-model", ResponseCache(tmp_path / "cache.sqlite"))
    condition = Condition("task", AgentConfig(level="task", max_steps=3))
    with pytest.raises(ReplayMiss, match="SKILLBOOK_REPLAY_ONLY"):
        run_condition(tmp_path / "run", llm, condition, ["fake/count/test/0"], {}, 1)
    assert not list((tmp_path / "run").rglob("*.jsonl.gz"))
    assert not (tmp_path / "run" / "episodes" / "open.jsonl").exists() or \
        not (tmp_path / "run" / "episodes" / "open.jsonl").read_text().strip()


def test_the_lab_says_where_its_records_really_go(tmp_path):
    # Real case: chapter 00 printed "records in runs/workshop/00_laboratory/" when runs_root sent
    # them to a temporary folder.
    from skillbook.book import Lab
    lab = Lab("00_laboratory", profile="workshop", runs_root=str(tmp_path),
              backend="openai:http://127.0.0.1:9/v1#m")
    assert lab.where == f"{tmp_path / '00_laboratory'}/"
    assert "runs/workshop" not in lab.where


def test_the_copy_message_names_each_folder_once():
    """The real case: `rerun 09_study --from study` said 'records copied from runs/study/ and runs/study/'."""
    from skillbook.book.rerun import copied_text
    assert copied_text("09_study", "study", "study", "mine", ["streams"]) == \
        "[skillbook] records copied from runs/study/: streams"
    assert copied_text("09_study", "workshop", "study", "mine", []) == \
        "[skillbook] records copied from runs/workshop/ and runs/study/: none (runs/mine/ has them already)"
    assert copied_text("05_utility", "workshop", "study", "mine", ["transfer"]) == \
        "[skillbook] records copied from runs/workshop/: transfer"


def test_a_rerun_from_a_profile_without_records_says_so():
    """The real case: a live smoke rerun printed 'records copied from runs/smoke/: none (runs/kit/ has
    them already)' when neither folder existed."""
    from skillbook.book.rerun import copied_text
    assert copied_text("05_utility", "smoke", "study", "kit", [], had=[]) == \
        "[skillbook] no records copied: runs/smoke/ has none of 05_utility (a live execution makes them)"
    assert copied_text("05_utility", "smoke", "study", "kit", [], had=["05_utility"]).endswith(
        "none (runs/kit/ has them already)")


def test_a_copy_of_the_project_is_its_own_root(tmp_path, monkeypatch):
    """The real case: `make rerun` run inside a copy of the project acted on the original checkout,
    because project_root() looked beside the editable package before looking at the current folder."""
    from skillbook.profiles import project_root
    copy = tmp_path / "copy"
    (copy / "chapters").mkdir(parents=True)
    for name in ("_toc.yml", "pyproject.toml"):
        (copy / name).write_text("")
    monkeypatch.chdir(copy / "chapters")  # where papermill runs a chapter
    assert project_root() == copy.resolve()
    monkeypatch.chdir(tmp_path)  # outside any checkout: the package's own checkout
    assert (project_root() / "lib" / "skillbook").is_dir()


def test_a_changed_parameter_shows_the_value_it_replaced_even_when_the_profile_does_not_set_it(tmp_path):
    """The real case: `make rerun CHAPTER=05_utility SET="n_buckets=4"` printed 'n_buckets None -> 4'; the
    chapter's parameters cell says 3."""
    from skillbook.book.rerun import changed_parameters, changed_text, notebook_defaults
    root = Path(__file__).resolve().parents[1]
    defaults = notebook_defaults(root, "05_utility")
    assert defaults["n_buckets"] == "3"
    changed = changed_parameters({"seed": 0}, {"seed": 0, "n_buckets": 4}, {"n_buckets": 4}, defaults)
    assert changed_text(changed) == "[skillbook] changed: n_buckets 3 -> 4"
    assert changed_text(changed_parameters({"n_buckets": 2}, {"n_buckets": 4}, {"n_buckets": 4}, defaults)) == \
        "[skillbook] changed: n_buckets 2 -> 4"
    assert changed_text({}) == "[skillbook] changed: nothing (the same parameters as the profile)"


def test_the_findings_chapter_and_the_second_study_copy_their_studies_records(tmp_path):
    """Chapter 10 collects chapter 11's claims (issue 36), which live with the second study's profile
    (runs/ceiling/), as chapter 09's live with the first's; a rerun of chapter 11 copies what it reads there."""
    from skillbook.book.rerun import copy_records
    runs = tmp_path / "runs"
    for folder, chapter in (("workshop", "04_transfer"), ("study", "09_study"), ("ceiling", "11_ceiling")):
        (runs / folder / chapter).mkdir(parents=True)
        (runs / folder / chapter / "claims.json").write_text("{}")
    (runs / "ceiling" / "streams" / "none").mkdir(parents=True)
    (runs / "ceiling" / "games.json").write_text("[]")
    studies = {"09_study": runs / "study", "11_ceiling": runs / "ceiling"}
    chapters = ["04_transfer", "09_study", "10_findings", "11_ceiling"]
    copied, _ = copy_records("10_findings", {}, runs / "workshop", studies, runs / "mine", chapters)
    assert sorted(copied) == ["04_transfer/claims.json", "09_study/claims.json", "11_ceiling/claims.json"]
    copied, _ = copy_records("11_ceiling", {}, runs / "workshop", studies, runs / "mine11", chapters)
    assert {"streams", "games.json", "11_ceiling"} <= set(copied)
    assert (runs / "mine11" / "streams" / "none").is_dir()
