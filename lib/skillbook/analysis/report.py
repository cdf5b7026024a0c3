"""Sentences for the findings at the end of a chapter, written from its claims table and measurements
(so a re-executed chapter says what its own numbers say, never a number typed by hand)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .claims import units_text


def num(x: float, signed: bool = True, digits: int = 2) -> str:
    """+0.12 / −0.03 (a true minus sign); 'n/a' for a missing value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return (f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}").replace("-", "−")


def interval(low: float, high: float, signed: bool = True, digits: int = 2) -> str:
    if any(v is None or math.isnan(v) for v in (low, high)):
        return "no interval"
    return f"[{num(low, signed, digits)}, {num(high, signed, digits)}]"


def p_text(p: float) -> str:
    if p is None or math.isnan(p):
        return "no test"
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}" if p < 0.1 else f"p = {p:.2f}"


def claim_sentence(row) -> str:
    """One row of `analysis.claims_table` in words: the claim, what the paper reports, the measurement
    with its interval and n in its units as the table's n column gives it ("n = 6 games (12 tasks)",
    "n = 64 episodes (13 clusters)"), the test (Holm-adjusted for a secondary claim) and the verdict; a
    descriptive row (no test) says what was observed."""
    head = f"*{row['claim']}* (paper: {row['paper']}): "
    measured = "" if pd.isna(row["estimate"]) else f"{num(row['estimate'])} "
    if not (pd.isna(row["ci_low"]) or pd.isna(row["ci_high"])):
        measured += f"{interval(row['ci_low'], row['ci_high'])} "
    n = "" if pd.isna(row["n"]) else f"n = {units_text(row)}"
    if row["verdict"] == "not tested":
        observed = "; ".join(x for x in (measured.strip(), n, row["note"]) if x)
        return head + f"{observed} — descriptive, no test."
    test = p_text(row["p"])
    if row["role"] == "secondary" and not pd.isna(row["p_holm"]):
        test += f", Holm-adjusted {p_text(row['p_holm'])[2:]}"
    note = f" ({row['note']})" if row["note"] else ""
    observed = ", ".join(x for x in (measured.strip(), n) if x) or "no estimate"
    return head + f"{observed}; {test} — **{row['verdict']}**{note}."


def _of_kind(table: pd.DataFrame, kind: str | None) -> pd.Series:
    """Which rows are of `kind` ("paper": claims of a paper, "check": checks of the book's tools; None:
    all). A table without a kind column (an older record) holds claims of the papers only."""
    if kind is None:
        return pd.Series(True, index=table.index)
    return (table["kind"] if "kind" in table else pd.Series("paper", index=table.index)) == kind


def claim_list(table: pd.DataFrame, role: str | None = None, kind: str | None = "paper") -> str:
    """The claims of one role (or all) and one kind (claims of the papers unless asked otherwise: a
    check of the book's tools is reported apart) as a markdown list of `claim_sentence`s."""
    keep = _of_kind(table, kind)
    if role is not None:
        keep &= table["role"] == role
    rows = table[keep]
    return "\n".join(f"* {claim_sentence(r)}" for _, r in rows.iterrows()) or "* (none could be measured in this run)"


def tally(table: pd.DataFrame, role: str, kind: str = "paper") -> str:
    """'1 of 2 supported, 0 contradicted, 1 not resolved' for the claims of `role` and `kind` (by default
    the claims of the papers: checks of the book's tools are not counted with them)."""
    v = table.loc[(table["role"] == role) & _of_kind(table, kind), "verdict"]
    if not len(v):
        return f"no {role} claim"
    parts = [f"{(v == 'supported').sum()} of {len(v)} supported", f"{(v == 'contradicted').sum()} contradicted",
             f"{v.str.startswith('not resolved').sum()} not resolved"]
    if (v == "not tested").any():
        parts.append(f"{(v == 'not tested').sum()} descriptive (not tested)")
    return ", ".join(parts)


__all__ = ["num", "interval", "p_text", "claim_sentence", "claim_list", "tally"]


# Small helpers the chapters' sentences share (they were defined in the chapters: `count` in 01 and
# `plural` in 06 were the same function).
def count(k: int, what: str = "task", plural: str | None = None) -> str:
    """"1 task", "3 tasks"; `plural` where adding an s is wrong ("trajectories")."""
    return f"{k} {what}" if k == 1 else f"{k} {plural or what + 's'}"


def includes_zero(row) -> bool:
    """Whether a result's 95% interval (`ci_low`, `ci_high`) contains 0."""
    return row["ci_low"] <= 0 <= row["ci_high"]


def pct(x: float) -> str:
    """A share as a whole percentage, "n/a" when undefined."""
    return "n/a" if math.isnan(x) else f"{x:.0%}"


def apart(summary: pd.DataFrame, measure: str) -> list[str]:
    """Pairs of conditions (rows of `summary`, with condition, ci_low, ci_high) whose intervals for
    `measure` do not overlap."""
    s = summary.set_index("condition") if len(summary) else pd.DataFrame()
    return [f"{a} and {b} ({measure})" for i, a in enumerate(s.index) for b in s.index[i + 1:]
            if s.loc[a, "ci_high"] < s.loc[b, "ci_low"] or s.loc[b, "ci_high"] < s.loc[a, "ci_low"]]


def positions_at(values, x) -> str:
    """The 1-based positions where `values` equal `x` (within float tolerance): "2 and 3"."""
    return " and ".join(str(i + 1) for i in np.flatnonzero(np.isclose(values, x)))
