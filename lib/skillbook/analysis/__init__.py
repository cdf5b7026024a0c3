"""Analyses computed from recorded trajectories and calls (never by re-running agents)."""
from ..records import dependency
from .stats import (bootstrap_ci, bootstrap_difference, budget_curve, difficulty_strata, paired_difference,
                    spearman_ci, summarize, verdict)

__all__ = ["dependency", "bootstrap_ci", "budget_curve", "difficulty_strata", "paired_difference", "summarize",
           "bootstrap_difference", "spearman_ci", "verdict"]
