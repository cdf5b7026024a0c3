"""SKILLC (the fourth paper): contrastive credit assignment, and credited steps made into macro skills.

Candidates are parts of a successful trajectory: contiguous action windows, single thought+action steps,
and clusters of steps linked by data dependency (an object one step brings in, a later step uses). A
candidate's credit is how much the outcome depends on it:

    judge credit   an evaluator model reads the task, the original trajectory and the trajectory with the
                   candidate replaced by a neutral action, and returns P(success) for each as JSON;
                   averaged over samples, Credit = P(orig) − P(ablated)
    replay credit  what the paper cannot do on open tasks: our worlds are deterministic given the task, so
                   the ablated action sequence is replayed in the real environment and
                   Credit = score(orig) − score(ablated), the true effect on the benchmark's own score

High-credit windows become macro skills: the model names and abstracts each into a parameterised action
template (description, inputs, preconditions, steps with {placeholders}); the template is compiled to a
code skill, so a retrieved macro runs as one action (`call name(args)`) in the same sandbox as every
code skill and expands into its environment commands.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...agent.parsing import parse_json
from ...prompts import load
from ...text import cut

NEUTRAL = "look around"
KINDS = ("window", "step", "dependency")


@dataclass(frozen=True)
class Candidate:
    kind: str
    indices: tuple[int, ...]

    @property
    def label(self) -> str:
        return f"{self.kind}:{','.join(map(str, self.indices))}"


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


def ablate(actions: list[str], cand: Candidate, neutral: str = NEUTRAL) -> list[str]:
    return [neutral if i in cand.indices else a for i, a in enumerate(actions)]


# -- replay credit --------------------------------------------------------------------------------------------
def replay_score(env, task_id: str, actions: list[str]) -> float:
    """The benchmark's score after replaying `actions` from the task's start (stops when the episode ends)."""
    env.reset(task_id)
    score = 0.0
    for a in actions:
        r = env.step(a)
        score = r.score
        if r.done:
            break
    return float(score)


def replay_credit(env, task_id: str, actions: list[str], cand: Candidate, original: float | None = None,
                  neutral: str = NEUTRAL) -> float:
    base = replay_score(env, task_id, actions) if original is None else original
    return base - replay_score(env, task_id, ablate(actions, cand, neutral))


# -- judge credit --------------------------------------------------------------------------------------------



def parse_probabilities(text: str) -> tuple[float, float] | None:
    """(p_a, p_b) from a judge reply: JSON if present, else the first two numbers in [0, 1]; None if unusable."""
    text = text or ""
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


def render_actions(actions: list[str], observations: list[str] | None = None, marked=(), obs_chars: int = 80) -> str:
    lines = []
    for i, a in enumerate(actions):
        mark = " *" if i in marked else ""
        obs = f" -> {cut(observations[i], obs_chars, mark='')}" if observations else ""
        lines.append(f"{i + 1}. {a}{mark}{obs}")
    return "\n".join(lines)


def judge_credit(llm, instruction: str, actions: list[str], observations: list[str], success: bool, cand: Candidate,
                 samples: int = 3, neutral: str = NEUTRAL, temperature: float = 0.7) -> dict:
    """Mean P(orig) − mean P(ablated) over the usable samples (NaN when none is usable)."""
    prompt = load("skillbook.papers.skillc", "judge").strip().format(instruction=instruction, a=render_actions(actions, observations),
                                 b=render_actions(ablate(actions, cand, neutral), None, cand.indices),
                                 neutral=neutral, outcome="task completed" if success else "task not completed")
    got, bad = [], 0
    for k in range(samples):
        c = llm.chat([{"role": "user", "content": prompt}], temperature=temperature if samples > 1 else 0.0,
                     max_tokens=40, seed=k)
        p = parse_probabilities(c.text)
        if p is None:
            bad += 1
        else:
            got.append(p)
    if not got:
        return {"credit": float("nan"), "p_orig": float("nan"), "p_ablated": float("nan"), "unusable": bad}
    a, b = np.mean([g[0] for g in got]), np.mean([g[1] for g in got])
    return {"credit": float(a - b), "p_orig": float(a), "p_ablated": float(b), "unusable": bad}


__all__ = ["Candidate", "KINDS", "NEUTRAL", "window_candidates", "step_candidates", "dependency_candidates",
           "candidates", "ablate", "replay_score", "replay_credit", "parse_probabilities", "render_actions",
           "judge_credit"]
