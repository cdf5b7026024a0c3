"""Language models: backend strings, the embedded llama.cpp server, the response cache."""
from . import kinds  # noqa: F401  (registers the built-in backend kinds)
from .backends import (
    BACKEND_KINDS,
    DEFAULT_BACKEND,
    EMBEDDED_MODELS,
    BackendError,
    BackendKind,
    BackendSpec,
    backend_fingerprint,
    parse_backend,
    register_backend,
)
from .cache import CacheCorruptError, CacheError, CacheFormatError, ReplayMiss, ResponseCache, cache_key
from .client import LLM, Completion, LLMError, get_llm
from .servers import ServerError, stop_all

__all__ = ["DEFAULT_BACKEND", "EMBEDDED_MODELS", "BackendError", "BackendSpec", "parse_backend",
           "backend_fingerprint", "BACKEND_KINDS", "BackendKind", "register_backend",
           "ResponseCache", "cache_key", "CacheError", "ReplayMiss", "CacheCorruptError", "CacheFormatError",
           "LLM", "Completion", "LLMError", "get_llm", "ServerError", "stop_all"]
