"""The one agent loop, its two planners (task level, subtask level), and reply parsing."""
from .loop import LEVELS, Agent, AgentConfig
from .parsing import match_action, parse_json, parse_reply
from .planner import PLANNERS, SubtaskPlanner, TaskPlanner

__all__ = ["LEVELS", "Agent", "AgentConfig", "PLANNERS", "SubtaskPlanner", "TaskPlanner", "match_action",
           "parse_json", "parse_reply"]
