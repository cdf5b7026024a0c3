"""Memory policies: what to write after a (sub)task, what to retrieve before one."""
from .base import MEMORY_POLICIES, MemoryPolicy, NoMemory, make_memory, register
from .induced import InducedMemory

__all__ = ["MEMORY_POLICIES", "MemoryPolicy", "NoMemory", "InducedMemory", "make_memory", "register"]
