"""Analyses computed from recorded trajectories and calls (never by re-running agents)."""
from ..records import dependency
from .claims import KINDS, Claim, claims_table, render_claims, units_text
from .stats import (
                    bootstrap_ci,
                    bootstrap_difference,
                    budget_curve,
                    cluster_slope,
                    dedupe_episodes,
                    difficulty_strata,
                    exact_mcnemar_p,
                    halfwidth_paired_binary,
                    holm,
                    mde_from_ci,
                    mde_paired_binary,
                    mde_paired_binary_connor,
                    mde_paired_t,
                    mean_t_test,
                    n_for_halfwidth,
                    newcombe_paired_ci,
                    paired_difference,
                    power_paired_binary,
                    sign_flip_test,
                    sign_test_p,
                    spearman_ci,
                    summarize,
                    verdict,
                    wilson_interval,
)

__all__ = ["dependency", "bootstrap_ci", "budget_curve", "difficulty_strata", "paired_difference", "summarize",
           "bootstrap_difference", "spearman_ci", "verdict", "Claim", "claims_table", "render_claims",
           "cluster_slope", "dedupe_episodes", "exact_mcnemar_p", "halfwidth_paired_binary", "holm", "mde_from_ci",
           "mde_paired_binary", "mde_paired_binary_connor", "mde_paired_t", "mean_t_test", "n_for_halfwidth",
           "newcombe_paired_ci", "power_paired_binary", "sign_flip_test", "sign_test_p", "wilson_interval", "KINDS",
           "units_text"]
