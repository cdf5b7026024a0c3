"""The first paper's two agent architectures as one loop: task level and subtask level."""
from .agent import LEVELS, Agent, AgentConfig
from .parsing import match_action, parse_reply

__all__ = ["LEVELS", "Agent", "AgentConfig", "match_action", "parse_reply"]
