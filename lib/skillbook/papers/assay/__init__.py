"""Assay (the second paper): each skill's causal effect by random masking, library restructuring
behind a dev gate, per-task masking.

    memory.py       AssayMemory (a frozen library seen through a mask) and PerTaskMasking
    attribution.py  the attribution matrix C from masks and outcomes, Ĉ, H, the variance bound
    templates.py    the protected templates (masked in attribution; never split, retired, merged or
                    suppressed per task)
    pipeline.py     upstream library → K masking trials → split/retire/merge behind the dev gate → test
    simulate.py     planted heterogeneous effects through attribution and the restructuring decisions
    prompts/        the split prompt
"""
from .memory import AssayMemory, PerTaskMasking, is_template
from .pipeline import AssaySettings, half_width_by_k, run_assay, sign_flips

__all__ = ["AssayMemory", "PerTaskMasking", "is_template", "AssaySettings", "half_width_by_k", "run_assay",
           "sign_flips"]
