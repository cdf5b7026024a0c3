"""The pipe between the agent and a code skill: bounded reads and writes with one deadline, a strict message
schema, the child killed with everything it started, and child misbehaviour returned as the skill's error
with the commands it already issued kept (never an exception in the agent). Run in-process and as an
unprivileged user."""
from __future__ import annotations

from textwrap import dedent

import pytest

pytest_plugins = ["sandbox_harness"]   # the `runner` and `victim` fixtures



def contained(r: dict) -> dict:
    for bad in ("hung", "raised", "driver_died"):
        assert bad not in r, f"{bad}: {r[bad]}"
    assert r["leftover"] == [], f"processes left behind: {r['leftover']}"
    return r


def test_a_half_written_message_does_not_hang_the_run(runner):
    stall = "def stall(env):\n    import sys, time\n    sys.stdout.write('{')\n    sys.stdout.flush()\n" \
            "    time.sleep(30)\n"
    r = contained(runner({"definitions": [stall], "call": ["stall", []], "limits": {"timeout_s": 2}}, timeout=15))
    assert not r["ok"] and "timed out" in r["error"] and r["wall"] < 5


BREAK = dedent("""
    def rogue(env):
        import sys, time
        env.step('open fridge')
        sys.stdout.write(RAW + '\\n')
        sys.stdout.flush()
        time.sleep(30)
""")


@pytest.mark.parametrize("raw", ['["cmd"]', "5", "NaN", "null", '"result"', "{}", '{"cmd": "jump"}',
                                 '{"cmd": "step"}', '{"cmd": "step", "action": NaN}', '{"cmd": "step", "action": 5}',
                                 '{"cmd": "step", "action": "x", "also": 1}', '{"result": 5}', '{"error": ["x"]}',
                                 '{"loaded": false}', '{"result": "a", "error": "b"}', "[" * 100000, "not json",
                                 '{"result": "\\ud800"}', "1" * 5000])
def test_a_malformed_message_ends_the_skill_but_keeps_its_steps(runner, raw):
    r = contained(runner({"definitions": [BREAK.replace("RAW", repr(raw))], "call": ["rogue", []],
                          "limits": {"timeout_s": 10}}, timeout=30))
    assert not r["ok"] and "protocol" in r["error"], r
    assert r["commands"] == [["open fridge", "you open fridge"]] and r["wall"] < 5


def test_a_huge_line_is_cut_without_waiting_for_its_end(runner):
    flood = "def flood(env):\n    import sys, time\n    sys.stdout.write('x' * (3 << 20))\n    sys.stdout.flush()\n" \
            "    time.sleep(30)\n"
    r = contained(runner({"definitions": [flood], "call": ["flood", []], "limits": {"timeout_s": 20}}, timeout=40))
    assert not r["ok"] and "longer than" in r["error"] and r["wall"] < 10


def test_a_skill_that_stops_reading_cannot_block_the_agent(runner):
    """The agent's replies go through a pipe too: a child that never reads them fills it."""
    deaf = dedent("""
        def deaf(env):
            import sys, time
            for _ in range(10):
                sys.stdout.write('{"cmd": "step", "action": "look"}\\n')
            sys.stdout.flush()
            time.sleep(30)
    """)
    r = contained(runner({"definitions": [deaf], "call": ["deaf", []], "limits": {"timeout_s": 3},
                          "observation_bytes": 200_000}, timeout=20))
    assert not r["ok"] and "timed out" in r["error"] and r["wall"] < 6
    assert [c[0] for c in r["commands"]] == ["look"]


@pytest.mark.parametrize("body, error", [("os._exit(3)", "died (exit code 3)"),
                                         ("os.kill(os.getpid(), 9)", "died"),
                                         ("os.close(1)\n    import time\n    time.sleep(30)", "timed out after 3 s")])
def test_a_skill_that_exits_or_closes_its_output_is_reported(runner, body, error):
    r = contained(runner({"definitions": [f"def quit(env):\n    import os\n    env.step('look')\n    {body}\n"],
                          "call": ["quit", []], "limits": {"timeout_s": 3}}, timeout=20))
    assert not r["ok"] and error in r["error"] and r["commands"] == [["look", "you look"]] and r["wall"] < 5, r


def test_after_the_world_ends_the_skill_is_stopped(runner):
    r = contained(runner({"definitions": ["def go(env):\n    env.step('win')\n    env.step('after')\n"],
                          "call": ["go", []]}))
    assert r["ok"] and r["done"] and r["issued"] == ["win"]


def test_a_skill_error_comes_back_with_its_steps(runner):
    r = contained(runner({"definitions": ["def oops(env):\n    env.step('look')\n    return 1 / 0\n"],
                          "call": ["oops", []]}))
    assert not r["ok"] and r["error"].startswith("ZeroDivisionError") and r["commands"] == [["look", "you look"]]
