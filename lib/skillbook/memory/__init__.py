"""Memory policies: what to write after a (sub)task, what to retrieve before one."""
from .base import MEMORY_POLICIES, MemoryPolicy, NoMemory, make_memory, register
from .induced import InducedMemory
from .assay import AssayMemory, PerTaskMasking
from .credit import CreditMemory
from .skillbank import RawTrajectoryMemory, SkillBankMemory

__all__ = ["MEMORY_POLICIES", "MemoryPolicy", "NoMemory", "InducedMemory", "AssayMemory", "PerTaskMasking", "CreditMemory", "SkillBankMemory",
           "RawTrajectoryMemory", "make_memory",
           "register"]
