"""SkillRL (the third paper) without weight updates: a teacher distils the base agent's successes and
failures into a hierarchical SkillBank (general skills, task-specific skills, common mistakes), which
evolves recursively from validation failures.

    bank.py       the SkillBank as records of the one skill library, and the public JSON layout
    memory.py     SkillBankMemory (general always, task-specific by similarity or category, mistakes);
                  RawTrajectoryMemory (the raw-trajectory ablation)
    pipeline.py   collect → distil → validate/evolve → test conditions; the teacher; citations; footprint
    prompts/      the teacher's prompts
"""
from .bank import bank_from_json, bank_to_json, kind, render_bank
from .memory import RawTrajectoryMemory, SkillBankMemory
from .pipeline import CONDITIONS, SkillRLRun, Teacher, citations, distil, evolution_round, run_skillrl

__all__ = ["bank_from_json", "bank_to_json", "kind", "render_bank", "RawTrajectoryMemory", "SkillBankMemory",
           "CONDITIONS", "SkillRLRun", "Teacher", "citations", "distil", "evolution_round", "run_skillrl"]
