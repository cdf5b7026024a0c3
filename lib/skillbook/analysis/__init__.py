"""Analyses computed from recorded trajectories and calls (never by re-running agents)."""
from .cost import dependency

__all__ = ["dependency"]
