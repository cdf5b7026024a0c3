"""What an executed chapter looks like to a reader: applied to the executed copy, never to the source.

`prepare_for_reading(nb)` (called by `normalize_notebook`, so every execution path gets it):

* **one parameters cell**: the chapter's `parameters` cell keeps its comments and takes this run's
  values from papermill's `injected-parameters` copy, which is then removed from the page
  (`remove-cell`); the merged cell is folded (`hide-input`).
* **setup code folded**: a cell that opens the `Lab` (imports, `Lab(...)`) shows its outputs but folds
  its code behind a toggle (`hide-input`).
* **one line per progress bar**: a tqdm bar is an ipywidgets HBox (text, bar, text) whose final state
  lives in the notebook's widget state; it becomes one text line ('credit: 100% 30/30', without the
  clock, which differs between executions), and its widget models are dropped. A bar written to a
  stream (tqdm without widgets) keeps only its last update, the same way.
* **an anchor for the claims table**: a MyST target `(claims-<chapter>)=` before the cell that records
  the chapter's claims (`lab.claims(...)`), so that the closing chapter can link to that cell.

Jupyter Book honours the tags when it renders; nothing here changes what a cell computed.
"""
from __future__ import annotations

import ast
import html
import re

import nbformat

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PROGRESS_MODELS = {"FloatProgressModel", "IntProgressModel"}


def claims_anchor(chapter: str) -> str:
    """The target name of a chapter's claims cell (Sphinx ids use dashes, not underscores)."""
    return "claims-" + re.sub(r"[^a-z0-9]+", "-", chapter.lower()).strip("-")


def prepare_for_reading(nb, chapter: str | None = None) -> None:
    """Tag and tidy an executed notebook in place (see the module docstring)."""
    merge_parameters(nb)
    fold_setup(nb)
    collapse_progress(nb)
    if chapter:
        anchor_claims(nb, chapter)


def _tag(cell, *tags: str) -> None:
    have = cell.metadata.setdefault("tags", [])
    have.extend(t for t in tags if t not in have)


def _tagged(nb, tag: str):
    return next((c for c in nb.cells if c.cell_type == "code" and tag in c.metadata.get("tags", [])), None)


def _assignments(source: str) -> dict[str, ast.Assign]:
    """Top-level `name = value` statements of a cell (the last one wins, as when the cell runs)."""
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node
    return out


def _offset(lines: list[str], line: int, col: int) -> int:
    """Character offset of (1-based line, UTF-8 byte column) as ast reports them."""
    before = sum(len(x) for x in lines[:line - 1])
    return before + len(lines[line - 1].encode()[:col].decode())


def merge_parameters(nb) -> None:
    """The parameters cell with this run's values; papermill's injected copy removed from the page."""
    source, injected = _tagged(nb, "parameters"), _tagged(nb, "injected-parameters")
    if source is None:
        return
    _tag(source, "hide-input")
    source.metadata["mystnb"] = {"code_prompt_show": "Show this run's parameters",
                                 "code_prompt_hide": "Hide the parameters"}
    if injected is None:
        return
    _tag(injected, "remove-cell")
    if "skillbook: merged" in source.source:      # normalising the same notebook twice changes nothing
        return
    try:
        mine, theirs = _assignments(source.source), _assignments(injected.source)
    except SyntaxError:
        return
    lines = source.source.splitlines(keepends=True)
    edits, changed = [], []
    for name, node in mine.items():
        new = theirs.get(name)
        if new is None:
            continue
        try:
            same = ast.literal_eval(node.value) == ast.literal_eval(new.value)
        except ValueError:
            same = False
        if same:
            continue
        start = _offset(lines, node.value.lineno, node.value.col_offset)
        end = _offset(lines, node.value.end_lineno, node.value.end_col_offset)
        edits.append((start, end, ast.get_source_segment(injected.source, new.value)))
        changed.append(name)
    text = source.source
    for start, end, value in sorted(edits, reverse=True):
        text = text[:start] + value + text[end:]
    head = ("# skillbook: merged — this run's values; papermill set "
            + (", ".join(changed) if changed else "no value other than the defaults") + "\n")
    source.source = head + text


def fold_setup(nb) -> None:
    """Fold the code of the cells that open the Lab (their outputs stay visible)."""
    for cell in nb.cells:
        if cell.cell_type == "code" and re.search(r"\bLab\(", cell.source):
            _tag(cell, "hide-input")
            cell.metadata.setdefault("mystnb", {"code_prompt_show": "Show the setup code (imports, the Lab)",
                                                "code_prompt_hide": "Hide the setup code"})


def _strip(text: str) -> str:
    """Widget HTML as plain text; tqdm pads with figure spaces (U+2007), read as plain spaces."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", text or ""))).strip()


def _refs(value) -> list[str]:
    """Widget model ids a state value refers to ("IPY_MODEL_<id>", also inside lists and dicts)."""
    if isinstance(value, str):
        return [value[len("IPY_MODEL_"):]] if value.startswith("IPY_MODEL_") else []
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    if isinstance(value, dict):
        return [r for v in value.values() for r in _refs(v)]
    return []


def _tidy_bar(text: str) -> str:
    """'desc: 100%|████| 30/30 [00:12<00:00, 2.4it/s]' -> 'desc: 100% 30/30': the bar's glyphs and its
    clock (elapsed time and rate differ between two executions of the same records) left out."""
    if not re.search(r"\d%.*\d+/\d+", text):
        return text
    text = re.sub(r"\|[^|]*\|", " ", text)
    return re.sub(r"\s*\[[^\]]*\]\s*$", "", re.sub(r"\s+", " ", text)).strip()


def _bar_line(state: dict, model_id: str) -> str | None:
    """The final text of a tqdm widget bar, 'desc: 100% 30/30' (see `_tidy_bar`), or None."""
    box = state.get(model_id, {})
    if box.get("model_name") != "HBoxModel":
        return None
    kids = [state.get(r, {}) for r in _refs(box["state"].get("children", []))]
    bars = [k for k in kids if k.get("model_name") in PROGRESS_MODELS]
    if len(kids) != 3 or len(bars) != 1 or kids[1] is not bars[0]:
        return None
    left, right = (_strip(k.get("state", {}).get("value", "")) for k in (kids[0], kids[2]))
    bar = bars[0]["state"]
    stopped = " (stopped early)" if bar.get("bar_style") == "danger" else ""
    return _tidy_bar(f"{left} {right}") + stopped


def _last_updates(text: str) -> str:
    """A stream's text with each carriage-return-updated line reduced to its last update."""
    return "\n".join(_tidy_bar(line.rsplit("\r", 1)[-1]) if "\r" in line.rstrip("\r") else line.rstrip("\r")
                     for line in text.split("\n"))


def collapse_progress(nb) -> None:
    """Every progress bar becomes one line of text; the widget models only it used are dropped."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    dropped: set[str] = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        outputs = []
        for out in cell.outputs:
            if out.output_type == "stream" and "\r" in out.text:
                out.text = _last_updates(out.text)
            view = out.get("data", {}).get(WIDGET_VIEW) if out.output_type == "display_data" else None
            line = _bar_line(state, view["model_id"]) if view else None
            if line is None:
                outputs.append(out)
                continue
            dropped.add(view["model_id"])
            outputs.append({"output_type": "stream", "name": "stdout", "text": line + "\n"})
        # consecutive stdout lines read as one block, as they would in a terminal
        merged = []
        for out in outputs:
            if (merged and out["output_type"] == "stream" and merged[-1]["output_type"] == "stream"
                    and merged[-1]["name"] == out["name"]):
                merged[-1] = {**merged[-1], "text": merged[-1]["text"] + out["text"]}
            else:
                merged.append(out)
        cell.outputs = [nbformat.from_dict(o) for o in merged]
    if not dropped:
        return
    closure, todo = set(), list(dropped)
    while todo:
        m = todo.pop()
        if m in closure or m not in state:
            continue
        closure.add(m)
        todo.extend(_refs(state[m].get("state", {})))
    still_used = {r for k, v in state.items() if k not in closure for r in _refs(v.get("state", {}))}
    for m in closure - still_used:
        del state[m]


def anchor_claims(nb, chapter: str) -> None:
    """A MyST target before the cell that records the chapter's claims table."""
    anchor = claims_anchor(chapter)
    if any(c.cell_type == "markdown" and c.source.strip() == f"({anchor})=" for c in nb.cells):
        return
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and "lab.claims(" in cell.source:
            target = nbformat.v4.new_markdown_cell(f"({anchor})=")
            if nb.nbformat_minor >= 5:
                target["id"] = anchor          # a fixed id: executing again gives the same file
            else:
                target.pop("id", None)
            nb.cells.insert(i, target)
            return
