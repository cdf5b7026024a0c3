"""Replaying from read-only records (issue 33, item 10): a workshop copy on a read-only share, a USB kit.

`ResponseCache.for_run` opened `<run_dir>/.responses.sqlite` for writing, so a chapter could not even open
its Lab over records it may not write. The replay below goes through the code path every chapter uses
(`Lab`, the response cache, `run_condition` with nothing left to run, `lab.claims`, `lab.finish`) with
FAKES (tests/fakes.py: the fake world, a fake OpenAI-compatible server), in a view of the records that is
truly read-only: tests run as root in CI and root ignores file modes, so the records are bind-mounted
read-only (bubblewrap, else `unshare -m` with `mount -o remount,ro,bind`), which works for root and for
an ordinary user alike.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from skillbook.llm import LLM, ReplayMiss, ResponseCache
from skillbook.llm.cache import CacheError

TESTS = Path(__file__).parent

# One chapter-like run: a call of the chapter's own, one condition on two fake tasks, a claims record.
CHAPTER = '''
import json, sys, warnings
sys.path.insert(0, {tests!r})
from fakes import FakeWorld
from skillbook import envs
envs.ENVS["fake"] = FakeWorld
from skillbook.agent import AgentConfig
from skillbook.analysis import Claim
from skillbook.book import Lab
from skillbook.llm import ReplayMiss
from skillbook.run import Condition, run_condition

mode, records, backend = sys.argv[1:4]
result = {{"difference": 0.1, "ci_low": -0.1, "ci_high": 0.3, "p": 0.5, "mde": 0.3, "n_tasks": 2}}
lab = Lab("90_tiny", runs_root=records, backend=backend)
out = {{"chat": lab.llm.chat([{{"role": "user", "content": "hi"}}]).text}}
condition = Condition("task", AgentConfig(level="task", max_steps=2))
tasks = ["fake/count/test/0", "fake/count/test/1"]
run = run_condition(lab.run_dir / "task", lab.llm, condition, tasks, {{}}, 1)
out["episodes"] = len(run.episodes)
lab.claims([Claim("memory helps", "+1 pp", +1, True, result)])
out["live_calls"] = lab.llm.stats.live_calls
if mode == "replay":
    try:
        lab.llm.chat([{{"role": "user", "content": "a question never asked"}}])
    except ReplayMiss as e:
        out["miss"] = str(e)
    with warnings.catch_warnings(record=True) as caught:   # another machine's replay measured otherwise
        warnings.simplefilter("always")
        lab.claims([Claim("memory helps", "+1 pp", +1, True, {{**result, "difference": 0.2}})])
    out["claims_warnings"] = [str(w.message) for w in caught]
    # a chapter that keeps no folder of its own (10_findings): its Lab opens over the records all the same
    Lab("91_reader", runs_root=records, backend=backend).finish()
lab.finish()
print(json.dumps(out))
'''


def _probe(prefix: list[str], folder: Path) -> bool:
    """Does `prefix` run a command in which `folder` cannot be written (and the command runs at all)?"""
    check = ("import sys\ntry:\n    open(sys.argv[1] + '/.probe', 'w')\nexcept OSError:\n    sys.exit(0)\n"
             "sys.exit(1)")
    try:
        r = subprocess.run(prefix + [sys.executable, "-c", check, str(folder)], capture_output=True,
                           timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    (folder / ".probe").unlink(missing_ok=True)
    return r.returncode == 0


def read_only_view(folder: Path) -> list[str]:
    """A command prefix that runs its command with `folder` bind-mounted read-only (skip without one)."""
    f = str(folder)
    candidates = []
    if shutil.which("bwrap"):
        candidates.append(["bwrap", "--dev-bind", "/", "/", "--ro-bind", f, f, "--"])
    if shutil.which("unshare"):
        remount = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" && exec "$@"'
        user = [] if os.geteuid() == 0 else ["-r"]   # an ordinary user maps itself to root in a new namespace
        candidates.append(["unshare", "-m", *user, "sh", "-c", remount, f])
    for prefix in candidates:
        if _probe(prefix, folder):
            return prefix
    pytest.skip("no read-only bind mount here (bubblewrap, or unshare with mount namespaces)")


def chapter(mode: str, records: Path, backend: str, prefix=()) -> dict:
    script = records.parent / "chapter.py"
    script.write_text(CHAPTER.format(tests=str(TESTS)))
    r = subprocess.run([*prefix, sys.executable, str(script), mode, str(records), backend],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def digest(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_chapter_replays_from_read_only_records(tmp_path, fake_server_factory):
    server = fake_server_factory()
    records = tmp_path / "records"
    recorded = chapter("record", records, server.backend)
    assert recorded["episodes"] == 2 and recorded["live_calls"] > 0
    server.close()
    before = digest(records)
    assert (records / "90_tiny" / ".responses.sqlite").exists()   # a local cache left by the live run
    # the same model on another port (nothing listens there): every answer must come from the records
    replayed = chapter("replay", records, "openai:http://127.0.0.1:9/v1#fake", read_only_view(records))
    assert replayed["chat"] == recorded["chat"] == "fake answer"
    assert replayed["episodes"] == 2 and replayed["live_calls"] == 0
    assert "read-only" in replayed["miss"]                          # a request not recorded: ReplayMiss
    assert any("read-only" in w for w in replayed["claims_warnings"])
    assert digest(records) == before


def _recorded_run(run: Path, server) -> list[dict]:
    llm = LLM(server.backend, ResponseCache.for_run(run))
    questions = [[{"role": "user", "content": f"question {i}"}] for i in range(3)]
    for q in questions:
        llm.chat(q)
    llm.cache.save()
    llm.cache.close()
    for p in run.glob(".responses.sqlite*"):
        p.unlink()   # a fresh copy: the committed chunks only
    return questions


def test_a_read_only_cache_answers_from_the_exports_and_writes_nothing(tmp_path, fake_server_factory):
    server = fake_server_factory()
    run = tmp_path / "run"
    questions = _recorded_run(run, server)
    asked = server.requests
    before = digest(run)
    cache = ResponseCache.for_run(run, read_only=True)
    assert cache.read_only and len(cache) == 3 and cache.stats()["unsaved"] == 0
    llm = LLM(server.backend, cache)
    assert [llm.chat(q).cached for q in questions] == [True] * 3
    with pytest.raises(ReplayMiss, match="read-only"):            # refused before any model time
        llm.chat([{"role": "user", "content": "a question never asked"}])
    assert server.requests == asked
    with pytest.raises(CacheError, match="read-only"):
        cache.put("openai:fake", {"messages": []}, {"text": "x"})
    assert cache.save() is None
    assert digest(run) == before and not (run / ".responses.sqlite").exists()


def test_a_file_a_replay_derives_again_is_not_rewritten(tmp_path):
    """The pipelines' spec files (transfer/experiment.json, the assay's attribution.json, chapter 07's
    policies.json) were rewritten on every replay, which failed on read-only records."""
    from skillbook.io import write_json_if_changed
    path = tmp_path / "experiment.json"
    assert write_json_if_changed(path, {"k": 5}, indent=1)
    inode, text = path.stat().st_ino, path.read_text()
    assert not write_json_if_changed(path, {"k": 5}, indent=1)
    assert path.stat().st_ino == inode and path.read_text() == text == '{\n "k": 5\n}\n'
    assert write_json_if_changed(path, {"k": 6}, indent=1) and '"k": 6' in path.read_text()
