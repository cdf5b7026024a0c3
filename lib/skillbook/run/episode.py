"""One episode of a run and what fingerprints a run: the two things the thread runner (`run.streams`) and
the Ray executor (`run.distributed`) share, in a module below both (they imported each other's private
names before, a cycle held by function-level imports)."""
from __future__ import annotations

import json
from importlib import resources
from typing import cast

from ..agent import Agent, loop
from ..envs import Conversational, EnvPool, canonical_options, parse_task_id, simulator_revisions
from ..llm import backend_fingerprint
from ..llm.cache import CacheError
from ..memory import content_hash
from ..prompts import version_files
from ..records import Episode


def settings_of(agent: Agent, env_options: dict | None, mode: str, envs=()) -> dict:
    """What must not change between a run and its resumption: agent config, model, seed, the memory
    policy with all its parameters, stream mode, env options (in one spelling), and the simulator revision
    of each env in `envs` (the envs the run's tasks use) that has one.

    The model is named by `llm.backend_fingerprint`: which model answers, not where it is served, so the
    same model on a new port or a fleet that grew resumes its run (embedded backends are unchanged)."""
    options = {name: canonical_options(name, opts) for name, opts in (env_options or {}).items()}
    prompts = resources.files("skillbook.agent").joinpath("prompts")
    code = {"revision": loop.AGENT_REVISION,   # read when called (a test bumps it)
            "prompts": content_hash({p.name: p.read_text() for p in prompts.iterdir() if p.name.endswith(".txt")})}
    if changed := version_files("skillbook.agent", agent.config.prompts):
        code[f"prompts_{agent.config.prompts}"] = content_hash(changed)
    settings = {"agent": agent.config.record(), "agent_code": code,
                "backend": backend_fingerprint(agent.llm.backend),
                "seed": agent.llm.seed, "memory": agent.memory.settings(), "mode": mode, "env_options": options}
    if simulators := simulator_revisions(envs):
        settings["simulators"] = simulators
    return json.loads(json.dumps(settings, sort_keys=True, default=str))


def attempt_episode(agent: Agent, pool: EnvPool, stream: str, position: int, task_id: str) -> Episode:
    """One episode; any exception of ours becomes the episode's error (an infrastructure error)."""
    try:
        env = pool.for_task(task_id)
        if env.conversational:   # τ²-bench's simulated user runs on the agent's backend and cache
            cast(Conversational, env).bind_llm(agent.llm)
        return agent.run(env, task_id, stream=stream, position=position)
    except CacheError:
        raise   # the response cache is broken: stop the run, do not spend model time that cannot be kept
    except Exception as e:  # noqa: BLE001 — one task's crash must not end the run
        t = parse_task_id(task_id)
        return Episode(task_id=task_id, env=t[0], task_type=t[1], split=t[2], agent=agent.config.level,
                       memory=agent.memory.name, stream=stream, position=position,
                       error=f"{type(e).__name__}: {e}", stop_reason="error")
