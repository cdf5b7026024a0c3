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

import json
import re
from dataclasses import asdict, dataclass, field

import numpy as np

from .agents.parsing import parse_json

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
JUDGE_PROMPT = """You judge whether an agent's actions complete its task in a text-based world.
Task: {instruction}
Run A:
{a}
Run B (the same, except that the marked steps were replaced by "{neutral}"):
{b}
Run A ended with: {outcome}.
Estimate the probability that each run completes the task. Reply with JSON only: {{"p_a": <0..1>, "p_b": <0..1>}}"""


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
        obs = f" -> {' '.join(str(observations[i]).split())[:obs_chars]}" if observations else ""
        lines.append(f"{i + 1}. {a}{mark}{obs}")
    return "\n".join(lines)


def judge_credit(llm, instruction: str, actions: list[str], observations: list[str], success: bool, cand: Candidate,
                 samples: int = 3, neutral: str = NEUTRAL, temperature: float = 0.7) -> dict:
    """Mean P(orig) − mean P(ablated) over the usable samples (NaN when none is usable)."""
    prompt = JUDGE_PROMPT.format(instruction=instruction, a=render_actions(actions, observations),
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


# -- macro skills -------------------------------------------------------------------------------------------
MACRO_PROMPT = """These consecutive actions were essential to completing a task ("{instruction}"):
{steps}
Turn them into a reusable macro: replace the specific objects and places with parameters.
Reply with JSON only: {{"name": "snake_case_name", "description": "what it achieves, one sentence", "inputs": ["obj", ...], "preconditions": "when it can be used", "steps": ["take {{obj}}", ...]}}"""

_IDENT = re.compile(r"^[a-z_][a-z0-9_]{1,40}$")


@dataclass
class Macro:
    name: str
    description: str
    inputs: list[str]
    preconditions: str
    steps: list[str]
    credit: list[float] = field(default_factory=list)

    def commands(self, *args) -> list[str]:
        values = dict(zip(self.inputs, map(str, args)))
        return [s.format(**values) for s in self.steps]

    def binding(self, actions: list[str]) -> dict[str, str] | None:
        """The input values under which the macro's steps are exactly `actions` (case aside), or None.
        A macro generalises the credited window it was written from; one that cannot reproduce it (a
        made-up step, a lost step) is not that window's skill."""
        if len(actions) != len(self.steps):
            return None
        bound: dict[str, str] = {}
        for template, action in zip(self.steps, actions):
            pattern, fresh = "", []
            for i, piece in enumerate(re.split(r"\{(\w+)\}", template)):  # literal, name, literal, ...
                if i % 2 == 0:
                    pattern += re.escape(piece)
                elif piece in bound:            # bound by an earlier step: must be the same text
                    pattern += re.escape(bound[piece])
                elif piece in fresh:            # repeated within this step
                    pattern += f"(?P={piece})"
                else:
                    pattern += f"(?P<{piece}>.+?)"
                    fresh.append(piece)
            m = re.fullmatch(pattern, action.strip(), re.IGNORECASE)
            if m is None:
                return None
            bound.update({name: m.group(name).lower() for name in fresh})
        return bound

    def code(self) -> str:
        """The macro as a code skill: one env.step per template step (run in the skill sandbox)."""
        params = ", ".join(["env", *self.inputs])
        body = "\n".join(f"    env.step({_fstring(s)})" for s in self.steps)
        doc = self.description.replace('"""', "'")
        return f'def {self.name}({params}):\n    """{doc}"""\n{body}\n'


def _fstring(template: str) -> str:
    parts = re.split(r"\{(\w+)\}", template)
    out = []
    for i, p in enumerate(parts):
        out.append(f"str({p})" if i % 2 else json.dumps(p))
    return " + ".join(x for x in out if x != '""') or '""'


def parse_macro(text: str) -> Macro | None:
    """A well-formed macro from the model's reply: identifier name, inputs that are identifiers, and steps
    whose placeholders are all inputs; None otherwise."""
    obj = parse_json(text, dict)
    if obj is None:
        return None
    try:
        name = str(obj["name"]).strip().lower()
        inputs = [str(x).strip() for x in obj.get("inputs", [])]
        steps = [str(x).strip() for x in obj["steps"] if str(x).strip()]
        desc = str(obj["description"]).strip()
    except (KeyError, TypeError):
        return None
    if not _IDENT.match(name) or not steps or not desc or not all(_IDENT.match(i) for i in inputs):
        return None
    used = {p for s in steps for p in re.findall(r"\{(\w+)\}", s)}
    if not used <= set(inputs) or any("{" in re.sub(r"\{\w+\}", "", s) or "}" in re.sub(r"\{\w+\}", "", s) for s in steps):
        return None
    return Macro(name, desc, [i for i in inputs if i in used] or inputs, str(obj.get("preconditions", "")).strip(), steps)


def make_macro(llm, instruction: str, actions: list[str]) -> Macro | None:
    c = llm.chat([{"role": "user", "content": MACRO_PROMPT.format(instruction=instruction,
                                                                   steps="\n".join(f"- {a}" for a in actions))}],
                 temperature=0.0, max_tokens=200)
    return parse_macro(c.text)


def macro_skill(macro: Macro, skill_id: str, source: dict):
    from .skills.record import Skill
    return Skill(id=skill_id, description=macro.description, body=macro.code(), format="code",
                 provenance={"induction_level": "credit", **source},
                 extra={"macro": asdict(macro), "credit_history": list(macro.credit)})


__all__ = ["Candidate", "KINDS", "NEUTRAL", "window_candidates", "step_candidates", "dependency_candidates",
           "candidates", "ablate", "replay_score", "replay_credit", "JUDGE_PROMPT", "parse_probabilities",
           "render_actions", "judge_credit", "Macro", "parse_macro", "make_macro", "macro_skill"]


# -- the library -------------------------------------------------------------------------------------------
def add_macro(library, skill, tau_dup: float = 0.85) -> str:
    """Add a macro skill; a near-duplicate description (cosine ≥ tau_dup) merges into the existing skill,
    which keeps the higher-credit template and the union of credit histories. Returns 'added' | 'merged'."""
    hits = library.search(skill.description, k=1, threshold=tau_dup)
    if not hits:
        library.add(skill)
        return "added"
    old = hits[0][0]
    history = list(old.extra.get("credit_history", [])) + list(skill.extra.get("credit_history", []))
    if np.mean(skill.extra.get("credit_history") or [0]) > np.mean(old.extra.get("credit_history") or [0]):
        name = old.extra["macro"]["name"]
        old.body, old.extra["macro"] = skill.body.replace(f"def {skill.extra['macro']['name']}(", f"def {name}("), \
            {**skill.extra["macro"], "name": name}
    old.extra["credit_history"] = history
    library.log("merged", skill=old.id, merged=skill.id)
    return "merged"


__all__ += ["add_macro"]


# -- the pipeline -------------------------------------------------------------------------------------------
@dataclass
class SkillCSettings:
    min_len: int = 1               # candidate windows: lengths min_len..max_len
    max_len: int = 3
    kinds: tuple = KINDS
    max_candidates: int = 12       # per successful trajectory (evenly spread over its candidates)
    judge_samples: int = 2
    credit_source: str = "judge"   # which credit makes macros: "judge" (the paper) or "replay" (ground truth)
    min_credit: float = 0.1
    n_macros: int = 4              # at most this many macros (highest credit first)
    k: int = 3                     # retrieval
    threshold: float = 0.3
    rerank: bool = False

    def validate(self) -> "SkillCSettings":
        if self.credit_source not in ("judge", "replay"):
            raise ValueError(f"unknown credit source {self.credit_source!r}; valid: judge, replay")
        window_candidates(0, self.min_len, self.max_len)
        candidates([], kinds=self.kinds)
        return self


def spread(items: list, n: int) -> list:
    """At most n items, evenly spaced (deterministic)."""
    if len(items) <= n:
        return list(items)
    idx = np.linspace(0, len(items) - 1, n).round().astype(int)
    return [items[i] for i in dict.fromkeys(idx)]


def credit_table(path, llm, env, episodes, settings: SkillCSettings, progress: bool = True):
    """Judge and replay credit of the candidates of every successful episode; one JSON line per candidate,
    appended as it is computed, so an interrupted run resumes."""
    import pandas as pd
    from tqdm.auto import tqdm
    from pathlib import Path
    path = Path(path)
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            r = json.loads(line)
            done[(r["task_id"], r["candidate"])] = r
    todo = []
    for e in episodes:
        if not e.success or not e.steps:
            continue
        valid = [s for s in e.steps if s.valid]
        cands = spread(candidates(valid, settings.min_len, settings.max_len, settings.kinds), settings.max_candidates)
        todo += [(e, valid, c) for c in cands]
    rows = []
    originals: dict[str, float] = {}
    for e, valid, c in tqdm(todo, desc="credit", disable=not progress):
        key = (e.task_id, c.label)
        if key in done:
            rows.append(done[key])
            continue
        actions = [s.action for s in valid]
        if e.task_id not in originals:
            originals[e.task_id] = replay_score(env, e.task_id, actions)
        j = judge_credit(llm, e.instruction, actions, [s.observation for s in valid], e.success, c,
                         samples=settings.judge_samples)
        r = {"task_id": e.task_id, "task_type": e.task_type, "candidate": c.label, "kind": c.kind,
             "indices": list(c.indices), "actions": [actions[i] for i in c.indices],
             "replay_original": originals[e.task_id],
             "replay_credit": originals[e.task_id] - replay_score(env, e.task_id, ablate(actions, c)),
             "judge_credit": j["credit"], "p_orig": j["p_orig"], "p_ablated": j["p_ablated"], "unusable": j["unusable"]}
        with path.open("a") as fh:
            fh.write(json.dumps(r) + "\n")
        rows.append(r)
    return pd.DataFrame(rows)


def build_library(llm, credits, episodes, settings: SkillCSettings):
    """Macro skills from the highest-credit contiguous windows (≥ 2 actions), duplicates merged."""
    from .skills.library import SkillLibrary
    lib = SkillLibrary()
    by_task = {e.task_id: e for e in episodes}
    col = f"{settings.credit_source}_credit"
    pool = credits[(credits["kind"] == "window") & (credits["actions"].map(len) >= 2) & (credits[col] >= settings.min_credit)]
    pool = pool.sort_values([col, "task_id", "candidate"], ascending=[False, True, True])
    log = []
    for _, r in pool.iterrows():
        if len(lib) >= settings.n_macros:
            break
        macro = make_macro(llm, by_task[r.task_id].instruction, list(r.actions))
        if macro is None:
            log.append({"candidate": f"{r.task_id} {r.candidate}", "result": "unusable macro reply"})
            continue
        if macro.binding(list(r.actions)) is None:
            log.append({"candidate": f"{r.task_id} {r.candidate}", "result": "does not reproduce its window",
                        "macro": macro.name})
            continue
        macro.credit = [float(r[col])]
        what = add_macro(lib, macro_skill(macro, lib.new_id("m"), {"source_task": r.task_id, "candidate": r.candidate}))
        log.append({"candidate": f"{r.task_id} {r.candidate}", "result": what, "macro": macro.name})
    return lib, log


__all__ += ["SkillCSettings", "spread", "credit_table", "build_library"]


CONDITIONS = ("none", "subtask-text", "credit")


@dataclass
class SkillCRun:
    credits: object               # DataFrame: one row per candidate
    library: object               # the macro SkillLibrary
    build_log: list
    test: object                  # DataFrame: one row per test episode and condition
    train_episodes: list


def run_skillc(run_dir, llm, tasks: dict[str, list[str]], agent: dict, settings: SkillCSettings,
               env_options: dict | None = None, workers: int = 1, text_library=None, progress: bool = True) -> SkillCRun:
    """Collect → credit (judge and replay) → macros → test conditions (none, the transfer experiment's
    subtask-level text skills when given, credit macros as one stream). Every stage resumes."""
    from pathlib import Path

    import pandas as pd

    from .agents import AgentConfig
    from .envs import make_env, parse_task_id
    from .experiment import collect, load_condition, require_splits, run_condition
    from .io import atomic_write_json
    from .memory import InducedMemory, NoMemory
    from .skills.library import SkillLibrary

    settings.validate()
    require_splits(tasks, ("train", "test"), "run_skillc")
    run_dir = Path(run_dir)
    config = AgentConfig(level="task", **agent)
    train = collect(run_dir / "collect", llm, tasks["train"], config, env_options, workers)
    name = parse_task_id(tasks["train"][0])[0]
    env = make_env(name, **(env_options or {}).get(name, {}))
    try:
        credits = credit_table(run_dir / "credits.jsonl", llm, env, train, settings, progress)
    finally:
        env.close()
    path = run_dir / "library.json"
    if path.exists():
        saved = json.loads(path.read_text())
        library, log = SkillLibrary().load_state(saved["library"]), saved["log"]
    else:
        library, log = build_library(llm, credits, train, settings) if len(credits) else (SkillLibrary(), [])
        atomic_write_json(path, {"library": library.state(), "log": log})
    memories = {"none": (NoMemory, False)}
    if text_library is not None:
        memories["subtask-text"] = (lambda: InducedMemory(llm, "text", library=text_library, frozen=True,
                                                          k=settings.k, threshold=settings.threshold), False)
    memories["credit"] = (lambda: credit_memory(library, settings), True)
    frames = []
    for cond, (make, stream) in memories.items():
        d = run_dir / "test" / cond
        run_condition(d, llm, tasks["test"], config, make, env_options=env_options, workers=workers, stream=stream,
                      desc=f"test: {cond}")
        frames.append(load_condition(d)[1].assign(condition=cond))
    return SkillCRun(credits, library, log, pd.concat(frames, ignore_index=True), train)


def credit_memory(library, settings: SkillCSettings):
    """A CreditMemory over a copy of the macro library (its usage statistics change as the stream runs)."""
    from .memory import CreditMemory
    return CreditMemory(library.filtered(lambda s: True), k=settings.k, threshold=settings.threshold,
                        rerank=settings.rerank)


__all__ += ["CONDITIONS", "SkillCRun", "run_skillc"]
