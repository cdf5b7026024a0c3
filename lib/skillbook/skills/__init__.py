"""Skills: the one record type every paper's memory stores."""
from .record import Skill, render_skills

__all__ = ["Skill", "render_skills"]
