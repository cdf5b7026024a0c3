"""Break it down, pass it on (the first paper): task- vs subtask-level skill induction, text vs code
skills, retrieval by description, skill utility (specificity × abstractness) and transfer density.

    memory.py     InducedMemory: induce a skill after each (sub)task, retrieve by description
    induction.py  the induction prompt (L1–L3) and reply parsing; prompts/ its templates
    hygiene.py    appendix B: merging near-duplicates, code-skill overwrites, load checks
    pipeline.py   the six-condition transfer stream and its follow-ups (E.2, E.3, E.4, prompt ablation)
    retrieval.py  what each query retrieved, threshold/k sweeps, the query explorer (chapter 03)
    utility.py    §6.1 specificity, abstractness, utility; success by retrieved utility (chapter 05)
    density.py    transfer density and reuse (E.5)
"""
from .memory import InducedMemory
from .pipeline import (CONDITIONS, Transfer, TransferSpec, condition, frozen, interleave, library_of, load_transfer,
                       parse_conditions, run_transfer, transfer_library)

__all__ = ["InducedMemory", "CONDITIONS", "Transfer", "TransferSpec", "condition", "frozen", "interleave",
           "library_of", "load_transfer", "parse_conditions", "run_transfer", "transfer_library"]
