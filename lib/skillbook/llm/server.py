"""The embedded llama.cpp server, run in a child process.

A crash inside llama.cpp (a segfault, an out-of-memory kill) then ends only this child: the parent
notices, restarts it once and retries the call, and the episode in flight is the most that is lost.
The child prints one JSON line with its address, then serves until its stdin closes, so it never
outlives the process that started it.

    python -m skillbook.llm.server --gguf PATH --alias NAME [--parallel 4] [--ctx-per-slot 8192]
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--alias", required=True)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--ctx-per-slot", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args(argv)

    import xllamacpp

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
    server = xllamacpp.Server(p)
    print(json.dumps({"address": server.listening_address, "pid": os.getpid()}), flush=True)
    sys.stdin.read()  # returns at EOF: the parent has exited or closed the pipe
    os._exit(0)


if __name__ == "__main__":
    main()
