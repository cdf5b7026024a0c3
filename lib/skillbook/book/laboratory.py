"""Measurements of the laboratory chapter: model speed, a gold trajectory, the cost of a model step."""
from __future__ import annotations

import pandas as pd

from ..envs.base import Env
from ..llm import LLM
from ..records import dependency
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
    from ..agent import Agent, AgentConfig
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
