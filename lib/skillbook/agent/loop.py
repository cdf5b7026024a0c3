"""The one agent loop of the book.

Subtask level (Planner → Executor → Summarizer, the first paper's §3.1):

    summary = ""
    repeat at most max_subtasks times, within max_steps environment steps in all:
        subtask  = Planner(goal, summary, observation)        # or DONE
        skills   = memory.retrieve(subtask)
        τ_k      = Executor: ReAct on the subtask until it says "subtask done", the world ends, or its budget
        summary  = Summarizer(summary, τ_k);  memory.write(τ_k)

Task level is the special case of one subtask — the instruction itself — with no planner and no
summarizer: `memory.retrieve(instruction)` before, `memory.write(τ)` after. Same code path.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass

from ..envs import make_env
from ..envs.base import Env, EnvError, Task
from ..llm import LLM, Completion, LLMError
from ..memory import MemoryPolicy, NoMemory
from ..prompts import check_version
from ..records import Call, Episode, Step, Subtask
from ..skills.sandbox import JailStartError, JailUnavailable, Limits, SkillCallError, parse_call, run
from ..text import cut
from .parsing import match_action, normalize, parse_reply, suggestions
from .planner import PLANNERS, template

LEVELS = tuple(PLANNERS)

# Part of every run's settings fingerprint (run.streams.settings_of): bump it whenever the loop's behaviour
# changes (parsing, loop guards, feedback, what a prompt shows), so records made by an earlier loop are
# never resumed or replayed as if this one had made them. The agent's prompt files are fingerprinted too.
#   1  the first book; 2  the first valid line of a prefix-less reply, task query = instruction + first
#   observation, examples from a fresh simulator, stuck = (action, observation) seen before, all valid
#   actions shown after an invalid one when they are few
AGENT_REVISION = 2


@dataclass
class AgentConfig:
    level: str = "task"            # task | subtask
    max_steps: int = 50            # environment steps per episode (both levels; the paper's budget)
    max_subtasks: int = 15         # the paper's subtask budget
    max_subtask_steps: int = 15    # our choice (the paper is silent): one subtask cannot eat the whole budget
    n_examples: int = 1            # example trajectories from TRAIN gold paths of the same task type (0–2)
    example_steps: int = 6         # steps shown per example
    list_actions_max: int = 40     # list valid actions when there are at most this many, else action forms
    max_tokens: int = 48           # executor reply ("Thought: … / Action: …")
    temperature: float = 0.0
    loop_patience: int = 5         # this many invalid, blocked or repeated actions in a row end the (sub)task
    resample_temperature: float = 0.7  # a reply that repeats the previous action is re-sampled once at this temperature
    context_limit: int = 6000      # prompt tokens beyond which the oldest turns are dropped
    obs_chars: int = 700           # observations are cut to this many characters
    prompts: str = "v1"            # prompt version (skillbook.prompts.PROMPT_VERSIONS): v2 for new studies

    def validate(self) -> AgentConfig:
        check_version(self.prompts)
        if self.level not in LEVELS:
            raise ValueError(f"unknown agent level {self.level!r}; valid: {', '.join(LEVELS)}")
        for name in ("max_steps", "max_subtasks", "max_subtask_steps", "max_tokens", "loop_patience",
                     "context_limit", "obs_chars", "list_actions_max"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"agent parameter {name} must be a positive integer, got {value!r}")
        if not 0 <= self.n_examples <= 2:
            raise ValueError(f"n_examples must be 0, 1 or 2, got {self.n_examples!r}")
        return self

    def record(self) -> dict:
        """The config as runs record and fingerprint it. A field added after records exist is left out
        at its default (`LATER_FIELDS`), so that the records made before it keep their fingerprints."""
        return {k: v for k, v in asdict(self).items() if LATER_FIELDS.get(k, object()) != v}


# Fields added to AgentConfig after chapters 01-09 were recorded, with the value they implicitly had.
LATER_FIELDS = {"prompts": "v1"}


class Agent:
    def __init__(self, llm: LLM, config: AgentConfig | None = None, memory: MemoryPolicy | None = None):
        self.llm = llm
        self.config = (config or AgentConfig()).validate()
        self.memory = memory or NoMemory()
        self.planner = PLANNERS[self.config.level](self.config)
        self.stop: threading.Event | None = None   # when set, the episode stops before its next model call

    # -- the episode ----------------------------------------------------------------------------------
    def run(self, env: Env, task: Task | str, *, stream: str = "", position: int = 0) -> Episode:
        """One episode. Simulator, model and jail-start failures (EnvError, LLMError, JailStartError) end it
        with `error` set: the runner treats such an episode as an infrastructure error, not as the agent's
        failure."""
        cfg = self.config
        task = env.task(task) if isinstance(task, str) else task
        ep = Episode(task_id=task.id, env=task.env, task_type=task.task_type, split=task.split, agent=cfg.level,
                     memory=self.memory.name, stream=stream, position=position, seed=self.llm.seed,
                     config={**cfg.record(), "backend": self.llm.backend})
        t0 = time.perf_counter()
        try:
            example = self._example_text(env, task)
            obs = env.reset(task)
            self._env_calls(env, ep)
            ep.instruction = env.instruction
            context = self._loop(env, task, ep, obs, example)
            self.memory.finish(ep, context)
            ep.calls += self.memory.pop_calls()
            if env.conversational:
                ep.transcript = env.conversation()
        except (EnvError, LLMError, JailStartError) as e:
            if isinstance(e, LLMError) and not e.retryable:
                # the request itself was refused (e.g. longer than the context): the agent's own outcome
                ep.stop_reason, ep.note = "llm_rejected", str(e)
            else:
                ep.error = f"{type(e).__name__}: {e}"
                ep.stop_reason = "error"
            if ep.subtasks and not ep.subtasks[-1].end:
                ep.subtasks[-1].end = len(ep.steps)
        ep.wall_s = time.perf_counter() - t0
        return ep

    def _loop(self, env: Env, task: Task, ep: Episode, obs: str, example: str) -> dict:
        """plan → retrieve → execute → summarise → write, once per subtask (once at task level); returns
        the task context memory saw."""
        cfg, planner = self.config, self.planner
        summary = ""
        context = {"task_id": task.id, "task_type": task.task_type, "env": task.env, "level": cfg.level,
                   "position": ep.position, "instruction": ep.instruction, "observation": obs}
        for k in range(planner.max_subtasks):
            steps_left = cfg.max_steps - len(ep.steps)
            if steps_left <= 0:
                ep.stop_reason = "step_budget"
                return context
            planned = planner.next_subtask(self, ep, summary, obs, steps_left)
            if planned is None:
                ep.stop_reason = "planner_done"
                return context
            description, budget = planned
            query = planner.query(description, context)
            skills = self.memory.retrieve(query, context)
            ep.calls += self.memory.pop_calls()
            sub = Subtask(index=k, description=description, start=len(ep.steps),
                                retrieved=[s.id for s in skills], query=query)
            ep.subtasks.append(sub)
            ep.retrieved += sub.retrieved
            conversation: list[dict] = []      # the executor's; from prompt v3 the summarizer is a turn of it
            obs = self._execute(env, ep, sub, summary, obs, skills, example, budget, conversation)
            sub.end = len(ep.steps)
            summary = planner.summarize(self, ep, summary, sub, conversation)
            written = self.memory.write(planner.trajectory(ep, sub), context)
            ep.calls += self.memory.pop_calls()
            sub.written = [s.id for s in written]
            ep.written += sub.written
            if sub.stop_reason == "env_done":
                ep.stop_reason = sub.stop_reason
                return context
        ep.stop_reason = planner.out_of_subtasks(sub)
        return context

    # -- executor: ReAct on one (sub)task, append-only conversation ----------------------------------
    def _execute(self, env, ep: Episode, sub: Subtask, summary: str, obs: str, skills, example: str,
                 budget: int, messages: list[dict]) -> str:
        """ReAct on one (sub)task; `messages` (empty on entry) is left holding its conversation."""
        cfg = self.config
        finish_rule = template(self.planner.finish_rule, cfg.prompts).strip()
        subtask = self.planner.header(summary, sub)
        valid = env.valid_actions()
        skill_text = self.memory.render(skills)
        if any(sk.format == "code" for sk in skills):
            skill_text += "\nTo run a code skill as one action, write: Action: call <name>(<arguments>)\n"
        first = template("executor_first", cfg.prompts).format(
            skills=_block(skill_text), example=_block(example), instruction=ep.instruction, subtask=subtask,
            actions=self._actions_text(env, valid), observation=cut(obs, cfg.obs_chars))
        messages[:] = [{"role": "system",
                        "content": template("executor_system", cfg.prompts).format(finish_rule=finish_rule).strip()},
                       {"role": "user", "content": first.strip()}]
        shown_actions = set(valid)
        stuck = 0               # consecutive invalid, blocked or repeated actions (and repeated useless macro calls)
        seen = set()            # (action, observation) pairs this (sub)task has already produced
        last_before = None      # the observation before the last environment step
        last_macro = None       # (call, observation after it) of the last code-skill call
        while len(ep.steps) - sub.start < budget:
            c = self.call("executor", ep, messages)
            is_valid = lambda a, valid=valid: self._match(env, a, valid) is not None  # noqa: E731
            parsed = parse_reply(c.text, is_valid)
            last = ep.steps[-1] if ep.steps and ep.steps[-1].subtask == sub.index else None
            if cfg.resample_temperature > 0 and last is not None and (
                    c.text.strip() == last.raw.strip() or match_action(parsed.action, valid) == last.action):
                # Greedy decoding of a small model repeats itself; one seeded sample often breaks the loop.
                c = self.call("executor", ep, messages, temperature=cfg.resample_temperature,
                               seed=self.llm.seed * 1000 + len(ep.steps))
                parsed = parse_reply(c.text, is_valid)
            messages.append({"role": "assistant", "content": c.text.strip()})
            call = ep.calls[-1]
            if parsed.finish and self.planner.can_finish:
                sub.stop_reason = "subtask_done"
                ep.steps.append(Step(parsed.thought, "finish", "", ep.score, c.text, True, sub.index, call))
                return obs
            if parsed.action.lower().startswith("call "):
                text, done = self._macro(env, ep, sub, parsed, c.text, call, budget - (len(ep.steps) - sub.start))
                obs = ep.steps[-1].observation if ep.steps and ep.steps[-1].valid else obs
                if done:
                    sub.stop_reason = "env_done"
                    return obs
                valid = env.valid_actions()
                messages.append({"role": "user", "content": text})
                # The same call again with nothing changed is a loop like any repeated action.
                this = (normalize(parsed.action), text)
                stuck = stuck + 1 if this == last_macro else 0
                last_macro = this
                if stuck >= cfg.loop_patience:
                    sub.stop_reason = "loop"
                    return obs
                self._trim(messages, c)
                continue
            action = self._match(env, parsed.raw_action or parsed.action if env.conversational
                                 else parsed.action, valid)
            feedback = None
            if action is None:
                feedback = f"'{parsed.action}' is not a valid action here." + (
                    " Keep the thought short and end with 'Action: …'." if not parsed.action else
                    # When the valid actions are few they are all shown again (the calibration's real case:
                    # 'look in the kitchen cupboard' with only 'take coin' and 'look around' possible got
                    # 'Similar valid actions: look around' and looped); else the most similar ones.
                    f" Valid actions: {', '.join(sorted(valid))}." if len(valid) <= cfg.list_actions_max else
                    f" Similar valid actions: {', '.join(suggestions(parsed.action, valid))}.")
            elif last is not None and action == last.action and last.observation == last_before:
                feedback = f"Nothing changed the last time you did '{action}'. Choose a different action."
            if feedback is not None:
                # Not sent to the environment; counts as a step, as the paper's budget counts every turn.
                ep.steps.append(Step(parsed.thought, parsed.action or action or "", feedback, ep.score, c.text,
                                     False, sub.index, call))
                messages.append({"role": "user", "content": f"Observation: {feedback}"})
                stuck += 1
            else:
                last_before = cut(obs, cfg.obs_chars)
                r = env.step(action)
                self._env_calls(env, ep)
                obs, ep.score, ep.success = r.observation, r.score, bool(r.info.get("success", r.score >= 1.0))
                ep.steps.append(Step(parsed.thought, action, cut(obs, cfg.obs_chars), r.score, c.text, True,
                                     sub.index, call))
                if r.done:
                    sub.stop_reason = "env_done"
                    return obs
                # A step that leads where the same action led before in this (sub)task (an open/close or
                # look-around cycle) makes no progress; a repeated action with a new outcome does.
                pair = (action, cut(obs, cfg.obs_chars))
                stuck = stuck + 1 if pair in seen else 0
                seen.add(pair)
                valid = env.valid_actions()
                text = f"Observation: {cut(obs, cfg.obs_chars)}"
                if set(valid) != shown_actions and len(valid) <= cfg.list_actions_max:
                    text += f"\nValid actions now: {', '.join(sorted(valid))}"
                    shown_actions = set(valid)
                messages.append({"role": "user", "content": text})
            if stuck >= cfg.loop_patience:
                sub.stop_reason = "loop"
                return obs
            self._trim(messages, c)
        sub.stop_reason = "step_budget"
        return obs

    def _macro(self, env, ep: Episode, sub: Subtask, parsed, raw: str, call: Call, budget: int):
        """Run a retrieved code skill as one macro action; each command it issues is a recorded step."""
        try:
            name, args = parse_call(parsed.action[5:])
        except SkillCallError as e:
            return self._refuse(ep, sub, parsed, raw, call, str(e)), False
        defs = self.memory.callable_code(name)
        if defs is None:
            return self._refuse(ep, sub, parsed, raw, call, f"there is no code skill named {name!r}"), False
        first = [True]

        def step(action: str):
            matched = match_action(action, env.valid_actions())
            s = Step(parsed.thought if first[0] else "", action, "", ep.score, raw if first[0] else "",
                     matched is not None, sub.index, call if first[0] else None, macro=name)
            first[0] = False
            if matched is None:
                s.observation = f"'{action}' is not a valid action here."
                ep.steps.append(s)
                return s.observation, False
            r = env.step(matched)
            s.action, s.observation, s.score = matched, cut(r.observation, self.config.obs_chars), r.score
            ep.score, ep.success = r.score, bool(r.info.get("success", r.score >= 1.0))
            ep.steps.append(s)
            return r.observation, r.done

        try:
            result = run(defs, (name, args), step, Limits(max_commands=max(1, min(20, budget))))
        except JailUnavailable as e:      # no jail on this machine: the call is refused, the episode goes on
            return self._refuse(ep, sub, parsed, raw, call, f"skill {name} cannot run here: {e}"), False
        if not result.commands:
            return self._refuse(ep, sub, parsed, raw, call, f"skill {name} issued no action"
                                + (f" ({result.error})" if result.error else "")), False
        last = result.commands[-1][1]
        text = (f"Observation: skill {name} ran {len(result.commands)} actions"
                + (f" and stopped: {result.error}" if result.error else "")
                + f". Last observation: {cut(last, self.config.obs_chars)}")
        return text, result.done

    @staticmethod
    def _match(env, action: str, valid: list[str]) -> str | None:
        """The valid action meant, by the env's own matcher for free-form actions (τ²-bench) or by spelling."""
        if env.conversational:
            return env.match_action(action, valid)
        return match_action(action, valid)

    @staticmethod
    def _env_calls(env, ep: Episode) -> None:
        """Model calls the environment made (τ²-bench's simulated user), recorded with role 'user'."""
        if not env.conversational:
            return
        for c in env.user_calls:
            ep.calls.append(Call("user", c.prompt_tokens, c.completion_tokens, c.latency_s, c.cached,
                                 (c.server_timings or {}).get("prompt_n")))
        env.user_calls.clear()

    def _refuse(self, ep: Episode, sub: Subtask, parsed, raw: str, call: Call, why: str) -> str:
        ep.steps.append(Step(parsed.thought, parsed.action, why, ep.score, raw, False, sub.index, call))
        return f"Observation: {why}"

    def _actions_text(self, env, valid: list[str]) -> str:
        if len(valid) <= self.config.list_actions_max:
            return f"Valid actions: {', '.join(sorted(valid))}"
        forms = env.action_templates()
        return "Action forms (OBJ = an object or place you have seen): " + ", ".join(forms)

    def _trim(self, messages: list[dict], last: Completion) -> bool:
        """Drop the oldest turns when the conversation nears the context limit (keeps system + first message);
        whether it dropped any."""
        if last.prompt_tokens + last.completion_tokens + 300 < self.config.context_limit:
            return False
        keep = 12  # the last six exchanges
        if len(messages) <= 2 + keep:
            return False
        tail = messages[-keep:]
        if tail[0]["role"] != "assistant":
            tail = tail[1:]
        tail[1] = {"role": "user", "content": "(Earlier turns omitted.)\n" + tail[1]["content"]}
        messages[2:] = tail
        return True

    # -- helpers --------------------------------------------------------------------------------------
    def call(self, role: str, ep: Episode, messages: list[dict], max_tokens: int | None = None,
             temperature: float | None = None, seed: int | None = None) -> Completion:
        """One model call of this agent (executor, planner, summarizer), recorded in the episode."""
        if self.stop is not None and self.stop.is_set():
            raise KeyboardInterrupt("the run was stopped")
        c = self.llm.chat(messages, max_tokens=max_tokens or self.config.max_tokens,
                          temperature=self.config.temperature if temperature is None else temperature,
                          seed=seed, stop=["\nObservation", "\nObs:"], role=role)
        new = (c.server_timings or {}).get("prompt_n")
        ep.calls.append(Call(role, c.prompt_tokens, c.completion_tokens, c.latency_s, c.cached, new))
        return c

    def _example_text(self, env, task: Task) -> str:
        """Example turns from TRAIN-split gold trajectories of the same task type (never the task's own split)."""
        cfg = self.config
        if cfg.n_examples == 0:
            return ""
        key = (env.name, json.dumps(env.options, sort_keys=True, default=str), task.task_type, cfg.n_examples,
               cfg.example_steps)
        with _EXAMPLES_LOCK:
            if key not in _EXAMPLES:
                # A simulator whose gold paths depend on what it ran before gets a fresh one, so the example
                # (and every prompt after it) is the same in every run.
                source = make_env(env.name, **env.options) if env.gold_depends_on_history else env
                try:
                    _EXAMPLES[key] = _examples(source, task, cfg.n_examples, cfg.example_steps)
                finally:
                    if source is not env:
                        source.close()
        return _EXAMPLES[key]


_EXAMPLES: dict[tuple, str] = {}   # the example text is a pure function of its key: computed once per process
_EXAMPLES_LOCK = threading.Lock()


def _examples(env: Env, task: Task, n: int, steps: int) -> str:
    blocks = []
    for i in range(n):
        train = env.task(f"{task.env}/{task.task_type}/train/{i}")
        gold = env.gold_actions(train)
        obs = env.reset(train)
        lines = [f"Example task: {env.instruction}", f"Observation: {cut(obs, 200)}"]
        for action in gold[:steps]:
            r = env.step(action)
            lines += [f"Action: {action}", f"Observation: {cut(r.observation, 120)}"]
        if len(gold) > steps:
            lines.append("(… the example continues until the task is complete.)")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n(End of example.)"


def _block(text: str) -> str:
    return text.strip() + "\n\n" if text.strip() else ""

