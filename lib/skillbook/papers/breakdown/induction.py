"""Skill induction: the same prompt at both levels; only the span of trajectory it reads differs.

Prompt levels (the first paper's ablation): L1 = instruction + output format; L2 = L1 + a demonstration;
L3 = L2 + abstraction rules (the default). Text skills are workflow notes (procedure + caveats);
code skills are one Python function whose instance values are parameters, caveats as comments.
"""
from __future__ import annotations

import ast
import re

from ...prompts import at_least, check_version, load
from ...records import Trajectory, render_steps
from ...skills import sandbox
from ...skills.record import Skill

PROMPT_LEVELS = ("L1", "L2", "L3")
# A text skill has at most six numbered steps (the induction and merge prompts say so). A 1.5B model that
# goes past six writes a loop ("1. look around 2. move west 3. look around …") until the token cap: in the
# book's records up to chapter 09, 29% of induction replies and 53% of merge replies had more than six
# steps, and 42% and 54% ran to the cap. The reply ends where a seventh step would begin.
SIX_STEPS = ["\n7."]


def stop_of(format: str, prompts: str) -> list[str] | None:
    """The stop sequences of a skill reply: under prompt version v2, a text skill's ends at a seventh step."""
    return SIX_STEPS if format == "text" and check_version(prompts) != "v1" else None


class InductionError(ValueError):
    """A model reply that is not a usable skill (the write is skipped, the run goes on)."""


def prompt(name: str, version: str = "v1") -> str:
    """A prompt of the first paper (`papers/breakdown/prompts/[<version>/]<name>.txt`)."""
    return load("skillbook.papers.breakdown", name, version).strip()


def render_span(trajectory: Trajectory, max_steps: int = 20, obs_chars: int = 160, middle: bool = False) -> str:
    lines = [f"Task: {trajectory.instruction}"]
    if trajectory.level == "subtask":
        lines.append(f"Subtask: {trajectory.description}")
    steps = render_steps(trajectory.steps[-max_steps:], obs_chars, middle=middle)
    if steps:
        lines.append(steps)
    outcome = "the task was completed" if trajectory.success else f"score {trajectory.score:.2f}"
    lines.append(f"Outcome: {outcome}.")
    return "\n".join(lines)


def induction_prompt(trajectory: Trajectory, format: str, prompt_level: str = "L3", prompts: str = "v1") -> str:
    if prompt_level not in PROMPT_LEVELS:
        raise ValueError(f"unknown prompt level {prompt_level!r}; valid: {', '.join(PROMPT_LEVELS)}")
    unit = "subtask" if trajectory.level == "subtask" else "task"
    guidance = []
    if prompt_level in ("L2", "L3"):
        guidance.append(prompt(f"induce_example_{format}", prompts))
    if prompt_level == "L3":
        guidance.append(prompt("induce_rules", prompts))
    head, answer = prompt("induce_instruction", prompts).format(unit=unit), prompt(f"induce_format_{format}", prompts)
    if check_version(prompts) == "v1":
        return "\n\n".join([head, render_span(trajectory), *guidance, answer])
    # v2: what is the same in every induction call comes first (the instruction, the example, the rules),
    # so that the server's prompt cache keeps it; the record follows, and the answer format stays last,
    # nearest to the answer, where a small model follows it best.
    # v3: each observation keeps its head and its tail (where a room names what lies in it and its exits;
    # cut at 160 characters from the start, the records of coin never showed the coin the agent took).
    record = render_span(trajectory, obs_chars=200, middle=True) if at_least(prompts, "v3") else \
        render_span(trajectory)
    return "\n\n".join([head, *guidance, "The record:\n" + record, answer])


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
    fn = next(n for n in ast.parse(body).body if isinstance(n, ast.FunctionDef))
    if not fn.args.args or fn.args.args[0].arg != "env":
        raise InductionError(f"the function {name} must take `env` as its first parameter")
    return m.group(1).strip().strip("*").strip(), body[:3000], name


def induce(llm, trajectory: Trajectory, format: str, prompt_level: str = "L3", skill_id: str = "",
           max_tokens: int = 220, prompts: str = "v1") -> tuple[Skill, object]:
    """Ask the model for one skill from a (sub-)trajectory; raises InductionError on an unusable reply."""
    text = induction_prompt(trajectory, format, prompt_level, prompts)
    c = llm.chat([{"role": "user", "content": text}], max_tokens=max_tokens, temperature=0.0,
                 stop=stop_of(format, prompts), role="induction")
    try:
        return _skill_from_reply(c, trajectory, format, prompt_level, skill_id), c
    except InductionError as e:
        e.completion = c  # the call was paid for; the caller records its cost
        raise


def _skill_from_reply(c, trajectory: Trajectory, format: str, prompt_level: str, skill_id: str) -> Skill:
    provenance = {"source_task": trajectory.task_id, "span": list(trajectory.span),
                  "induction_level": trajectory.level, "prompt_level": prompt_level,
                  # the state when the span ended; the task's final outcome is added when the episode ends
                  "span_success": bool(trajectory.success), "span_score": trajectory.score,
                  "subtask": trajectory.description}
    if format == "text":
        description, body = parse_text_skill(c.text)
        return Skill(skill_id, description, body, "text", provenance)
    description, body, name = parse_code_skill(c.text)
    return Skill(skill_id, description, body, "code", provenance, extra={"function": name})
