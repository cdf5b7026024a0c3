"""Calibrate the study's benchmark on the DEV split: success of the two no-memory agents (task level,
subtask level) per TextWorldExpress game setting. Records: <runs_root>/calibration/<setting>/<level>/.

    .venv/bin/python tools/calibrate_study.py --runs-root runs/study --n 8
"""
from __future__ import annotations

import argparse

from skillbook.agent import AgentConfig
from skillbook.book import Lab
from skillbook.experiment import run_condition

SETTINGS = {
    "coin-L2": {"coin": {"numLocations": 2, "numDistractorItems": 0, "includeDoors": 0, "limitInventorySize": 0}},
    "coin-L3": {"coin": {"numLocations": 3, "numDistractorItems": 0, "includeDoors": 0, "limitInventorySize": 0}},
    "twc-L1-I1": {"twc": {"numLocations": 1, "numItemsToPutAway": 1, "includeDoors": 0, "limitInventorySize": 0}},
    "twc-L1-I2": {"twc": {"numLocations": 1, "numItemsToPutAway": 2, "includeDoors": 0, "limitInventorySize": 0}},
    "twc-L2-I1": {"twc": {"numLocations": 2, "numItemsToPutAway": 1, "includeDoors": 0, "limitInventorySize": 0}},
    "cookingworld-L1-I1": {"cookingworld": {"numLocations": 1, "numIngredients": 1, "numDistractorItems": 0,
                                            "includeDoors": 0, "limitInventorySize": 0}},
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs-root", required=True)
    ap.add_argument("--backend", default="embedded:qwen2.5-coder-1.5b")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--levels", default="task,subtask")
    args = ap.parse_args()
    lab = Lab("calibration", profile="study", backend=args.backend, runs_root=args.runs_root)
    for label in args.settings.split(","):
        game_params = SETTINGS[label]
        tasks = [f"twx/{g}/dev/{i}" for g in game_params for i in range(args.n)]
        for level in args.levels.split(","):
            config = AgentConfig(level=level, max_steps=args.max_steps, max_subtask_steps=10)
            df = run_condition(lab.run_dir / label / level, lab.llm, tasks, config,
                               env_options={"twx": {"game_params": game_params}}, desc=f"{label} {level}")
            lab.cache.save()
            print(label, level, df[["success", "score", "steps", "wall_s"]].mean().round(2).to_dict(), flush=True)
    print(lab.finish().to_string())


if __name__ == "__main__":
    main()
