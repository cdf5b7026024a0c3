"""The executed copy as a reader meets it: one parameters cell, setup folded, one line per progress bar,
the claims cell anchored and recorded, the closing chapter's table; chapter sources within 88 columns."""
import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from skillbook.analysis import Claim, claims_table, paired_difference
from skillbook.book import normalize_notebook, project_root, slowest_cells
from skillbook.book.findings import INTERIM, collect_claims, findings_frame, findings_html, tally
from skillbook.book.lab import FoldedTable, Lab
from skillbook.book.reading import claims_anchor, collapse_progress, prepare_for_reading

ROOT = project_root()
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
STATE = "application/vnd.jupyter.widget-state+json"

PARAMS = '''backend = "embedded:qwen2.5-coder-1.5b"   # the model
n_tasks = 3                    # tasks per task type
twx_params = {"twc": {"numLocations": 1,
                      "includeDoors": 0}}
profile = "workshop"
runs_root = None'''
INJECTED = '''# Parameters
backend = "embedded:qwen2.5-coder-0.5b"
n_tasks = 1
twx_params = {"twc": {"numLocations": 1, "includeDoors": 0}}
profile = "smoke"
runs_root = "../runs/mine"
'''


def chapter_like(*extra):
    cells = [new_markdown_cell("# A chapter"),
             new_code_cell(PARAMS, metadata={"tags": ["parameters"]}),
             new_code_cell(INJECTED, metadata={"tags": ["injected-parameters"]}),
             new_code_cell("import pandas as pd\nfrom skillbook.book import Lab\n\nlab = Lab('x', profile=profile)"),
             *extra,
             new_code_cell("lab.finish()")]
    for i, c in enumerate(cells):
        c["id"] = f"cell-{i}"
    return new_notebook(cells=cells)


def test_one_parameters_cell_with_this_runs_values_and_the_source_comments():
    nb = chapter_like()
    prepare_for_reading(nb)
    source, injected = nb.cells[1], nb.cells[2]
    assert "remove-cell" in injected.metadata.tags        # papermill's copy is not shown ...
    assert "hide-input" in source.metadata.tags           # ... the merged cell is, folded
    ns = {}
    exec(source.source, ns)                               # the merged cell computes the injected values
    assert (ns["backend"], ns["n_tasks"], ns["profile"], ns["runs_root"]) == \
        ("embedded:qwen2.5-coder-0.5b", 1, "smoke", "../runs/mine")
    assert ns["twx_params"] == {"twc": {"numLocations": 1, "includeDoors": 0}}
    assert "# the model" in source.source and "# tasks per task type" in source.source
    assert "backend, n_tasks, profile, runs_root" in source.source.splitlines()[0]   # what papermill changed
    text = source.source
    prepare_for_reading(nb)                                # normalising again changes nothing
    assert nb.cells[1].source == text


def test_setup_code_is_folded_and_its_outputs_stay():
    nb = chapter_like(new_code_cell("x = 1"))
    prepare_for_reading(nb)
    setup = next(c for c in nb.cells if "Lab(" in c.source)
    assert "hide-input" in setup.metadata.tags
    assert "hide-input" not in next(c for c in nb.cells if c.source == "x = 1").metadata.get("tags", [])


def real_progress_bar_state(desc="credit", total=3, done=3):
    """A tqdm bar drawn with ipywidgets, as a kernel records it: (its model id, the widget state)."""
    import ipywidgets as widgets
    from tqdm.notebook import tqdm
    widgets.Widget.close_all()
    bar = tqdm(total=total, desc=desc, display=False)
    bar.update(done)
    bar.close()
    return bar.container.model_id


def text_progress_bar(desc, total):
    """What tqdm writes to a stream (no widgets): carriage-return updates of one line."""
    import io

    from tqdm import tqdm
    out = io.StringIO()
    with tqdm(total=total, desc=desc, file=out, mininterval=0) as bar:
        for _ in range(total):
            bar.update(1)
    assert "\r" in out.getvalue()
    return out.getvalue()


def test_a_progress_bar_becomes_one_line_and_its_widgets_go_but_an_explorer_stays():
    import ipywidgets as widgets
    bar_id = real_progress_bar_state()
    pick, stack = widgets.Dropdown(options=[("a", 0), ("b", 1)]), widgets.Stack([widgets.HTML("A"),
                                                                                 widgets.HTML("B")])
    box = widgets.VBox([pick, stack])
    link = widgets.jslink((pick, "index"), (stack, "selected_index"))   # displayed nowhere, still needed
    state = widgets.Widget.get_manager_state(drop_defaults=False)
    explorer = {m.model_id for m in (pick, stack, box, link, *stack.children)}
    view = lambda i: new_output("display_data", {WIDGET_VIEW: {"model_id": i, "version_major": 2,  # noqa: E731
                                                               "version_minor": 0}, "text/plain": "…"})
    cell = new_code_cell("run()")
    cell.outputs = [new_output("stream", name="stdout", text="start\n"), view(bar_id),
                    new_output("stream", name="stderr", text=text_progress_bar("gold paths", 2)),
                    view(box.model_id)]
    nb = new_notebook(cells=[cell], metadata={"widgets": {STATE: state}})
    collapse_progress(nb)
    outs = nb.cells[0].outputs
    assert outs[0].text == "start\ncredit: 100% 3/3\n"                  # no clock: the same every execution
    assert outs[1].text == "gold paths: 100% 2/2\n"                    # the last update of a text bar
    assert outs[2].data[WIDGET_VIEW]["model_id"] == box.model_id
    left = nb.metadata.widgets[STATE]["state"]
    assert explorer <= set(left)                                       # the explorer and its link stay
    names = [v["model_name"] for v in left.values()]
    assert "FloatProgressModel" not in names and "HBoxModel" not in names
    widgets.Widget.close_all()


def test_the_claims_cell_is_anchored_and_recorded(tmp_path, monkeypatch):
    cell = new_code_cell("display(lab.claims(table))")
    nb = chapter_like(cell)
    prepare_for_reading(nb, "04_transfer")
    i = next(i for i, c in enumerate(nb.cells) if "lab.claims(" in c.source)
    assert nb.cells[i - 1].source == "(claims-04-transfer)=" and nb.cells[i - 1].id == "claims-04-transfer"
    prepare_for_reading(nb, "04_transfer")
    assert sum(c.source == "(claims-04-transfer)=" for c in nb.cells) == 1

    lab = Lab.__new__(Lab)                  # the recording half of a Lab: no model, no environment
    lab.root, lab.chapter = tmp_path, "04_transfer"
    shown = lab.claims([claim("memory helps", True, [1] * 9, [0] * 9)])
    record = json.loads((tmp_path / "04_transfer" / "claims.json").read_text())
    assert record["anchor"] == claims_anchor("04_transfer") and record["interim"] is False
    row, = record["claims"]
    assert row["claim"] == "memory helps" and row["test"] == "exact McNemar" and row["verdict"] == "supported"
    assert shown.verdict.tolist() == ["supported"]                     # what the page shows
    before = (tmp_path / "04_transfer" / "claims.json").stat().st_mtime_ns
    lab.claims([claim("memory helps", True, [1] * 9, [0] * 9)])        # a replay: the same record, untouched
    assert (tmp_path / "04_transfer" / "claims.json").stat().st_mtime_ns == before


def test_an_interim_claims_record_holds_no_verdict(tmp_path):
    # Real case: the study's claims.json at 144 of 223 tasks stored "contradicted" for two primary
    # contrasts; the chapter hid it, but a reader of the JSON (or a later tool) could take it as final.
    lab = Lab.__new__(Lab)
    lab.root, lab.chapter = tmp_path, "09_study"
    shown = lab.claims([claim("subtask-text − subtask-none", True, [0] * 9, [1] * 9)], interim=True)
    record = json.loads((tmp_path / "09_study" / "claims.json").read_text())
    row, = record["claims"]
    assert record["interim"] is True and row["verdict"] == INTERIM
    assert row["estimate"] == -1.0 and row["p"] is not None                # the measurement is kept
    assert shown.verdict.tolist() == [INTERIM]                            # and the page says so too


def test_a_claims_record_never_rounds_a_small_p_to_zero(tmp_path):
    # Real case: chapter 11's claims.json at 206 games stored "p": 0.0 for oracle − none (p < 1e-6): six
    # decimals rounded a measured p to an impossible value; the page said "<0.001", the record said 0.
    lab = Lab.__new__(Lab)
    lab.root, lab.chapter = tmp_path, "11_ceiling"
    lab.claims([claim("oracle − none", True, [0] * 40, [1] * 40)], interim=True)
    row, = json.loads((tmp_path / "11_ceiling" / "claims.json").read_text())["claims"]
    assert 0 < row["p"] < 1e-6 and row["p"] == float(f"{2 * 0.5 ** 40:.3g}")     # 3 significant digits
    assert row["estimate"] == -1.0 and row["n"] == 40                          # the rest as before
    noise = claims_table([claim("a − a", True, [1, 0] * 9, [1, 0] * 9)]).assign(estimate=-3e-9)
    lab.claims(noise)                                          # an estimate of 0 up to float noise stays 0
    row, = json.loads((tmp_path / "11_ceiling" / "claims.json").read_text())["claims"]
    assert row["estimate"] == 0 and row["p"] == 1.0


def test_the_closing_table_of_a_chapter_is_one_line_that_unfolds():
    t = FoldedTable({"value": [1, 2]}).fold("fake:model: 3 model calls, 3 answered from the response cache")
    html = t._repr_html_()
    assert html.startswith('<details class="skillbook-folded"><summary>fake:model: 3 model calls')
    assert "<table" in html and html.endswith("</details>")
    assert type(t.head(1)) is not FoldedTable                      # derived frames are plain


def test_a_replays_closing_table_shows_what_the_recorded_live_run_cost(tmp_path):
    # Real case: after a replay the closing table of chapter 01 read "0 model calls", hiding the live run's 477.
    import json
    lab = Lab("01_agents", runs_root=str(tmp_path), backend="openai:http://127.0.0.1:9/v1#m")
    recorded = {**lab.summary(), "calls": 477, "live_calls": 457, "cache_hits": 20, "live_seconds": 1098.0,
                "recorded_model_seconds": 1145.2}
    (lab.run_dir / "summary-01_agents.json").write_text(json.dumps(recorded))
    html = lab.finish()._repr_html_()
    # the live calls' minutes (18.3), as the chapters count "min live" — not the recorded latency of every
    # answer used (19.1), which charges cached answers too (real case: 02's findings said 45.8 min live, its
    # footer "52.4 min of model time")
    assert "replayed from the records. The last live execution made 477 model calls, 457 live (18.3 min" in html
    # Real case: chapter 06's footer said "the recorded live run made 113 model calls, 75 live", the τ²-bench
    # execution alone; its TextWorldExpress runs (610 live calls) came from an earlier execution's records
    assert "records it found from earlier executions are not counted" in html
    assert "this execution 0 calls, 0 live" in html and "last live execution" in html
    assert json.loads((lab.run_dir / "summary-01_agents.json").read_text())["calls"] == 477   # not rewritten


def claim(name, primary, a, b, paper="+1.9 pp"):
    import pandas as pd
    df = pd.DataFrame({"task_id": list(range(len(a))) * 2, "condition": ["a"] * len(a) + ["b"] * len(b),
                       "success": a + b})
    return Claim(name, paper, +1, primary,
                 paired_difference(df, "condition", "b", "a", "success"))


def test_the_findings_table_is_built_from_the_recorded_claims(tmp_path):
    for chapter, interim in (("04_transfer", False), ("09_study", True)):
        lab = Lab.__new__(Lab)
        lab.root, lab.chapter = tmp_path / ("study" if chapter == "09_study" else "workshop"), chapter
        lab.claims(claims_table([claim("p1", True, [1] * 9, [0] * 9),
                                 claim("s1", False, [1, 0] * 3, [0, 1] * 3, paper="−4.1 pp")]),
                   interim=interim)
    found, missing = collect_claims(["04_transfer", "06_assay", "09_study"],
                                    [tmp_path / "workshop", tmp_path / "study"])
    assert missing == ["06_assay"]
    assert found.chapter.tolist() == ["04_transfer"] * 2 + ["09_study"] * 2
    frame = findings_frame(found)
    assert frame.columns.tolist() == ["paper", "chapter", "claim", "paper reports", "this book [95% CI]",
                                      "verdict", "p", "n", "test", "role", "note"]
    # the stylesheet keeps the interval column on one line by its position in the page's table (no paper column)
    import re
    css = (project_root() / "lib" / "skillbook" / "book" / "static" / "skillbook.css").read_text()
    column = int(re.search(r"table\.skillbook-findings td:nth-child\((\d+)\)", css).group(1))
    assert [c for c in frame.columns if c != "paper"][column - 1] == "this book [95% CI]"
    first = frame.iloc[0]
    assert (first.paper, first["paper reports"], first.test, first.verdict) == \
        ("Break it down, pass it on", "+1.9 pp", "exact McNemar", "supported")
    assert frame.iloc[1].test == "exact McNemar; Holm"                 # a secondary claim's p is Holm's
    assert frame.verdict.iloc[2:].tolist() == [INTERIM, INTERIM]
    html = findings_html(found, {"04_transfer": "Transfer"})
    assert '<a href="04_transfer.html#claims-04-transfer">Transfer</a>' in html
    assert '<a href="09_study.html#claims-09-study">09_study</a>' in html
    counts = tally(found)
    assert counts.loc["Break it down, pass it on", "interim"] == 2
    assert counts.loc["Break it down, pass it on", "supported"] == 1


def test_the_findings_in_words_say_no_more_than_the_verdicts(tmp_path):
    from skillbook.book.findings import findings_summary
    lab = Lab.__new__(Lab)
    lab.root, lab.chapter = tmp_path, "04_transfer"
    lab.claims(claims_table([claim("p1", True, [1] * 9, [0] * 9),
                             claim("p2", True, [1, 0] * 3, [0, 1] * 3),
                             claim("s1", False, [1, 0] * 3, [0, 1] * 3, paper="−4.1 pp")]))
    lab.chapter = "06_assay"
    lab.claims(claims_table([claim("a1", True, [1, 0] * 3, [0, 1] * 3)]))
    found, _ = collect_claims(["04_transfer", "06_assay"], [tmp_path])
    text = findings_summary(found, {"04_transfer": "Transfer", "06_assay": "Assay"})
    assert text.startswith("Of the 4 claims of the four papers that the chapters record, 1 was resolved")
    assert "**Break it down, pass it on** (*Transfer*): 3 claims: 1 supported, 2 not resolved." in text
    assert "3 claims: 1 supported, 2 not resolved.\n\nIn *Transfer*:\n\n* supported: p1 (+1.00" in text
    # a paper with nothing resolved gets the smallest effect its primary tests could have detected
    assert "**Assay** (*Assay*): 1 claim: 1 not resolved. Of its primary claims, the smallest effect" in text
    assert "for \"a1\" in *Assay* (6)" in text
    assert "SkillRL" not in text                                     # no record, no sentence


def test_normalising_twice_gives_the_same_file(tmp_path):
    path = tmp_path / "04_transfer.ipynb"
    nbformat.write(chapter_like(new_code_cell("display(lab.claims(t))")), path)
    normalize_notebook(path, tmp_path)
    once = path.read_text()
    normalize_notebook(path, tmp_path)
    assert path.read_text() == once


def test_the_slowest_cells_are_read_before_normalising_takes_the_clock_out(tmp_path):
    path = tmp_path / "00_x.ipynb"
    nb = chapter_like(new_code_cell("run()"))
    for n, (c, d) in enumerate(zip(nb.cells[1:], [0.1, 0.2, 12.5, 40.0, 1.0]), start=1):
        c.execution_count, c.metadata["papermill"] = n, {"duration": d}
    nbformat.write(nb, path)
    assert slowest_cells(path, k=2) == [(4, 40.0), (3, 12.5)]
    normalize_notebook(path, tmp_path)
    assert slowest_cells(path) == []     # no clock in the copy a reader gets


@pytest.mark.parametrize("path", sorted((ROOT / "chapters").glob("*.ipynb")), ids=lambda p: p.stem)
def test_chapter_code_lines_fit_in_88_columns(path):
    nb = nbformat.read(path, as_version=4)
    long = [(i, line) for i, c in enumerate(nb.cells) if c.cell_type == "code"
            for line in c.source.splitlines() if len(line) > 88]
    assert not long, f"{path.name}: code lines over 88 characters are cut off on the page: {long[:3]}"


def test_a_jittered_figure_is_the_same_on_every_execution(tmp_path):
    # seaborn's stripplot jitters with numpy's global generator: unseeded, every replay rewrote the PNGs of
    # chapters 00 and 01. The Lab seeds it with the chapter's seed.
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    from skillbook.book import Lab

    def figure() -> bytes:
        Lab("x", runs_root=str(tmp_path), backend="openai:http://127.0.0.1:9/v1#m", seed=0)
        fig, ax = plt.subplots()
        sns.stripplot(data=__import__("pandas").DataFrame({"a": ["u"] * 20 + ["v"] * 20, "y": range(40)}),
                      x="a", y="y", ax=ax)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        plt.close(fig)
        return buf.getvalue()
    first = figure()
    import numpy as np
    np.random.uniform(size=7)   # whatever ran before in the kernel
    assert figure() == first


def test_two_executions_differing_only_in_the_injected_cells_random_id_normalise_alike(tmp_path):
    # Real case: replaying workshop chapter 04 from its records changed only the id of papermill's
    # injected-parameters cell (a fresh random id on every execution), so `git status` was never clean.
    files = []
    for k, random_id in enumerate(("756a5573", "3a2abaf1")):
        nb = chapter_like()
        nb.cells[2]["id"] = random_id
        path = tmp_path / str(k) / "04_transfer.ipynb"
        path.parent.mkdir()
        nbformat.write(nb, path)
        normalize_notebook(path, tmp_path)
        files.append(path.read_text())
    assert files[0] == files[1]


def test_chapter_05_shows_no_wall_seconds_so_a_replay_reproduces_it():
    # Real case (2026-12-02, a new VM): replaying chapter 05 changed its notebook though every record was
    # the same: the catalogue table showed this execution's wall seconds (exact_s 0.0010 → 0.0014, 13.5 →
    # 14.2) and the line above it "… in 15 s" → "… in 1561 s" (a cold cache). `make bench` times them.
    import nbformat
    root = project_root()
    source = nbformat.read(root / "chapters" / "05_utility.ipynb", as_version=4)
    code = "\n".join(c.source for c in source.cells if c.cell_type == "code")
    assert "perf_counter" not in code and "whole.exact_s" not in code
    executed = nbformat.read(root / "runs" / "workshop" / "05_utility.ipynb", as_version=4)
    shown = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/html", ""))
                      for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "scored against 5 task sets\n" in shown and "exact_s" not in shown and "sampled_s" not in shown


def test_two_executions_that_made_the_same_widgets_in_another_order_normalize_alike(tmp_path):
    # Real case (2026-12-02): chapter 05 replayed twice from the same records differed only in its widget
    # state: the skill explorer's models were stored in another order ("HTMLModel" where the other replay
    # had "HTMLStyleModel"), so renumbering ids in order of appearance gave different files.
    import ipywidgets as widgets

    def execution(reverse: bool) -> str:
        made = [lambda: widgets.HTML("A"), lambda: widgets.HTML("B"), lambda: widgets.Dropdown(options=["a", "b"])]
        parts = [f() for f in (reversed(made) if reverse else made)]
        html_a, html_b, pick = (parts[::-1] if reverse else parts)
        stack = widgets.Stack([html_a, html_b])
        box = widgets.VBox([pick, stack])
        state = widgets.Widget.get_manager_state(drop_defaults=False)
        if reverse:
            state["state"] = dict(reversed(list(state["state"].items())))
        cell = new_code_cell("skill_explorer()", id="explorer")      # ids come from the chapter's source
        cell.outputs = [new_output("display_data", {WIDGET_VIEW: {"model_id": box.model_id, "version_major": 2,
                                                                  "version_minor": 0}, "text/plain": "…"})]
        nb = new_notebook(cells=[cell], metadata={"widgets": {STATE: state}})
        path = tmp_path / f"05_utility_{reverse}.ipynb"
        nbformat.write(nb, path)
        widgets.Widget.close_all()
        normalize_notebook(path, tmp_path)
        return path.read_text()

    first, second = execution(False), execution(True)
    assert first == second
    assert f'"model_id": "{1:032x}"' in first          # the widget the output shows is number 1


def test_a_replay_saves_no_answers_even_when_its_cache_holds_another_runs(tmp_path, monkeypatch):
    # Real case (2026-12-02): replaying chapter 09 while the study ran wrote the study's unsaved answers
    # (in the SQLite cache both share) as a new committed chunk, responses/000045.jsonl.gz.
    from skillbook.llm import ResponseCache
    from skillbook.llm.cache import export_files
    cache = ResponseCache.for_run(tmp_path)
    cache.put("model-a", {"messages": [{"role": "user", "content": "the study's"}]}, {"text": "unsaved"})
    lab = Lab.__new__(Lab)
    lab._envs, lab.cache, lab.run_dir, lab.chapter = [], cache, tmp_path, "09_study"
    replay = {"backend": "fake:model", "calls": 3, "live_calls": 0, "cache_hits": 3, "prompt_tokens": 9,
              "completion_tokens": 3}
    monkeypatch.setattr(Lab, "summary", lambda self: replay)
    lab.finish()
    assert export_files(tmp_path) == []
    monkeypatch.setattr(Lab, "summary", lambda self: {**replay, "live_calls": 1, "cache_hits": 2})
    lab.finish()                                  # a live execution saves what is unsaved
    assert len(export_files(tmp_path)) == 1
    cache.close()


def test_maths_in_displayed_markdown_is_rendered():
    # Real case: chapter 06's display(Markdown(...)) lines showed "$C$" and "$H \ge$ 0.5" as raw text: myst-nb
    # parses a cell's Markdown output as CommonMark unless told otherwise, and CommonMark has no maths.
    import re

    import yaml
    config = yaml.safe_load((project_root() / "_config.yml").read_text())
    uses_maths = [p.name for p in (project_root() / "runs" / "workshop").glob("*.ipynb")
                  for c in nbformat.read(p, as_version=4).cells for o in c.get("outputs", [])
                  if re.search(r"\$[^$\s][^$]*\$", "".join(o.get("data", {}).get("text/markdown", "")))]
    assert uses_maths                                   # the case is real: some chapter displays maths
    assert config["sphinx"]["config"]["nb_render_markdown_format"] == "myst", uses_maths


def test_a_chapters_tables_show_text_cells_whole(tmp_path):
    # Real case: claims, notes and skill descriptions ended in "..." at pandas' 50 characters (chapters 04–08)
    import pandas as pd
    Lab("04_transfer", runs_root=str(tmp_path), backend="openai:http://127.0.0.1:9/v1#m")
    note = "judge_neutral is +0 on all 246 pairs: a constant judge gives no ranking at all"
    assert note in pd.DataFrame({"note": [note]})._repr_html_()


def test_the_findings_say_how_much_each_chapter_could_detect():
    # Real case (the book after the study): chapter 10's tally put the study's 223-task verdicts and the
    # workshop's 9-task "not resolved" rows in one count; a reader could not see which rows can say anything.
    import pandas as pd

    from skillbook.book.findings import by_chapter
    rows = [{"chapter": "04_transfer", "verdict": "not resolved (MDE ±0.73)", "n": 9, "n_clusters": float("nan"),
             "mde": 0.73, "interim": False},
            {"chapter": "04_transfer", "verdict": "not tested", "n": 6, "n_clusters": float("nan"),
             "mde": float("nan"), "interim": False},
            {"chapter": "05_utility", "verdict": "contradicted", "n": 64, "n_clusters": 13, "mde": float("nan"),
             "interim": False},
            {"chapter": "09_study", "verdict": "contradicted", "n": 223, "n_clusters": float("nan"), "mde": 0.10,
             "interim": False},
            {"chapter": "09_study", "verdict": "supported", "n": 223, "n_clusters": float("nan"), "mde": 0.11,
             "interim": False}]
    t = by_chapter(pd.DataFrame(rows), {"04_transfer": "Transfer", "09_study": "The study"})
    assert t.index.tolist() == ["Transfer", "05_utility", "The study"]
    assert t.loc["Transfer", "claims"] == 2 and t.loc["Transfer", "resolved"] == 0
    # rows of an older record name no unit; a clustered claim rests on its clusters
    assert t.loc["05_utility", "units"] == "13 clusters" and t.loc["Transfer", "units"] == "6–9"
    assert t.loc["The study", "resolved"] == 2 and t.loc["The study", "median MDE"] == pytest.approx(0.105)
    assert pd.isna(t.loc["05_utility", "median MDE"])
    # interim claims are not counted as resolved whatever their stored verdict
    t = by_chapter(pd.DataFrame(rows).assign(interim=True), {})
    assert (t.resolved == 0).all()


def test_the_closing_chapter_counts_only_claims_of_the_papers_and_states_their_units(tmp_path):
    # Real case (issue 34): chapter 10 counted 7 of 58 claims as resolved, 2 of them chapter 06's planted
    # simulation (300 simulated libraries make p as small as wanted) and 1 chapter 05's rank stability of
    # its own score — checks of the book's tools, not claims of a paper; and its n column said "223" where
    # the tasks were 16 games.
    import pandas as pd

    from skillbook.analysis import Claim, claims_table
    from skillbook.book.findings import by_chapter
    lab = Lab.__new__(Lab)
    lab.root, lab.chapter = tmp_path, "06_assay"
    twx = pd.DataFrame({"task_id": [f"twx/twc/test/{i}" for i in range(6)] * 2,
                        "condition": ["full"] * 6 + ["assay"] * 6, "success": [0] * 6 + [1, 0] * 3})
    games = pd.Series([f"g{i}" for i in range(6)], index=[f"twx/twc/test/{i}" for i in range(6)])
    lab.claims(claims_table([
        Claim("twx: Assay beats the full library", "+", +1, True,
              paired_difference(twx, "condition", "full", "assay", units=games)),
        Claim("twx: the attribution recovers planted signs", "assumed", +1, False,
              {"estimate": 0.08, "ci_low": 0.06, "ci_high": 0.10, "p": 1e-9, "n": 300, "unit": "libraries"},
              kind="check")]))
    found, _ = collect_claims(["06_assay"], [tmp_path])
    assert found.kind.tolist() == ["paper", "check"] and found.unit.tolist() == ["games", "libraries"]
    frame = findings_frame(found)
    assert frame.n.tolist() == ["6 games", "300 libraries"]
    papers, checks = findings_html(found, kind="paper"), findings_html(found, kind="check")
    assert "Assay beats the full library" in papers and "planted signs" not in papers
    assert "planted signs" in checks and "Assay beats" not in checks
    counts = tally(found)
    assert counts.loc["Assay"].sum() == 1 and "supported" not in counts      # the check is not counted
    power = by_chapter(found)
    assert power.loc["06_assay"].tolist()[:2] == [1, "6 games"]
    assert power.loc["06_assay", "resolved"] == 0 and power.loc["06_assay", "checks"] == 1


def test_an_older_record_without_kind_or_unit_reads_as_claims_of_a_paper(tmp_path):
    import json
    (tmp_path / "04_transfer").mkdir()
    row = {"claim": "subtask-text − subtask-none", "role": "primary", "paper": "+1.9 pp", "n": 9,
           "n_clusters": None, "estimate": 0.0, "ci_low": -0.19, "ci_high": 0.19, "p": 1.0, "p_holm": None,
           "mde": 0.73, "expected_sign": 1, "verdict": "not resolved (MDE ±0.73)", "note": "",
           "test": "exact McNemar"}
    (tmp_path / "04_transfer" / "claims.json").write_text(json.dumps(
        {"chapter": "04_transfer", "interim": False, "anchor": "claims-04-transfer", "claims": [row]}))
    found, _ = collect_claims(["04_transfer"], [tmp_path])
    assert found.kind.tolist() == ["paper"] and found.unit.tolist() == [""] and found.n_tasks.isna().all()
    assert findings_frame(found).n.tolist() == ["9"]
    assert tally(found).loc["Break it down, pass it on", "not resolved"] == 1


def test_no_chapter_defines_a_function():
    # issue 38: ten `def`s lived in chapters 01, 02, 03, 05 and 06 (`count` in 01 and `plural` in 06 the same
    # function); chapters call the library (`analysis/report.py` and the papers' modules)
    import re
    for path in sorted((project_root() / "chapters").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        defs = [m for c in nb.cells if c.cell_type == "code" for m in re.findall(r"^def (\w+)", c.source, re.M)]
        assert not defs, f"{path.name} defines {defs}: move them into lib/"


@pytest.mark.parametrize("path", sorted((ROOT / "chapters").glob("*.ipynb")), ids=lambda p: p.stem)
def test_chapters_define_no_functions_or_classes(path):
    """Chapters only call the library (nbdev's rule: the notebook explains, the library is tested); the
    real case, chapter 06's untested reading of the simulated user, is now `envs.tau2.user_talk`."""
    import re
    nb = nbformat.read(path, as_version=4)
    defs = [(i, m.group(0).strip()) for i, c in enumerate(nb.cells) if c.cell_type == "code"
            for m in re.finditer(r"^\s*(?:async\s+)?(?:def|class)\s+\w+", c.source, re.M)]
    assert not defs, f"{path.name}: move these into lib/ (and test them there): {defs}"


def test_the_findings_in_words_quote_the_table_s_numbers_and_the_note_of_a_resolved_claim(tmp_path):
    """Real case (chapter 10 on chapter 11's final records): "Supported: self − oracle (-0.07 [-0.13,
    -0.02], …)" — a hyphen where the claims table prints −0.07 [−0.13, −0.02] — and without the check its
    table row carries ("check over the 87 texts the games open on: not resolved …")."""
    from skillbook.book.findings import findings_summary
    lab = Lab.__new__(Lab)
    lab.root, lab.chapter = tmp_path, "04_transfer"
    table = claims_table([claim("p1", True, [0] * 9, [1] * 9)])
    table.loc[0, "note"] = "check over the 3 texts the games open on: not resolved, p 0.25"
    lab.claims(table)
    found, _ = collect_claims(["04_transfer"], [tmp_path])
    text = findings_summary(found, {"04_transfer": "Transfer"})
    assert "* contradicted: p1 (−1.00 [−" in text and "-1.00" not in text
    assert "; check over the 3 texts the games open on: not resolved, p 0.25)" in text
