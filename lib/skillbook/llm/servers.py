"""Model servers started by this process: the embedded llama.cpp child and the vLLM launcher.

One server per backend per process (chapters call `get_llm` in many cells; the model loads once).
"""
from __future__ import annotations

import atexit
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from ..io import cache_dir
from .backends import BACKEND_KINDS, BackendError, BackendSpec
from .modelfiles import gguf_path, merged_hf_path


class ServerError(RuntimeError):
    """The model server could not be started or died and could not be restarted."""


def _healthy(base_url: str, timeout: float = 2.0) -> bool:
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(root + "/health", timeout=timeout) as r:
            return r.status == 200
    except Exception:
        return False


class _ChildServer:
    """A server in a child process; `base_url` is its OpenAI-compatible endpoint."""

    name = "server"

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.base_url = ""
        self.restarts = 0
        self._lock = threading.Lock()
        atexit.register(self.stop)

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _log_path(self) -> Path:
        return cache_dir() / "logs" / f"{self.name}.log"

    def _start(self) -> None:
        log = self._log_path()
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(self._command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.base_url = self._wait_ready()

    def _wait_ready(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None   # _start just set it, stdout a PIPE
        line = self.proc.stdout.readline().decode()
        if not line:
            raise ServerError(f"{self.name} exited during start (exit code {self.proc.wait()}); "
                              f"see its log: {self._log_path()}")
        return json.loads(line)["address"].rstrip("/") + "/v1"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and _healthy(self.base_url)

    def ensure(self) -> str:
        """Start the server if it is not running; return its base URL."""
        with self._lock:
            if self.proc is None:
                self._start()
            return self.base_url

    def restart(self) -> str:
        """Restart a dead server; a no-op when another thread already brought it back."""
        with self._lock:
            if self.proc is not None and self.proc.poll() is None and _healthy(self.base_url):
                return self.base_url
            self._stop_locked()
            self.restarts += 1
            self._start()
            return self.base_url

    def stop(self) -> None:
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        if self.proc is None:
            return
        try:
            assert self.proc.stdin is not None   # a PIPE (_start)
            self.proc.stdin.close()  # the child exits when its stdin closes
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


class EmbeddedServer(_ChildServer):
    """A packaged GGUF served by llama.cpp (xllamacpp) on 127.0.0.1 with parallel slots and prompt caching."""

    def __init__(self, model: str, parallel: int = 4, ctx_per_slot: int = 8192, threads: int | None = None,
                 adapter: str = "", batch: int = 0, ubatch: int = 0, speculative: str = "none",
                 draft: str = "qwen2.5-coder-0.5b", draft_max: int = 8) -> None:
        """`speculative`: "none", "ngram" (drafts looked up in the prompt) or "draft" (the packaged `draft`
        model proposes); `batch`/`ubatch` llama.cpp's batch sizes (0: its defaults). Serving options only:
        they decide how fast an answer comes, and `make bench` checks that they leave answers unchanged."""
        # deferred: skillbook.llm imports this module, and `python -m skillbook.llm.server` must not find
        # its module imported already (runpy warns, and the module would run twice)
        from .server import SPECULATIVE
        if speculative not in SPECULATIVE:
            raise BackendError(f"speculative must be one of {', '.join(SPECULATIVE)}, got {speculative!r}")
        super().__init__()
        self.model = model
        self.name = f"embedded-{model}" + (f"+{adapter}" if adapter else "")
        self.parallel = parallel
        self.ctx_per_slot = ctx_per_slot
        self.threads = threads or os.cpu_count() or 2
        self.gguf = gguf_path(model, adapter)
        self.batch, self.ubatch, self.speculative, self.draft_max = batch, ubatch, speculative, draft_max
        self.draft_gguf = gguf_path(draft, "") if speculative == "draft" else None

    def _command(self) -> list[str]:
        cmd = [sys.executable, "-m", "skillbook.llm.server", "--gguf", str(self.gguf), "--alias", self.model,
               "--parallel", str(self.parallel), "--ctx-per-slot", str(self.ctx_per_slot),
               "--threads", str(self.threads)]
        if self.batch:
            cmd += ["--batch", str(self.batch)]
        if self.ubatch:
            cmd += ["--ubatch", str(self.ubatch)]
        if self.speculative != "none":
            cmd += ["--speculative", self.speculative, "--draft-max", str(self.draft_max)]
            if self.draft_gguf:
                cmd += ["--draft-gguf", str(self.draft_gguf)]
        return cmd


class VLLMServer(_ChildServer):
    """`vllm serve <model>` on a free local port (GPU machines with the `gpu` extra)."""

    def __init__(self, model: str, start_timeout: float = 1800.0, adapter: str = "") -> None:
        backend = f"vllm:{model}" + (f"+{adapter}" if adapter else "")
        self.weights = model
        if adapter:   # a trained policy: the merged weights SkillRL's training exported
            path = merged_hf_path(model, adapter)
            if not (path / "config.json").exists():
                raise BackendError(
                    f"no merged model {backend} in {path.parent}: export it from its adapters with "
                    "skillbook.papers.skillrl.training.export_policy (chapter 07's training records hold them)")
            self.weights = str(path)
        if importlib.util.find_spec("vllm") is None:
            raise BackendError(
                f"backend '{backend}' needs vLLM, which is not installed: on a CUDA machine run "
                "`.venv/bin/pip install -e '.[gpu]'`, or serve the model yourself and use "
                "'openai:<base_url>#<model>'")
        super().__init__()
        self.model = model   # requests name the base model; the weights may be the merged ones
        self.name = "vllm-" + model.replace("/", "_") + (f"+{adapter}" if adapter else "")
        self.start_timeout = start_timeout

    def _command(self) -> list[str]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.weights,
                "--host", "127.0.0.1", "--port", str(self.port), "--served-model-name", self.model]

    def _wait_ready(self) -> str:
        url = f"http://127.0.0.1:{self.port}/v1"
        deadline = time.monotonic() + self.start_timeout
        assert self.proc is not None   # _start just set it
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"vllm exited during start; see its log: {self._log_path()}")
            if _healthy(url):
                return url
            time.sleep(2)
        raise ServerError(f"vllm did not become healthy in {self.start_timeout:.0f} s; log: {self._log_path()}")


_SERVERS: dict[str, _ChildServer] = {}
_REGISTRY_LOCK = threading.Lock()


def server_for(spec: BackendSpec, **options: Any) -> _ChildServer:
    """The process-wide server of a backend (embedded or vllm), created on first use."""
    key = f"{spec}|{sorted(options.items())}"   # a one-slot (deterministic) server is not a four-slot one
    make = BACKEND_KINDS[spec.kind].server
    if make is None:
        raise BackendError(f"backend {spec} is served elsewhere, not started by skillbook")
    with _REGISTRY_LOCK:
        if key not in _SERVERS:
            _SERVERS[key] = make(spec, **options)
        return _SERVERS[key]


def stop_all() -> None:
    for server in list(_SERVERS.values()):
        server.stop()
