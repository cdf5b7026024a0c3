"""Running untrusted code skills: a separate process, resource limits, no files, no network.

A code skill is a Python function `def name(env, ...)`; its only way to act is `env.step(action)`,
which sends the command to the parent (the agent) over a pipe and returns the observation. The child:

* runs `python -I -S` in an empty temporary directory, with a scrubbed environment;
* drops to the unprivileged `nobody` user when started as root (so it cannot touch the project's files);
* has RLIMIT_NOFILE = 3 (stdin, stdout, stderr): opening any file or socket fails with EMFILE;
* has RLIMIT_NPROC = 0 (no fork), RLIMIT_FSIZE = 0 (no file writes), RLIMIT_AS (memory) and RLIMIT_CPU;
* is killed by the parent after a wall-clock timeout or too many commands.

Residual risk, stated plainly: for a non-root user the child keeps the user's identity, so a skill could
still unlink a file it can name (unlink needs no file descriptor). Chapters run code skills only from the
model's own induction, and the paper's hygiene deletes skills that fail to load.
"""
from __future__ import annotations

import ast
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

CHILD = r'''
import json, os, resource, sys
req = json.loads(sys.stdin.readline())
lim = req["limits"]
if os.getuid() == 0:
    os.setgroups([]); os.setgid(65534); os.setuid(65534)
resource.setrlimit(resource.RLIMIT_AS, (lim["memory_bytes"], lim["memory_bytes"]))
resource.setrlimit(resource.RLIMIT_CPU, (lim["cpu_seconds"], lim["cpu_seconds"]))
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
resource.setrlimit(resource.RLIMIT_NOFILE, (3, 3))
out = sys.stdout
def send(msg):
    out.write(json.dumps(msg) + "\n"); out.flush()
class Env:
    """The only door to the world: env.step(action) -> observation."""
    def step(self, action):
        send({"cmd": "step", "action": str(action)})
        reply = json.loads(sys.stdin.readline())
        if reply.get("stop"):
            raise SystemExit(0)
        return reply["observation"]
try:
    ns = {"__name__": "skill"}
    for code in req["definitions"]:
        exec(compile(code, "<skill>", "exec"), ns)
    if req.get("call"):
        name, args = req["call"]
        result = ns[name](Env(), *args)
        send({"result": repr(result)[:300]})
    else:
        send({"loaded": True})
except SystemExit:
    pass
except BaseException as e:
    send({"error": f"{type(e).__name__}: {e}"[:500]})
'''


class SkillCallError(ValueError):
    """A macro call the agent wrote that is not `name(literal, ...)` of a known code skill."""


@dataclass
class SkillRun:
    ok: bool
    commands: list[tuple[str, str]] = field(default_factory=list)   # (action, observation) issued by the skill
    result: str = ""
    error: str = ""
    done: bool = False             # the environment ended the episode during the skill
    seconds: float = 0.0


@dataclass
class Limits:
    timeout_s: float = 10.0
    cpu_seconds: int = 5
    memory_mb: int = 256
    max_commands: int = 20


def function_name(code: str) -> str:
    """The name of the single top-level function a code skill defines (SyntaxError/ValueError otherwise)."""
    tree = ast.parse(code)
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if len(funcs) != 1:
        raise ValueError(f"a code skill defines exactly one top-level function, found {len(funcs)}")
    return funcs[0].name


def called_names(code: str) -> set[str]:
    """Names the code calls as functions (to find which other code skills it depends on)."""
    return {n.func.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def parse_call(text: str) -> tuple[str, list]:
    """'name(1, "red box")' -> ('name', [1, 'red box']); only literal arguments are accepted."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise SkillCallError(f"cannot parse skill call {text!r}: {e.msg}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.keywords:
        raise SkillCallError(f"a skill call looks like name(arg, ...), got {text!r}")
    try:
        args = [ast.literal_eval(a) for a in node.args]
    except ValueError:
        raise SkillCallError(f"skill call arguments must be literals (strings, numbers), got {text!r}") from None
    return node.func.id, args


def run(definitions: list[str], call: tuple[str, list] | None, step, limits: Limits | None = None) -> SkillRun:
    """Load `definitions` in a sandboxed child and optionally call one function with `env` first.

    `step(action) -> (observation, done)` executes a command in the real environment.
    """
    limits = limits or Limits()
    t0 = time.perf_counter()
    run_ = SkillRun(ok=False)
    with tempfile.TemporaryDirectory(prefix="skill-") as cwd:
        os.chmod(cwd, 0o755)
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", CHILD], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd,
                                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, start_new_session=True)
        request = {"definitions": definitions, "call": call,
                   "limits": {"memory_bytes": limits.memory_mb << 20, "cpu_seconds": limits.cpu_seconds}}
        sel = selectors.DefaultSelector()
        try:
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
            sel.register(proc.stdout, selectors.EVENT_READ)
            deadline = t0 + limits.timeout_s
            while True:
                remaining = deadline - time.perf_counter()
                if remaining <= 0 or not sel.select(timeout=remaining):
                    run_.error = f"timed out after {limits.timeout_s:.0f} s"
                    break
                line = proc.stdout.readline(1 << 16)
                if not line:
                    run_.error = f"the skill process died (exit code {proc.wait()})"
                    break
                try:
                    msg = json.loads(line)
                except json.JSONDecodeError:
                    run_.error = "the skill process wrote something that is not a message"
                    break
                if "cmd" in msg:
                    if len(run_.commands) >= limits.max_commands:
                        run_.error = f"more than {limits.max_commands} commands"
                        break
                    action = str(msg.get("action", ""))[:200]
                    observation, done = step(action)
                    run_.commands.append((action, observation))
                    if done:
                        run_.done, run_.ok = True, True
                        proc.stdin.write(b'{"stop": true}\n')
                        proc.stdin.flush()
                        break
                    proc.stdin.write((json.dumps({"observation": observation}) + "\n").encode())
                    proc.stdin.flush()
                elif "error" in msg:
                    run_.error = msg["error"]
                    break
                else:
                    run_.ok, run_.result = True, str(msg.get("result", ""))
                    break
        except (BrokenPipeError, OSError) as e:
            run_.error = run_.error or f"the skill process died ({type(e).__name__})"
        finally:
            sel.close()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
    run_.seconds = time.perf_counter() - t0
    return run_


def load_check(definitions: list[str], limits: Limits | None = None) -> str:
    """'' when the definitions load (define their functions without error), else the error."""
    r = run(definitions, None, lambda a: ("", False), limits or Limits(timeout_s=5, cpu_seconds=2))
    return "" if r.ok else (r.error or "did not load")
