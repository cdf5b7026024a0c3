"""SKILLC (the fourth paper): contrastive credit assignment, and credited steps made into macro skills.

Candidates are parts of a successful trajectory: contiguous action windows, single thought+action steps,
and clusters of steps linked by data dependency (an object one step brings in, a later step uses). A
candidate's credit is how much the outcome depends on it:

    judge credit   an evaluator model reads the task, its starting observation, the original actions (run A)
                   and the actions with the candidate ablated (run B), and returns P(success) for each as
                   JSON; averaged over samples, Credit = P(A) − P(B). It sees both runs but NOT their
                   outcomes: no observation after the start (the last one of a won Simon-says game reads
                   "you have completed the game. You win!") and no "run A ended with …" line; run B was never
                   run, so showing A's observations would also tell the judge which run is the real one.
    replay credit  what the paper cannot do on open tasks: our worlds are deterministic given the task, so
                   the ablated action sequence is replayed in the real environment and
                   Credit = score(A) − score(B), the true effect on the benchmark's own score.

Two ablations (`ABLATIONS`): "neutral" replaces the candidate's actions by a neutral action (the paper's),
"delete" leaves them out. Two replays: open loop replays the rest of the original actions as they were;
closed loop (`closed_loop`) lets the agent re-plan from the state after the ablated window, and compares
with the agent continuing after the intact window (so the agent's own competence cancels out).

Saturation. In some worlds any deviation ends the episode (Simon says: a wrong command is game over), so
every candidate gets replay credit ≈ the whole score and the reference says nothing about which steps
matter. `replay_ablation` marks such a candidate (`ends_episode`): the ablated replay ended, below the
original score, at an ablated step or at the step right after one (`touched`).

High-credit windows become macro skills (macros.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from ...agent import Agent, AgentConfig
from ...agent.parsing import parse_json
from ...memory import content_hash
from ...prompts import load
from ...text import cut

NEUTRAL = "look around"
KINDS = ("window", "step", "dependency")
ABLATIONS = ("neutral", "delete")


@dataclass(frozen=True)
class Candidate:
    kind: str
    indices: tuple[int, ...]

    @property
    def label(self) -> str:
        return f"{self.kind}:{','.join(map(str, self.indices))}"

    @classmethod
    def parse(cls, label: str) -> Candidate:
        kind, _, rest = label.partition(":")
        return cls(kind, tuple(int(i) for i in rest.split(",") if i))


# -- candidates ---------------------------------------------------------------------------------------------
def window_candidates(n_steps: int, min_len: int = 1, max_len: int = 3) -> list[Candidate]:
    """Every contiguous window of length min_len..max_len."""
    if min_len < 1 or max_len < min_len:
        raise ValueError(f"need 1 ≤ min_len ≤ max_len, got {min_len}, {max_len}")
    return [Candidate("window", tuple(range(i, i + n))) for n in range(min_len, max_len + 1)
            for i in range(0, n_steps - n + 1)]


def step_candidates(steps) -> list[Candidate]:
    """Each step whose reply carried a thought: the thought+action segment."""
    return [Candidate("step", (i,)) for i, s in enumerate(steps) if getattr(s, "thought", "").strip()]


_VERBS = re.compile(r"^(take|get|pick up|open|close|put|place|move|read|eat|drop|cook|slice|chop|examine|"
                    r"look at|go to|go|teleport to|focus on|use|touch|insert|give|wear|mix|pour)\s+", re.I)


def _objects(action: str) -> set[str]:
    """The object phrases an action names ('put red apple in fridge' → {'red apple', 'fridge'})."""
    rest = _VERBS.sub("", action.strip().lower())
    parts = re.split(r"\s+(?:in|on|into|onto|to|from|with|at)\s+", rest)
    return {re.sub(r"\b(the|a|an)\b\s*", "", p).strip() for p in parts if p.strip()} - {""}


def dependency_candidates(steps) -> list[Candidate]:
    """Clusters of ≥ 2 steps linked by data dependency: a step whose action names an object is linked to the
    earliest earlier step that brought the object in (named it in its action, or showed it in its observation)."""
    n = len(steps)
    parent = list(range(n))

    def root(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    named = [_objects(s.action) for s in steps]
    seen = [str(getattr(s, "observation", "")).lower() for s in steps]
    for j in range(n):
        for obj in named[j]:
            for i in range(j):
                if obj in named[i] or obj in seen[i]:
                    parent[root(j)] = root(i)
                    break
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(root(i), []).append(i)
    return [Candidate("dependency", tuple(g)) for g in groups.values() if len(g) >= 2]


def candidates(steps, min_len: int = 1, max_len: int = 3, kinds=KINDS) -> list[Candidate]:
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise ValueError(f"unknown candidate kind(s) {bad}; valid: {', '.join(KINDS)}")
    out = []
    if "window" in kinds:
        out += window_candidates(len(steps), min_len, max_len)
    if "step" in kinds:
        out += step_candidates(steps)
    if "dependency" in kinds:
        out += dependency_candidates(steps)
    return list(dict.fromkeys(out))


# -- ablation -----------------------------------------------------------------------------------------------
def _check_how(how: str) -> str:
    if how not in ABLATIONS:
        raise ValueError(f"unknown ablation {how!r}; valid: {', '.join(ABLATIONS)}")
    return how


def spread(items: list, n: int) -> list:
    """At most n items, evenly spaced over the list (deterministic; the first and the last included)."""
    if len(items) <= n:
        return list(items)
    if n <= 0:
        return []
    idx = np.linspace(0, len(items) - 1, n).round().astype(int)
    return [items[i] for i in dict.fromkeys(idx)]


def ablate(actions: list[str], cand: Candidate, neutral: str = NEUTRAL, how: str = "neutral") -> list[str]:
    """The actions with the candidate's steps replaced by `neutral` (how="neutral") or left out ("delete")."""
    if _check_how(how) == "neutral":
        return [neutral if i in cand.indices else a for i, a in enumerate(actions)]
    return [a for i, a in enumerate(actions) if i not in cand.indices]


def touched(cand: Candidate, how: str = "neutral") -> set[int]:
    """Positions in the ablated sequence where the ablation acts at once: each replaced step and the step
    right after it (neutral); the step that now stands where deleted steps were (delete)."""
    idx = sorted(cand.indices)
    if _check_how(how) == "neutral":
        return set(idx) | {i + 1 for i in idx}
    return {i - rank for rank, i in enumerate(idx)}


# -- replay credit --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Replay:
    score: float                # the benchmark's score when the replay stopped
    ended_at: int | None        # index of the action at which the episode ended (None: it did not end)
    start: str                  # the task's first observation


def replay(env, task_id: str, actions: list[str]) -> Replay:
    """Replay `actions` from the task's start, stopping when the episode ends."""
    start = env.reset(task_id)
    score, ended = 0.0, None
    for i, a in enumerate(actions):
        r = env.step(a)
        score = r.score
        if r.done:
            ended = i
            break
    return Replay(float(score), ended, start)


def replay_score(env, task_id: str, actions: list[str]) -> float:
    """The benchmark's score after replaying `actions` from the task's start (stops when the episode ends)."""
    return replay(env, task_id, actions).score


def replay_ablation(env, task_id: str, actions: list[str], cand: Candidate, original: float,
                    how: str = "neutral", neutral: str = NEUTRAL) -> dict:
    """Open-loop replay credit of one candidate under one ablation: score (of the ablated replay), credit
    (original − score), ended_at, and ends_episode (the ablation ended the episode at once, below the
    original score: a saturated reference, see the module docstring)."""
    r = replay(env, task_id, ablate(actions, cand, neutral, how))
    ends = r.ended_at is not None and r.ended_at in touched(cand, how) and r.score < original
    return {"score": r.score, "credit": float(original - r.score), "ended_at": r.ended_at, "ends_episode": bool(ends)}


def replay_credit(env, task_id: str, actions: list[str], cand: Candidate, original: float | None = None,
                  neutral: str = NEUTRAL, how: str = "neutral") -> float:
    base = replay_score(env, task_id, actions) if original is None else original
    return base - replay_score(env, task_id, ablate(actions, cand, neutral, how))


# -- closed-loop replay ---------------------------------------------------------------------------------------
class ReplayedStart:
    """An env that starts one task where `prefix` leaves it: `reset(task_id)` replays the prefix and returns
    the observation after it, preceded by the actions already taken; every other task and every other
    call goes to the wrapped env. `score` is the benchmark's score after the last step taken."""

    def __init__(self, env, task_id: str, prefix: list[str]):
        self.env, self.task_id, self.prefix = env, task_id, list(prefix)
        self.score, self.done = 0.0, False

    def __getattr__(self, name):
        if name == "env":                  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, task):
        obs = self.env.reset(task)
        if getattr(task, "id", task) != self.task_id:
            return obs
        self.score, self.done = 0.0, False
        for a in self.prefix:
            r = self.env.step(a)
            obs, self.score = r.observation, r.score
            if r.done:
                self.done = True
                break
        if not self.prefix:
            return obs
        return f"(Actions already taken: {'; '.join(self.prefix)}.) {obs}"

    def step(self, action):
        r = self.env.step(action)
        self.score = r.score
        self.done = self.done or r.done
        return r


def closed_loop(llm, env, task_id: str, prefix: list[str], max_steps: int, config=None) -> dict:
    """The task-level agent (no memory) continues from where `prefix` leaves the task, for at most
    `max_steps` steps; the score when it stops, and what it cost (model_seconds: of the calls answered live,
    a response-cache hit costs nothing). A prefix that ends the episode leaves nothing to re-plan."""
    wrapped = ReplayedStart(env, task_id, prefix)
    r = replay(env, task_id, prefix)
    if r.ended_at is not None:
        return {"score": r.score, "ended_in_prefix": True, "steps": 0, "calls": 0, "prompt_tokens": 0,
                "completion_tokens": 0, "model_seconds": 0.0, "error": ""}
    cfg = replace(config or AgentConfig(), level="task", max_steps=max(1, int(max_steps)))
    ep = Agent(llm, cfg).run(wrapped, task_id)
    return {"score": float(wrapped.score), "ended_in_prefix": False, "steps": len(ep.steps), "calls": len(ep.calls),
            "prompt_tokens": sum(c.prompt_tokens for c in ep.calls),
            "completion_tokens": sum(c.completion_tokens for c in ep.calls),
            "model_seconds": float(sum(c.latency_s for c in ep.calls if not c.cached)), "error": ep.error}


def closed_loop_credit(llm, env, task_id: str, actions: list[str], cand: Candidate, slack: int = 3,
                       neutral: str = NEUTRAL, how: str = "neutral", config=None) -> dict:
    """Closed-loop credit: the agent continues after the intact window (prefix actions[:end]) and after the
    ablated one (the same prefix, ablated), each for the steps the original needed after the window plus
    the window's length plus `slack`; credit = score(intact) − score(ablated)."""
    end = max(cand.indices) + 1
    budget = len(actions) - end + len(cand.indices) + slack
    intact = closed_loop(llm, env, task_id, actions[:end], budget, config)
    ablated = closed_loop(llm, env, task_id, ablate(actions[:end], cand, neutral, how), budget, config)
    return {"budget": budget, "credit": intact["score"] - ablated["score"],
            **{f"intact_{k}": v for k, v in intact.items()}, **{f"ablated_{k}": v for k, v in ablated.items()}}


# -- judge credit --------------------------------------------------------------------------------------------
def parse_probabilities(text: str, truncated: bool = False) -> tuple[float, float] | None:
    """(p_a, p_b) from a judge reply: JSON if present, else the first two numbers in [0, 1]; None if unusable.
    `truncated`: the reply was cut at max_tokens, so a number at its very end may be cut too ('0.2' of
    '0.25') and is not read."""
    text = text or ""
    if truncated:
        text = re.sub(r"[\d.]+\Z", "", text)   # \Z, not $: a number before a final newline is whole
    obj = parse_json(text, dict)
    if obj is not None:
        try:
            a, b = float(obj.get("p_a")), float(obj.get("p_b"))
            if 0 <= a <= 1 and 0 <= b <= 1:
                return a, b
        except (TypeError, ValueError):
            pass
    nums = [float(x) for x in re.findall(r"(?<![\d.])\d*\.?\d+", text)]
    nums = [x for x in nums if 0 <= x <= 1]
    return (nums[0], nums[1]) if len(nums) >= 2 else None


def render_actions(actions: list[str], marked=(), gap_after: int | None = None, gap: int = 0) -> str:
    """Numbered actions, ' *' after the marked ones; with `gap`, a line '(N steps left out)' after
    position `gap_after` (−1: before the first)."""
    lines = [f"{i + 1}. {a}{' *' if i in marked else ''}" for i, a in enumerate(actions)]
    if gap:
        lines.insert(gap_after + 1, f"({gap} step{'s' if gap > 1 else ''} left out here)")
    return "\n".join(lines) if lines else "(no actions)"


_CHANGE = {"neutral": 'with the steps marked * replaced by "{neutral}"',
           "delete": "with some steps left out (where the line says so)"}
# The 1.5B judge wraps its JSON in a ```json fence: 24 tokens (the first book's budget) cut every reply
# right after p_b's value, where a longer number would have been cut short; 40 leave room for the fence.
JUDGE_MAX_TOKENS = 40
START_CHARS = 400


def judge_prompt(instruction: str, start: str, actions: list[str], cand: Candidate, how: str = "neutral",
                 neutral: str = NEUTRAL, start_chars: int = START_CHARS) -> str:
    """The judge's prompt: task, starting observation, run A (the actions), run B (ablated). Nothing about
    either run's outcome. Everything up to the end of run A is the same for every candidate of a
    trajectory, so the model server's prompt cache answers it once."""
    if _check_how(how) == "neutral":
        b = render_actions(ablate(actions, cand, neutral, how), marked=cand.indices)
    else:
        idx = sorted(cand.indices)
        b = render_actions(ablate(actions, cand, neutral, how), gap_after=idx[0] - 1, gap=len(idx))
    return load("skillbook.papers.skillc", "judge").strip().format(
        instruction=instruction.strip(), start=cut(start, start_chars), a=render_actions(actions), b=b,
        change=_CHANGE[how].format(neutral=neutral))


def judge_id(how: str = "neutral", samples: int = 1, neutral: str = NEUTRAL, temperature: float = 0.7) -> str:
    """What a recorded judge credit was made with (prompt template, ablation, samples, decoding): records
    carrying another id are refused rather than mixed with new ones."""
    return content_hash({"template": load("skillbook.papers.skillc", "judge"), "how": how, "samples": samples,
                         "neutral": neutral, "temperature": temperature if samples > 1 else 0.0,
                         "max_tokens": JUDGE_MAX_TOKENS, "start_chars": START_CHARS})


def judge_credit(llm, instruction: str, start: str, actions: list[str], cand: Candidate, samples: int = 1,
                 how: str = "neutral", neutral: str = NEUTRAL, temperature: float = 0.7) -> dict:
    """Mean P(A) − mean P(B) over the usable samples (NaN when none is usable), and what the calls cost:
    tokens per call (prompt, newly prefilled by the server, completion) and the model seconds of the calls
    answered live (a response-cache hit costs nothing; `cached` counts them)."""
    prompt = judge_prompt(instruction, start, actions, cand, how, neutral)
    got, bad, cost = [], 0, []
    for k in range(samples):
        c = llm.chat([{"role": "user", "content": prompt}], temperature=temperature if samples > 1 else 0.0,
                     max_tokens=JUDGE_MAX_TOKENS, seed=k)
        new = (getattr(c, "server_timings", None) or {}).get("prompt_n")
        cost.append((c.prompt_tokens, np.nan if new is None else new, c.completion_tokens, c.latency_s,
                     bool(getattr(c, "cached", False))))
        p = parse_probabilities(c.text, truncated=getattr(c, "finish_reason", "") == "length")
        if p is None:
            bad += 1
        else:
            got.append(p)
    cost = np.array(cost, dtype=float)
    out = {"unusable": bad, "calls": samples, "prompt_tokens": float(cost[:, 0].mean()),
           "new_prompt_tokens": float(np.nanmean(cost[:, 1])) if np.isfinite(cost[:, 1]).any() else float("nan"),
           "completion_tokens": float(cost[:, 2].mean()),
           "model_seconds": float((cost[:, 3] * (1 - cost[:, 4])).sum()), "cached": int(cost[:, 4].sum()),
           "judge": judge_id(how, samples, neutral, temperature)}
    if not got:
        return {"credit": float("nan"), "p_orig": float("nan"), "p_ablated": float("nan"), **out}
    a, b = np.mean([g[0] for g in got]), np.mean([g[1] for g in got])
    return {"credit": float(a - b), "p_orig": float(a), "p_ablated": float(b), **out}


__all__ = ["Candidate", "KINDS", "NEUTRAL", "ABLATIONS", "window_candidates", "step_candidates",
           "dependency_candidates", "candidates", "spread", "ablate", "touched", "Replay", "replay", "replay_score",
           "replay_ablation", "replay_credit", "ReplayedStart", "closed_loop", "closed_loop_credit",
           "parse_probabilities", "render_actions", "judge_prompt", "judge_id", "judge_credit"]
