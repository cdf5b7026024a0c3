"""The backend kinds the book knows, registered in `backends.BACKEND_KINDS` (docs/HOWTO.md: how to add one).

    embedded   a packaged GGUF, served by llama.cpp in a child process of this one
    openai     any OpenAI-compatible server, or a fleet of them, served elsewhere
    vllm       `vllm serve` started by this process (the `gpu` extra)
"""
from __future__ import annotations

from typing import Any

from .backends import (
    EMBEDDED_MODELS,
    BackendKind,
    BackendSpec,
    backend_fingerprint,
    parse_embedded,
    parse_openai,
    parse_vllm,
    register_backend,
)
from .servers import EmbeddedServer, VLLMServer


def _gguf_identity(spec: BackendSpec) -> str:
    # a merged policy is another model: its adapters' digest is part of the identity (and so of every cache
    # key and run fingerprint), never mixed with the base model's answers
    return "gguf-sha256:" + EMBEDDED_MODELS[spec.model].sha256 + (f"+{spec.adapter}" if spec.adapter else "")


def _served_identity(spec: BackendSpec) -> str:
    # a served model is named by its id, never by where it is served (`backend_fingerprint`): `openai:<model>`
    # whichever server of a fleet answers, `vllm:<id>[+lora-…]`
    return backend_fingerprint(str(spec))


def _embedded_server(spec: BackendSpec, **options: Any) -> EmbeddedServer:
    return EmbeddedServer(spec.model, adapter=spec.adapter, **options)


def _vllm_server(spec: BackendSpec, **options: Any) -> VLLMServer:
    return VLLMServer(spec.model, adapter=spec.adapter, **options)


register_backend(BackendKind(
    "embedded", parse_embedded,
    (*(f"'embedded:{m}'" for m in EMBEDDED_MODELS), "'embedded:<model>+lora-<16 hex digits>' (a trained policy)"),
    _gguf_identity, server=_embedded_server, slots=True))
register_backend(BackendKind(
    "openai", parse_openai,
    ("'openai:<base_url>#<model>' (e.g. openai:http://localhost:8000/v1#Qwen/Qwen2.5-7B-Instruct)",
     "'openai:<url>,<url>,...#<model>' (a fleet of servers of that model)"),
    _served_identity, fleet=True))
register_backend(BackendKind(
    "vllm", parse_vllm,
    ("'vllm:<hf-model-id>'", "'vllm:<hf-model-id>+lora-<16 hex digits>' (a trained policy)"),
    _served_identity, server=_vllm_server))
