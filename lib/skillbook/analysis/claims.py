"""Claims tables: the one place where a chapter's measurements become verdicts on the paper's claims.

A chapter names its primary contrast(s) before it shows results. Every other claim in its table is
secondary, and the secondary claims' p-values are Holm-adjusted together (`stats.holm`), so the table as a
whole does not find more "supported" claims than chance would give. A primary claim is tested on its own
at α (several primaries are each tested at α: naming them in advance is what licenses that).

A claim is of one of two kinds (`KINDS`): a claim of a paper, or a check of the book's own tools (does a
simulation recover what was planted, a property a score has by construction). The two are different
questions, so they are two Holm families: a check's tiny p does not make a paper's claims harder to
resolve, and a paper's claims do not move a check's verdict. Every claim states its unit: what n counts
(games, tasks, skills, libraries, episodes in clusters).

Verdict of one claim, with p' = its own p (primary) or its Holm-adjusted p (secondary):

    supported      p' < α and the estimate has the paper's sign
    contradicted   p' < α and the estimate has the opposite sign
    not resolved   otherwise; shown with the minimum detectable effect at this n (80% power, α),
                   "not resolved (MDE ±x)", so a reader sees how large an effect the run could have found
    not tested     the measurement has no p at all (a descriptive number); `note` says what was observed
                   (a test that could not run, p = NaN, counts as not resolved; the result's own `note`,
                   e.g. "judge_neutral is +0 on all 246 pairs: … ρ is undefined", says why)

The verdict follows the test, not the interval. The interval shown is the unadjusted 95% interval of the
estimate; for a secondary claim it can exclude 0 while the Holm-adjusted test does not reject, and for a
0/1 metric at small n Newcombe's interval can exclude 0 while the exact McNemar test does not (4 of 9
pairs discordant, all one way: interval ≈ [+0.02, +0.70], p = 0.125). In both cases the verdict is
"not resolved", because the test is the procedure whose error rate is controlled.

Usage:

    claims = [Claim("memory helps", paper="+1.9 pp", expected_sign=+1, primary=True,
                    result=paired_difference(df, "condition", "none", "memory")), ...]
    table = claims_table(claims)          # numbers, for code
    display(render_claims(table))         # strings, for the page
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .stats import holm, mde_from_ci

_ESTIMATE_KEYS = ("estimate", "difference", "rho", "slope")
_P_KEYS = ("p", "mcnemar_p")
_N_KEYS = ("n_units", "n_tasks", "n")
KINDS = {"paper": "a claim of a paper, tested on this book's runs",
         "check": "a check of the book's own tools (a simulation's recovery, a property of a score)"}


@dataclass
class Claim:
    """One claim of a paper and what this book measured for it.

    name: the claim in words ("memory helps at the subtask level").
    paper: what the paper reports ("+1.9 pp", "ρ = 0.6"), shown next to the measurement.
    expected_sign: +1 when the paper's claim is that the estimate is positive, −1 negative.
    primary: named before the results as a primary contrast (tested at α without adjustment).
    result: the measurement, a mapping with the estimate under `estimate`, `difference`, `rho` or `slope`,
        and optionally `ci_low`, `ci_high`, `p`, `mde`, `n` / `n_tasks`, `n_clusters` — what
        `paired_difference`, `spearman_ci`, `cluster_slope` and `bootstrap_difference` return.
    note: free text for the table (e.g. what a descriptive claim showed).
    unit: what n counts — the independent units the test treats as draws ("games", "tasks", "skills",
        "libraries"); the result's own `unit` wins (`paired_difference(units=...)` sets "games").
    kind: "paper" (a claim of one of the papers) or "check" (a check of the book's own tools: whether a
        simulation recovers what was planted, a property of a score by construction). The closing
        chapter's tally counts only the first kind.
    """

    name: str
    paper: str
    expected_sign: int
    primary: bool
    result: Mapping = field(default_factory=dict)
    note: str = ""
    unit: str = ""
    kind: str = "paper"

    def __post_init__(self):
        if self.expected_sign not in (1, -1):
            raise ValueError(f"expected_sign must be +1 or -1, got {self.expected_sign!r} ({self.name})")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r} ({self.name})")


def _get(result: Mapping, keys, default=float("nan")):
    for k in keys:
        if k in result and result[k] is not None:
            return result[k]
    return default


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _decimals(*values: float) -> int:
    """2 decimals below 10; from 10 up, enough for 3 significant figures of the largest value."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v)]
    top = max(finite, default=0.0)
    return 2 if top < 10 else max(0, 2 - math.floor(math.log10(top)))


def format_number(x: float, signed: bool = True, decimals: int | None = None) -> str:
    """+0.12 / −0.03 with a true minus sign; 'n/a' for NaN, ∞ for infinity."""
    if x is None or math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return ("+" if x > 0 and signed else "−" if x < 0 else "") + "∞"
    d = _decimals(x) if decimals is None else decimals
    s = f"{x:+.{d}f}" if signed else f"{abs(x):.{d}f}"
    return s.replace("-", "−")


def _bracket(low: float, high: float, decimals: int) -> str:
    return f"[{format_number(low, decimals=decimals)}, {format_number(high, decimals=decimals)}]"


def measured_text(estimate: float, low: float, high: float) -> str:
    """"+0.12 [−0.03, +0.27]": the estimate with its interval (left out when there is none), all at the
    same decimals — the claims table's *measured* column, and the prose that quotes it."""
    d = _decimals(estimate, low, high)
    out = format_number(estimate, decimals=d)
    if not (pd.isna(low) or pd.isna(high)):
        out += " " + _bracket(low, high, d)
    return out


def format_p(p: float) -> str:
    if p is None or math.isnan(p):
        return "—"
    if p < 0.001:
        return "<0.001"
    return f"{p:.3f}" if p < 0.1 else f"{p:.2f}"


def _mde_text(mde: float, n) -> str:
    if mde is None or math.isnan(mde):
        return "not resolved (MDE n/a)"
    if math.isinf(mde):
        n = int(n) if isinstance(n, (int, float)) and not math.isnan(n) else n   # a column of n is float
        return f"not resolved (no effect detectable at n = {n})"
    return f"not resolved (MDE ±{format_number(mde, signed=False)})"


def _result_note(r) -> str:
    """The result's own `note` (why its estimate, interval or MDE is undefined), or ""."""
    note = r.get("note")
    return note if isinstance(note, str) else ""


def claims_table(claims: list[Claim], alpha: float = 0.05, power: float = 0.8) -> pd.DataFrame:
    """One row per claim: claim, role (primary / secondary), paper, n, n_clusters, estimate, ci_low, ci_high,
    p, p_holm, mde, expected_sign, verdict, note, test (the result's `test`, e.g. "exact McNemar"; "" when
    the result does not name one), unit (what n counts), n_tasks (the tasks behind n units, when fewer
    units than tasks), kind (paper or check).

    n is the number of independent units the test used: `n_units` when the result has it (tasks grouped
    into games), else its tasks or n.

    p_holm is Holm's adjustment across the secondary claims of the same kind that have a p (NaN for
    primary claims, which are decided on their own p). The verdict rule is in the module docstring.
    The MDE is the result's
    own `mde` (exact for `paired_difference` on a 0/1 metric) or, when absent, the approximation
    `stats.mde_from_ci` from its 95% interval; its power is `power`.
    """
    rows = []
    for c in claims:
        r = dict(c.result) if c.result is not None else {}
        lo, hi = _num(r.get("ci_low")), _num(r.get("ci_high"))
        mde = _num(r["mde"]) if r.get("mde") is not None else mde_from_ci(lo, hi, alpha=alpha, power=power)
        rows.append({"claim": c.name, "role": "primary" if c.primary else "secondary", "paper": c.paper,
                     "n": _get(r, _N_KEYS, np.nan), "n_clusters": r.get("n_clusters", np.nan),
                     "estimate": _num(_get(r, _ESTIMATE_KEYS)), "ci_low": lo, "ci_high": hi,
                     "p": _num(_get(r, _P_KEYS)), "mde": mde, "expected_sign": c.expected_sign,
                     "note": c.note or _result_note(r),
                     "test": r["test"] if isinstance(r.get("test"), str) else "",
                     "tested": any(k in r for k in _P_KEYS),
                     "unit": r["unit"] if isinstance(r.get("unit"), str) and r.get("unit") else c.unit,
                     "n_tasks": r["n_tasks"] if "n_units" in r and r.get("n_tasks") != r.get("n_units") else np.nan,
                     "kind": c.kind})
    t = pd.DataFrame(rows, columns=["claim", "role", "paper", "n", "n_clusters", "estimate", "ci_low", "ci_high",
                                    "p", "mde", "expected_sign", "note", "test", "tested", "unit", "n_tasks",
                                    "kind"])
    secondary = (t["role"] == "secondary").to_numpy()
    t["p_holm"] = np.nan
    for kind in KINDS:      # one family per kind: checks of the book's tools are not claims of a paper
        family = secondary & (t["kind"] == kind).to_numpy()
        if family.any():
            t.loc[family, "p_holm"] = holm(t.loc[family, "p"].to_numpy(dtype=float))
    decide = np.where(secondary, t["p_holm"], t["p"])
    verdicts = []
    for (_, row), p in zip(t.iterrows(), decide):
        if not row["tested"]:
            verdicts.append("not tested")
        elif p < alpha and np.sign(row["estimate"]) == row["expected_sign"]:
            verdicts.append("supported")
        elif p < alpha and np.sign(row["estimate"]) == -row["expected_sign"]:
            verdicts.append("contradicted")
        else:
            verdicts.append(_mde_text(row["mde"], row["n"]))
    t["verdict"] = verdicts
    return t[["claim", "role", "paper", "n", "n_clusters", "estimate", "ci_low", "ci_high", "p", "p_holm", "mde",
              "expected_sign", "verdict", "note", "test", "unit", "n_tasks", "kind"]]


def units_text(row) -> str:
    """The n column as a reader needs it: "16 games (223 tasks)", "9 tasks", "120 episodes (13 clusters)"."""
    if pd.isna(row["n"]):
        return ""
    unit = row.get("unit") if isinstance(row.get("unit"), str) else ""
    if int(row["n"]) == 1 and unit.endswith("s"):
        unit = unit[:-1]                 # "1 task", not "1 tasks"
    out = f"{int(row['n'])}" + (f" {unit}" if unit else "")
    n_tasks = row.get("n_tasks")
    if n_tasks is not None and not pd.isna(n_tasks):
        out += f" ({int(n_tasks)} tasks)"
    if not pd.isna(row.get("n_clusters", np.nan)):
        out += f" ({int(row['n_clusters'])} clusters)"
    return out


def render_claims(table: pd.DataFrame | list[Claim], alpha: float = 0.05) -> pd.DataFrame:
    """The claims table as strings for a notebook: claim, role, paper, n, 'measured [95% CI]' such as
    "+0.12 [−0.03, +0.27]", p, p (Holm), MDE, verdict, note (left out when every row's is empty) — and
    kind, when the table holds a check of the book's tools (so the page says which rows are not claims of a
    paper). Accepts a `claims_table` frame or the claims."""
    if not isinstance(table, pd.DataFrame):
        table = claims_table(table, alpha=alpha)
    kinds = table["kind"] if "kind" in table else pd.Series("paper", index=table.index)
    rows = []
    for _, r in table.iterrows():
        est = measured_text(r["estimate"], r["ci_low"], r["ci_high"])
        n = units_text(r)
        rows.append({"claim": r["claim"], "role": r["role"], "paper": r["paper"], "n": n, "measured [95% CI]": est,
                     "p": format_p(r["p"]), "p (Holm)": format_p(r["p_holm"]),
                     "MDE": "" if math.isnan(r["mde"]) else "±" + format_number(r["mde"], signed=False),
                     "verdict": r["verdict"], "note": r["note"]})
    out = pd.DataFrame(rows, columns=["claim", "role", "paper", "n", "measured [95% CI]", "p", "p (Holm)", "MDE",
                                      "verdict", "note"])
    if (kinds == "check").any():
        out.insert(2, "kind", kinds.fillna("paper").to_numpy())
    if not out["note"].astype(bool).any():
        out = out.drop(columns="note")    # an empty column costs the others their width on the page
    return out
