"""The episode store (`run/store.py`, issue 33): a sealed chunk is never overwritten (also after a chunk was
deleted), a line cut by a crash never breaks the next append, a file named like a chunk that this run did not
write is refused with its name, a damaged chunk is named with what to do — and the committed records, whose
chunks predate chunk signatures, read exactly as before. No model, no simulator (the fake world)."""
import gzip
import json
import re
import shutil
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest

from fakes import FakeModel
from skillbook.agent import AgentConfig
from skillbook.memory import NoMemory
from skillbook.records import Episode
from skillbook.run import Condition, RecordError, RunDir, load_episodes, run_condition
from skillbook.run import store as store_module

# (getattr: before the fix each test failed on its own, not all of them on the import)
RecordWarning = getattr(store_module, "RecordWarning", UserWarning)

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"agent": {"level": "task"}, "memory": {"name": "none"}, "seed": 0}
TASKS = [f"fake/count/dev/{i}" for i in range(12)]


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(store_module, "CHUNK", 3)


def _ep(position: int, stream: str = "s", memory: str = "none", score: float = 1.0) -> Episode:
    return Episode(task_id=TASKS[position], env="fake", task_type="count", split="dev", agent="task",
                   memory=memory, stream=stream, position=position, score=score, success=True)


def _store(path, n: int, settings=SETTINGS, memory: str = "none") -> RunDir:
    """A run directory of one stream "s" over TASKS, its first `n` episodes recorded."""
    store = RunDir(path)
    store.check_or_start(settings, {"s": TASKS})
    for i in range(n):
        store.append_episode(_ep(i, memory=memory))
    return store


def _chunks(path) -> list[str]:
    return sorted(p.name for p in (Path(path) / "episodes").glob("*.jsonl.gz"))


def _legacy_chunk(path: Path, lines: list[dict]) -> None:
    """A chunk as versions before chunk signatures sealed it (what every committed chunk is)."""
    path.write_bytes(gzip.compress("".join(json.dumps(d) + "\n" for d in lines).encode(), 9, mtime=0))


def _legacy_dir(path: Path, n: int, memory: str = "none") -> Path:
    """A run directory as earlier versions wrote it: run.json without a chunk list, unsigned chunks."""
    (path / "episodes").mkdir(parents=True)
    settings = {**SETTINGS, "memory": {"name": memory}}
    (path / "run.json").write_text(json.dumps({"format": 2, "settings": settings, "streams": {"s": TASKS}},
                                              indent=1, sort_keys=True) + "\n")
    eps = [_ep(i, memory=memory).to_dict() for i in range(n)]
    for c in range(n // 3):
        _legacy_chunk(path / "episodes" / f"{c + 1:06d}.jsonl.gz", eps[3 * c: 3 * c + 3])
    (path / "episodes" / "open.jsonl").write_text("".join(json.dumps(d) + "\n" for d in eps[n // 3 * 3:]))
    return path


# -- item 1: a gap in chunk numbers ----------------------------------------------------------------------
def test_a_missing_chunk_never_lets_a_seal_overwrite_another(tmp_path, small_chunks):
    store = _store(tmp_path, 9)
    assert _chunks(tmp_path) == ["000001.jsonl.gz", "000002.jsonl.gz", "000003.jsonl.gz"]
    newest = (tmp_path / "episodes" / "000003.jsonl.gz").read_bytes()
    (tmp_path / "episodes" / "000002.jsonl.gz").unlink()      # what a user did after a nameless error
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordWarning)
        for i in (3, 4, 5, 9, 10, 11):                          # the lost ones re-run, then the rest
            store.append_episode(_ep(i))
        assert (tmp_path / "episodes" / "000003.jsonl.gz").read_bytes() == newest
        assert _chunks(tmp_path) == [f"00000{n}.jsonl.gz" for n in (1, 3, 4, 5)]
        assert sorted(p for _, p in store.episode_dicts()) == list(range(12))


def test_a_missing_chunk_is_named_when_read(tmp_path, small_chunks):
    store = _store(tmp_path, 9)
    (tmp_path / "episodes" / "000002.jsonl.gz").unlink()
    with pytest.warns(RecordWarning, match=r"000002\.jsonl\.gz is missing.*runs them again.*restore it"):
        assert sorted(p for _, p in store.episode_dicts()) == [0, 1, 2, 6, 7, 8]


def test_a_run_resumed_after_a_deleted_chunk_keeps_every_episode(tmp_path, fake_env, small_chunks):
    """The issue's case: a 12-task run reported success with 3 episodes, and every re-run lost them again."""
    c = Condition("c", AgentConfig(max_steps=6, n_examples=0), NoMemory)
    assert len(run_condition(tmp_path, FakeModel(), c, TASKS).episodes) == 12
    (tmp_path / "episodes" / "000002.jsonl.gz").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordWarning)
        again = run_condition(tmp_path, FakeModel(), c, TASKS)
        assert [e.task_id for e in again.episodes] == TASKS
        assert len(load_episodes(tmp_path)) == 12


def test_a_run_that_returns_fewer_episodes_than_tasks_says_so(tmp_path, fake_env, monkeypatch):
    append = RunDir.append_episode

    def lossy(self, ep):                                       # a store that loses records (the bug above)
        if ep.stream != "t0001":
            append(self, ep)
    monkeypatch.setattr(RunDir, "append_episode", lossy)
    c = Condition("c", AgentConfig(max_steps=6, n_examples=0), NoMemory)
    with pytest.raises(RecordError, match=rf"3 of 4 episodes.*{re.escape(str(tmp_path))}"):
        run_condition(tmp_path, FakeModel(), c, TASKS[:4])


def test_concurrent_appends_lose_nothing(tmp_path, small_chunks):
    store = RunDir(tmp_path)
    streams = {f"w{w}": TASKS for w in range(4)}
    store.check_or_start(SETTINGS, streams)

    def worker(w):
        for i in range(12):
            store.append_episode(_ep(i, stream=f"w{w}"))
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.episode_dicts()) == 48


# -- item 2: a cut last line -----------------------------------------------------------------------------
@pytest.mark.parametrize("cut", [b'{"task_id": "fake/count/dev/2", "stream": "s", "pos',   # a kill mid-write
                                 json.dumps(_ep(2).to_dict()).encode()],          # all but the newline
                         ids=["mid-line", "before-newline"])
def test_a_line_cut_by_a_crash_is_dropped_before_the_next_append(tmp_path, small_chunks, cut):
    store = _store(tmp_path, 2)
    open_path = tmp_path / "episodes" / "open.jsonl"
    with open(open_path, "ab") as f:
        f.write(cut)
    assert sorted(p for _, p in store.episode_dicts()) == [0, 1]     # the cut episode was not recorded
    with pytest.warns(RecordWarning, match=rf"{open_path}: dropped .*partial record"):
        store.append_episode(_ep(2))                          # the episode re-run
    for i in range(3, 7):
        store.append_episode(_ep(i))
    assert sorted(p for _, p in store.episode_dicts()) == list(range(7))
    with gzip.open(tmp_path / "episodes" / "000001.jsonl.gz", "rt") as f:    # sealed whole lines only
        assert [json.loads(line)["position"] for line in f] == [0, 1, 2]


def test_a_killed_writer_leaves_a_directory_that_resumes(tmp_path):
    """A real kill (SIGKILL, nothing runs after it) in the middle of writing a record."""
    _store(tmp_path, 2)
    script = ("import os, signal, sys\n"
              "f = open(os.path.join(sys.argv[1], 'episodes', 'open.jsonl'), 'a')\n"
              "f.write('{\"task_id\": \"fake/count/dev/2\", \"stream\": \"s\", \"steps\": [{'); f.flush()\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    killed = subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=False, timeout=60)
    assert killed.returncode == -9
    assert not (tmp_path / "episodes" / "open.jsonl").read_bytes().endswith(b"\n")
    store = RunDir(tmp_path)
    with pytest.warns(RecordWarning, match="partial record"):
        store.append_episode(_ep(2))
    assert sorted(p for _, p in store.episode_dicts()) == [0, 1, 2]


# -- item 3: a stray file named like a chunk -------------------------------------------------------------
def test_a_chunk_from_another_run_is_refused_with_its_name(tmp_path, small_chunks):
    _store(tmp_path / "other", 3, settings={**SETTINGS, "seed": 1}, memory="none")
    store = _store(tmp_path / "run", 3)
    stray = tmp_path / "run" / "episodes" / "000002.jsonl.gz"
    shutil.copy(tmp_path / "other" / "episodes" / "000001.jsonl.gz", stray)
    with pytest.raises(RecordError, match=rf"{stray}: .*another run"):
        store.episode_dicts()


def test_a_chunk_under_another_number_is_refused(tmp_path, small_chunks):
    store = _store(tmp_path, 6)
    stray = tmp_path / "episodes" / "000007.jsonl.gz"
    shutil.copy(tmp_path / "episodes" / "000001.jsonl.gz", stray)       # e.g. a backup copied back in
    with pytest.raises(RecordError, match=rf"{stray}: .*chunk 1 of this run"):
        store.episode_dicts()


def test_an_unsigned_chunk_in_a_new_run_is_refused(tmp_path, small_chunks):
    store = _store(tmp_path, 4)                               # one chunk, signed; nothing listed
    assert set(json.loads((tmp_path / "run.json").read_text())) == {"format", "settings", "streams"}
    stray = tmp_path / "episodes" / "000002.jsonl.gz"
    _legacy_chunk(stray, [_ep(1, score=0.0).to_dict()])      # this run's task, settings — but not its record
    with pytest.raises(RecordError, match=rf"{stray}: .*not one of this run's chunks"):
        store.episode_dicts()
    stray.unlink()
    for name in ("1.jsonl.gz", "000002 (copy).jsonl.gz"):
        (tmp_path / "episodes" / name).write_bytes((tmp_path / "episodes" / "000001.jsonl.gz").read_bytes())
        with pytest.raises(RecordError, match=rf"episodes/{re.escape(name)}: named like a chunk"):
            store.episode_dicts()
        (tmp_path / "episodes" / name).unlink()
    assert sorted(p for _, p in store.episode_dicts()) == [0, 1, 2, 3]


def test_a_legacy_run_reads_as_before_and_refuses_what_it_did_not_write(tmp_path, small_chunks):
    run = _legacy_dir(tmp_path / "run", 7)
    other = _legacy_dir(tmp_path / "other", 7, memory="text")
    store = RunDir(run)
    assert sorted(p for _, p in store.episode_dicts()) == list(range(7))
    # before this version wrote here, a stray is told apart by its content: another condition's episodes
    stray = run / "episodes" / "000003.jsonl.gz"
    shutil.copy(other / "episodes" / "000001.jsonl.gz", stray)
    with pytest.raises(RecordError, match=rf"{stray}:1: .*memory 'text'.*not this run's"):
        store.episode_dicts()
    stray.unlink()
    # the first run here lists the legacy chunks in run.json (with their sha256); from then on only they
    # and the chunks this version signs are read
    store.check_or_start({**SETTINGS, "memory": {"name": "none"}}, {"s": TASKS})
    listed = json.loads((run / "run.json").read_text())["legacy_chunks"]
    assert sorted(listed) == ["000001.jsonl.gz", "000002.jsonl.gz"]
    for i in range(7, 10):
        store.append_episode(_ep(i))
    assert _chunks(run) == ["000001.jsonl.gz", "000002.jsonl.gz", "000003.jsonl.gz"]
    assert sorted(p for _, p in store.episode_dicts()) == list(range(10))
    twin = _legacy_dir(tmp_path / "twin", 12)          # same settings, same tasks: only the list tells
    shutil.copy(twin / "episodes" / "000004.jsonl.gz", run / "episodes" / "000004.jsonl.gz")
    with pytest.raises(RecordError, match=r"000004\.jsonl\.gz: .*not one of this run's chunks"):
        store.episode_dicts()


# -- item 4: a damaged chunk ----------------------------------------------------------------------------
@pytest.mark.parametrize("damage", [lambda b: b[: len(b) // 2],            # a truncated chunk (EOFError)
                                    lambda b: b"<html>not a chunk</html>\n",  # not gzip (BadGzipFile)
                                    lambda b: b[:40] + bytes(40) + b[80:]])   # damaged inside (zlib/CRC)
def test_a_damaged_chunk_is_named_with_what_to_do(tmp_path, small_chunks, damage):
    store = _store(tmp_path, 6)
    chunk = tmp_path / "episodes" / "000001.jsonl.gz"
    chunk.write_bytes(damage(chunk.read_bytes()))
    with pytest.raises(RecordError, match=rf"{re.escape(str(chunk))}.*restore it from git") as e:
        store.episode_dicts()
    assert "delete" not in str(e.value).lower()


def test_committed_records_read_identically(tmp_path):
    """Every committed run directory reads (no error, no warning), and one with chunks sealed before
    signatures — copied, the committed one is never written — resumes: its legacy chunks are listed, new
    chunks are signed, and what was recorded reads as before."""
    dirs = sorted(p.parent for p in (ROOT / "runs").rglob("run.json"))
    assert dirs
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for d in dirs:
            RunDir(d).episode_dicts()
    # chapter 09's study sealed its chunks before signatures; the second study (chapter 11) seals signed
    # ones, which have nothing to list: pick a directory whose sealed chunks are all unsigned
    src = next(d for d in dirs if (sealed := sorted((d / "episodes").glob("*.jsonl.gz")))
               and all(store_module._gzip_comment(c.read_bytes()) is None for c in sealed))
    copy = tmp_path / "copy"
    shutil.copytree(src, copy)
    before = RunDir(src).episode_dicts()
    assert RunDir(copy).episode_dicts() == before
    m = json.loads((copy / "run.json").read_text())
    store = RunDir(copy)
    store.check_or_start(m["settings"], m["streams"])
    assert sorted(json.loads((copy / "run.json").read_text())["legacy_chunks"]) == _chunks(src)
    assert store.episode_dicts() == before
    key, last = max(before.items(), key=lambda kv: kv[0][1])
    again = Episode.from_dict(last)
    n = len(_chunks(copy))
    for _ in range(store_module.CHUNK):
        store.append_episode(again)                            # the same record again: the last copy wins
    after = store.episode_dicts()
    assert len(_chunks(copy)) == n + 1 and after.keys() == before.keys()
    assert {k: v for k, v in after.items() if k != key} == {k: v for k, v in before.items() if k != key}
    assert after[key] == json.loads(json.dumps(again.to_dict()))


def test_records_made_when_fingerprints_held_the_server_address_still_resume(tmp_path):
    # Issue 33 item 9, the other half: a run.json written before `backend_fingerprint` holds the URLs; the
    # same model served elsewhere resumes it (the recorded backend is read as the model, not its address).
    old = {**SETTINGS, "backend": "openai:http://127.0.0.1:8001/v1#qwen",
           "memory": {"name": "text", "llm": "openai:http://127.0.0.1:8001/v1,http://127.0.0.1:8002/v1#qwen"}}
    store = RunDir(tmp_path)
    store.check_or_start(old, {"s": TASKS[:2]})
    now = {**SETTINGS, "backend": "openai:qwen", "memory": {"name": "text", "llm": "openai:qwen"}}
    store.check_settings(now)                       # refused before: 'recorded with other settings (backend…)'
    with pytest.raises(ValueError, match="backend"):
        store.check_settings({**now, "backend": "openai:another-model"})


def test_running_in_a_read_only_copy_says_so_instead_of_a_raw_oserror(tmp_path, monkeypatch):
    # Issue 33 item 10, the other half: a replay takes no lock, but a run with episodes left in a read-only
    # copy raised "OSError: [Errno 30] Read-only file system: '.lock'".
    import errno
    import os

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(RecordError, match="cannot be written .*replay read-only.*writable copy"):
        RunDir(tmp_path).lock()


def test_recorded_fingerprints_are_read_as_they_are():
    # Real case (CI run of this change): a run.json written by the current code holds 'openai:fake', which
    # is no backend string; reading it as the model must not parse it as one.
    from skillbook.llm.backends import backend_fingerprint
    assert backend_fingerprint("openai:fake") == "openai:fake"
    assert backend_fingerprint(backend_fingerprint("openai:http://h:1/v1#m")) == "openai:m"
