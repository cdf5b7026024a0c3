"""Calibrate TextWorldExpress difficulty on the DEV split: success of the no-memory task-level agent
per game and parameter setting. Results: runs/<profile>/calibration/ (records + response cache).

    .venv/bin/python tools/calibrate_twx.py --profile workshop --n 4 --settings tools/twx_settings.json
"""
from __future__ import annotations

import argparse
import json

from skillbook.agent import Agent, AgentConfig
from skillbook.book import Lab
from skillbook.run import run_streams


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="workshop")
    ap.add_argument("--backend", default="embedded:qwen2.5-coder-1.5b")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--settings", required=True, help="JSON: {label: {game: params}}")
    args = ap.parse_args()
    settings = json.load(open(args.settings))
    lab = Lab("calibration", profile=args.profile, backend=args.backend)
    for label, game_params in settings.items():
        streams = {f"{label}-{g}-{i}": [f"twx/{g}/dev/{i}"] for g in game_params for i in range(args.n)}
        df = run_streams(lab.run_dir / label, streams, lambda: Agent(lab.llm, AgentConfig(max_steps=args.max_steps)),
                         env_options={"twx": {"game_params": game_params}}, workers=args.workers, desc=label)
        lab.cache.save()
        print(label, df.groupby("task_type")[["success", "score", "steps", "wall_s"]].mean().round(2).to_string(),
              flush=True)
    print(lab.finish().to_string())


if __name__ == "__main__":
    main()
