"""The embedded llama.cpp server, run in a child process.

A crash inside llama.cpp (a segfault, an out-of-memory kill) then ends only this child: the parent
notices, restarts it once and retries the call, and the episode in flight is the most that is lost.
The child prints one JSON line with its address, then serves until its stdin closes, so it never
outlives the process that started it.

    python -m skillbook.llm.server --gguf PATH --alias NAME [--parallel 4] [--ctx-per-slot 8192]
                                   [--threads N] [--batch N] [--ubatch N] [--speculative none|ngram|draft]
                                   [--draft-gguf PATH] [--draft-max N]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from types import ModuleType
from typing import Any


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--alias", required=True)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--ctx-per-slot", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--batch", type=int, default=0, help="logical batch size (0: llama.cpp's default)")
    ap.add_argument("--ubatch", type=int, default=0, help="physical batch size (0: llama.cpp's default)")
    ap.add_argument("--speculative", choices=SPECULATIVE, default="none",
                    help="ngram: draft tokens looked up in the prompt (no second model); draft: a draft model")
    ap.add_argument("--draft-gguf", default="", help="the draft model's GGUF (with --speculative draft)")
    ap.add_argument("--draft-max", type=int, default=8, help="tokens drafted per step")
    args = ap.parse_args(argv)

    import xllamacpp  # deferred: llama.cpp's bindings; only this server process needs them

    p = xllamacpp.CommonParams()
    p.model.path = args.gguf
    p.model_alias = {args.alias}
    p.hostnames = ["127.0.0.1"]
    p.port = 0  # the OS picks a free port
    p.n_parallel = args.parallel
    p.n_ctx = args.parallel * args.ctx_per_slot  # llama.cpp splits n_ctx evenly over the slots
    p.cont_batching = True
    p.cache_prompt = True
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads
    # No busy-waiting between batches: same speed alone, and a second process on the same cores
    # (an environment's JVM, another server) is not starved.
    p.cpuparams.poll = 0
    p.cpuparams_batch.poll = 0
    if args.batch:
        p.n_batch = args.batch
    if args.ubatch:
        p.n_ubatch = args.ubatch
    _speculative(p, args, xllamacpp)
    server = xllamacpp.Server(p)
    print(json.dumps({"address": server.listening_address, "pid": os.getpid()}), flush=True)
    sys.stdin.read()  # returns at EOF: the parent has exited or closed the pipe
    os._exit(0)


SPECULATIVE = ("none", "ngram", "draft")


def _speculative(p: Any, args: argparse.Namespace, xllamacpp: ModuleType) -> None:
    """Speculative decoding: tokens proposed cheaply (looked up in the prompt, or by a small draft model)
    and verified by the model in one batch. With greedy sampling the model keeps only tokens it would
    have chosen itself; whether the records stay byte-identical is measured, not assumed (`make bench`).
    `p` is xllamacpp's CommonParams (the package has no type information)."""
    if args.speculative == "none":
        return
    kinds = xllamacpp.common_speculative_type
    spec = p.speculative
    spec.draft.n_max = args.draft_max
    if args.speculative == "ngram":
        spec.types = [kinds.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
        return
    if not args.draft_gguf:
        raise SystemExit("--speculative draft needs --draft-gguf PATH")
    spec.types = [kinds.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
    spec.draft.mparams.path = args.draft_gguf
    spec.draft.cpuparams.n_threads = args.threads
    spec.draft.cpuparams_batch.n_threads = args.threads
    spec.draft.cpuparams.poll = 0
    spec.draft.cpuparams_batch.poll = 0


if __name__ == "__main__":
    main()
