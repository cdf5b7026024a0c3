"""The first paper's skill utility score (§6.1): computed from text alone, before any task is run.

Let c_j = cos(e(skill), e(t_j)) over the N task instructions t_1..t_N (unit-norm MiniLM vectors).

    specificity(s) = Pr_{i ≠ k}[ max_j c_j ≥ cos(t_i, t_k) ]      does the skill fit some task as well as
                                                                  tasks fit each other?
    abstractness(s) = exp(H(softmax(c / τ))) / N,  τ = 0.1        over how many tasks is its relevance
                                                                  spread (perplexity / N, in [1/N, 1])?
    utility(s) = specificity(s) · abstractness(s)

The three functions take one skill's vector `c` (shape N) and return a float; they also accept a
matrix of skills (shape n_skills × N) and then return one value per row, so that a whole library is
scored in one vectorised pass.

Against thousands of tasks (the whole task catalogue, `catalogue.py`) the N × N task matrix is not built:
`score_vectors` works from unit vectors, with exact specificity from `pair_counts` (a block of tasks at a
time, memory O(block · N)) and the paper's sampled estimate beside it; `task_sets`, `scaling`,
`scaling_summary` and `rank_stability` show how the scores and the skills' ranking change with N.
"""
from __future__ import annotations

import time
from html import escape

import ipywidgets as widgets
import numpy as np
import pandas as pd
from scipy.stats import permutation_test, spearmanr

from ...analysis.stats import bootstrap_difference, cluster_slope, spearman_ci, wilson_interval
from ...skills.embeddings import COSINE_DECIMALS, DIM, cosines, get_embedder

TAU = 0.1


def _check(skill_task_sims, task_task_sims=None) -> tuple[np.ndarray, np.ndarray | None]:
    c = np.asarray(skill_task_sims, dtype=np.float64)
    if c.ndim not in (1, 2) or c.shape[-1] == 0:
        raise ValueError(f"skill_task_sims must be a vector of N task similarities (or n_skills × N), "
                         f"got shape {c.shape}")
    if task_task_sims is None:
        return c, None
    t = np.asarray(task_task_sims, dtype=np.float64)
    n = c.shape[-1]
    if t.shape != (n, n):
        raise ValueError(f"task_task_sims must be {n}×{n} (one row per task of skill_task_sims), got {t.shape}")
    if n < 2:
        raise ValueError("specificity needs at least two tasks (it compares against task pairs)")
    return c, t


def _pair_sims(task_task_sims: np.ndarray) -> np.ndarray:
    """cos(t_i, t_k) over all ordered pairs i ≠ k, sorted."""
    n = task_task_sims.shape[0]
    return np.sort(task_task_sims[~np.eye(n, dtype=bool)])


def specificity(skill_task_sims, task_task_sims):
    """Pr[max_j c_j ≥ cos(t_i, t_k)] over all ordered task pairs i ≠ k (exact)."""
    c, t = _check(skill_task_sims, task_task_sims)
    pairs = _pair_sims(t)
    best = c.max(axis=-1)
    # number of pairs with cos(t_i, t_k) <= best, by binary search over the sorted pair similarities
    out = np.searchsorted(pairs, best, side="right") / pairs.size
    return float(out) if np.ndim(out) == 0 else out


def _random_pairs(n: int, n_pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`n_pairs` ordered pairs (i, k), i ≠ k, uniform and independent (drawn with replacement)."""
    if not isinstance(n_pairs, (int, np.integer)) or n_pairs < 1:
        raise ValueError(f"n_pairs must be a positive integer, got {n_pairs!r}")
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, n_pairs)
    k = (i + rng.integers(1, n, n_pairs)) % n      # uniform over k ≠ i
    return i, k


def _share_at_or_below(values: np.ndarray, best) -> np.ndarray:
    """For each best: the share of `values` ≤ it (sort once, binary search)."""
    return np.searchsorted(np.sort(values), np.atleast_1d(best), side="right") / values.size


def specificity_sampled(skill_task_sims, task_task_sims, n_pairs: int = 100_000, seed: int = 0):
    """The same probability estimated on `n_pairs` random ordered pairs (for very large N)."""
    c, t = _check(skill_task_sims, task_task_sims)
    i, k = _random_pairs(t.shape[0], n_pairs, seed)
    out = _share_at_or_below(t[i, k], c.max(axis=-1))
    return float(out[0]) if c.ndim == 1 else out


def abstractness(skill_task_sims, tau: float = TAU):
    """exp(H(softmax(c/τ))) / N with the natural-log entropy: 1 for uniform c, ≈ 1/N for one dominant task."""
    if tau <= 0:
        raise ValueError(f"tau must be positive, got {tau!r}")
    c, _ = _check(skill_task_sims)
    z = c / tau
    z = z - z.max(axis=-1, keepdims=True)          # stable softmax
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)
    h = -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=-1)
    out = np.exp(h) / c.shape[-1]
    return float(out) if np.ndim(out) == 0 else out


def utility(skill_task_sims, task_task_sims, tau: float = TAU):
    """specificity × abstractness."""
    return specificity(skill_task_sims, task_task_sims) * abstractness(skill_task_sims, tau)


# -- from libraries and records --------------------------------------------------------------------
def similarity_matrices(skill_texts: list[str], task_texts: list[str], embedder=None) -> tuple[np.ndarray, np.ndarray]:
    """(skills × tasks, tasks × tasks) cosines of the embedded texts (`cosines`: the same on every CPU)."""
    emb = embedder or get_embedder()
    tasks = emb.embed(list(task_texts))
    skills = emb.embed(list(skill_texts)) if skill_texts else np.zeros((0, tasks.shape[1]), np.float32)
    return cosines(skills, tasks), cosines(tasks, tasks)


def score_library(library, task_texts: list[str], tau: float = TAU, embedder=None) -> pd.DataFrame:
    """specificity, abstractness and utility of every skill of a library against the task instructions."""
    skills = list(library)
    cols = ["skill_id", "format", "level", "description", "specificity", "abstractness", "utility"]
    if not skills:
        return pd.DataFrame(columns=cols)
    s, t = similarity_matrices([k.description for k in skills], task_texts, embedder)
    spec, abst = np.atleast_1d(specificity(s, t)), np.atleast_1d(abstractness(s, tau))
    return pd.DataFrame({"skill_id": [k.id for k in skills], "format": [k.format for k in skills],
                         "level": [k.provenance.get("induction_level", "") for k in skills],
                         "description": [k.description for k in skills],
                         "specificity": spec, "abstractness": abst, "utility": spec * abst})


# -- thousands of tasks: from unit vectors, without the N × N matrix ------------------------------------
def pair_counts(task_vectors, thresholds, block: int = 512) -> np.ndarray:
    """For each threshold b: the number of ordered task pairs i ≠ k with cos(t_i, t_k) ≤ b, exactly.

    The N × N matrix is never held: `block` rows at a time are compared with the tasks after them (the
    upper triangle; a cosine is symmetric, so each unordered pair counts twice) and their cosines binned
    between the sorted thresholds. Memory O(block · N) — about 300 MB at N = 24,000 with block = 512 (a
    block's float64 cosines, their rounded copy and their bin indices), where the N(N−1) sorted pair cosines
    of `specificity` would take 4.6 GB.
    """
    v = np.ascontiguousarray(task_vectors, dtype=np.float64)
    n = v.shape[0]
    th = np.atleast_1d(np.asarray(thresholds, dtype=np.float64))
    edges, where = np.unique(th, return_inverse=True)
    hist = np.zeros(edges.size + 1, dtype=np.int64)
    for a in range(0, n, block):
        b = min(n, a + block)
        s = cosines(v[a:b], v[a:])                        # rows a..b-1 against tasks a..n-1
        s[:, : b - a][np.tril(np.ones((b - a, b - a), dtype=bool))] = np.inf   # k ≤ i: not counted
        # bin j holds the cosines x with edges[j-1] < x ≤ edges[j]; +inf falls past the last edge
        hist += np.bincount(np.searchsorted(edges, s.ravel(), side="left"), minlength=edges.size + 1)
    return 2 * np.cumsum(hist)[: edges.size][where]


def specificity_vectors(best, task_vectors, n_pairs: int | None = None, seed: int = 0, block: int = 512):
    """Specificity from each skill's best cosine `best` (max_j c_j) and the tasks' unit vectors (rows).

    Exact over all N(N−1) ordered pairs (`pair_counts`) when `n_pairs` is None; otherwise the paper's
    estimate on `n_pairs` random ordered pairs — the same draws as `specificity_sampled`, so for a seed
    both give the same estimate.
    """
    v = np.asarray(task_vectors, dtype=np.float64)
    n = v.shape[0]
    if v.ndim != 2 or n < 2:
        raise ValueError(f"task_vectors must be N × d with N ≥ 2 (specificity compares task pairs), got {v.shape}")
    best = np.atleast_1d(np.asarray(best, dtype=np.float64))
    if n_pairs is None:
        return pair_counts(v, best, block) / (n * (n - 1))
    i, k = _random_pairs(n, n_pairs, seed)
    # row by row, rounded like `cosines`, so an estimate compares like with like
    return _share_at_or_below(np.round(np.einsum("ij,ij->i", v[i], v[k]), COSINE_DECIMALS), best)


def embed_many(texts: list[str], embedder=None, chunk: int = 2_000) -> np.ndarray:
    """Unit vectors of many texts, `chunk` at a time (the cache looks up at most `chunk` keys per query)."""
    emb = embedder or get_embedder()
    texts = list(texts)
    parts = [emb.embed(texts[a:a + chunk]) for a in range(0, len(texts), chunk)]
    return np.concatenate(parts) if parts else np.zeros((0, DIM), np.float32)


def score_vectors(skill_vectors, task_vectors, tau: float = TAU, n_pairs: int | None = None, seed: int = 0,
                  block: int = 512) -> pd.DataFrame:
    """specificity (exact), abstractness and utility of skills (rows of unit vectors) against N tasks, in
    memory O((block + 256) · N) whatever N; with `n_pairs` also `specificity_sampled` on that many random
    pairs. `exact_s` and `sampled_s` (in `attrs`) are the seconds each specificity took."""
    s = np.asarray(skill_vectors, dtype=np.float64)
    t = np.asarray(task_vectors, dtype=np.float64)       # once, not per block of skills (`cosines` is float64)
    best, abst = np.empty(len(s)), np.empty(len(s))
    for a in range(0, len(s), 256):
        c = cosines(s[a:a + 256], t)
        best[a:a + 256] = c.max(axis=1)
        abst[a:a + 256] = np.atleast_1d(abstractness(c, tau))
    t0 = time.perf_counter()
    spec = specificity_vectors(best, t, None, block=block) if len(s) else np.zeros(0)
    out = pd.DataFrame({"specificity": spec, "abstractness": abst, "utility": spec * abst})
    out.attrs["exact_s"] = time.perf_counter() - t0
    if n_pairs is not None:
        t0 = time.perf_counter()
        out["specificity_sampled"] = specificity_vectors(best, t, n_pairs, seed) if len(s) else np.zeros(0)
        out.attrs["sampled_s"] = time.perf_counter() - t0
    return out


def task_sets(stream: list[str], catalogue: list[str], sizes=(500, 2_000), seed: int = 0) -> dict[str, list[str]]:
    """The task sets of growing N that a library is scored against: 'stream' (the texts given), random
    samples of the catalogue ('random N', without replacement, seeded) of the stream's size and of each
    size in `sizes` below the catalogue's, and the whole 'catalogue'. A sample of the stream's size tells
    what changes with N from what changes with the kind of task."""
    rng = np.random.default_rng(seed)
    out = {"stream": list(stream)}
    for n in sorted({len(stream), *sizes}):
        if 2 <= n < len(catalogue):
            out[f"random {n}"] = [catalogue[j] for j in np.sort(rng.choice(len(catalogue), n, replace=False))]
    out["catalogue"] = list(catalogue)
    return out


def scaling(skills: pd.DataFrame, sets: dict[str, list[str]], tau: float = TAU, n_pairs: int = 10_000,
            seed: int = 0, embedder=None) -> pd.DataFrame:
    """Every skill (rows of `skills`: condition, skill_id, description) scored against each task set:
    one row per (task set, skill) with n_tasks, specificity (exact), specificity_sampled (`n_pairs`
    random ordered pairs), abstractness, utility, and the seconds the two specificities took per set."""
    skill_vecs = embed_many(skills["description"].tolist(), embedder)
    rows = []
    for name, texts in sets.items():
        r = score_vectors(skill_vecs, embed_many(texts, embedder), tau, n_pairs, seed)
        rows.append(r.assign(task_set=name, n_tasks=len(texts), condition=skills["condition"].to_numpy(),
                             skill_id=skills["skill_id"].to_numpy(), exact_s=r.attrs["exact_s"],
                             sampled_s=r.attrs.get("sampled_s", np.nan)))
    cols = ["task_set", "n_tasks", "condition", "skill_id", "specificity", "specificity_sampled", "abstractness",
            "utility", "exact_s", "sampled_s"]
    return pd.concat(rows, ignore_index=True)[cols] if rows else pd.DataFrame(columns=cols)


def _rho(x, y) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    return float(spearmanr(x, y).statistic) if len(x) >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0 else float("nan")


def scaling_summary(long: pd.DataFrame, reference: str = "stream") -> pd.DataFrame:
    """Per task set: N, ordered pairs, seconds of exact and sampled specificity; how the sampled estimate
    agrees with the exact value across skills (Spearman ρ, mean and largest |difference|); median
    specificity, abstractness and perplexity (N · abstractness: over how many tasks a skill's relevance
    is spread); and Spearman ρ of each score with its value against the `reference` set (by skill)."""
    ref = long[long.task_set == reference].set_index(["condition", "skill_id"])
    rows = []
    for name, g in long.groupby("task_set", sort=False):
        g = g.set_index(["condition", "skill_id"])
        r = ref.reindex(g.index)
        diff = (g.specificity_sampled - g.specificity).abs()
        n = int(g.n_tasks.iloc[0])
        rows.append({"task_set": name, "n_tasks": n, "pairs": n * (n - 1), "exact_s": g.exact_s.iloc[0],
                     "sampled_s": g.sampled_s.iloc[0], "rho_sampled_exact": _rho(g.specificity_sampled,
                                                                                 g.specificity),
                     "mean_abs_diff": diff.mean(), "max_abs_diff": diff.max(),
                     "median_specificity": g.specificity.median(), "median_abstractness": g.abstractness.median(),
                     "median_perplexity": (g.abstractness * n).median(), "median_utility": g.utility.median(),
                     **{f"rho_{s}_vs_{reference}": _rho(g[s], r[s]) for s in ("specificity", "abstractness",
                                                                               "utility")}})
    return pd.DataFrame(rows).set_index("task_set")


def rank_stability(long: pd.DataFrame, reference: str = "stream", target: str = "catalogue",
                   score: str = "utility", seed: int = 0) -> dict:
    """Spearman's ρ between skills' `score` against two task sets, with its bootstrap interval, MDE and
    permutation p (`spearman_permutation`): does the ranking of skills survive a change of task set?"""
    a = long[long.task_set == reference].set_index(["condition", "skill_id"])[score]
    b = long[long.task_set == target].set_index(["condition", "skill_id"])[score].reindex(a.index)
    return spearman_permutation(a.to_numpy(), b.to_numpy(), seed=seed)


def split_at_median(library, scores: pd.DataFrame):
    """(high, low): the library's skills ranked by utility (ties by id) and cut in two halves.

    With an odd number of skills the median skill goes to the high half, so neither half is empty
    for a library of two or more skills.
    """
    ranked = scores.sort_values(["utility", "skill_id"], ascending=[False, True])["skill_id"].tolist()
    high = set(ranked[: len(ranked) - len(ranked) // 2])
    return library.filtered(lambda s: s.id in high), library.filtered(lambda s: s.id not in high)


def retrieved_scores(episodes, scores: pd.DataFrame, identity: dict[str, str] | None = None) -> pd.DataFrame:
    """Per episode: success and the mean specificity, abstractness and utility of the distinct skills it
    retrieved (skills that hygiene deleted later have no score and are left out). Episodes that
    retrieved no scorable skill are left out. `identity` maps recorded skill ids to the ids in
    `scores` (`hygiene.identities`, for records in which a code overwrite got a new id)."""
    by_id = scores.set_index("skill_id")
    identity = identity or {}
    rows = []
    for e in episodes:
        ids = [i for i in dict.fromkeys(identity.get(r, r) for r in e.retrieved) if i in by_id.index]
        if not ids:
            continue
        m = by_id.loc[ids, ["specificity", "abstractness", "utility"]].mean()
        rows.append({"task_id": e.task_id, "task_type": e.task_type, "success": float(e.success), "score": e.score,
                     "n_skills": len(ids), **m.to_dict()})
    return pd.DataFrame(rows, columns=["task_id", "task_type", "success", "score", "n_skills", "specificity",
                                       "abstractness", "utility"])


def bucket_success(df: pd.DataFrame, column: str, n_buckets: int = 3, success: str = "success") -> pd.DataFrame:
    """Episodes cut into `n_buckets` quantile buckets of `column` (ties broken by row order); per bucket
    its edges, n, successes, the success rate and its 95% Wilson interval (valid at the small n of a
    bucket, where a bootstrap of a handful of 0/1 values is not). Repeated episodes must be removed
    first (`analysis.dedupe_episodes`): a bucket counts rows."""
    cols = ["score", "bucket", "low_edge", "high_edge", "n", "successes", "success", "ci_low", "ci_high"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    q = pd.qcut(df[column].rank(method="first"), q=min(n_buckets, len(df)), labels=False)
    rows = []
    for b, g in df.groupby(q):
        k, n = int(g[success].astype(float).sum()), len(g)
        lo, hi = wilson_interval(k, n)
        rows.append({"score": column, "bucket": int(b) + 1, "low_edge": g[column].min(), "high_edge": g[column].max(),
                     "n": n, "successes": k, "success": k / n, "ci_low": float(lo), "ci_high": float(hi)})
    return pd.DataFrame(rows, columns=cols)


def success_slope(df: pd.DataFrame, column: str, success: str = "success", within: str | None = None,
                  cluster: str = "task_id") -> dict:
    """Linear-probability slope of success on the standardised score (per SD), with a cluster-robust
    95% interval (`analysis.cluster_slope`, CR1, t with G − 1 df): episodes of one task share its
    difficulty, so the task (`cluster`), not the episode, is the independent unit.

    `within` names a column (e.g. task_type) whose levels get their own intercepts, so the slope compares
    episodes of the same kind only: a score that merely tells easy task types from hard ones gets no credit.
    NaN estimate (and a `note`) with fewer than 2 clusters or a score that does not vary.
    """
    base = {"score": column, "within": within or "", "n": len(df),
            "n_clusters": df[cluster].nunique() if len(df) else 0}
    nan = dict.fromkeys(("slope", "estimate", "slope_per_sd", "se", "ci_low", "ci_high", "p", "mde"), np.nan)
    if len(df) < 3 or df[column].nunique() < 2 or base["n_clusters"] < 2:
        return {**base, **nan, "note": "too few episodes, tasks or distinct scores for a slope"}
    if df[success].nunique() < 2:      # a constant outcome has slope 0 with standard error 0: no test
        return {**base, **nan, "note": f"every episode has {success} = {df[success].iloc[0]}: no slope to test"}
    r = cluster_slope(df, column, success, cluster, within=within, standardize=True)
    keep = ("slope", "estimate", "se", "ci_low", "ci_high", "p", "mde", "n", "n_clusters")
    return {**base, **{k: r[k] for k in keep}, "slope_per_sd": r["slope"], "note": ""}


# -- comparing skills (libraries of a handful of skills: tests that stay valid at small n) ---------------
def permutation_difference(a, b, stat: str = "median", n_resamples: int = 9_999, seed: int = 0) -> dict:
    """stat(b) − stat(a) of two independent samples (e.g. the utilities of two libraries' skills): the
    estimate, its 95% percentile-bootstrap interval and MDE (`analysis.bootstrap_difference`), and the p
    of a two-sided permutation test of the same statistic — exact when the two samples have at most
    `n_resamples` distinct relabellings, as libraries of a few skills do. (The bootstrap's own p is not
    used: with 3 or 4 skills a side its distribution of medians is a handful of points and its p can
    fall below 0.001 where no relabelling test could.)"""
    if stat not in ("median", "mean"):
        raise ValueError(f"stat must be 'median' or 'mean', got {stat!r}")
    fn = np.median if stat == "median" else np.mean
    out = bootstrap_difference(a, b, stat=fn, seed=seed)
    a, b = (np.asarray(x, dtype=float) for x in (a, b))
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    out.update(stat=stat, test="permutation")
    if len(a) and len(b):
        res = permutation_test((b, a), lambda x, y, axis: fn(x, axis=axis) - fn(y, axis=axis), vectorized=True,
                               permutation_type="independent", n_resamples=n_resamples, random_state=seed)
        out["p"] = float(res.pvalue)
    return out


def spearman_permutation(x, y, n_resamples: int = 9_999, seed: int = 0) -> dict:
    """Spearman's ρ with its percentile-bootstrap interval and MDE (`analysis.spearman_ci`) and the p of a
    two-sided permutation test (y shuffled against x; exact for small n), valid where the bootstrap's p is
    not (a few skills, many ties)."""
    out = {**spearman_ci(x, y, seed=seed), "test": "permutation"}
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    if len(x) >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0:
        res = permutation_test((y,), lambda v: spearmanr(x, v).statistic, permutation_type="pairings",
                               n_resamples=n_resamples, random_state=seed)
        out["p"] = float(res.pvalue)
    return out


def skill_explorer(scores: pd.DataFrame, sims: dict[str, np.ndarray], task_ids: list[str], uses: pd.DataFrame):
    """A widget: pick a skill; see its cosine to every task, its three scores, and every episode that
    retrieved it with the outcome. Pages are pre-rendered, so the static book keeps them.

    `scores`: one row per skill with columns condition, skill_id, description, specificity, abstractness,
    utility; `sims[condition]`: that condition's skills × tasks cosine matrix in the row order of `scores`;
    `uses`: rows with condition, skill_id, run, task_id, position, success.
    """

    def page(row, c) -> str:
        order = np.argsort(-c)
        bars = "".join(
            f"<tr><td><code>{escape(task_ids[j])}</code></td><td>{c[j]:+.3f}</td><td><div style='background:#4c72b0;"
            f"height:0.8em;width:{max(0.0, c[j]) * 200:.0f}px'></div></td></tr>" for j in order)
        used = uses[(uses["condition"] == row.condition) & (uses["skill_id"] == row.skill_id)]
        use_rows = "".join(f"<tr><td>{escape(u.run)}</td><td><code>{escape(u.task_id)}</code></td><td>{u.position}</td>"
                           f"<td>{'✓' if u.success else '✗'}</td></tr>" for u in used.itertuples()) or \
            "<tr><td colspan=4><i>never retrieved</i></td></tr>"
        return (f"<p><b>{escape(row.skill_id)}</b> ({escape(row.condition)}): {escape(row.description)}</p>"
                f"<p>specificity {row.specificity:.3f} × abstractness {row.abstractness:.3f} = "
                f"<b>utility {row.utility:.3f}</b></p>"
                f"<table><tr><th>task</th><th>cosine</th><th></th></tr>{bars}</table>"
                f"<p>retrieved by:</p><table><tr><th>run</th><th>task</th><th>position</th><th>success</th></tr>"
                f"{use_rows}</table>")

    rows = list(scores.itertuples())
    seen: dict[str, int] = {}
    pages = []
    for row in rows:
        i = seen.get(row.condition, 0)
        seen[row.condition] = i + 1
        pages.append(widgets.HTML(page(row, sims[row.condition][i])))
    stack = widgets.Stack(pages, selected_index=0 if pages else None)
    pick = widgets.Dropdown(options=[(f"{r.condition} {r.skill_id} (u={r.utility:.2f}): {r.description[:70]}", i)
                                     for i, r in enumerate(rows)],
                            description="skill", layout=widgets.Layout(width="95%"))
    box = widgets.VBox([pick, stack])
    box.link = widgets.jslink((pick, "index"), (stack, "selected_index"))
    return box


__all__ = ["TAU", "specificity", "specificity_sampled", "abstractness", "utility", "similarity_matrices",
           "score_library", "pair_counts", "specificity_vectors", "embed_many", "score_vectors", "task_sets",
           "scaling", "scaling_summary", "rank_stability", "split_at_median", "retrieved_scores", "bucket_success",
           "success_slope", "permutation_difference", "spearman_permutation", "skill_explorer"]
