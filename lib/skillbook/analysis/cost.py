"""Costs of model calls.

The first paper's *dependency* cost charges each call for the attention work its output tokens do
over everything before them: a call with p prompt tokens and o output tokens costs
Σ_{t=1..o} (p + t) ≈ (2p + o)·o / 2 token², reported in units of 1e9 token².
"""
from __future__ import annotations

import numpy as np


def dependency(prompt_tokens, completion_tokens) -> float:
    """Σ_calls (2·p + o)·o / 2, in 1e9 token² (arrays or scalars of per-call token counts)."""
    p = np.asarray(prompt_tokens, dtype=float)
    o = np.asarray(completion_tokens, dtype=float)
    if p.shape != o.shape:
        raise ValueError(f"prompt_tokens and completion_tokens differ in shape: {p.shape} vs {o.shape}")
    if (p < 0).any() or (o < 0).any():
        raise ValueError("token counts must be non-negative")
    return float(((2 * p + o) * o / 2).sum() / 1e9)
