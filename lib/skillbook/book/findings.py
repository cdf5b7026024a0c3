"""The closing chapter's table: every claim of the four papers, read from the chapters' own records.

Each chapter that tests claims records its claims table with `lab.claims(table)` in
`<runs root>/<chapter>/claims.json`; `collect_claims` reads those records (nothing is retyped) and
`findings_html` renders them as a table that links every row to the cell that measured it (the
anchor `reading.anchor_claims` puts before that cell in the executed chapter).

A record's rows are of two kinds (`analysis.KINDS`): claims of a paper, and checks of the book's own
tools (a simulation recovering what it planted, a property a score has by construction). The closing
chapter shows them in two tables, and `tally` and `by_chapter` count only the claims of the papers: a
check says whether the book's instruments work, not whether a paper is right. Every row states its
units (the n column: "9 games", "32 skills", "64 episodes (13 clusters)").
"""
from __future__ import annotations

import json
from html import escape
from pathlib import Path

import nbformat
import pandas as pd

from ..analysis import render_claims
from ..analysis.claims import measured_text
from ..papers import PAPERS, paper_of


def paper_titles() -> dict[str, str]:
    """Bibliography key → the paper's short name, from the one registry of papers (`papers.PAPERS`;
    references.bib holds the rest), read when asked, so that a paper registered later is included."""
    return {key: paper.title for key, paper in PAPERS.items()}
INTERIM = "(interim: no verdict before n is reached)"
NUMERIC = ["n", "n_tasks", "n_clusters", "estimate", "ci_low", "ci_high", "p", "p_holm", "mde", "expected_sign"]
# what a record written before claims stated their unit and kind holds: claims of a paper, unit not named
DEFAULTS = {"kind": "paper", "unit": "", "note": "", "test": ""}


def chapter_titles(chapters_dir: Path) -> dict[str, str]:
    """chapter name → the title of its source notebook (its first '# ' heading)."""
    out = {}
    for path in sorted(Path(chapters_dir).glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        heads = [line[2:].strip() for c in nb.cells if c.cell_type == "markdown"
                 for line in c.source.splitlines() if line.startswith("# ")]
        out[path.stem] = heads[0] if heads else path.stem
    return out


def _with_defaults(t: pd.DataFrame) -> pd.DataFrame:
    """`t` with every `DEFAULTS` column, missing values filled (an older record has no kind or unit)."""
    t = t.copy()
    for col, default in DEFAULTS.items():
        t[col] = t[col].fillna(default) if col in t else default
    return t


def collect_claims(chapters: list[str], roots: list[Path]) -> tuple[pd.DataFrame, list[str]]:
    """Every recorded claim of `chapters` (the first of `roots` that has `<chapter>/claims.json`), in
    chapter order, and the chapters with no record. Columns: those of `claims_table`, plus chapter,
    paper (the bibliography key), anchor, interim. An older record without kind, unit or n_tasks reads
    as claims of a paper in unnamed units (`DEFAULTS`)."""
    frames, missing = [], []
    for chapter in chapters:
        path = next((Path(r) / chapter / "claims.json" for r in roots
                     if (Path(r) / chapter / "claims.json").exists()), None)
        if path is None:
            missing.append(chapter)
            continue
        record = json.loads(path.read_text())
        t = pd.DataFrame(record["claims"])
        if t.empty:
            continue
        for col in NUMERIC:
            t[col] = pd.to_numeric(t[col], errors="coerce") if col in t else float("nan")
        t = _with_defaults(t)
        t.insert(0, "chapter", chapter)
        t.insert(1, "key", paper_of(chapter))
        t["anchor"], t["interim"] = record["anchor"], bool(record.get("interim"))
        frames.append(t)
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), missing


def findings_frame(claims: pd.DataFrame) -> pd.DataFrame:
    """The claims as strings: paper, chapter, claim, role, the paper's number, this book's measurement
    [95% CI], test, p, verdict; interim verdicts are labelled so."""
    if claims.empty:
        return pd.DataFrame()
    claims = claims.reset_index(drop=True)      # a selection (one kind) lines up with its rendering
    shown = render_claims(claims)
    test = [t if t else ("—" if p == "—" else "as recorded") for t, p in zip(claims["test"], shown["p"])]
    test = [t + ("; Holm" if role == "secondary" and p != "—" else "")
            for t, role, p in zip(test, claims["role"], shown["p"])]
    p = [hp if role == "secondary" and hp != "—" else p0
         for p0, hp, role in zip(shown["p"], shown["p (Holm)"], claims["role"])]
    verdict = [INTERIM if interim else v for v, interim in zip(shown["verdict"], claims["interim"])]
    # The verdict right after the measurement: at a laptop's page width the last columns scroll out of
    # view, and the verdict is what a reader of this table came for.
    return pd.DataFrame({"paper": [paper_titles().get(k, k) for k in claims["key"]], "chapter": claims["chapter"],
                         "claim": shown["claim"], "paper reports": shown["paper"],
                         "this book [95% CI]": shown["measured [95% CI]"], "verdict": verdict, "p": p,
                         "n": shown["n"], "test": test, "role": shown["role"],
                         "note": shown["note"] if "note" in shown else ""})   # the page leaves out an empty one


def findings_html(claims: pd.DataFrame, titles: dict[str, str] | None = None, kind: str | None = None) -> str:
    """One HTML table, a header row per paper; the chapter column links to the cell that measured the
    claim. `kind`: only the claims of the papers ("paper") or only the checks of the book's tools
    ("check"); None: every row."""
    if kind is not None and not claims.empty:
        claims = _with_defaults(claims)
        claims = claims[claims["kind"] == kind]
    frame = findings_frame(claims)
    if frame.empty:
        return ("<p>No chapter has recorded a claims table yet.</p>" if kind is None else
                f"<p>No chapter has recorded a {'claim of a paper' if kind == 'paper' else 'check'}.</p>")
    titles = titles or {}
    # Six columns that fit the page (issue 37: the role and note columns sat behind a sideways scroll):
    # the claim carries its role and note, the verdict its p and test, in small type under them.
    shown = ["chapter", "claim", "paper reports", "this book [95% CI]", "verdict", "n"]
    rows, paper = [], None
    for (_, r), anchor in zip(frame.iterrows(), claims["anchor"]):
        if r["paper"] != paper:
            paper = r["paper"]
            rows.append(f'<tr class="skillbook-paper"><th colspan="{len(shown)}">{escape(paper)}</th></tr>')
        cells = [escape(str(r[c])) for c in shown]
        name = titles.get(r["chapter"], r["chapter"])
        cells[0] = f'<a href="{escape(r["chapter"])}.html#{escape(anchor)}">{escape(name)}</a>'
        cells[1] += _detail("; ".join(str(x) for x in (r["role"], r["note"]) if x and x != "—"))
        cells[4] += _detail("; ".join(str(x) for x in (f"p {r['p']}" if r["p"] != "—" else "", r["test"])
                                      if x and x != "—"))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{escape(c)}</th>" for c in shown)
    return (f'<table class="dataframe skillbook-findings"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def _detail(text: str) -> str:
    return f'<div class="skillbook-detail">{escape(text)}</div>' if text else ""


def _verdict_kind(claims: pd.DataFrame) -> pd.Series:
    """The verdict without its parenthesis: "not resolved (MDE ±0.73)" → "not resolved"."""
    return claims["verdict"].str.replace(r" \(.*\)$", "", regex=True)


def tally(claims: pd.DataFrame) -> pd.DataFrame:
    """Claims of the papers per paper and verdict kind (supported, contradicted, not resolved, not tested,
    interim). Checks of the book's tools are not counted: their verdicts are not about a paper."""
    if not claims.empty:
        claims = _with_defaults(claims)
        claims = claims[claims["kind"] == "paper"]
    if claims.empty:
        return pd.DataFrame()
    kind = _verdict_kind(claims).where(~claims["interim"], "interim")
    out = (pd.DataFrame({"paper": [paper_titles().get(k, k) for k in claims["key"]], "verdict": kind})
           .groupby(["paper", "verdict"]).size().unstack(fill_value=0))
    order = [p for p in paper_titles().values() if p in out.index]
    cols = [c for c in ("supported", "contradicted", "not resolved", "not tested", "interim") if c in out]
    return out.loc[order, cols]


def _units(row) -> tuple[float, str]:
    """How many independent units a claim rests on, and what they are: its clusters when it is clustered
    (episodes of one game are not independent), else its n in its unit ("" in an older record)."""
    if not pd.isna(row["n_clusters"]):
        return row["n_clusters"], "clusters"
    return row["n"], row["unit"]


def _span(counts: list[int], unit: str) -> str:
    """"6–9 games", "13 clusters", "1 task"."""
    lo, hi = min(counts), max(counts)
    if hi == 1 and unit.endswith("s"):
        unit = unit[:-1]
    return (f"{lo}" if lo == hi else f"{lo}–{hi}") + (f" {unit}" if unit else "")


def by_chapter(claims: pd.DataFrame, titles: dict[str, str] | None = None) -> pd.DataFrame:
    """Per chapter, how much its claims of the papers could say: their number, the independent units they
    were measured on (per unit, a range when they differ: "6–9 games, 8–32 skills, 13 clusters"), the
    median minimum detectable effect of those with one, how many were resolved (supported or
    contradicted; an interim claim never is), and how many checks of the book's tools the chapter ran
    beside them (not counted in the rest). Chapters sized for a workshop and the pre-registered study read
    side by side."""
    cols = ["claims", "units", "median MDE", "resolved", "checks"]
    if claims.empty:
        return pd.DataFrame(columns=cols)
    titles = titles or {}
    claims = _with_defaults(claims)
    paper = claims["kind"] == "paper"
    resolved = _verdict_kind(claims).isin(["supported", "contradicted"]) & ~claims["interim"].astype(bool)
    mde = claims["mde"].where(claims["mde"] < float("inf"))
    rows = {}
    for chapter, idx in claims.groupby("chapter", sort=False).groups.items():
        mine = claims.loc[idx][paper[idx]]
        spans = {}
        for _, r in mine.iterrows():
            n, unit = _units(r)
            if not pd.isna(n):
                spans.setdefault(unit, []).append(int(n))
        units = ", ".join(_span(v, u) for u, v in spans.items())
        rows[titles.get(chapter, chapter)] = {"claims": len(mine), "units": units or "—",
                                              "median MDE": float(mde[mine.index].median()),
                                              "resolved": int(resolved[mine.index].sum()),
                                              "checks": int((~paper[idx]).sum())}
    return pd.DataFrame.from_dict(rows, orient="index", columns=cols)


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def findings_summary(claims: pd.DataFrame, titles: dict[str, str] | None = None) -> str:
    """What the book found, in a few plain sentences per paper (Markdown), built from the claims records
    and saying no more than their verdicts: how many claims each paper's chapters tested and how many were
    resolved, each supported or contradicted claim with its estimate and note (listed under the chapter
    that tested it), and, where none was, the smallest effect any of its tests could have detected.
    Chapter 10 shows it first; the start page includes it."""
    titles = titles or {}
    if claims.empty:
        return "No chapter has recorded a claims table yet."
    claims = _with_defaults(claims)
    kind = _verdict_kind(claims).where(~claims["interim"].astype(bool), "interim")
    paper = claims["kind"] == "paper"
    resolved = kind.isin(["supported", "contradicted"])
    n_resolved = int((resolved & paper).sum())
    were = {0: "none was", 1: "1 was"}.get(n_resolved, f"{n_resolved} were")
    out = [f"Of the {int(paper.sum())} claims of the four papers that the chapters record, {were} "
           "resolved at the sizes these runs have (\"not resolved\": the test could not tell an effect from "
           "none at that size; it does not say that there is none)."]
    for key, name in paper_titles().items():
        mine = claims[paper & (claims["key"] == key)]
        if mine.empty:
            continue
        k = kind[mine.index]
        chapters = ", ".join(f"*{titles.get(c, c)}*" for c in dict.fromkeys(mine["chapter"]))
        parts = [f"**{name}** ({chapters}): {_count(len(mine), 'claim')}"]
        parts.append(", ".join(_verdict_count(k, v) for v in VERDICT_WORDS if (k == v).any()) + ".")
        # the resolved claims as a list under the chapter that tested them (its title once, not per claim)
        listed = []
        for chapter in dict.fromkeys(mine.loc[resolved[mine.index], "chapter"]):
            rows = mine[(mine["chapter"] == chapter) & resolved[mine.index]]
            listed.append(f"In *{titles.get(chapter, chapter)}*:\n\n" + "\n".join(
                f"* {v}: {r['claim']} ({_estimate(r)}{_note(r)})"
                for v in ("supported", "contradicted") for _, r in rows[k[rows.index] == v].iterrows()))
        if not resolved[mine.index].any():
            primary = mine[mine["role"] == "primary"]
            mde = primary["mde"].where(primary["mde"] < float("inf")).dropna()
            if len(mde):
                r = mine.loc[mde.idxmin()]
                parts.append(f"Of its primary claims, the smallest effect a test could have detected (80% power) was "
                             f"±{r['mde']:.2f}, for \"{r['claim']}\" in *{titles.get(r['chapter'], r['chapter'])}*"
                             f" ({_span([int(_units(r)[0])], _units(r)[1])}).")
        out.append("\n\n".join([" ".join([parts[0] + ": " + parts[1]] + parts[2:])] + listed))
    checks = claims[~paper]
    if len(checks):
        k = kind[checks.index]
        named = [f"{v}: {r['claim']} ({_estimate(r)}, *{titles.get(r['chapter'], r['chapter'])}*{_note(r)})"
                 for v in ("contradicted",) for _, r in checks[k == v].iterrows()]
        out.append(f"Beside them, {_count(len(checks), 'check')} of the book's own tools: "
                   + ", ".join(_verdict_count(k, v) for v in VERDICT_WORDS if (k == v).any()) + "."
                   + "".join(f" {n[0].upper()}{n[1:]}." for n in named))
    return "\n\n".join(out)


VERDICT_WORDS = {"supported": "supported", "contradicted": "contradicted", "not resolved": "not resolved",
                 "not tested": "described without a test", "interim": "interim (the run is not complete)"}


def _verdict_count(kinds: pd.Series, verdict: str) -> str:
    return f"{int((kinds == verdict).sum())} {VERDICT_WORDS[verdict]}"


def _estimate(r) -> str:
    """The estimate and its interval as the claims table prints them (true minus signs)."""
    return measured_text(r["estimate"], r["ci_low"], r["ci_high"])


def _note(r) -> str:
    """A resolved claim's note (e.g. a check that qualifies its verdict), so the sentence keeps what the
    table's row says beside the verdict."""
    note = r.get("note")
    return f"; {note}" if isinstance(note, str) and note else ""
