"""The four papers, one folder each, with the same inner names: `memory.py` (the paper's memory policy),
`pipeline.py` (its experiment), `prompts/` (its prompt templates), and what is particular to it.

    breakdown   Break it down, pass it on — task vs subtask induction, text vs code skills, utility
    assay       Assay — each skill's causal effect by random masking, restructuring, per-task masking
    skillrl     SkillRL — a hierarchical SkillBank distilled from successes and failures, evolved
    skillc      SKILLC — contrastive credit assignment over the steps of a success, macro skills
"""
