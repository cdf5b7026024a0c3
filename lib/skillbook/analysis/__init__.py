"""Analyses computed from recorded trajectories and calls (never by re-running agents)."""
from .cost import dependency
from .stats import bootstrap_ci, budget_curve, difficulty_strata, paired_difference, summarize

__all__ = ["dependency", "bootstrap_ci", "budget_curve", "difficulty_strata", "paired_difference", "summarize"]
