"""The study: the first paper's central claim (task-level skills hurt, subtask-level skills help) on a
run large enough to resolve it on a laptop — calibration on the DEV split, then five pre-registered
streams over the same TEST tasks (chapter 09).

    python -m skillbook.papers.breakdown.study calibrate [--settings ...]   # dev split, no-memory agents
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from ...agent import AgentConfig
from ...run import Condition, frame, run_conditions

# Candidate benchmarks: TextWorldExpress games whose first observation differs from task to task.
CALIBRATION_SETTINGS = {
    "coin-L2": {"coin": {"numLocations": 2, "numDistractorItems": 0, "includeDoors": 0, "limitInventorySize": 0}},
    "twc-L1-I1": {"twc": {"numLocations": 1, "numItemsToPutAway": 1, "includeDoors": 0, "limitInventorySize": 0}},
    "twc-L1-I2": {"twc": {"numLocations": 1, "numItemsToPutAway": 2, "includeDoors": 0, "limitInventorySize": 0}},
    "twc-L2-I1": {"twc": {"numLocations": 2, "numItemsToPutAway": 1, "includeDoors": 0, "limitInventorySize": 0}},
    "cookingworld-L1-I1": {"cookingworld": {"numLocations": 1, "numIngredients": 1, "numDistractorItems": 0,
                                            "includeDoors": 0, "limitInventorySize": 0}},
}
LEVELS = ("task", "subtask")


def calibrate(root: str | Path, llm, settings: list[str], n: int = 8, max_steps: int = 30,
              max_subtask_steps: int = 10, levels=LEVELS) -> pd.DataFrame:
    """Both no-memory agents on the first `n` dev tasks of each candidate setting, recorded under
    `<root>/calibration/<setting>/<level>/`; one row per episode (columns `setting`, `condition`)."""
    bad = [s for s in settings if s not in CALIBRATION_SETTINGS]
    if bad:
        raise ValueError(f"unknown calibration setting(s) {bad}; valid: {', '.join(CALIBRATION_SETTINGS)}")
    frames = []
    for label in settings:
        game_params = CALIBRATION_SETTINGS[label]
        tasks = [f"twx/{g}/dev/{i}" for g in game_params for i in range(n)]
        conditions = [Condition(level, AgentConfig(level=level, max_steps=max_steps,
                                                   max_subtask_steps=max_subtask_steps)) for level in levels]
        results = run_conditions(Path(root) / "calibration" / label, llm, conditions, tasks,
                                 {"twx": {"game_params": game_params}}, prefix=f"{label} ")
        frames.append(frame(results).assign(setting=label))
        llm.cache.save()
    return pd.concat(frames, ignore_index=True)


def main(argv: list[str] | None = None) -> None:
    from ...book import project_root
    from ...llm import DEFAULT_BACKEND, ResponseCache, get_llm
    ap = argparse.ArgumentParser(prog="python -m skillbook.papers.breakdown.study", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    cal = sub.add_parser("calibrate", help="the no-memory agents on dev tasks of each candidate setting")
    cal.add_argument("--runs-root", default=None, help="default: runs/study of the checkout")
    cal.add_argument("--backend", default=DEFAULT_BACKEND)
    cal.add_argument("--settings", default=",".join(CALIBRATION_SETTINGS))
    cal.add_argument("--n", type=int, default=8)
    cal.add_argument("--max-steps", type=int, default=30)
    args = ap.parse_args(argv)
    root = Path(args.runs_root) if args.runs_root else project_root() / "runs" / "study"
    llm = get_llm(args.backend, ResponseCache.for_run(root / "calibration"))
    df = calibrate(root, llm, [s for s in args.settings.split(",") if s], n=args.n, max_steps=args.max_steps)
    print(df.groupby(["setting", "condition"])[["success", "score", "steps", "wall_s"]].mean().round(2).to_string())


if __name__ == "__main__":
    main()
