"""Success with task-bootstrap confidence intervals, paired comparisons, strata and budget curves.

Tasks are the unit of resampling: a 95% interval is the 2.5th–97.5th percentile of the mean over
`n_boot` resamples of the tasks with replacement. A paired comparison resamples tasks too, so the
two conditions' outcomes on the same task stay together.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def bootstrap_ci(values, n_boot: int = 10_000, ci: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high) of the mean of `values` by the percentile bootstrap."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return (float("nan"),) * 3
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    alpha = (1 - ci) / 2
    return float(x.mean()), float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))


def summarize(df: pd.DataFrame, by: list[str] | str, metric: str = "success", **kw) -> pd.DataFrame:
    """n, mean and bootstrap CI of `metric` per group."""
    by = [by] if isinstance(by, str) else list(by)
    rows = []
    for key, g in df.groupby(by, sort=True):
        mean, lo, hi = bootstrap_ci(g[metric].astype(float), **kw)
        rows.append({**dict(zip(by, key if isinstance(key, tuple) else (key,))),
                     "n": len(g), metric: mean, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows)


def paired_difference(df: pd.DataFrame, condition: str, a: str, b: str, metric: str = "success",
                      key: str = "task_id", **kw) -> dict:
    """Mean of metric(b) − metric(a) over the tasks both conditions ran, with a task-bootstrap CI.

    For a binary metric also McNemar's exact test on the discordant pairs.
    """
    wide = df.pivot_table(index=key, columns=condition, values=metric, aggfunc="mean")
    missing = [c for c in (a, b) if c not in wide.columns]
    if missing:
        raise ValueError(f"condition(s) {missing} not in column {condition!r}; present: {list(wide.columns)}")
    wide = wide[[a, b]].dropna()
    diff = (wide[b] - wide[a]).to_numpy(dtype=float)
    mean, lo, hi = bootstrap_ci(diff, **kw)
    out = {"a": a, "b": b, "metric": metric, "n_tasks": len(wide), "mean_a": float(wide[a].mean()),
           "mean_b": float(wide[b].mean()), "difference": mean, "ci_low": lo, "ci_high": hi}
    values = set(np.unique(wide.to_numpy()))
    if values <= {0.0, 1.0}:
        from statsmodels.stats.contingency_tables import mcnemar
        only_a = int(((wide[a] == 1) & (wide[b] == 0)).sum())
        only_b = int(((wide[a] == 0) & (wide[b] == 1)).sum())
        both = int(((wide[a] == 1) & (wide[b] == 1)).sum())
        neither = len(wide) - only_a - only_b - both
        out.update({"only_a": only_a, "only_b": only_b,
                    "mcnemar_p": float(mcnemar([[both, only_a], [only_b, neither]], exact=True).pvalue)})
    return out


def difficulty_strata(gold_length: pd.Series, labels=("easy", "medium", "hard")) -> pd.Series:
    """Tercile strata of the gold-path length: ≤ 1/3 quantile, ≤ 2/3 quantile, above (ties stay together)."""
    q1, q2 = gold_length.quantile([1 / 3, 2 / 3])
    return pd.Series(np.where(gold_length <= q1, labels[0], np.where(gold_length <= q2, labels[1], labels[2])),
                     index=gold_length.index)


def budget_curve(df: pd.DataFrame, cost: str, by: str | None = None, success: str = "success",
                 points: int = 50) -> pd.DataFrame:
    """Share of all tasks solved within each cost budget (the paper's success-vs-cost curves)."""
    groups = df.groupby(by) if by else [(None, df)]
    top = float(df[cost].max()) if len(df) else 0.0
    budgets = np.linspace(0, top, points)
    rows = []
    for name, g in groups:
        solved = g.loc[g[success].astype(bool), cost].to_numpy(dtype=float)
        for b in budgets:
            rows.append({**({by: name} if by else {}), "budget": b, "solved_share": (solved <= b).sum() / len(g)})
    return pd.DataFrame(rows)
