"""Code skills are untrusted: a malicious one is contained (files, sockets, loops, memory, processes).

The jail itself, as root and as an unprivileged user, is tested in test_sandbox_jail.py; the pipe protocol
in test_sandbox_protocol.py; what the agent and hygiene do with the answers in test_sandbox_callers.py.
"""
import time

import pytest

from skillbook.skills.sandbox import Limits, SkillCallError, load_check, parse_call, run


def world():
    issued = []

    def step(action):
        issued.append(action)
        return f"you {action}", action == "win"
    return issued, step


def test_a_well_behaved_skill_acts_through_env_step_only():
    issued, step = world()
    r = run(["def fetch(env, obj):\n    env.step('open fridge')\n    return env.step('take ' + obj)\n"],
            ("fetch", ["milk"]), step)
    assert r.ok and issued == ["open fridge", "take milk"]
    assert r.commands == [("open fridge", "you open fridge"), ("take milk", "you take milk")]
    assert r.result == "'you take milk'"


def test_the_world_ending_stops_the_skill():
    issued, step = world()
    r = run(["def go(env):\n    env.step('win')\n    env.step('after')\n"], ("go", []), step)
    assert r.ok and r.done and issued == ["win"]


@pytest.mark.parametrize("body, expected", [
    ("return open('/etc/hostname').read()", "Too many open files"),
    ("import socket\n    socket.create_connection(('127.0.0.1', 80))", "Too many open files"),
    ("a = bytearray(8 * 10**9)", "MemoryError"),
    ("a = []\n    while True: a.append('x' * 10**6)", "MemoryError"),
    ("import os\n    os.fork()", "Operation not permitted"),       # seccomp (RLIMIT_NPROC does not bind root)
])
def test_malicious_skills_fail_inside_the_sandbox(body, expected):
    issued, step = world()
    r = run([f"def evil(env):\n    {body}\n"], ("evil", []), step)
    assert not r.ok and expected in r.error and issued == []


def test_a_skill_cannot_delete_the_projects_files(tmp_path):
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    r = run([f"def evil(env):\n    import os\n    os.remove({str(victim)!r})\n"], ("evil", []), world()[1])
    assert not r.ok and "FileNotFoundError" in r.error      # the jail has no such file to remove
    assert victim.read_text() == "keep me"


def test_infinite_loops_are_killed_on_time():
    t0 = time.perf_counter()
    r = run(["def spin(env):\n    while True:\n        pass\n"], ("spin", []), world()[1],
            Limits(timeout_s=3, cpu_seconds=1))
    assert not r.ok and time.perf_counter() - t0 < 6


def test_a_chatty_skill_is_cut_at_its_command_budget():
    issued, step = world()
    r = run(["def chatty(env):\n    while True:\n        env.step('look')\n"], ("chatty", []), step,
            Limits(max_commands=5))
    assert not r.ok and "more than 5 commands" in r.error and len(issued) == 5


def test_load_check_reports_definitions_that_fail():
    assert load_check(["def ok(env):\n    return 1\n"]) == ""
    assert "NameError" in load_check(["def bad(env: Missing):\n    pass\n"])
    assert "SyntaxError" in load_check(["def bad(env):\n    return (\n"])


@pytest.mark.parametrize("text, parsed", [("fetch('milk')", ("fetch", ["milk"])),
                                          ("put_into('apple', \"red box\", 2)", ("put_into", ["apple", "red box", 2]))])
def test_parse_call(text, parsed):
    assert parse_call(text) == parsed


@pytest.mark.parametrize("text", ["fetch(__import__('os'))", "os.system('ls')", "fetch(x=1)", "fetch('a'",
                                  "fetch({1, 2})", "fetch(b'x')", "fetch(1j)", "fetch(1e999)", "fetch({1: 'a'})"])
def test_parse_call_accepts_only_literal_calls(text):
    with pytest.raises(SkillCallError):
        parse_call(text)
