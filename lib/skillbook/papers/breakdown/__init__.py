"""Break it down, pass it on (the first paper): task- vs subtask-level skill induction, text vs code
skills, retrieval by description, skill utility (specificity × abstractness) and transfer density.

    memory.py     InducedMemory: induce a skill after each (sub)task, retrieve by description; label
                  what an episode wrote with the task's final outcome when it ends (E.3)
    induction.py  the induction prompt (L1–L3) and reply parsing; prompts/ its templates
    hygiene.py    appendix B: merging near-duplicates, code-skill overwrites (new versions of one skill
                  identity), load checks
    pipeline.py   the transfer stream (six conditions and two placebos) and its follow-ups (E.2, E.3,
                  E.4, prompt ablation); every run that retrieved skills, each episode once
    retrieval.py  what each query retrieved, threshold/k sweeps, the query explorer (chapter 03)
    utility.py    §6.1 specificity, abstractness, utility; success by retrieved utility (chapter 05);
                  exact and sampled specificity against thousands of tasks (task sets of growing N)
    catalogue.py  the whole TextWorldExpress task catalogue as text (instruction + first observation),
                  cached per user
    density.py    transfer density and reuse per skill identity (E.5)
    study.py      calibration of the study's benchmarks (command line)
"""
from .memory import InducedMemory
from .pipeline import (
                       CONDITIONS,
                       DEFAULT_CONDITIONS,
                       E3_HALVES,
                       RetrievingRun,
                       Transfer,
                       TransferSettings,
                       condition,
                       frozen,
                       imported_library,
                       interleave,
                       library_of,
                       load_transfer,
                       parse_conditions,
                       run_transfer,
                       transfer_library,
)

__all__ = ["InducedMemory", "CONDITIONS", "DEFAULT_CONDITIONS", "E3_HALVES", "RetrievingRun", "Transfer",
           "TransferSettings", "condition", "frozen", "imported_library", "interleave", "library_of", "load_transfer",
           "parse_conditions", "run_transfer", "transfer_library"]
