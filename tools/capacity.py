"""What a run costs per agent step, from recorded episodes, and what a profile's chapters would cost on a
fleet: the numbers of "Capacity on paper" in cluster.md.

    .venv/bin/python tools/capacity.py runs/workshop/01_agents runs/workshop/transfer --profile paper
        [--output-tps 1000] [--prefill-tps 10000] [--batch 32] [--sequence-tps 40]

1. Per agent level (task, subtask), over every run directory under the given folders (its recorded
   episodes, `load_episodes`; the level from the run's settings, `settings.agent.level`, or the
   episodes' own `agent` for records of the first format): episodes, steps per episode, model calls per
   step (by role), prompt tokens per step (what the server is sent), new prompt tokens (what it had to
   prefill: llama.cpp reports the tokens its prompt cache did not hold; a call without that report counts
   in full), output tokens, and the share of calls the response cache answered. A run directory whose
   `.lock` names a holder is being written and is left out (named in the output).
2. With `--profile`: the episodes each chapter 01-08 runs under that profile (`paper_episodes`, from the
   parameters `skillbook.book.execution_plan` gives each chapter and the task counts of the official
   splits, `SPLIT_SIZES`), and their tokens and GPU-hours at the recorded per-step costs of their level,
   once with the recorded steps per episode and once with every episode at its step limit. GPU-hours
   assume the stated aggregate throughputs of one GPU server: assumptions to replace by what your server
   measures. Runs whose requests repeat earlier ones of the same response cache exactly (E.4's conditions
   that are E.2's or E.3's) are counted as episodes but cost no GPU time.
3. How many actors keep one server busy: recorded time per step outside model calls (simulator and
   agent, from episodes none of whose calls was a cache hit), the recorded output tokens per step at
   `--sequence-tps` per sequence in a batch, and `--batch` sequences a server batches efficiently.
"""
from __future__ import annotations

import argparse
import json
import random
from collections import Counter, defaultdict
from pathlib import Path

from skillbook.run import load_episodes

LEVELS = ("task", "subtask")
CONTEXT_LIMIT = 6000   # AgentConfig.context_limit: prompt tokens beyond which the oldest turns are dropped

# Tasks per official split (train, dev, test), from chapter 00's catalogue (ScienceWorld's variations,
# TextWorldExpress's 1,000 seeds per split) and τ²-bench retail (our dev: every fourth official train task).
_SCIWORLD = {
    "boil": (14, 7, 9), "change-the-state-of-matter-of": (14, 7, 9), "chemistry-mix": (16, 8, 8),
    "chemistry-mix-paint-secondary-color": (18, 9, 9), "chemistry-mix-paint-tertiary-color": (18, 9, 9),
    "find-animal": (150, 75, 75), "find-living-thing": (150, 75, 75), "find-non-living-thing": (150, 75, 75),
    "find-plant": (150, 75, 75), "freeze": (14, 7, 9), "grow-fruit": (62, 31, 33), "grow-plant": (62, 31, 33),
    "identify-life-stages-1": (6, 3, 5), "identify-life-stages-2": (4, 2, 4),
    "inclined-plane-determine-angle": (84, 42, 42), "inclined-plane-friction-named-surfaces": (692, 346, 348),
    "inclined-plane-friction-unnamed-surfaces": (80, 40, 42), "lifespan-longest-lived": (62, 31, 32),
    "lifespan-longest-lived-then-shortest-lived": (62, 31, 32), "lifespan-shortest-lived": (62, 31, 32),
    "measure-melting-point-known-substance": (218, 109, 109),
    "measure-melting-point-unknown-substance": (150, 75, 75), "melt": (14, 7, 9),
    "mendelian-genetics-known-plant": (60, 30, 30), "mendelian-genetics-unknown-plant": (240, 120, 120),
    "power-component": (10, 5, 5), "power-component-renewable-vs-nonrenewable-energy": (10, 5, 5),
    "test-conductivity": (450, 225, 225), "test-conductivity-of-unknown-substances": (300, 150, 150),
    "use-thermometer": (270, 135, 135)}
_TWX = ("arithmetic", "coin", "cookingworld", "mapreader", "peckingorder", "simonsays", "sorting", "twc")
SPLIT_SIZES: dict[str, dict[str, int]] = {
    **{f"sciworld/{t}": dict(zip(("train", "dev", "test"), n)) for t, n in _SCIWORLD.items()},
    **{f"twx/{t}": {"train": 1000, "dev": 1000, "test": 1000} for t in _TWX},
    "tau2/retail": {"train": 56, "dev": 18, "test": 40}}


# -- 1. per-step costs by agent level -------------------------------------------------------------------
def _held(run_dir: Path) -> str | None:
    """The holder a run directory's lock names (a run writing there now), else None."""
    lock = run_dir / ".lock"
    text = lock.read_text(errors="replace").strip() if lock.exists() else ""
    return text or None


def per_level(roots: list[Path]) -> tuple[dict[str, dict], list[str]]:
    """level -> summed counts over every recorded episode under `roots`; and the run directories left out
    because they are being written."""
    out: dict[str, dict] = {}
    skipped = []
    for root in roots:
        for manifest in sorted(Path(root).rglob("run.json")):
            d = manifest.parent
            if (holder := _held(d)) is not None:
                skipped.append(f"{d} (being written: {holder})")
                continue
            settings = json.loads(manifest.read_text()).get("settings", {})
            recorded = (settings.get("agent") or {}).get("level")
            for e in load_episodes(d):
                level = recorded or e.agent
                n = out.setdefault(level, {"runs": set(), "episodes": 0, "steps": 0, "calls": 0, "cached": 0,
                                           "prompt": 0, "new": 0, "output": 0, "roles": Counter(),
                                           "fit": [0, 0, 0, 0, 0]})
                n["runs"].add(str(d))
                n["episodes"] += 1
                n["steps"] += len(e.steps)
                for i, s in enumerate(e.steps):    # the executor's prompt against the step's index
                    if s.call is not None and s.call.role == "executor":
                        y = s.call.prompt_tokens
                        for j, v in enumerate((1, i, i * i, y, i * y)):
                            n["fit"][j] += v
                for c in e.calls:
                    n["calls"] += 1
                    n["cached"] += bool(c.cached)
                    n["roles"][c.role] += 1
                    n["prompt"] += c.prompt_tokens
                    n["new"] += c.new_prompt_tokens if c.new_prompt_tokens is not None else c.prompt_tokens
                    n["output"] += c.completion_tokens
    for n in out.values():
        n["runs"] = len(n["runs"])
    return out, skipped


def rates(n: dict) -> dict:
    """Per-step (and per-episode) figures of one level's counts."""
    s = n["steps"]
    if not s:
        raise ValueError("no recorded steps")
    m, si, sii, sy, siy = n.get("fit") or (0, 0, 0, 0, 0)
    var = m * sii - si * si
    slope = (m * siy - si * sy) / var if var else 0.0
    return {"episodes": n["episodes"], "steps_per_episode": s / n["episodes"], "calls": n["calls"] / s,
            "prompt": n["prompt"] / s, "new": n["new"] / s, "output": n["output"] / s,
            "cached_share": n["cached"] / n["calls"] if n["calls"] else 0.0,
            "roles": {r: k / s for r, k in sorted(n["roles"].items())},
            # executor prompt tokens ≈ intercept + slope × step index (least squares over the records)
            "executor_prompt": sy / m if m else 0.0, "slope": slope,
            "intercept": (sy - slope * si) / m if m else 0.0}


def prompt_growth(k: dict, steps: int, context_limit: int = CONTEXT_LIMIT) -> float:
    """How much more prompt a step of an episode that runs `steps` steps sends than a recorded step: the
    executor's fitted prompt (intercept + slope × step index, at most `context_limit`) averaged over the
    steps, over its recorded mean. The fit is extrapolated beyond the recorded episodes' lengths."""
    if not k.get("executor_prompt") or steps < 1:
        return 1.0
    mean = sum(min(k["intercept"] + k["slope"] * i, context_limit) for i in range(steps)) / steps
    return max(mean, 0.0) / k["executor_prompt"]


def step_times(roots: list[Path]) -> dict[str, dict]:
    """Per env, over episodes none of whose calls was a response-cache hit: steps, seconds outside model
    calls (wall time − the calls' latencies) and seconds in them."""
    out: dict[str, dict] = defaultdict(lambda: {"episodes": 0, "steps": 0, "other_s": 0.0, "model_s": 0.0})
    for root in roots:
        for manifest in sorted(Path(root).rglob("run.json")):
            if _held(manifest.parent) is not None:
                continue
            for e in load_episodes(manifest.parent):
                if not e.steps or any(c.cached for c in e.calls):
                    continue
                model = sum(c.latency_s for c in e.calls)
                t = out[e.env]
                t["episodes"] += 1
                t["steps"] += len(e.steps)
                t["model_s"] += model
                t["other_s"] += max(0.0, e.wall_s - model)
    return dict(out)


# -- 2. episodes per chapter of a profile ----------------------------------------------------------------
def _types(spec) -> list[str]:
    return [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]


def draw(task_types, split: str, n: int, seed: int = 0, sizes: dict = SPLIT_SIZES) -> list[str]:
    """The task ids `skillbook.envs.sample_tasks` draws (n per task type, seeded), from split sizes
    instead of the simulators (no JVM): the same generator, the same calls, in the same order."""
    rng = random.Random(seed)
    ids = []
    for tt in _types(task_types):
        count = sizes[tt][split]
        ids += [f"{tt}/{split}/{i}" for i in sorted(rng.sample(range(count), min(n, count)))]
    return ids


def _row(chapter, part, level, episodes, max_steps, exact=True, replayed=False, note=""):
    return {"chapter": chapter, "part": part, "level": level, "episodes": int(episodes), "max_steps": max_steps,
            "exact": exact, "replayed": replayed, "note": note}


def paper_episodes(params: dict[str, dict], sizes: dict = SPLIT_SIZES) -> tuple[list[dict], list[dict]]:
    """(episode rows, model-call rows that are not agent episodes) of chapters 01-08 under `params`
    (chapter -> its parameters, as `chapter_parameters` gives them). An episode row: chapter, part, agent
    level, episodes, step limit, `exact` (False: an upper bound, the count depends on results), `replayed`
    (its requests are earlier ones of the same response cache: no model time)."""
    rows, calls = [], []
    p = params.get("01_agents")
    if p:
        n = len(draw(p["task_types"], p["split"], p["n_tasks"], p["seed"], sizes))
        rows += [_row("01", f"{n} tasks × {lv} agent", lv, n, p["max_steps"]) for lv in LEVELS]
    p2 = params.get("02_induction")
    stream = []
    if p2:
        stream = draw(p2["task_types"], p2["split"], p2["n_tasks"], p2["seed"], sizes)
        conds = _types(p2["conditions"])
        for lv in LEVELS:
            mine = [c for c in conds if c.startswith(f"{lv}-")]
            if mine:
                rows.append(_row("02", f"stream of {len(stream)} × {len(mine)} {lv}-level conditions", lv,
                                 len(stream) * len(mine), p2["max_steps"]))

    def heldout(n):   # Transfer.heldout: the stream's task types, seed + 1, minus the stream's tasks
        return [t for t in draw(p2["task_types"], p2["split"], n, p2["seed"] + 1, sizes) if t not in stream]

    p = params.get("04_transfer")
    if p and p2:
        h, conds, steps = len(heldout(p["n_heldout"])), _types(p2["conditions"]), p2["max_steps"]
        e2 = 1 + sum(c in conds for c in ("task-text", "subtask-text"))
        rows.append(_row("04", f"E.2: {h} held-out × {e2}", "task", h * e2, steps))
        if "subtask-text" in conds:
            rows.append(_row("04", f"E.3: {h} held-out × 3", "subtask", h * 3, steps))
        rows.append(_row("04", "prompt ablation: L1, L2 × first tasks", "subtask",
                         2 * min(p["n_ablation"], len(stream)), steps))
    p = params.get("05_utility")
    if p and p2:
        h, conds, steps = len(heldout(p["n_heldout"])), _types(p2["conditions"]), p2["max_steps"]
        for lv in LEVELS:
            if f"{lv}-text" in conds:
                # none = E.3's subtask-none / E.2's task-none; task-full = E.2's task+task-text-library
                again = 2 if lv == "task" and "task-text" in conds else 1
                rows.append(_row("05", f"E.4 {lv}: {h} held-out × {4 - again} halves", lv, h * (4 - again), steps))
                rows.append(_row("05", f"E.4 {lv}: {h} held-out × {again} as in E.2/E.3", lv, h * again, steps,
                                 replayed=True))
    p = params.get("06_assay")
    if p:
        for world in _types(p["assay_envs"]):
            if world == "twx":
                types, pre, steps = p["assay_task_types"], "", p["max_steps"]
            else:
                types, pre, steps = f"tau2/{p['tau2_domain']}", "tau2_", p["tau2_max_steps"]
            n = {s: len(draw(types, s, p[f"{pre}n_{s}"], p["seed"], sizes)) for s in ("train", "dev", "test")}
            K = p[f"{pre}K"]
            rows += [_row("06", f"{world} upstream: 2 passes × {n['train']} train", "subtask", 2 * n["train"], steps),
                     _row("06", f"{world} masks: K = {K} × {n['dev']} dev", "task", K * n["dev"], steps),
                     _row("06", f"{world} dev gate: ≤ 4 libraries × {n['dev']} dev", "task", 4 * n["dev"], steps,
                          exact=False, note="1 + one per restructuring step with candidates (split, retire, merge)"),
                     _row("06", f"{world} test: 5 conditions × {n['test']}", "task", 5 * n["test"], steps)]
            if world == "tau2" and not p.get("tau2_user_backend"):
                for r in rows[-4:]:
                    r["note"] = "; ".join(x for x in (r["note"], "the agent's model also plays the user") if x)
    p = params.get("07_skillrl")
    if p:
        n = {s: len(draw(p["skillrl_task_types"], s, p[f"n_{s}"], p["seed"], sizes)) for s in ("train", "dev", "test")}
        rows += [_row("07", f"collect: {n['train']} train", "task", n["train"], p["max_steps"]),
                 _row("07", f"validation: {p['rounds']} rounds × {n['dev']} dev", "task", p["rounds"] * n["dev"],
                      p["max_steps"]),
                 _row("07", f"test: 5 conditions × {n['test']}", "task", 5 * n["test"], p["max_steps"])]
        if p.get("train_base"):
            k = len(_types(p["train_conditions"]))
            rows.append(_row("07", f"trained policies: {k} × {n['test']} test", "task", k * n["test"],
                             p["max_steps"], note="served by the trainer, not the fleet"))
        calls.append({"chapter": "07", "what": "teacher: distillation + one evolution per round", "calls": None,
                      "max_output": None})
    p = params.get("08_credit")
    if p:
        n = {s: len(draw(p["skillc_task_types"], s, p[f"n_{s}"], p["seed"], sizes)) for s in ("train", "test")}
        gold = len(_types(p["gold_task_types"])) * p["n_gold"]
        windows = gold * p["gold_windows"]
        closed = min(p["closed_loop_windows"], windows)
        rows += [_row("08", f"collect: {n['train']} train", "task", n["train"], p["max_steps"]),
                 _row("08", f"test: 3 conditions × {n['test']}", "task", 3 * n["test"], p["max_steps"]),
                 _row("08", f"closed loop: ≤ {closed} gold windows × 2", "task", 2 * closed, p["max_steps"],
                      exact=False, note="short runs: budget = rest of the gold path + window + closed_slack")]
        s = p["judge_samples"]
        calls += [{"chapter": "08", "what": f"judge, own runs: ≤ {n['train']} successes × {p['max_candidates']} "
                                            f"candidates × {s} samples",
                   "calls": n["train"] * p["max_candidates"] * s, "max_output": 24},
                  {"chapter": "08", "what": f"judge, gold: ≤ {windows} windows × {s} + "
                                            f"{min(p['judged_deletions'], windows)} deletions × {s}",
                   "calls": (windows + min(p["judged_deletions"], windows)) * s, "max_output": 24}]
    return rows, calls


def chapter_parameters(profile: str, chapters=("01_agents", "02_induction", "04_transfer", "05_utility",
                                               "06_assay", "07_skillrl", "08_credit")) -> dict[str, dict]:
    """chapter -> every parameter it runs with under `profile`: its defaults, then what `execute` passes."""
    from skillbook.book import execution_plan, parameter_defaults
    return {name: {**parameter_defaults(source), **p}
            for name, source, p in execution_plan(profile, list(chapters))}


def costs(rows: list[dict], level_rates: dict[str, dict], at_limit: bool = False) -> list[dict]:
    """Per row: steps, prompt / new / output tokens at the level's recorded per-step costs; steps per episode
    as recorded, or (`at_limit`) the row's step limit, where a step's prompt grows as the recorded
    executor prompts grow with the step index (`prompt_growth`). Replayed rows cost nothing."""
    out = []
    for r in rows:
        k = level_rates[r["level"]]
        steps = 0 if r["replayed"] else r["episodes"] * (r["max_steps"] if at_limit else k["steps_per_episode"])
        grow = prompt_growth(k, r["max_steps"]) if at_limit else 1.0
        out.append({**r, "steps": steps, "prompt": steps * k["prompt"] * grow, "new": steps * k["new"],
                    "output": steps * k["output"]})
    return out


def gpu_hours(output: float, prefill: float, output_tps: float, prefill_tps: float) -> float:
    return (output / output_tps + prefill / prefill_tps) / 3600


# -- the report ------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--profile", default=None, help="e.g. paper: episodes and costs of chapters 01-08")
    ap.add_argument("--output-tps", type=float, default=1000.0, help="output tokens/s of one GPU server")
    ap.add_argument("--prefill-tps", type=float, default=10000.0, help="prefilled prompt tokens/s of one server")
    ap.add_argument("--batch", type=int, default=32, help="sequences one server batches efficiently")
    ap.add_argument("--sequence-tps", type=float, default=40.0, help="output tokens/s of one sequence in a batch")
    args = ap.parse_args(argv)
    counts, skipped = per_level(args.roots)
    for s in skipped:
        print("left out:", s)
    if not counts:
        raise SystemExit(f"no recorded episodes under {', '.join(map(str, args.roots))}")
    level_rates = {}
    print("| level | runs | episodes | steps/episode | calls/step | prompt tokens/step | new (prefilled)/step "
          "| output tokens/step | calls the response cache answered |\n|---|---|---|---|---|---|---|---|---|")
    for level, n in sorted(counts.items()):
        k = level_rates[level] = rates(n)
        roles = ", ".join(f"{r} {v:.2f}" for r, v in k["roles"].items())
        print(f"| {level} | {n['runs']} | {n['episodes']} | {k['steps_per_episode']:.1f} | {k['calls']:.2f} ({roles}) "
              f"| {k['prompt']:,.0f} | {k['new']:,.0f} | {k['output']:.1f} | {k['cached_share']:.0%} |")
    for level, k in sorted(level_rates.items()):
        print(f"{level} level: executor prompt ≈ {k['intercept']:,.0f} + {k['slope']:.1f} × step index tokens "
              f"(least squares; recorded mean {k['executor_prompt']:,.0f}); at 50 steps a step's prompt is "
              f"{prompt_growth(k, 50):.2f}× the recorded mean")
    print()
    times = step_times(args.roots)
    for env, t in sorted(times.items()):
        if t["steps"]:
            print(f"{env}: {t['other_s'] / t['steps']:.3f} s per step outside model calls, "
                  f"{t['model_s'] / t['steps']:.2f} s in them (as recorded; {t['episodes']} episodes, "
                  f"{t['steps']} steps without cache hits)")
    for level, k in sorted(level_rates.items()):
        model = k["output"] / args.sequence_tps + k["new"] / args.prefill_tps
        for env, t in sorted(times.items()):
            if t["steps"]:
                other = t["other_s"] / t["steps"]
                share = model / (model + other)
                print(f"  {level} level on {env}: {model:.2f} s per step waiting for the model at "
                      f"{args.sequence_tps:g} tokens/s per sequence → {share:.0%} of a step; "
                      f"{args.batch} ÷ {share:.2f} ≈ {args.batch / share:.0f} actors per server, "
                      f"≈ {args.batch / share * (1 - share):.1f} of them busy outside the model at any time")
    if not args.profile:
        return
    missing = [lv for lv in LEVELS if lv not in level_rates]
    if missing:
        raise SystemExit(f"no recorded {', '.join(missing)}-level episodes for the profile's costs")
    rows, calls = paper_episodes(chapter_parameters(args.profile))
    print(f"\nprofile {args.profile}: episodes per chapter (≤: an upper bound; replayed: answered by the response "
          "cache)")
    for r in rows:
        mark = "" if r["exact"] else "≤ "
        extra = "; ".join(x for x in ("replayed" if r["replayed"] else "", r["note"]) if x)
        print(f"  {r['chapter']} {r['part']}: {mark}{r['episodes']:,} {r['level']}-level, ≤ {r['max_steps']} steps"
              + (f" ({extra})" if extra else ""))
    for c in calls:
        bound = f"≤ {c['calls']:,} calls, ≤ {c['max_output']} output tokens each" if c["calls"] else "a few calls"
        print(f"  {c['chapter']} {c['what']}: {bound} (not agent steps; not in the table)")
    for at_limit in (False, True):
        table = costs(rows, level_rates, at_limit)
        print(f"\n{'every episode at its step limit' if at_limit else 'steps per episode as recorded'}:")
        print("| chapter | episodes | task / subtask | steps | prompt tokens | new (prefilled) | output tokens "
              "| GPU-hours, prompt cache on | off |\n|---|---|---|---|---|---|---|---|---|")
        for ch in sorted({r["chapter"] for r in table}) + ["all"]:
            part = [r for r in table if ch in ("all", r["chapter"])]
            s = Counter()
            for r in part:
                s["episodes"] += r["episodes"]
                s[r["level"]] += r["episodes"]
                for t in ("steps", "prompt", "new", "output"):
                    s[t] += r[t]
            bound = "≤ " if any(not r["exact"] for r in part) else ""
            on = gpu_hours(s["output"], s["new"], args.output_tps, args.prefill_tps)
            off = gpu_hours(s["output"], s["prompt"], args.output_tps, args.prefill_tps)
            print(f"| {ch} | {bound}{s['episodes']:,} | {s['task']:,} / {s['subtask']:,} | {s['steps']:,.0f} "
                  f"| {s['prompt'] / 1e6:,.1f} M | {s['new'] / 1e6:,.1f} M | {s['output'] / 1e6:,.2f} M "
                  f"| {on:,.1f} | {off:,.1f} |")
    print(f"\n(at {args.output_tps:g} output and {args.prefill_tps:g} prefill tokens/s per GPU server)")


if __name__ == "__main__":
    main()
