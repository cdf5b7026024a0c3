"""Calibrate TextWorldExpress difficulty on the DEV split for the workshop chapters: success of the
no-memory task-level agent per game and parameter setting. Records: runs/<profile>/calibration/
(the study's calibration, both agent levels, is `python -m skillbook.papers.breakdown.study calibrate`).

    .venv/bin/python tools/calibrate_twx.py --profile workshop --n 4 --settings tools/twx_settings.json
"""
from __future__ import annotations

import argparse
import json

from skillbook.agent import AgentConfig
from skillbook.book import Lab
from skillbook.run import Condition, run_condition


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="workshop")
    ap.add_argument("--backend", default="embedded:qwen2.5-coder-1.5b")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--settings", required=True, help="JSON: {label: {game: params}}")
    args = ap.parse_args()
    settings = json.load(open(args.settings))
    lab = Lab("calibration", profile=args.profile, backend=args.backend)
    for label, game_params in settings.items():
        tasks = [f"twx/{g}/dev/{i}" for g in game_params for i in range(args.n)]
        r = run_condition(lab.run_dir / label, lab.llm, Condition(label, AgentConfig(max_steps=args.max_steps)),
                          tasks, {"twx": {"game_params": game_params}})
        lab.cache.save()
        print(label, r.frame.groupby("task_type")[["success", "score", "steps", "wall_s"]].mean().round(2).to_string(),
              flush=True)
    print(lab.finish().to_string())


if __name__ == "__main__":
    main()
