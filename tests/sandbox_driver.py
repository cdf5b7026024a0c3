"""Runs one sandbox case, in the test process or as a script under another user (tests/test_sandbox*.py).

As a script (stdlib only, so that an interpreter an unprivileged user can run will do):

    python sandbox_driver.py PATH/TO/sandbox.py  < spec.json  > result.json

A spec is {"mode": "run" | "load_check" | "unjailed" | "orphan" | "reaper", "definitions": [...],
"call": [name, args], "limits": {...}, "observation_bytes": n, "broken_jail": {...}, "calls": n}. The string
"$PARENT_PID" in call arguments and definitions becomes the pid of the process that calls the sandbox (the
skill's real parent). `broken_jail` breaks the jail after its probe passed: {"bwrap": path} runs that
program instead of bwrap, {"nproc": n} sets RLIMIT_NPROC (the process limit) to n.
"""
from __future__ import annotations

import ctypes
import dataclasses
import importlib.util
import json
import os
import resource
import sys
import threading
import time


def world(observation_bytes: int = 0):
    """The environment a skill acts on: 'win' ends the episode; observations are 'you <action>' (padded)."""
    issued = []

    def step(action):
        issued.append(action)
        return f"you {action}" + "." * observation_bytes, action == "win"
    return issued, step


def processes():
    """(pid, state letter, parent pid) of every process in /proc that can still be read."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        yield int(d), fields[0], int(fields[1])


def descendants(root: int) -> list[int]:
    """Live (non-zombie) processes below `root`, from /proc."""
    children: dict[int, list[int]] = {}
    for pid, state, parent in processes():
        if state != "Z":
            children.setdefault(parent, []).append(pid)
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return sorted(out)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


def _substitute(value):
    """'$PARENT_PID' (alone: the int; inside a string: its digits), in nested lists."""
    if isinstance(value, list):
        return [_substitute(v) for v in value]
    if value == "$PARENT_PID":
        return os.getpid()
    if isinstance(value, str):
        return value.replace("$PARENT_PID", str(os.getpid()))
    return value


def zombie_children() -> list[int]:
    """Children of this process that died and were not reaped, from /proc."""
    return sorted(pid for pid, state, parent in processes() if state == "Z" and parent == os.getpid())


def execute(sandbox, spec: dict) -> dict:
    """Run the case; never raises (an exception from the sandbox is reported as `raised`)."""
    broken = spec.get("broken_jail")
    if not broken:
        return _execute(sandbox, spec)
    original, nproc = sandbox.jail, resource.getrlimit(resource.RLIMIT_NPROC)
    try:
        probed = original()
    except Exception as e:  # noqa: BLE001
        return {"raised": f"probe: {type(e).__name__}: {e}"}
    try:
        if "bwrap" in broken:
            sandbox.jail = lambda: dataclasses.replace(probed, bwrap=broken["bwrap"])
        if "nproc" in broken:
            resource.setrlimit(resource.RLIMIT_NPROC, (broken["nproc"], nproc[1]))
        return _execute(sandbox, spec)
    finally:
        resource.setrlimit(resource.RLIMIT_NPROC, nproc)
        sandbox.jail = original


def _execute(sandbox, spec: dict) -> dict:
    issued, step = world(spec.get("observation_bytes", 0))
    call = [spec["call"][0], _substitute(spec["call"][1])] if spec.get("call") else None
    spec = {**spec, "definitions": _substitute(spec["definitions"])}
    limits = sandbox.Limits(**spec["limits"]) if spec.get("limits") else None
    mode = spec.get("mode", "run")
    before = set(descendants(os.getpid()))
    out: dict = {"issued": issued, "parent_pid": os.getpid()}
    t0 = time.perf_counter()
    try:
        if mode == "load_check":
            out["load_error"] = sandbox.load_check(spec["definitions"], limits)
        elif mode == "unjailed":
            # The control: the same skill run as plain Python by the same user, to show the attack is real.
            class Env:
                def step(self, action):
                    return step(str(action))[0]
            ns: dict = {"__name__": "skill"}
            for code in spec["definitions"]:
                exec(compile(code, "<skill>", "exec"), ns)
            if call:
                out["result"] = repr(ns[call[0]](Env(), *call[1]))
        else:
            r = sandbox.run(spec["definitions"], call, step, limits)
            out.update(ok=r.ok, error=r.error, result=r.result, done=r.done,
                       commands=[list(c) for c in r.commands], seconds=r.seconds)
    except BaseException as e:  # noqa: BLE001 — the harness reports everything
        out["raised"] = f"{type(e).__name__}: {e}"
        out["infrastructure"] = getattr(e, "infrastructure", False)
    out["wall"] = time.perf_counter() - t0
    out["leftover"] = sorted(set(descendants(os.getpid())) - before)
    return out


def orphan(sandbox, spec: dict) -> None:
    """Start the case in a thread, print this process's descendants after `after` s, then wait to be killed."""
    threading.Thread(target=execute, args=(sandbox, spec), daemon=True).start()
    time.sleep(spec.get("after", 1.0))
    print(json.dumps({"pids": descendants(os.getpid())}), flush=True)
    time.sleep(120)


def reaper(sandbox, spec: dict) -> None:
    """As a subreaper (what a container's PID 1 is), run the case `calls` times; print the results and the
    children left as zombies (orphans are re-parented to a subreaper, which must reap them)."""
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)                     # PR_SET_CHILD_SUBREAPER
    results = [_execute(sandbox, spec) for _ in range(spec.get("calls", 1))]
    time.sleep(0.5)                                             # what is dying has died
    print(json.dumps({"results": results, "zombies": zombie_children()}), flush=True)


def main() -> None:
    loader = importlib.util.spec_from_file_location("jailed_sandbox", sys.argv[1])
    sandbox = importlib.util.module_from_spec(loader)
    sys.modules[loader.name] = sandbox   # dataclasses look their module up
    loader.loader.exec_module(sandbox)
    spec = json.loads(sys.stdin.read())
    if spec.get("mode") in ("orphan", "reaper"):
        (orphan if spec["mode"] == "orphan" else reaper)(sandbox, spec)
        return
    print(json.dumps(execute(sandbox, spec)), flush=True)


if __name__ == "__main__":
    main()
