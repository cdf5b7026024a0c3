"""Running conditions over task streams and reading back what they recorded."""
from .conditions import Condition, Result, collect, frame, load_condition, run_condition, run_conditions
from .distributed import EXECUTORS, ExecutorError, RayExecutor, parse_executor
from .store import RecordError, RunDir, RunLocked
from .streams import (
                      IncompleteRun,
                      Interrupted,
                      episodes_frame,
                      final_memory,
                      independent_streams,
                      interruptible,
                      live_minutes,
                      load_episodes,
                      run_sessions,
                      run_streams,
                      sittings,
                      stage_costs,
                      validate_streams,
)

__all__ = ["EXECUTORS", "ExecutorError", "RayExecutor", "parse_executor",
           "Condition", "Result", "collect", "frame", "load_condition", "run_condition", "run_conditions",
           "RecordError", "RunDir", "RunLocked", "IncompleteRun", "Interrupted", "episodes_frame", "final_memory",
           "independent_streams", "interruptible", "live_minutes", "load_episodes", "run_sessions", "run_streams",
           "sittings", "stage_costs", "validate_streams"]
