"""skillbook: skill libraries for LLM agents, as an executable book."""
__version__ = "0.1.0"
