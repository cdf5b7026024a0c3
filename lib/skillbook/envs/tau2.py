"""τ²-bench (retail, airline) behind the book's Env protocol, scored by the package's own evaluator.

An episode is a conversation. `reset` opens it the way τ²-bench's orchestrator does: the agent's fixed
greeting, then the simulated user's first message, which is the first observation. Each agent action
is either a tool call, written `tool_name({"arg": value, ...})`, whose result comes back as the
observation, or `respond <message>`, sent to the simulated user, whose reply comes back. The episode
ends when the user stops (###STOP###, ###TRANSFER###, ###OUT-OF-SCOPE###); its score is then
`evaluate_simulation(..., EvaluationType.ALL)`: the database-state check times the communicate check
(the reward basis of every retail and airline task; no LLM judge is involved). An episode that ends
any other way (e.g. the step budget) scores 0, as in τ²-bench.

The simulated user runs on the book's LLM client (same backend and response cache as the agent unless
`user_backend` names another), so its replies are cached and recorded like every other model call.

Splits: τ²-bench ships train and test. Our `dev` split is every fourth task of the official train
split (in the package's order) and our `train` is the rest, so train, dev and test are disjoint and
the test split is exactly the official one.
"""
from __future__ import annotations

import json
import os
import re
import threading
from difflib import SequenceMatcher

from ..llm import LLMError, get_llm
from ..llm.backends import backend_fingerprint
from .base import EnvError, StepResult, Task, TaskIdError, check_split, parse_task_id

DOMAINS = ("retail", "airline")
FIRST_AGENT_MESSAGE = "Hi! How can I help you today?"
DEV_EVERY = 4

_lock = threading.Lock()
_loaded: dict = {}


def _tau2():
    """Import τ²-bench once, quietly and offline (litellm must not fetch its price list)."""
    with _lock:
        if not _loaded:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            # deferred: importing τ²-bench (with litellm) takes ~6 s and only its simulator needs it; and
            # it must come after the line above
            from loguru import logger
            logger.disable("tau2")
            from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage
            from tau2.data_model.simulation import SimulationRun, TerminationReason
            from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
            from tau2.registry import registry
            from tau2.user.user_simulator import UserSimulator
            from tau2.utils.llm_utils import to_litellm_messages
            _loaded.update(AssistantMessage=AssistantMessage, ToolCall=ToolCall, UserMessage=UserMessage,
                           SimulationRun=SimulationRun, TerminationReason=TerminationReason,
                           EvaluationType=EvaluationType, evaluate_simulation=evaluate_simulation,
                           registry=registry, UserSimulator=UserSimulator, to_litellm_messages=to_litellm_messages)
    return _loaded


def _ours(split: str, official: dict[str, list[str]]) -> list[str]:
    train = official["train"]
    if split == "dev":
        return [t for i, t in enumerate(train) if i % DEV_EVERY == DEV_EVERY - 1]
    if split == "train":
        return [t for i, t in enumerate(train) if i % DEV_EVERY != DEV_EVERY - 1]
    return list(official["test"])


_TOOL_CALL = re.compile(r"^\s*([A-Za-z_]\w*)\s*\((.*)\)\s*$", re.S)
_RESPOND = re.compile(r"^\s*(?:respond|say|reply|message)\s*[:\-]?\s*(.+)$", re.S | re.I)


class Tau2Bench:
    """One τ²-bench domain family; one conversation at a time per instance (runner workers get their own)."""

    name = "tau2"
    conversational = True
    gold_depends_on_history = False
    TASK_TEXT = "observation+instruction"   # the instruction is the long domain policy, the same for every task
    TASK_TYPES = DOMAINS

    def __init__(self, user_backend: str | None = None, user_max_tokens: int = 120, user_temperature: float = 0.0):
        self.user_backend = user_backend
        self.user_max_tokens = user_max_tokens
        self.user_temperature = user_temperature
        self.options = {"user_backend": user_backend, "user_max_tokens": user_max_tokens,
                        "user_temperature": user_temperature}
        self._llm = None
        self.user_calls: list = []         # the simulated user's completions (the agent loop adds them to the episode)
        self._tasks: dict[tuple[str, str], list] = {}
        self.current: Task | None = None
        self._reset_state()

    def _reset_state(self):
        self._env = self._user = self._ustate = self._native = None
        self._tools: dict = {}
        self._messages: list = []
        self._calls = 0
        self._done = False
        self._score = 0.0

    @staticmethod
    def canonical_options(options: dict) -> dict:
        """The options as run fingerprints compare them: the user's model by `backend_fingerprint` (the
        model, not where it is served), so a user model moved to another port keeps its run."""
        if options.get("user_backend"):
            options["user_backend"] = backend_fingerprint(options["user_backend"])
        return options

    # -- the model behind the simulated user -----------------------------------------------------------
    def bind_llm(self, llm) -> None:
        """The runner hands over the agent's LLM; the user runs on it (or on `user_backend`, same cache)."""
        if self.user_backend and self.user_backend != llm.backend:
            self._llm = get_llm(self.user_backend, llm.cache, seed=llm.seed)
        else:
            self._llm = llm

    # -- tasks ----------------------------------------------------------------------------------------
    def task_types(self) -> list[str]:
        return list(DOMAINS)

    def _domain_tasks(self, domain: str, split: str) -> list:
        if domain not in DOMAINS:
            raise TaskIdError(f"unknown tau2 domain {domain!r}; valid: {', '.join(DOMAINS)}")
        check_split(split)
        key = (domain, split)
        if key not in self._tasks:
            t = _tau2()
            official = t["registry"].get_task_splits_loader(domain)()
            by_id = {x.id: x for x in t["registry"].get_tasks_loader(domain)(None)}
            self._tasks[key] = [by_id[i] for i in _ours(split, official)]
        return self._tasks[key]

    def split_ids(self, task_type: str, split: str) -> list[str]:
        return [x.id for x in self._domain_tasks(task_type, split)]

    def tasks(self, split: str, task_types: list[str] | None = None) -> list[Task]:
        return [Task("tau2", d, split, i, int(x.id)) for d in (task_types or DOMAINS)
                for i, x in enumerate(self._domain_tasks(d, split))]

    def task(self, task_id: str) -> Task:
        env, domain, split, index = parse_task_id(task_id)
        if env != "tau2":
            raise TaskIdError(f"{task_id!r} is not a tau2 task id (tau2/<domain>/<split>/<index>)")
        tasks = self._domain_tasks(domain, split)
        if not 0 <= index < len(tasks):
            raise TaskIdError(f"{task_id!r}: tau2 {domain} {split} has tasks 0..{len(tasks) - 1}")
        return Task("tau2", domain, split, index, int(tasks[index].id))

    def native(self, task: Task | str):
        task = self.task(task) if isinstance(task, str) else task
        return self._domain_tasks(task.task_type, task.split)[task.index]

    # -- the conversation -----------------------------------------------------------------------------
    def reset(self, task: Task | str) -> str:
        task = self.task(task) if isinstance(task, str) else task
        t = _tau2()
        self._reset_state()
        self.current, self._native = task, self.native(task)
        self._domain = task.task_type
        try:
            self._env = t["registry"].get_env_constructor(self._domain)()
        except Exception as e:  # noqa: BLE001
            raise EnvError(f"tau2 {self._domain}: could not build the environment: {e}") from e
        self._policy = self._env.get_policy()
        self._tools = {tool.name: tool for tool in self._env.get_tools()}
        self._user = _user_simulator(t["UserSimulator"], self._chat_user, str(self._native.user_scenario))
        self._ustate = self._user.get_init_state()
        first = t["AssistantMessage"](role="assistant", content=FIRST_AGENT_MESSAGE)
        self._messages = [first]
        reply = self._user_turn(first)
        if reply is None:
            return "The user left without a request."
        return f"User: {reply}"

    def _chat_user(self, messages: list[dict]) -> str:
        if self._llm is None:
            raise EnvError("tau2: no model for the simulated user; the runner binds one (env.bind_llm(llm))")
        try:
            c = self._llm.chat(messages, temperature=self.user_temperature, max_tokens=self.user_max_tokens)
        except LLMError as e:
            raise EnvError(f"tau2 user simulator: {e}") from e
        self.user_calls.append(c)
        return c.text.strip() or "###STOP###"

    def _user_turn(self, message) -> str | None:
        """Send a message to the simulated user; its reply, or None when it ended the conversation."""
        t = _tau2()
        reply, self._ustate = self._user.generate_next_message(message, self._ustate)
        self._messages.append(reply)
        if t["UserSimulator"].is_stop(reply):
            self._done = True
            return None
        return reply.content

    def parse(self, action: str):
        """('tool', name, arguments) | ('respond', text) | None, from what the agent wrote."""
        action = (action or "").strip()
        m = _TOOL_CALL.match(action)
        if m and m.group(1) in self._tools:
            body = m.group(2).strip()
            try:
                args = json.loads(body) if body else {}
            except json.JSONDecodeError:
                return None
            return ("tool", m.group(1), args) if isinstance(args, dict) else None
        m = _RESPOND.match(action)
        if m and m.group(1).strip():
            return ("respond", m.group(1).strip().strip('"'))
        return None

    def match_action(self, action: str, valid: list[str] | None = None) -> str | None:
        """The canonical form of a parsable action, or None (the agent loop then says what is wrong)."""
        p = self.parse(action)
        if p is None:
            return None
        if p[0] == "tool":
            return f"{p[1]}({json.dumps(p[2], ensure_ascii=False)})"
        return f"respond {p[1]}"

    def step(self, action: str) -> StepResult:
        if self.current is None or self._env is None:
            raise RuntimeError("tau2: step() before reset()")
        if self._done:
            return StepResult("The conversation has ended.", self._score, True, {"success": self._score >= 1.0})
        t = _tau2()
        p = self.parse(action)
        if p is None:
            return StepResult(f"Could not read {action!r}: write tool_name({{\"arg\": value}}) or respond <message>.",
                              0.0, False, {"invalid": True})
        if p[0] == "tool":
            self._calls += 1
            call = t["ToolCall"](id=f"call_{self._calls}", name=p[1], arguments=p[2])
            self._messages.append(t["AssistantMessage"](role="assistant", tool_calls=[call]))
            result = self._env.get_response(call)
            self._messages.append(result)
            return StepResult(f"Tool result: {result.content}", 0.0, False, {"tool": p[1], "error": result.error})
        msg = t["AssistantMessage"](role="assistant", content=p[1])
        self._messages.append(msg)
        reply = self._user_turn(msg)
        if reply is None:
            self._score = self.evaluate(user_stopped=True)
            return StepResult(f"User: {self._messages[-1].content}", self._score, True,
                              {"success": self._score >= 1.0, "reward": self._score})
        return StepResult(f"User: {reply}", 0.0, False, {})

    def evaluate(self, user_stopped: bool = True, messages: list | None = None) -> float:
        """τ²-bench's reward of the conversation so far (0 unless the user ended it)."""
        t = _tau2()
        reason = t["TerminationReason"].USER_STOP if user_stopped else t["TerminationReason"].MAX_STEPS
        sim = t["SimulationRun"](id="skillbook", task_id=self._native.id, start_time="", end_time="", duration=0.0,
                                 termination_reason=reason, messages=list(messages or self._messages))
        try:
            info = t["evaluate_simulation"](simulation=sim, task=self._native, evaluation_type=t["EvaluationType"].ALL,
                                            solo_mode=False, domain=self._domain)
        except Exception as e:  # noqa: BLE001 — the evaluator's own failure costs this episode only
            raise EnvError(f"tau2 evaluator: {type(e).__name__}: {e}") from e
        return float(info.reward)

    def conversation(self) -> list[dict]:
        """The full conversation in OpenAI message form (tool results unabridged), for the records."""
        return _tau2()["to_litellm_messages"](self._messages) if self._messages else []

    def valid_actions(self) -> list[str]:
        return self.action_templates()

    def action_templates(self) -> list[str]:
        if self._env is None:
            return ["respond <message to the user>"]
        forms = ["respond <message to the user>"]
        for name, tool in self._tools.items():
            params = tool.openai_schema["function"].get("parameters", {}).get("properties", {})
            args = {k: "<" + str(v.get("type", "value")) + ">" for k, v in params.items()}
            forms.append(f"{name}({json.dumps(args)})")
        return forms

    def gold_actions(self, task: Task | str) -> list[str]:
        """The task's gold tool calls, then one message carrying the information the user must be told."""
        native = self.native(self.task(task) if isinstance(task, str) else task)
        crit = native.evaluation_criteria
        out = [f"{a.name}({json.dumps(a.arguments, ensure_ascii=False)})" for a in (crit.actions or [])
               if a.requestor == "assistant"]
        return out + ["respond " + (" ".join(crit.communicate_info or []) or "Your request is complete.")]

    @property
    def instruction(self) -> str:
        if self._env is None:
            return ""
        return (f"You are a customer service agent of the {self._domain} domain. Follow this policy:\n"
                f"{self._policy}\nHelp the user with their request. Use the tools to look up and change data; "
                "talk to the user with: respond <message>.")

    def close(self) -> None:
        self._reset_state()
        self.current = None


def _user_simulator(base, chat, instructions: str):
    """τ²-bench's UserSimulator (its prompt, guidelines and role flipping) with our chat function."""
    t = _tau2()

    class User(base):
        def _generate_next_message(self, message, state):
            if hasattr(message, "tool_messages"):
                state.messages.extend(message.tool_messages)
            else:
                state.messages.append(message)
            oai = t["to_litellm_messages"](state.system_messages + state.flip_roles())
            reply = t["UserMessage"](role="user", content=chat(oai))
            state.messages.append(reply)
            return reply, state

    return User(tools=None, instructions=instructions, llm="skillbook")


def user_talk(episodes: list[tuple[str, object]]) -> dict:
    """What the simulated user said across recorded episodes, given as (where, episode) pairs: its distinct
    opening messages, how many of its later turns repeat the agent's message before them (similarity ≥ 0.9,
    case ignored), and the groups of conversations on different tasks that are identical turn for turn
    (each member named "where (task)"). A user that only echoes carries nothing of its task."""
    def text(m: dict) -> str:
        return (m.get("content") or "").strip()

    openings: set[str] = set()
    later = echoes = 0
    same: dict[str, list[str]] = {}
    for where, e in episodes:
        transcript = e.transcript  # type: ignore[attr-defined]
        first = True
        for prev, m in zip([{}] + transcript, transcript):
            if m["role"] != "user":
                continue
            if first:
                openings.add(text(m))
                first = False
                continue
            later += 1
            echoes += (prev.get("role") == "assistant"
                       and SequenceMatcher(None, text(prev).lower(), text(m).lower()).ratio() >= 0.9)
        key = json.dumps([[m["role"], text(m), m.get("tool_calls")] for m in transcript], sort_keys=True,
                         default=str)
        same.setdefault(key, []).append(f"{where} ({e.task_id.split('/', 2)[2]})")  # type: ignore[attr-defined]
    groups = [g for g in same.values() if len({s.split(" (")[1] for s in g}) > 1]
    return {"episodes": len(episodes), "openings": openings, "later": later, "echoes": echoes, "groups": groups}


__all__ = ["Tau2Bench", "DOMAINS", "DEV_EVERY", "FIRST_AGENT_MESSAGE", "user_talk"]
