"""SKILLC (the fourth paper): contrastive credit assignment over the steps of a success, and the
credited steps made into macro skills.

    credit.py     candidates (windows, thought+action steps, data-dependency clusters), judge credit,
                  replay credit in the deterministic environment; prompts/judge.txt
    macros.py     Macro: a parameterised action template compiled to a code skill; prompts/macro.txt
    memory.py     CreditMemory: macros retrieved by description, usage statistics, retirement
    pipeline.py   collect → credit → macros → test conditions
"""
from .credit import Candidate, candidates, judge_credit, replay_credit, replay_score
from .macros import Macro, parse_macro
from .memory import CreditMemory
from .pipeline import SkillCRun, SkillCSettings, build_library, credit_table, run_skillc

__all__ = ["Candidate", "candidates", "judge_credit", "replay_credit", "replay_score", "Macro", "parse_macro",
           "CreditMemory", "SkillCRun", "SkillCSettings", "build_library", "credit_table", "run_skillc"]
