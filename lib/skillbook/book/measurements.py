"""Measurements of the laboratory chapter: model speed, a gold trajectory, the cost of a model step."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..agent import Agent, AgentConfig
from ..envs.base import Env
from ..llm import LLM
from ..papers.breakdown.pipeline import condition
from ..profiles import project_root
from ..records import dependency
from ..run import load_condition, run_condition
from ..text import cut

_FILLER = ("The agent walks through the house, opens doors, looks around, picks up objects, "
           "reads the cookbook, and writes down what it saw in each room. ")


def measure_speed(llm: LLM, trials: int = 3, prompt_words: int = 450, gen_tokens: int = 128) -> pd.DataFrame:
    """Prompt processing and generation speed of the model, one row per request.

    Each prompt request starts with a different nonce, so the server's prompt cache cannot reuse an
    earlier prefix and the number is a cold prompt speed. llama.cpp reports its own timings; other
    servers give only latency, from which the rates are estimated.
    """
    rows = []
    for i in range(trials):
        nonce = f"Record {i}."
        long_text = nonce + " " + " ".join((_FILLER * (prompt_words // 20 + 1)).split()[:prompt_words])
        p = llm.chat([{"role": "user", "content": long_text + "\nReply with OK."}], max_tokens=1)
        g = llm.chat([{"role": "user", "content": f"{nonce} Write a long numbered list of objects found "
                       "in a kitchen, one per line, with a short description of each."}],
                     max_tokens=gen_tokens)
        for kind, c in (("prompt", p), ("generation", g)):
            t = c.server_timings or {}
            if kind == "prompt":
                rate = t.get("prompt_per_second") or c.prompt_tokens / c.latency_s
            else:
                rate = t.get("predicted_per_second") or c.completion_tokens / max(c.latency_s, 1e-9)
            rows.append({"trial": i, "kind": kind, "prompt_tokens": c.prompt_tokens,
                         "completion_tokens": c.completion_tokens, "latency_s": c.latency_s,
                         "tokens_per_s": rate, "source": "server timings" if t else "latency",
                         "cached": c.cached})
    return pd.DataFrame(rows)


def play_gold(env: Env, task_id: str, max_obs_chars: int = 160) -> pd.DataFrame:
    """Play the benchmark's gold action sequence and record what the environment answered."""
    gold = env.gold_actions(task_id)
    obs = env.reset(task_id)
    rows = [{"step": 0, "action": "(reset)", "observation": cut(obs, max_obs_chars), "score": 0.0, "done": False}]
    for i, action in enumerate(gold, 1):
        r = env.step(action)
        rows.append({"step": i, "action": action, "observation": cut(r.observation, max_obs_chars),
                     "score": r.score, "done": r.done})
        if r.done:
            break
    return pd.DataFrame(rows)


def step_costs(llm: LLM, env: Env, task_id: str, steps: int = 3) -> pd.DataFrame:
    """What agent steps cost: the book's task-level agent (chapter "Agents") for a few steps of a real task.

    Each step's prompt extends the previous one (the conversation is append-only), which is where the
    server's prompt cache pays: `new_prompt_tokens` is what the server actually had to prefill.
    """
    ep = Agent(llm, AgentConfig(level="task", max_steps=steps)).run(env, task_id)
    if ep.error:
        raise RuntimeError(f"the cost probe failed: {ep.error}")
    rows = []
    for i, s in enumerate(ep.steps, 1):
        c = s.call
        rows.append({"step": i, "prompt_tokens": c.prompt_tokens, "new_prompt_tokens": c.new_prompt_tokens,
                     "completion_tokens": c.completion_tokens, "latency_s": c.latency_s,
                     "dependency_1e9": dependency(c.prompt_tokens, c.completion_tokens), "action": s.action,
                     "valid_action": s.valid, "score": s.score, "cached": c.cached})
    return pd.DataFrame(rows)


# -- where an episode's time goes (issue 35) ---------------------------------------------------------------
PROFILE_COLUMNS = ["condition", "task_id", "role", "prompt_tokens", "evaluated", "reused", "output",
                   "prompt_ms", "generation_ms", "latency_s", "cached"]


def episode_profile(llm: LLM, run_dir, tasks: list[str], conditions=("subtask-none", "subtask-text"),
                    env_options: dict | None = None, agent: dict | None = None) -> pd.DataFrame:
    """Run the first paper's conditions on `tasks` in `run_dir` and return one row per model call: its role
    (executor, planner, summarizer, induction, merge, …), its prompt tokens, the tokens llama.cpp actually
    evaluated (`prompt_n` of its own timings: the rest came from its prompt cache, `reused`), the tokens it
    generated, and llama.cpp's milliseconds for each part. Run it with an empty response cache: a cache hit
    carries the latency of the call that first produced it and says nothing about this machine.

    The server's timings reach the record of a call only as `new_prompt_tokens`; the rest is taken here from
    each answer as it returns (the calls are sequential, and a call's latency identifies it)."""
    seen: dict[float, dict] = {}
    chat = llm.chat

    def timed(*args, **kwargs):
        c = chat(*args, **kwargs)
        seen[c.latency_s] = c.server_timings or {}
        return c
    llm.chat = timed
    try:
        for name in conditions:
            c = condition(name, llm, AgentConfig(**(agent or {})))
            run_condition(Path(run_dir) / name, llm, c, tasks, env_options, desc=f"profile {name}")
    finally:
        del llm.chat                      # the instance attribute: back to the class's method
    rows = []
    for name in conditions:
        for e in load_condition(Path(run_dir) / name).episodes:
            for call in e.calls:
                t = seen.get(call.latency_s, {}) if not call.cached else {}
                evaluated = t.get("prompt_n", call.new_prompt_tokens)
                rows.append({"condition": name, "task_id": e.task_id, "role": call.role,
                             "prompt_tokens": call.prompt_tokens, "evaluated": evaluated,
                             "reused": t.get("cache_n"), "output": t.get("predicted_n", call.completion_tokens),
                             "prompt_ms": t.get("prompt_ms"), "generation_ms": t.get("predicted_ms"),
                             "latency_s": call.latency_s, "cached": call.cached})
    return pd.DataFrame(rows, columns=PROFILE_COLUMNS)


def profile_table(profile: pd.DataFrame, reference: dict | None = None) -> pd.DataFrame:
    """Per condition and role, over live calls: calls per episode, median prompt / evaluated / output
    tokens, the median seconds of a call, the share of the condition's model time, and llama.cpp's rates
    (evaluated tokens per second of prompt time, output tokens per second of generation time) — beside
    `reference` (`reference_rates`), the rates of a pure prefill and a pure generation on this machine."""
    live = profile[~profile.cached.astype(bool)]
    episodes = profile.groupby("condition").task_id.nunique()
    total = live.groupby("condition").latency_s.sum()
    rows = []
    for (cond, role), g in live.groupby(["condition", "role"], sort=False):
        pms, gms = g.prompt_ms.astype(float), g.generation_ms.astype(float)
        rows.append({"condition": cond, "role": role, "calls per episode": len(g) / episodes[cond],
                     "prompt tokens": g.prompt_tokens.median(), "evaluated": g.evaluated.astype(float).median(),
                     "output": g.output.astype(float).median(), "seconds": g.latency_s.median(),
                     "share of time": g.latency_s.sum() / total[cond],
                     "prefill tok/s": g.evaluated.astype(float).sum() / (pms.sum() / 1e3) if pms.sum() else np.nan,
                     "generation tok/s": g.output.astype(float).sum() / (gms.sum() / 1e3) if gms.sum() else np.nan})
    out = pd.DataFrame(rows).set_index(["condition", "role"])
    if reference:
        out["prefill vs reference"] = out["prefill tok/s"] / reference["prefill_tok_s"]
        out["generation vs reference"] = out["generation tok/s"] / reference["generation_tok_s"]
    return out


def reference_rates(llm: LLM, trials: int = 3) -> dict:
    """llama.cpp's own rates for this model on this machine, from its timings of a cold ~600-token prefill
    and of 128 generated tokens (`measure_speed`; medians): the physical reference the agent's calls are
    compared with. (xllamacpp ships the server, not the llama-bench tool; these are the same build's
    own timings.)"""
    speed = measure_speed(llm, trials=trials)
    rate = speed.groupby("kind").tokens_per_s.median()
    return {"prefill_tok_s": float(rate["prompt"]), "generation_tok_s": float(rate["generation"]),
            "prefill_tokens": int(speed[speed.kind == "prompt"].prompt_tokens.median())}


def bench_records(folder=None) -> dict:
    """What `make bench` measured on an idle machine (`runs/bench/`), as tables for the laboratory chapter;
    a part it has not measured yet is None. The chapter reads these committed records and never measures
    them again (a replay on another machine shows the same numbers).

    `profile` (`--profile`): per condition and role, the live calls of an episode beside llama.cpp's own
    rates (`reference`); `serving` (`--serving`): each serving change tried, its speed against the default
    and whether the records stayed identical; `sweep` (`--sweep`): llama.cpp's own rates under each thread
    count and batch size against the default; `concurrency` (the default run): aggregate generation
    throughput at 2 and 4 requests in flight, and a fixed task set as two concurrent streams against one
    deterministic stream; `speed` (`--speed`): episodes per hour and success of the old and new code on
    the same distinct dev games, the new code at the newest prompt version (`speed_v2`: the same at v2,
    measured before v3 existed)."""
    folder = Path(folder) if folder is not None else project_root() / "runs" / "bench"
    read = lambda name: json.loads((folder / name).read_text()) if (folder / name).exists() else None  # noqa: E731
    out: dict = {"profile": None, "reference": None, "serving": None, "sweep": None, "concurrency": None,
                 "speed": None, "speed_v2": None}
    if prof := read("profile.json"):
        out["profile"] = pd.DataFrame(prof["table"]).set_index(["condition", "role"])
        out["reference"] = {**prof["reference"], "measured": prof.get("measured", ""), "tasks": prof["tasks"]}
        out["profile_seconds"] = prof["model_seconds_per_episode"]
    rows = []
    for f in sorted(folder.glob("serving-*.json")):
        r = json.loads(f.read_text())
        name = ", ".join(f"{k}={v}" for k, v in r["options"].items()) or "none (the default twice)"
        speedup = r.get("speedup", r.get("speedup_first_game"))
        rows.append({"serving change": name, "speed vs default": speedup,
                     "records identical": {True: "yes", False: "no", None: "not compared"}[r["identical_records"]],
                     "games": len(r["tasks"]), "note": r.get("note", "")})
    if rows:
        out["serving"] = pd.DataFrame(rows).set_index("serving change")
    if sw := read("sweep.json"):
        rows = [{"setting": ", ".join(f"{k}={v}" for k, v in r["options"].items()) or "default",
                 "prefill tok/s": r["prefill_tok_s"], "generation tok/s": r["generation_tok_s"],
                 "prefill vs default": r["prefill_vs_default"],
                 "generation vs default": r["generation_vs_default"]} for r in sw["rows"]]
        out["sweep"] = {"table": pd.DataFrame(rows).set_index("setting"), "cores": sw["cores"],
                        "measured": sw["measured"]}
    if b := read("bench.json"):
        out["concurrency"] = {"throughput 2 vs 1": b["concurrency_2_vs_1"],
                              "throughput 4 vs 1": b["concurrency_4_vs_1"],
                              "two streams vs deterministic": b.get("streams_2_vs_1")}
    for name, key in (("speed.json", "speed"), ("speed-v2.json", "speed_v2")):
        if r := read(name):
            out[key] = _speed(r)
    return out


def _speed(r: dict) -> dict:
    """One `--speed` measurement (old code against new) as tables."""
    rows = []
    for cond, c in {**r["conditions"], "both": r["both_conditions"]}.items():
        row = {"condition": cond, "episodes/h old": c["episodes_per_hour"]["old"],
               "episodes/h new": c["episodes_per_hour"]["new"], "speed-up": c["speedup"]}
        if "success" in c:
            row.update({"games": c["games"], "success old": c["success"]["old"],
                        "success new": c["success"]["new"], "only old": c["only_old"],
                        "only new": c["only_new"], "McNemar p": c["mcnemar_p"]})
        rows.append(row)
    return {"episodes": pd.DataFrame(rows).set_index("condition"), "baseline": r["baseline"],
            "prompts": r.get("new_prompts", "v2"), "tasks": r["tasks"], "reference": r["reference"],
            "measured": r.get("measured", ""),
            "profile": pd.concat({v: pd.DataFrame(t).set_index(["condition", "role"])
                                  for v, t in r["profile"].items()}, names=["version"])}
