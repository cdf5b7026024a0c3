"""What differs between the first paper's two architectures, as one object the loop asks.

    TaskPlanner      task level: one subtask, the instruction itself; no planner, no summarizer
    SubtaskPlanner   subtask level: a Planner call proposes each subtask (or DONE), a Summarizer call
                     condenses each finished subtask into the progress the next one starts from

The loop (`agent.loop.Agent`) is the same for both: plan → retrieve → execute → summarise → write.
"""
from __future__ import annotations

from ..envs.tasks import task_query
from ..prompts import has, load
from ..records import Episode, Subtask, Trajectory, render_steps
from ..text import cut


def template(name: str, version: str = "v1") -> str:
    return load("skillbook.agent", name, version)


class TaskPlanner:
    level = "task"
    finish_rule = "finish_task"
    can_finish = False        # the benchmarks end episodes themselves; "finish" is no action at task level

    def __init__(self, config):
        self.config = config

    @property
    def max_subtasks(self) -> int:
        return 1

    def next_subtask(self, agent, ep: Episode, summary: str, obs: str, steps_left: int):
        """(description, step budget) of the next subtask, or None when the task is done."""
        return ep.instruction, steps_left

    def query(self, description: str, context: dict) -> str:
        """What memory is asked with: at task level the task as its env names it (instruction and first
        observation: a TextWorldExpress instruction is one sentence per game, so alone it would make
        every task of a game retrieve the same skills)."""
        return task_query(context["env"], context["instruction"], context["observation"])

    def header(self, summary: str, sub: Subtask) -> str:
        """What the executor's first message says about the subtask."""
        return ""

    def summarize(self, agent, ep: Episode, summary: str, sub: Subtask, conversation: list[dict]) -> str:
        """The running summary after `sub`; `conversation` is the executor's conversation of it."""
        return summary

    def trajectory(self, ep: Episode, sub: Subtask) -> Trajectory:
        """The span memory learns from: the whole episode."""
        return Trajectory.of(ep, None, self.level)

    def out_of_subtasks(self, sub: Subtask) -> str:
        return sub.stop_reason or "step_budget"


class SubtaskPlanner(TaskPlanner):
    level = "subtask"
    finish_rule = "finish_subtask"
    can_finish = True         # the executor ends a subtask with "subtask done"

    @property
    def max_subtasks(self) -> int:
        return self.config.max_subtasks

    def next_subtask(self, agent, ep: Episode, summary: str, obs: str, steps_left: int):
        prompt = template("planner", self.config.prompts).format(
            instruction=ep.instruction, summary=summary or "nothing yet", observation=cut(obs, 400))
        messages = [{"role": "user", "content": prompt}]
        c = agent.call("planner", ep, messages, max_tokens=40)
        text = field(c.text, "subtask")
        if not text or text.strip(" .").upper() in ("DONE", "TASK DONE", "COMPLETE"):
            return None
        return text, min(steps_left, self.config.max_subtask_steps)

    def query(self, description: str, context: dict) -> str:
        return description

    def header(self, summary: str, sub: Subtask) -> str:
        return f"Progress so far: {summary or 'nothing yet'}\nYour current subtask: {sub.description}\n"

    def summarize(self, agent, ep: Episode, summary: str, sub: Subtask, conversation: list[dict]) -> str:
        """The summary after `sub`; from prompt v3 one more turn of `conversation`, the executor's."""
        version = self.config.prompts
        if has("skillbook.agent", "summarizer_turn", version):
            # One more turn of the executor's conversation (from prompt v3): everything before it is the
            # prefix the server evaluated for the executor's last step, and the summarizer reads what the
            # executor read (its first message carries the progress before this subtask).
            ask = template("summarizer_turn", version).strip().format(subtask=sub.description)
            messages = [dict(m) for m in conversation]
            if messages[-1]["role"] == "user":
                messages[-1]["content"] += "\n\n" + ask
            else:
                messages.append({"role": "user", "content": ask})
        else:
            steps = render_steps(ep.steps[sub.start:sub.end], 150, mark="…") or "(no steps)"
            prompt = template("summarizer", version).format(instruction=ep.instruction,
                                                   summary=summary or "nothing yet",
                                                   subtask=sub.description, steps=steps)
            messages = [{"role": "user", "content": prompt}]
        c = agent.call("summarizer", ep, messages, max_tokens=80)
        sub.summary = field(c.text, "summary") or summary
        return sub.summary

    def trajectory(self, ep: Episode, sub: Subtask) -> Trajectory:
        return Trajectory.of(ep, sub, self.level)

    def out_of_subtasks(self, sub: Subtask) -> str:
        return "subtask_budget"


PLANNERS = {"task": TaskPlanner, "subtask": SubtaskPlanner}


def field(text: str, name: str) -> str:
    """The value of a 'Name: value' line of a reply, else its first non-empty line."""
    for line in (text or "").splitlines():
        head, _, rest = line.partition(":")
        if head.strip(" *#").lower() == name:
            return rest.strip(" *`\"'")
    first = next((line.strip() for line in (text or "").splitlines() if line.strip()), "")
    return first.strip(" *`\"'")
