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


def bootstrap_difference(a, b, stat=np.median, n_boot: int = 10_000, ci: float = 0.95, seed: int = 0) -> dict:
    """stat(b) − stat(a) of two independent samples, each resampled separately (percentile bootstrap)."""
    a, b = (np.asarray(x, dtype=float) for x in (a, b))
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    if len(a) == 0 or len(b) == 0:
        return {"difference": np.nan, "ci_low": np.nan, "ci_high": np.nan}
    rng = np.random.default_rng(seed)
    ra = a[rng.integers(0, len(a), size=(n_boot, len(a)))]
    rb = b[rng.integers(0, len(b), size=(n_boot, len(b)))]
    d = stat(rb, axis=1) - stat(ra, axis=1)
    alpha = (1 - ci) / 2
    return {"difference": float(stat(b) - stat(a)), "ci_low": float(np.quantile(d, alpha)),
            "ci_high": float(np.quantile(d, 1 - alpha))}


def spearman_ci(x, y, n_boot: int = 10_000, ci: float = 0.95, seed: int = 0) -> dict:
    """Spearman's rank correlation with a percentile-bootstrap interval over the (x, y) pairs."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    rank = lambda v: pd.DataFrame(v).rank(axis=1).to_numpy() if v.ndim == 2 else pd.Series(v).rank().to_numpy()  # noqa: E731

    def rho(a, b):
        a, b = rank(a), rank(b)
        a = a - a.mean(axis=-1, keepdims=True)
        b = b - b.mean(axis=-1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (a * b).sum(axis=-1) / np.sqrt((a * a).sum(axis=-1) * (b * b).sum(axis=-1))

    if len(x) < 3:
        return {"rho": np.nan, "ci_low": np.nan, "ci_high": np.nan, "n": len(x)}
    idx = np.random.default_rng(seed).integers(0, len(x), size=(n_boot, len(x)))
    boots = rho(x[idx], y[idx])
    boots = boots[~np.isnan(boots)]
    alpha = (1 - ci) / 2
    return {"rho": float(rho(x, y)), "ci_low": float(np.quantile(boots, alpha)) if len(boots) else np.nan,
            "ci_high": float(np.quantile(boots, 1 - alpha)) if len(boots) else np.nan, "n": len(x)}


def verdict(ci_low: float, ci_high: float, expected_sign: int) -> str:
    """'supported' when the interval excludes zero in the expected direction, 'contradicted' when it excludes
    zero in the other, 'not resolved' otherwise."""
    if np.isnan(ci_low) or np.isnan(ci_high):
        return "not resolved"
    if expected_sign * ci_low > 0 and expected_sign * ci_high > 0:
        return "supported"
    if expected_sign * ci_low < 0 and expected_sign * ci_high < 0:
        return "contradicted"
    return "not resolved"
