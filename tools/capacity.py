"""What a run costs per agent step, from recorded episodes, and what a number of episodes would cost on a
fleet: the numbers of "Capacity on paper" in cluster.md.

    .venv/bin/python tools/capacity.py runs/workshop/calibration [--episodes 3360] [--steps 50]
        [--output-tps 1000] [--prefill-tps 10000]

Every run directory under the given folders is read (its recorded episodes, `load_episodes`). Per
step: model calls, prompt tokens (what the server is sent), new prompt tokens (what it had to prefill:
llama.cpp reports the tokens its prompt cache did not hold) and output tokens. `--episodes` and
`--steps` (steps per episode; default: the recorded mean) scale them; GPU-hours assume the stated
aggregate throughputs of one GPU server — assumptions to replace by what your server measures.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from skillbook.run import load_episodes


def per_step(roots: list[Path]) -> dict:
    n = {"episodes": 0, "steps": 0, "calls": 0, "prompt": 0, "new": 0, "output": 0}
    for root in roots:
        for manifest in sorted(root.rglob("run.json")):
            for e in load_episodes(manifest.parent):
                n["episodes"] += 1
                n["steps"] += len(e.steps)
                for c in e.calls:
                    n["calls"] += 1
                    n["prompt"] += c.prompt_tokens
                    n["new"] += c.new_prompt_tokens or 0
                    n["output"] += c.completion_tokens
    if not n["steps"]:
        raise SystemExit(f"no recorded steps under {', '.join(map(str, roots))}")
    return n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--episodes", type=int, default=None)
    ap.add_argument("--steps", type=float, default=None, help="steps per episode (default: recorded mean)")
    ap.add_argument("--output-tps", type=float, default=1000.0, help="output tokens/s of one GPU server")
    ap.add_argument("--prefill-tps", type=float, default=10000.0, help="prefilled prompt tokens/s of one GPU")
    args = ap.parse_args(argv)
    n = per_step(args.roots)
    s = n["steps"]
    print(f"{n['episodes']} episodes, {s} steps ({s / n['episodes']:.1f} per episode), {n['calls'] / s:.2f} calls, "
          f"{n['prompt'] / s:,.0f} prompt tokens ({n['new'] / s:,.0f} new), {n['output'] / s:.1f} output tokens per step")
    if args.episodes:
        steps = args.episodes * (args.steps or s / n["episodes"])
        prompt, new, output = (steps * n[k] / s for k in ("prompt", "new", "output"))
        hours = output / args.output_tps / 3600 + new / args.prefill_tps / 3600
        cold = output / args.output_tps / 3600 + prompt / args.prefill_tps / 3600
        print(f"{args.episodes} episodes, {steps:,.0f} steps: {prompt / 1e6:,.1f} M prompt tokens "
              f"({new / 1e6:,.2f} M new), {output / 1e6:,.2f} M output tokens; {hours:,.1f} GPU-hours with a "
              f"prompt cache, {cold:,.1f} without (at {args.output_tps:g} output and {args.prefill_tps:g} "
              "prefill tokens/s)")


if __name__ == "__main__":
    main()
