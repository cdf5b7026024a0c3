"""A live re-run from empty response caches gives the same records (deterministic serving, issue 13 §2).

Each run starts its own model server (a fresh process, an empty llama.cpp prompt cache) and its own
empty response cache; two streams are offered two workers, which deterministic mode serialises.
"""
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

SCRIPT = """
import json, sys
from skillbook.agent import Agent, AgentConfig
from skillbook.llm import LLM, ResponseCache
from skillbook.run import load_episodes, run_streams
out = sys.argv[1]
llm = LLM("embedded:qwen2.5-coder-0.5b", ResponseCache(out + "/responses.sqlite"))
streams = {"a": ["twx/twc/dev/0", "twx/twc/dev/1"], "b": ["twx/peckingorder/dev/0"]}
run_streams(out, streams, lambda: Agent(llm, AgentConfig(max_steps=2)), workers=2, progress=False,
            env_options={"twx": {"game_params": {"twc": {"numLocations": 1, "numItemsToPutAway": 1}}}})
eps = sorted(load_episodes(out), key=lambda e: (e.stream, e.position))
print(json.dumps([[e.task_id, [(s.action, s.raw) for s in e.steps], e.score, e.success, e.error] for e in eps]))
"""


def test_two_live_runs_from_empty_caches_give_identical_records(tmp_path):
    runs = []
    for name in ("first", "second"):
        out = tmp_path / name
        out.mkdir()
        r = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-2000:]
        runs.append(r.stdout.strip().splitlines()[-1])
    import json
    records = json.loads(runs[0])
    assert len(records) == 3 and all(steps and not error for _, steps, _, _, error in records)
    assert runs[0] == runs[1]
