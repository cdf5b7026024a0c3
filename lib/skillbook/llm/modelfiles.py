"""The packaged GGUF files: joined from their PyPI part packages once, verified, kept per user."""
from __future__ import annotations

import hashlib
import importlib
import os
import re
import tempfile
from pathlib import Path

from ..io import cache_dir
from .backends import EMBEDDED_MODELS, BackendError, EmbeddedModel


def part_paths(model: EmbeddedModel) -> list[Path]:
    paths = []
    for name in model.part_modules():
        try:
            mod = importlib.import_module(name)
        except ImportError as e:
            raise RuntimeError(
                f"model part package {name!r} of {model.name} is not installed; "
                "run `make install` (it is pinned in pyproject.toml)") from e
        paths.append(Path(mod.get_part_path()))
    return paths


def merged_gguf_path(name: str, adapter: str) -> Path:
    """Where the GGUF of packaged model `name` with merged adapters `adapter` ("lora-<hex>") lives: in the
    per-user cache beside the base model (it is rebuilt from the adapters, which the run records keep)."""
    model = EMBEDDED_MODELS[name]
    return cache_dir() / "models" / f"{model.name}-{model.sha256[:12]}+{adapter}.gguf"


def merged_hf_path(model: str, adapter: str) -> Path:
    """Where a Hugging Face model (hub id or folder) with merged adapters `adapter` ("lora-<hex>") lives: a
    folder in the per-user cache named by the model id and the adapters' digest, never by a path of the run."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model.strip("/"))[-80:]
    return cache_dir() / "policies" / f"{slug}+{adapter}"


def gguf_path(name: str, adapter: str = "") -> Path:
    """Path of the verified GGUF for an embedded model, joining the parts on first use; with `adapter`,
    the merged policy exported by SkillRL's training (an error says how to export it when missing)."""
    if adapter:
        path = merged_gguf_path(name, adapter)
        if not path.exists():
            raise BackendError(
                f"no merged model embedded:{name}+{adapter} in {path.parent}: export it from its adapters with "
                "skillbook.papers.skillrl.training.export_policy (chapter 07's training records hold them)")
        return path
    model = EMBEDDED_MODELS[name]
    target = cache_dir() / "models" / f"{model.name}-{model.sha256[:12]}.gguf"
    marker = target.with_suffix(".verified")
    if target.exists() and marker.exists() and marker.read_text().strip() == model.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Join into a temporary file in the same directory, hash while writing, then rename atomically,
    # so a killed join never leaves a truncated model behind.
    h = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for part in part_paths(model):
                with open(part, "rb") as f:
                    while block := f.read(1 << 22):
                        h.update(block)
                        out.write(block)
        digest = h.hexdigest()
        if digest != model.sha256:
            raise RuntimeError(
                f"joined GGUF of {model.name} has SHA-256 {digest}, expected {model.sha256}: "
                "the part packages are not the pinned versions; reinstall with `make install`")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    marker.write_text(model.sha256)
    return target
