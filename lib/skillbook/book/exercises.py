"""The workshop's exercises: one file, `chapters/exercises.yml`, rendered as the closing markdown cell of
each chapter source (chapters/<chapter>.ipynb) and of its executed copy (runs/workshop/<chapter>.ipynb).

    python -m skillbook.book exercises            # write the cells into the sources and executed copies
    python -m skillbook.book exercises --check    # exit 1 naming every notebook whose cell differs

An exercise is a question, what to run, what to look for and an answer written from a real run. What to
run is either a re-execution (`rerun:` — rendered as `make rerun CHAPTER=… SET=… RUN=… [LIVE=1]`, the
same arguments `rerun.rerun` takes, so the integration test runs exactly what the page says) or a
shell command (`command:`). `seconds` is the measured wall time of that run; `live: true` marks an
exercise meant to run during a session (it starts from the smoke profile: the 0.5B model, one task per
game, a few steps). Only markdown is added to an executed
copy: its outputs are never touched.
"""
from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import yaml

from ..io import atomic_write_text
from ..profiles import ProfileError, project_root
from .execution import execution_plan, toc_chapters

CELL_ID = "exercises"
PAGE = "workshop.md"        # the facilitator's page: its table of times is written from the same file
TABLE_BEGIN = "<!-- exercise times: written by `python -m skillbook.book exercises` -->"
TABLE_END = "<!-- end of exercise times -->"
LIVE_TARGET_S = 300         # what a live exercise is sized for on an idle 2-core laptop (the table marks
                            # a measured time above it)
FIELDS = {"id", "title", "question", "rerun", "command", "look_for", "answer", "seconds", "model", "live"}
RERUN_FIELDS = {"from", "set", "into", "live"}


@dataclass(frozen=True)
class Exercise:
    chapter: str
    id: str
    title: str
    question: str
    look_for: str
    answer: str
    seconds: float
    model: str                       # which model answered (or "none": no model call)
    live: bool = False               # meant to be run during a session (from the smoke profile)
    rerun: dict = field(default_factory=dict)   # {from, set, into, live}: a `make rerun`
    command: str = ""                # or a shell command

    @property
    def sets(self) -> dict:
        return dict(self.rerun.get("set") or {})

    @property
    def kind(self) -> str:
        """"live" (re-executes with the model answering), "executed" (re-executes, no model in it) or ""."""
        return ("executed" if self.model == "none" else "live") if self.live else ""

    def command_line(self) -> str:
        if self.command:
            return self.command.strip()
        r = self.rerun
        parts = ["make rerun"]
        if r.get("from", "workshop") != "workshop":
            parts.append(f"PROFILE={r['from']}")
        parts.append(f"CHAPTER={self.chapter}")
        if self.sets:
            parts.append("SET=" + shlex.quote(" ".join(f"{k}={_yaml_scalar(v)}" for k, v in self.sets.items())))
        parts.append(f"RUN={r.get('into', 'mine')}")
        if r.get("live"):
            parts.append("LIVE=1")
        return " ".join(parts)


def _yaml_scalar(value) -> str:
    text = yaml.safe_dump(value, default_flow_style=True).strip()
    return text[:-4].strip() if text.endswith("\n...") or text.endswith(" ...") else text


def path(root: Path | None = None) -> Path:
    return (root or project_root()) / "chapters" / "exercises.yml"


def load(root: Path | None = None) -> dict[str, list[Exercise]]:
    """chapter → its exercises, in book order; every field and every re-execution's parameters checked
    (names and types against the chapter's parameters cell, as `make rerun` checks them)."""
    root = root or project_root()
    where = path(root)
    data = yaml.safe_load(where.read_text()) or {}
    known = toc_chapters(root)
    out: dict[str, list[Exercise]] = {}
    for chapter, items in data.items():
        if chapter not in known:
            raise ProfileError(f"{where}: unknown chapter {chapter!r}; chapters: {', '.join(known)}")
        out[chapter] = []
        for item in items:
            unknown = set(item) - FIELDS
            missing = {"id", "title", "question", "look_for", "answer", "seconds", "model"} - set(item)
            if unknown or missing:
                raise ProfileError(f"{where}: exercise {item.get('id', '?')} of {chapter}: "
                                   f"unknown fields {sorted(unknown)}, missing {sorted(missing)}")
            if bool(item.get("rerun")) == bool(item.get("command")):
                raise ProfileError(f"{where}: exercise {item['id']}: give exactly one of `rerun` and `command`")
            ex = Exercise(chapter=chapter, **{k: (v.strip() if isinstance(v, str) else v) for k, v in item.items()})
            if ex.rerun:
                bad = set(ex.rerun) - RERUN_FIELDS
                if bad:
                    raise ProfileError(f"{where}: exercise {ex.id}: unknown rerun fields {sorted(bad)}")
                execution_plan(ex.rerun.get("from", "workshop"), [chapter], extra_params=ex.sets, root=root)
            if ex.live and ex.rerun.get("from") != "smoke":
                raise ProfileError(f"{where}: exercise {ex.id} is marked live but does not start from the smoke "
                                   "profile (the smallest real run, which the integration test executes)")
            out[chapter].append(ex)
    return {c: out[c] for c in known if c in out}


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def render(chapter: str, exercises: list[Exercise]) -> str:
    """The closing markdown cell of `chapter`."""
    lines = ["## Exercises", "",
             "Run these from a terminal in the project folder (`make install` done). The times are wall "
             "times measured on an idle 2-core machine, every exercise in book order into one run folder "
             "(as the page {doc}`/workshop` suggests; it also says what to prepare). Most start from the "
             "smoke profile (`profiles/smoke.yml`: the smallest real run, with the 0.5B model), so their "
             "settings are that profile's, not the ones this page was executed with."]
    for i, ex in enumerate(exercises, 1):
        kind = f"{ex.kind}, " if ex.kind else ""
        model = "no model call" if ex.model == "none" else f"`{ex.model}`"
        lines += ["", f"### {chapter[:2]}.{i} {ex.title}", "", ex.question, "", "```bash", ex.command_line(),
                  "```", "", f"**Look for:** {ex.look_for}", "",
                  f"*Measured: {minutes(ex.seconds)} ({kind}{model}).*", "",
                  ":::{admonition} Answer (from the run measured above)", ":class: dropdown", ex.answer, ":::"]
    return "\n".join(lines)


def cell(chapter: str, exercises: list[Exercise]):
    c = nbformat.v4.new_markdown_cell(render(chapter, exercises))
    c["id"] = CELL_ID
    return c


def apply(notebook: Path, new_cell, write: bool = True) -> bool:
    """Put `new_cell` at the end of `notebook` (replacing the cell with its id); True when that changed it.
    Only the exercises cell is replaced or added: every other cell and output stays as it is."""
    nb = nbformat.read(notebook, as_version=4)
    old = [i for i, c in enumerate(nb.cells) if c.get("id") == CELL_ID]
    if old and old == [len(nb.cells) - 1] and nb.cells[-1].source == new_cell.source \
            and nb.cells[-1].cell_type == "markdown":
        return False
    if write:
        new_cell = nbformat.from_dict(dict(new_cell))
        if old:
            # an executed copy's cell carries papermill's status; a replay would write it back
            new_cell.metadata = nb.cells[old[-1]].metadata
        nb.cells = [c for c in nb.cells if c.get("id") != CELL_ID] + [new_cell]
        if executed(notebook):
            atomic_write_text(notebook, nbformat.writes(nb))    # as `normalize_notebook` writes it
        else:
            nbformat.write(nb, notebook)
    return True


def executed(notebook: Path) -> bool:
    """An executed copy (runs/<profile>/<chapter>.ipynb), not a chapter source."""
    return notebook.parent.parent.name == "runs"


def notebooks(chapter: str, root: Path, profile: str = "workshop") -> list[Path]:
    return [p for p in (root / "chapters" / f"{chapter}.ipynb", root / "runs" / profile / f"{chapter}.ipynb")
            if p.exists()]


def times_table(loaded: dict[str, list[Exercise]]) -> str:
    """The facilitator's table: every exercise, what answers it, its measured time."""
    rows = ["| exercise | chapter | what answers | measured |", "|---|---|---|---|"]
    for chapter, exercises in loaded.items():
        for i, e in enumerate(exercises, 1):
            model = "no model call" if e.model == "none" else f"`{e.model}`"
            over = " (over the 5-minute target)" if e.live and e.seconds > LIVE_TARGET_S else ""
            tag = f" ({e.kind})" if e.kind else ""
            rows.append(f"| {chapter[:2]}.{i} {e.title}{tag} | {chapter} | {model} "
                        f"| {minutes(e.seconds)}{over} |")
    return "\n".join(rows)


def _page_with_table(text: str, table: str) -> str:
    if TABLE_BEGIN not in text or TABLE_END not in text:
        raise ProfileError(f"{PAGE} has no place for the exercise times (the lines {TABLE_BEGIN} and {TABLE_END})")
    head, rest = text.split(TABLE_BEGIN, 1)
    return head + TABLE_BEGIN + "\n" + table + "\n" + TABLE_END + rest.split(TABLE_END, 1)[1]


def write_all(root: Path | None = None, check: bool = False) -> list[Path]:
    """Write (or, with `check`, only find) the notebooks whose exercises cell differs from exercises.yml,
    and the facilitator's page when its table of times does."""
    root = root or project_root()
    changed = []
    loaded = load(root)
    for chapter, exercises in loaded.items():
        c = cell(chapter, exercises)
        changed += [nb for nb in notebooks(chapter, root) if apply(nb, c, write=not check)]
    page = root / PAGE
    if page.exists():
        text = page.read_text()
        new = _page_with_table(text, times_table(loaded))
        if new != text:
            changed.append(page)
            if not check:
                page.write_text(new)
    return changed


def main(check: bool) -> None:
    changed = write_all(check=check)
    root = project_root()
    for p in changed:
        print(f"[skillbook] {'differs' if check else 'wrote'}: {p.relative_to(root)}")
    if check and changed:
        sys.exit("error: the exercises cells differ from chapters/exercises.yml; "
                 "run `python -m skillbook.book exercises`")
