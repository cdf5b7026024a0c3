"""SKILLC (the fourth paper): contrastive credit assignment over the steps of a success, and the
credited steps made into macro skills.

    credit.py     candidates (windows, thought+action steps, data-dependency clusters); ablation by a neutral
                  action or by deletion; replay credit in the deterministic environment, open loop (the rest
                  of the actions as they were) or closed loop (the agent re-plans after the window); saturated
                  replays marked; judge credit (the judge sees both runs, not their outcomes); prompts/judge.txt
    gold.py       the judge against replay on the benchmarks' gold trajectories (TRAIN split, no agent run)
    macros.py     Macro: a parameterised action template compiled to a code skill; prompts/macro.txt
    memory.py     CreditMemory: macros retrieved by description, usage statistics, retirement
    pipeline.py   collect → credit → macros → test conditions
"""
from .credit import (
                     ABLATIONS,
                     Candidate,
                     candidates,
                     closed_loop_credit,
                     judge_credit,
                     judge_prompt,
                     replay_ablation,
                     replay_credit,
                     replay_score,
)
from .gold import GoldSettings, GoldStudy, agreement, calibration, gold_study, gold_tasks
from .macros import Macro, parse_macro
from .memory import CreditMemory
from .pipeline import SkillCRun, SkillCSettings, build_library, credit_table, run_skillc

__all__ = ["ABLATIONS", "Candidate", "candidates", "closed_loop_credit", "judge_credit", "judge_prompt",
           "replay_ablation", "replay_credit", "replay_score", "GoldSettings", "GoldStudy", "agreement", "calibration",
           "gold_study", "gold_tasks", "Macro", "parse_macro", "CreditMemory", "SkillCRun", "SkillCSettings",
           "build_library", "credit_table", "run_skillc"]
