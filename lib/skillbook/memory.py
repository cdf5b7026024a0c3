"""The two hooks every paper's method plugs into.

    retrieve(query, context) -> [Skill]       before the task (task level) or each subtask (subtask level)
    write(trajectory, context) -> [Skill]     after the task or each subtask (`records.Trajectory`)
    finish(episode, context)                  when the episode has ended (its final outcome is known)

`context` describes the task: task_id, task_type, env, level, position (in the stream), instruction,
observation (the first one). State is saved with every checkpoint (`state()` / `load_state()`), so a
resumed stream has the same memory; `settings()` is what defines the policy (class and parameters, a
library by the hash of its content), so a run resumed with other settings is refused.

The policies of the papers live with their papers (`skillbook.papers.<paper>.memory`); here are the
two every experiment shares: no memory, and the placebo that any prompt-changing memory is read
against.
"""
from __future__ import annotations

import hashlib
import json

from .records import Call, Trajectory
from .skills import Skill, render_skills


class MemoryPolicy:
    name = "base"
    _calls: list | None = None

    def record_call(self, role: str, completion) -> None:
        """Remember a model call made by the policy (induction, merging), for the episode's costs."""
        if self._calls is None:
            self._calls = []
        new = (completion.server_timings or {}).get("prompt_n")
        self._calls.append(Call(role, completion.prompt_tokens, completion.completion_tokens,
                                completion.latency_s, completion.cached, new))

    def pop_calls(self) -> list:
        calls, self._calls = self._calls or [], []
        return calls

    def callable_code(self, name: str) -> list[str] | None:
        """Definitions to load for calling code skill `name` (with its dependencies), or None."""
        return None

    def retrieve(self, query: str, context: dict) -> list[Skill]:
        return []

    def render(self, skills: list[Skill]) -> str:
        """The prompt block for retrieved skills (a policy with structured skills overrides it)."""
        return render_skills(skills)

    def write(self, trajectory: Trajectory, context: dict) -> list[Skill]:
        return []

    def finish(self, episode, context: dict) -> None:
        """After the episode: its final outcome is known (e.g. to label the skills it wrote)."""

    def state(self) -> dict:
        return {}

    def load_state(self, state: dict) -> None:
        pass

    def settings(self) -> dict:
        """What defines this policy, for the resume check (subclasses add their parameters)."""
        return {"class": type(self).__name__, "name": self.name}


class NoMemory(MemoryPolicy):
    """The baseline: nothing is written, nothing is retrieved."""
    name = "none"


def content_hash(obj) -> str:
    """A short digest of JSON-able content (e.g. a frozen library's skills) for `settings()`."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


PLACEBO_TEXTS = (
    # Procedures from domains none of the book's benchmarks touch (they cannot help with any task),
    # written in the same register as induced skills.
    ("Calibrating a kitchen scale before weighing flour",
     "Place the empty bowl on the scale and press tare. Check the reading with a known weight, such as a "
     "full 500 ml water bottle. If the reading drifts, replace the battery and repeat the check."),
    ("Re-potting a root-bound house plant in spring",
     "Water the plant the day before. Loosen the root ball gently, trim dead roots, and set it in a pot "
     "one size larger with fresh soil at the same depth. Water lightly and keep it out of direct sun for a week."),
    ("Filing a travel expense claim with receipts",
     "Collect every receipt, note the date, amount and purpose of each, convert foreign amounts at the "
     "card's rate, total them per category, attach scans, and submit before the end of the month."),
    ("Tuning a guitar string by ear against a reference note",
     "Play the reference note and the open string together, listen for beating, and turn the peg slowly "
     "until the beating disappears. Tune up to the note rather than down so the string holds its pitch."),
    ("Changing a bicycle inner tube after a puncture",
     "Release the brake, remove the wheel, lever one side of the tyre off the rim, pull out the tube, find "
     "and remove the cause of the puncture, insert a slightly inflated new tube, refit the tyre and pump it up."),
    ("Writing a clear subject line for a work email",
     "State the action and the deadline in a few words, put the project name first, avoid vague words "
     "such as update or question, and change the subject when the topic of the thread changes."),
)


def _match_shape(text: str, template: str) -> str:
    """`text` (repeated as needed) laid out in the lines of `template`: the same number of lines, each of
    the same length, so the placebo takes the same room in the prompt and tokenises to about as many
    tokens. Blank lines stay blank; consecutive lines continue the text where the last one stopped."""
    stream = (text + " ") * (len(template) // max(1, len(text)) + 2)
    out, at = [], 0
    for line in template.split("\n"):
        if not line.strip():
            out.append(line)
            continue
        while stream[at].isspace():
            at += 1
        chunk = stream[at:at + len(line)]
        at += len(line)
        out.append(chunk[:-1] + "." if chunk[-1].isspace() else chunk)
    return "\n".join(out)


class ShownInstead(MemoryPolicy):
    """A policy that shows something else in place of what `inner` retrieves (a placebo): `inner` writes,
    learns and is saved as usual, and its model calls are the episode's."""

    def __init__(self, inner: MemoryPolicy):
        self.inner = inner

    def write(self, trajectory: Trajectory, context: dict) -> list[Skill]:
        written = self.inner.write(trajectory, context)
        self._calls = (self._calls or []) + self.inner.pop_calls()
        return written

    def finish(self, episode, context: dict) -> None:
        self.inner.finish(episode, context)

    def pop_calls(self) -> list:
        return super().pop_calls() + self.inner.pop_calls()

    def state(self) -> dict:
        return self.inner.state()

    def load_state(self, state: dict) -> None:
        self.inner.load_state(state)


class PlaceboMemory(ShownInstead):
    """The noise floor of a prompt-changing memory: the same policy writes and retrieves as usual, but
    every retrieved skill is shown as an irrelevant skill of the same shape — description and body of
    the same length in characters, line by line — in the same prompt slot. A memory that helps only as
    much as its placebo helps because its prompt changed, not because of what it says.

    The inner policy still learns from this agent's own trajectories (which the placebo prompts shaped),
    so the placebo's library grows as the real one would on those trajectories."""

    def __init__(self, inner: MemoryPolicy):
        super().__init__(inner)
        self.name = f"placebo-{inner.name}"

    def retrieve(self, query: str, context: dict) -> list[Skill]:
        real = self.inner.retrieve(query, context)
        seed = int(hashlib.sha256(str(context.get("task_id", "")).encode()).hexdigest(), 16)
        out = []
        for i, s in enumerate(real):
            description, body = PLACEBO_TEXTS[(seed + i) % len(PLACEBO_TEXTS)]
            out.append(Skill(id=f"placebo-{s.id}", description=_match_shape(description, s.description),
                             body=_match_shape(body, s.body), format="text",
                             provenance={"placebo_for": s.id}))
        return out

    def settings(self) -> dict:
        return {"class": "PlaceboMemory", "inner": self.inner.settings()}


__all__ = ["MemoryPolicy", "NoMemory", "PlaceboMemory", "ShownInstead", "content_hash", "PLACEBO_TEXTS"]
