"""SkillRL (the third paper) without weight updates: a teacher distils the base agent's successes and
failures into a hierarchical SkillBank (general skills, task-specific skills, common mistakes), which
evolves recursively from validation failures.

    bank.py       the SkillBank as records of the one skill library, the public JSON layout, an HTML view
    memory.py     SkillBankMemory (general always; the task's category's skills by similarity or in order;
                  its category's and the general mistakes); RawTrajectoryMemory (the raw-trajectory ablation)
    pipeline.py   collect → distil → validate/evolve → test conditions, resumed from records and bank files
                  and checked against them; the teacher; citations; what each prompt carried
    prompts/      the teacher's prompts
"""
from .bank import bank_from_json, bank_html, bank_to_json, kind, render_bank
from .memory import RawTrajectoryMemory, SkillBankMemory
from .pipeline import (
                       CONDITIONS,
                       SkillRLRun,
                       SkillRLSettings,
                       StaleRecords,
                       Teacher,
                       citations,
                       distil,
                       evolution_round,
                       prompt_footprint,
                       run_skillrl,
)

__all__ = ["bank_from_json", "bank_html", "bank_to_json", "kind", "render_bank", "RawTrajectoryMemory",
           "SkillBankMemory", "CONDITIONS", "SkillRLRun", "SkillRLSettings", "StaleRecords", "Teacher", "citations",
           "distil", "evolution_round", "prompt_footprint", "run_skillrl"]
