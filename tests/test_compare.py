"""`skillbook.run.compare`: the check behind "two live executions from empty caches give the same records".
Two record folders that differ only in what measures the machine (timings, session logs, the order in which
concurrently run streams or cache entries were written) are the same run; any difference in what the agent
saw, said or scored is reported with its place."""
import gzip
import json

import pytest

from skillbook.run.compare import compare_records, main


def _episode(stream, position, action, latency):
    return {"task_id": f"twx/coin/test/{position}", "stream": stream, "position": position,
            "steps": [{"action": action, "observation": "ok", "score": 0.5,
                       "call": {"prompt_tokens": 10, "latency_s": latency, "cached": False,
                                "new_prompt_tokens": 10}}],
            "success": False, "wall_s": latency * 3}


def _write(root, episodes, responses, session_started):
    d = root / "01_agents" / "task"
    (d / "episodes").mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"format": 2, "settings": {"seed": 0}}))
    (d / "episodes" / "open.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    (d / "sessions.jsonl").write_text(json.dumps({"started": session_started}) + "\n")
    r = root / "01_agents" / "responses"
    r.mkdir()
    with gzip.open(r / "000001.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(x) + "\n" for x in responses)
    (root / "01_agents" / "summary-01_agents.json").write_text(json.dumps({"live_seconds": session_started}))


RESPONSES = [{"key": "a", "request": {"m": 1}, "response": {"text": "look"}},
             {"key": "b", "request": {"m": 2}, "response": {"text": "take coin"}}]


def test_same_run_up_to_timings_and_write_order_is_identical(tmp_path):
    _write(tmp_path / "x", [_episode("s0", 0, "look", 1.0), _episode("s1", 0, "east", 2.0)], RESPONSES, 1)
    # the other execution: other latencies, streams finished in the other order, cache chunk in another order
    _write(tmp_path / "y", [_episode("s1", 0, "east", 9.0), _episode("s0", 0, "look", 7.5)],
           RESPONSES[::-1], 99)
    assert compare_records(tmp_path / "x", tmp_path / "y") == []


def test_a_different_action_or_reply_is_named(tmp_path):
    _write(tmp_path / "x", [_episode("s0", 0, "look", 1.0)], RESPONSES, 1)
    other = [dict(RESPONSES[0]), {**RESPONSES[1], "response": {"text": "take key"}}]
    _write(tmp_path / "y", [_episode("s0", 0, "west", 1.0)], other, 1)
    diffs = compare_records(tmp_path / "x", tmp_path / "y")
    assert any("episodes" in d and "'look'" in d and "'west'" in d for d in diffs), diffs
    assert any("responses" in d and "take coin" in d for d in diffs), diffs


def test_a_resumed_episode_counts_once_with_its_last_record(tmp_path):
    # a killed run re-runs the episode in flight on resume: the last line for a position is the record
    _write(tmp_path / "x", [_episode("s0", 0, "look", 1.0), _episode("s0", 0, "east", 1.0)], RESPONSES, 1)
    _write(tmp_path / "y", [_episode("s0", 0, "east", 3.0)], RESPONSES, 1)
    assert compare_records(tmp_path / "x", tmp_path / "y") == []


def test_cli_exit_status_and_a_missing_folder(tmp_path, capsys):
    _write(tmp_path / "x", [_episode("s0", 0, "look", 1.0)], RESPONSES, 1)
    _write(tmp_path / "y", [_episode("s0", 0, "look", 2.0)], RESPONSES, 2)
    main([str(tmp_path / "x"), str(tmp_path / "y")])
    assert "identical records" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "x"), str(tmp_path / "nowhere")])
    assert "not a folder of records" in str(e.value)


def test_save_records_what_was_found_without_a_path_and_is_not_compared_itself(tmp_path, capsys):
    _write(tmp_path / "x", [_episode("s0", 0, "look", 1.0), _episode("s1", 0, "east", 2.0)], RESPONSES, 1)
    _write(tmp_path / "y", [_episode("s0", 0, "look", 2.0), _episode("s1", 0, "east", 5.0)], RESPONSES, 2)
    saved = tmp_path / "x" / "01_agents" / "replicate.json"
    main([str(tmp_path / "x"), str(tmp_path / "y"), "--save", str(saved)])
    record = json.loads(saved.read_text())
    assert record["identical"] and record["episodes"] == 2 and record["differences"] == []
    assert str(tmp_path) not in saved.read_text()
    assert "2 episodes" in capsys.readouterr().out
    # the saved summary lives beside the records: comparing again does not count it as a record
    assert compare_records(tmp_path / "x", tmp_path / "y") == []
    _write(tmp_path / "z", [_episode("s0", 0, "west", 1.0)], RESPONSES, 1)
    with pytest.raises(SystemExit):
        main([str(tmp_path / "x"), str(tmp_path / "z"), "--save", str(tmp_path / "z.json")])
    assert not json.loads((tmp_path / "z.json").read_text())["identical"]
