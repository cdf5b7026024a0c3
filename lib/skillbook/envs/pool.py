"""Environments opened once, reused, and closed once: `with EnvPool(env_options) as envs: envs.get("twx")`.

A pool holds one instance per env name (one simulator, one JVM); code that touches several tasks
(listing splits, reading first observations, a worker thread's episodes) opens a pool instead of
creating and closing envs itself. A conversational env is bound to `llm` when one is given.
"""
from __future__ import annotations

from .base import Env, TaskIdError, parse_task_id


class EnvPool:
    def __init__(self, env_options: dict | None = None, llm=None):
        self.env_options = dict(env_options or {})
        self.llm = llm
        self.envs: dict[str, Env] = {}

    def get(self, name: str) -> Env:
        """The pool's instance of env `name`, created on first use."""
        from . import ENVS, make_env  # deferred: skillbook.envs imports this module
        if name not in ENVS:
            raise TaskIdError(f"unknown env {name!r}; valid envs: {', '.join(ENVS)}")
        if name not in self.envs:
            env = make_env(name, **self.env_options.get(name, {}))
            if env.conversational and self.llm is not None:
                env.bind_llm(self.llm)
            self.envs[name] = env
        return self.envs[name]

    def for_task(self, task_id: str) -> Env:
        return self.get(parse_task_id(task_id)[0])

    def close(self) -> None:
        envs, self.envs = list(self.envs.values()), {}
        for env in envs:
            env.close()

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
