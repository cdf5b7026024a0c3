"""Skill induction: the same prompt at both levels; only the span of trajectory it reads differs.

Prompt levels (the first paper's ablation): L1 = instruction + output format; L2 = L1 + a demonstration;
L3 = L2 + abstraction rules (the default). Text skills are workflow notes (procedure + caveats);
code skills are one Python function whose instance values are parameters, caveats as comments.
"""
from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

from . import sandbox
from .record import Skill

PROMPT_LEVELS = ("L1", "L2", "L3")


class InductionError(ValueError):
    """A model reply that is not a usable skill (the write is skipped, the run goes on)."""


@lru_cache(maxsize=None)
def _t(name: str) -> str:
    return resources.files("skillbook.skills").joinpath("prompts", f"{name}.txt").read_text(encoding="utf-8").strip()


def render_span(trajectory: dict, max_steps: int = 20, obs_chars: int = 160) -> str:
    steps = trajectory["steps"][-max_steps:]
    lines = [f"Task: {trajectory['instruction']}"]
    if trajectory.get("level") == "subtask":
        lines.append(f"Subtask: {trajectory['description']}")
    for s in steps:
        obs = " ".join(str(s["observation"]).split())[:obs_chars]
        lines.append(f"> {s['action']}\n  {obs}")
    outcome = "the task was completed" if trajectory.get("success") else f"score {trajectory.get('score', 0):.2f}"
    lines.append(f"Outcome: {outcome}.")
    return "\n".join(lines)


def induction_prompt(trajectory: dict, format: str, prompt_level: str = "L3") -> str:
    if prompt_level not in PROMPT_LEVELS:
        raise ValueError(f"unknown prompt level {prompt_level!r}; valid: {', '.join(PROMPT_LEVELS)}")
    unit = "subtask" if trajectory.get("level") == "subtask" else "task"
    parts = [_t("induce_instruction").format(unit=unit), render_span(trajectory)]
    if prompt_level in ("L2", "L3"):
        parts.append(_t(f"induce_example_{format}"))
    if prompt_level == "L3":
        parts.append(_t("induce_rules"))
    parts.append(_t(f"induce_format_{format}"))
    return "\n\n".join(parts)


_DESC = re.compile(r"^\s*[*#\s]*description\s*[*]*\s*:\s*(.+)$", re.I | re.M)
_CODE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def parse_text_skill(reply: str) -> tuple[str, str]:
    m = _DESC.search(reply or "")
    if not m or not m.group(1).strip():
        raise InductionError("no 'Description:' line")
    description = m.group(1).strip().strip("*").strip()
    body = reply[m.end():].strip()
    body = re.sub(r"^\s*[*#\s]*skill\s*[*]*\s*:\s*", "", body, flags=re.I)
    if len(body.split()) < 3:
        raise InductionError("the skill body is empty")
    return description, body[:1500]


def parse_code_skill(reply: str) -> tuple[str, str, str]:
    m = _DESC.search(reply or "")
    if not m or not m.group(1).strip():
        raise InductionError("no 'Description:' line")
    code = _CODE.search(reply)
    if not code:
        raise InductionError("no ```python block")
    body = code.group(1).strip() + "\n"
    try:
        name = sandbox.function_name(body)
    except (SyntaxError, ValueError) as e:
        raise InductionError(f"the code does not define one function: {e}") from None
    import ast
    fn = next(n for n in ast.parse(body).body if isinstance(n, ast.FunctionDef))
    if not fn.args.args or fn.args.args[0].arg != "env":
        raise InductionError(f"the function {name} must take `env` as its first parameter")
    return m.group(1).strip().strip("*").strip(), body[:3000], name


def induce(llm, trajectory: dict, format: str, prompt_level: str = "L3", skill_id: str = "",
           max_tokens: int = 220) -> tuple[Skill, object]:
    """Ask the model for one skill from a (sub-)trajectory; raises InductionError on an unusable reply."""
    prompt = induction_prompt(trajectory, format, prompt_level)
    c = llm.chat([{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0.0)
    try:
        return _skill_from_reply(c, trajectory, format, prompt_level, skill_id), c
    except InductionError as e:
        e.completion = c  # the call was paid for; the caller records its cost
        raise


def _skill_from_reply(c, trajectory: dict, format: str, prompt_level: str, skill_id: str) -> Skill:
    provenance = {"source_task": trajectory["task_id"], "span": list(trajectory["span"]),
                  "induction_level": trajectory.get("level", "task"), "prompt_level": prompt_level,
                  "source_success": bool(trajectory.get("success")), "source_score": trajectory.get("score", 0.0),
                  "subtask": trajectory.get("description", "")}
    if format == "text":
        description, body = parse_text_skill(c.text)
        return Skill(skill_id, description, body, "text", provenance)
    description, body, name = parse_code_skill(c.text)
    return Skill(skill_id, description, body, "code", provenance, extra={"function": name})
