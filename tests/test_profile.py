"""Where an episode's time goes (issue 35): the per-call profile of the first paper's conditions, read from
llama.cpp's own timings. Control flow only, with the fake world and a fake model whose answers carry
timings as llama.cpp's server sends them."""
import itertools

import pandas as pd

from skillbook.book.measurements import episode_profile, profile_table
from test_breakdown_pipeline import TypedInducer

_clock = itertools.count(1)


class TimedModel(TypedInducer):
    """A fake model that reports llama.cpp-style timings: every prompt token but the last 10 of the previous
    prompt is evaluated, 2 ms a token, and 50 ms per generated token; each call a distinct latency."""

    def chat(self, messages, **kw):
        c = super().chat(messages, **kw)
        c.latency_s = 0.001 * next(_clock)
        c.server_timings = {"prompt_n": min(c.prompt_tokens, 10), "cache_n": max(0, c.prompt_tokens - 10),
                            "predicted_n": c.completion_tokens, "prompt_ms": 2.0 * min(c.prompt_tokens, 10),
                            "predicted_ms": 50.0 * c.completion_tokens}
        return c


def test_every_call_of_every_condition_is_profiled_with_the_servers_own_timings(fake_env, tmp_path):
    llm = TimedModel()
    tasks = ["fake/count/dev/0", "fake/fetch/dev/0"]
    prof = episode_profile(llm, tmp_path, tasks, conditions=("subtask-none", "subtask-text"),
                           agent={"max_steps": 6})
    assert set(prof.condition) == {"subtask-none", "subtask-text"}
    assert {"executor", "planner", "summarizer"} <= set(prof.role)
    assert "induction" in set(prof[prof.condition == "subtask-text"].role)
    live = prof[~prof.cached]
    assert (live.evaluated <= 10).all() and live.reused.notna().all() and live.generation_ms.notna().all()
    assert "chat" not in vars(llm)                   # the capturing wrapper is removed afterwards
    table = profile_table(prof, {"prefill_tok_s": 500.0, "generation_tok_s": 20.0})
    ex = table.loc[("subtask-none", "executor")]
    assert ex["prefill tok/s"] == 500.0 and ex["generation tok/s"] == 20.0      # 2 ms and 50 ms a token
    assert ex["prefill vs reference"] == 1.0 and ex["generation vs reference"] == 1.0
    shares = table["share of time"].groupby(level="condition").sum()
    assert shares.round(6).eq(1.0).all()
    assert isinstance(table, pd.DataFrame)


def test_serving_options_reach_the_server_command_and_bad_ones_are_named():
    import pytest

    from skillbook.llm.backends import BackendError
    from skillbook.llm.servers import EmbeddedServer
    s = EmbeddedServer.__new__(EmbeddedServer)          # no GGUF needed to build the command
    s.model, s.gguf, s.parallel, s.ctx_per_slot, s.threads = "m", "/x.gguf", 1, 8192, 2
    s.batch, s.ubatch, s.speculative, s.draft_max, s.draft_gguf = 256, 128, "ngram", 6, None
    cmd = EmbeddedServer._command(s)
    assert cmd[cmd.index("--batch") + 1] == "256" and cmd[cmd.index("--ubatch") + 1] == "128"
    assert cmd[cmd.index("--speculative") + 1] == "ngram" and "--draft-gguf" not in cmd
    with pytest.raises(BackendError, match="speculative must be one of none, ngram, draft"):
        EmbeddedServer("qwen2.5-coder-0.5b", speculative="eagle")


def test_role_slots_send_each_role_to_its_own_slot_outside_the_cache_key():
    """Under `role_slots` the embedded server has one slot per role and each request names its role's
    slot (`id_slot`), so a planner call no longer evicts the executor's prefix; the role is not part of
    the request, so cache keys (and records) are those of a one-slot server."""
    from types import SimpleNamespace

    from skillbook.llm import LLM, ResponseCache
    from skillbook.llm.client import ROLE_SLOTS, SLOTS, slot_of
    sent = []

    class Client:   # stands in for the OpenAI client: records what would go over the wire
        chat = SimpleNamespace(completions=SimpleNamespace(create=lambda **kw: (sent.append(kw), _reply())[1]))

    def _reply():
        msg = SimpleNamespace(content="Action: look")
        return SimpleNamespace(choices=[SimpleNamespace(message=msg, finish_reason="stop")],
                               usage=SimpleNamespace(prompt_tokens=5, completion_tokens=2), model_extra={})

    cache = ResponseCache()
    llm = LLM("embedded:qwen2.5-coder-1.5b", cache, role_slots=True)
    assert llm._server_options["parallel"] == SLOTS and len(set(ROLE_SLOTS.values())) == len(ROLE_SLOTS)
    llm._connect = lambda: Client()
    for role in ("planner", "executor", "merge"):
        llm.chat([{"role": "user", "content": role}], role=role)
    assert [kw["extra_body"]["id_slot"] for kw in sent] == [0, 1, slot_of("merge")] and slot_of("x") == SLOTS - 1
    plain = LLM("embedded:qwen2.5-coder-1.5b", cache)
    assert plain._server_options["parallel"] == 1
    assert plain.chat([{"role": "user", "content": "planner"}], role="executor").cached    # same key
    assert not LLM("openai:http://127.0.0.1:9/v1#m", cache, role_slots=True).role_slots   # embedded only


def test_the_laboratory_reads_what_make_bench_measured_and_says_what_it_did_not(tmp_path):
    """Chapter 00 shows `make bench`'s records (`runs/bench/*.json`), never measures them again: each
    part is a table once its record exists and None before, so a checkout without a `--speed` run says
    so instead of failing. The real records of this checkout read without error."""
    import json

    from skillbook.book.measurements import bench_records
    empty = bench_records(tmp_path)
    assert all(empty[k] is None for k in ("profile", "serving", "sweep", "concurrency", "speed"))
    (tmp_path / "sweep.json").write_text(json.dumps({"cores": 2, "measured": "2026-12-05", "rows": [
        {"options": {}, "prefill_tok_s": 70.0, "generation_tok_s": 30.0, "prefill_vs_default": 1.0,
         "generation_vs_default": 1.0},
        {"options": {"threads": 1}, "prefill_tok_s": 35.0, "generation_tok_s": 20.0,
         "prefill_vs_default": 0.5, "generation_vs_default": 2 / 3}]}))
    (tmp_path / "serving-role_slots_1.json").write_text(json.dumps(
        {"options": {"role_slots": 1}, "tasks": ["a", "b"], "speedup": 0.84, "identical_records": False}))
    (tmp_path / "serving-speculative_draft.json").write_text(json.dumps(
        {"options": {"speculative": "draft"}, "tasks": ["a"], "speedup_first_game": 0.55,
         "identical_records": None, "note": "stopped"}))
    speed = {"baseline": "abc", "tasks": ["t1", "t2"], "reference": {}, "profile": {
        "old": [{"condition": "subtask-none", "role": "executor", "seconds": 2.0}],
        "new": [{"condition": "subtask-none", "role": "executor", "seconds": 1.0}]},
        "conditions": {"subtask-none": {"games": 2, "episodes_per_hour": {"old": 50, "new": 100}, "speedup": 2.0,
                                        "success": {"old": 0.5, "new": 0.5}, "only_old": 1, "only_new": 1,
                                        "mcnemar_p": 1.0}},
        "both_conditions": {"episodes_per_hour": {"old": 50, "new": 100}, "speedup": 2.0}}
    (tmp_path / "speed.json").write_text(json.dumps(speed))
    r = bench_records(tmp_path)
    assert r["serving"].loc["role_slots=1", "records identical"] == "no"
    assert r["serving"].loc["speculative=draft", "records identical"] == "not compared"
    assert r["speed"]["episodes"].loc["both", "speed-up"] == 2.0
    assert r["sweep"]["table"].loc["threads=1", "prefill vs default"] == 0.5
    assert r["sweep"]["table"].index[0] == "default"
    assert r["speed"]["profile"].loc[("new", "subtask-none", "executor"), "seconds"] == 1.0
    real = bench_records()
    assert real["profile"] is None or {"prefill vs reference", "generation vs reference"} <= set(real["profile"])
