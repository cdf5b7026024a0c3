"""Running untrusted code skills: a jailed child process, a strict protocol over a pipe, hard limits.

A code skill is a Python function `def name(env, ...)` written by a language model, so it is hostile
code. Its only way to act is `env.step(action)`, which sends the command to the parent (the agent) over a
pipe and returns the observation.

Threat model. The skill's code, including its top-level statements (which `load_check` runs when a skill
is written), may do anything Python and native code (ctypes) can do. It runs in a bubblewrap jail
(`bwrap`, Linux user namespaces); the same jail is used whoever runs the book, root or not:

* filesystem: a new mount namespace whose root is an empty read-only tmpfs with, read-only, only the
  interpreter binary, its standard library (site-packages hidden), libpython and the system library
  directories (/usr/lib, /lib, ...). No /etc, /home, /root, /tmp, /proc, /dev, /sys, no project files,
  nothing writable; the working directory is `/`;
* identity: a new user namespace, uid/gid 65534 inside, no capabilities, no further user namespaces;
* processes: a new pid namespace (the agent and every other process are invisible, so they cannot be
  signalled), a new session (no terminal to inject into), killed with the agent (`--die-with-parent`)
  and, with everything it started, when the parent kills its process group;
* network: a new network namespace with no interface up (and `socket()` refused by seccomp), new IPC,
  UTS and cgroup namespaces;
* system calls (x86-64 and arm64): a seccomp filter refuses process creation (clone, fork, clone3),
  namespace and mount calls, ptrace and cross-process memory access, bpf, perf, userfaultfd, io_uring,
  keyrings and sockets; other architectures run without this filter (the namespaces still apply);
* limits inside (a second layer): RLIMIT_AS (memory), RLIMIT_CPU, RLIMIT_FSIZE = 0, RLIMIT_NPROC = 0,
  RLIMIT_NOFILE = 3, RLIMIT_CORE = 0, and the process is made non-dumpable;
* protocol: the parent reads and writes with one wall-clock deadline (no blocking `readline`), accepts
  only messages of an exact schema and at most MAX_MESSAGE bytes, and a command budget. Whatever the
  child does, `run` returns a `SkillRun` whose `error` says what happened and whose `commands` keep the
  steps already taken; it raises only for the parent's own errors (from `step`) and `JailUnavailable`.

What the jail does not hide: the read-only system libraries and the interpreter's standard library
(public files), the CPU time and memory within the limits, and the kernel's remaining system-call
surface. Without bubblewrap (or where it cannot create namespaces) code skills do not run at all:
`run` and `load_check` raise `JailUnavailable` with the install hint; text skills are unaffected.
"""
from __future__ import annotations

import ast
import functools
import json
import math
import os
import platform
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field

CHILD = r'''
import json, os, resource, sys
req = json.loads(sys.stdin.readline())
lim = req["limits"]
try:                                   # not dumpable: no core file, no ptrace by same-uid processes
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
except Exception:
    pass
for name, value in (("RLIMIT_CORE", 0), ("RLIMIT_AS", lim["memory_bytes"]), ("RLIMIT_CPU", lim["cpu_seconds"]),
                    ("RLIMIT_FSIZE", 0), ("RLIMIT_NPROC", 0), ("RLIMIT_NOFILE", 3)):
    resource.setrlimit(getattr(resource, name), (value, value))
out = sys.stdout
def send(msg):
    out.write(json.dumps(msg) + "\n"); out.flush()
class Env:
    """The only door to the world: env.step(action) -> observation."""
    def step(self, action):
        send({"cmd": "step", "action": str(action)})
        reply = json.loads(sys.stdin.readline())
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

MAX_MESSAGE = 1 << 20          # bytes in one message from the child
INSTALL_HINT = ("install bubblewrap: `sudo apt-get install bubblewrap` (Debian/Ubuntu), "
                "`sudo dnf install bubblewrap` (Fedora), `sudo pacman -S bubblewrap` (Arch)")


class JailUnavailable(RuntimeError):
    """Code skills cannot run here: bubblewrap is missing or cannot create its namespaces."""


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
    if not all(_plain(a) for a in args):
        raise SkillCallError(f"skill call arguments must be strings, numbers, booleans, None, or lists and dicts "
                             f"of them, got {text!r}")
    return node.func.id, args


def _plain(value) -> bool:
    """A value that travels to the skill as JSON (no sets, bytes, complex numbers or infinities)."""
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


# -- the jail ----------------------------------------------------------------------------------------------

def find_bwrap() -> str | None:
    """The bubblewrap executable, or None."""
    return shutil.which("bwrap") or next((p for p in ("/usr/bin/bwrap", "/usr/local/bin/bwrap")
                                         if os.access(p, os.X_OK)), None)


def interpreter() -> str:
    """The real Python binary the child runs (a venv's `python` is a link to it; the venv is not needed)."""
    return os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)


def _binds(python: str) -> list[str]:
    """bwrap arguments that make the interpreter, its standard library and the system libraries readable."""
    import resource  # an extension module: its directory is lib-dynload
    args: list[str] = []
    for d in ("/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/libx32", "/lib", "/lib64", "/lib32", "/libx32"):
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    files = [python]
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        for name in {sysconfig.get_config_var("INSTSONAME"), sysconfig.get_config_var("LDLIBRARY")} - {None}:
            lib = os.path.join(sysconfig.get_config_var("LIBDIR") or "", name)
            if os.path.isfile(lib):
                files.append(os.path.realpath(lib))
    for f in dict.fromkeys(files):
        args += ["--ro-bind", f, f]
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    dynload = os.path.realpath(os.path.dirname(getattr(resource, "__file__", None) or os.__file__))
    for d in dict.fromkeys([stdlib, dynload]):
        args += ["--ro-bind", d, d]
    site = os.path.join(stdlib, "site-packages")
    if os.path.isdir(site) and not os.path.islink(site):
        args += ["--tmpfs", site, "--remount-ro", site]
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and len(files) > 1:
        args += ["--setenv", "LD_LIBRARY_PATH", os.path.dirname(files[1])]
    return args


# seccomp: (x86-64 number, arm64 number) of the refused system calls; clone3 answers ENOSYS so that libc
# falls back to clone, which answers EPERM like the rest.
_REFUSED = {
    "clone": (56, 220), "fork": (57, None), "vfork": (58, None), "clone3": (435, 435),
    "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39),
    "pivot_root": (155, 41), "chroot": (161, 51), "open_tree": (428, 428), "move_mount": (429, 429),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442), "ptrace": (101, 117), "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271), "kcmp": (312, 272), "pidfd_open": (434, 434), "pidfd_getfd": (438, 438),
    "pidfd_send_signal": (424, 424), "bpf": (321, 280), "perf_event_open": (298, 241),
    "userfaultfd": (323, 282), "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "socket": (41, 198), "socketpair": (53, 199),
}
_AUDIT_ARCH = {"x86_64": (0xC000003E, 0), "amd64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1),
               "arm64": (0xC00000B7, 1)}


def seccomp_filter(machine: str | None = None) -> bytes | None:
    """A compiled classic-BPF seccomp program for bwrap --seccomp, or None on other architectures.

    A system call from another ABI (i386 on x86-64, x32) kills the process; the refused calls answer
    EPERM (ENOSYS for clone3); everything else is allowed."""
    machine = (machine or platform.machine()).lower()
    if machine not in _AUDIT_ARCH:
        return None
    arch, column = _AUDIT_ARCH[machine]
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06                    # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JGE|K, RET|K
    allow, kill, errno_ = 0x7FFF0000, 0x80000000, 0x00050000      # SECCOMP_RET_ALLOW, _KILL_PROCESS, _ERRNO
    ins = lambda code, k, jt=0, jf=0: struct.pack("HBBI", code, jt, jf, k)  # noqa: E731
    prog = [ins(ld, 4), ins(jeq, arch, 1, 0), ins(ret, kill), ins(ld, 0)]
    if column == 0:                                               # x32 system calls on x86-64
        prog += [ins(jge, 0x40000000, 0, 1), ins(ret, kill)]
    for name, numbers in _REFUSED.items():
        nr = numbers[column]
        if nr is not None:
            prog += [ins(jeq, nr, 0, 1), ins(ret, errno_ | (38 if name == "clone3" else 1))]
    prog.append(ins(ret, allow))
    return b"".join(prog)


@dataclass(frozen=True)
class _Jail:
    bwrap: str
    python: str
    args: tuple[str, ...]       # bwrap options before --seccomp
    seccomp: bytes | None


def _jail_args(bwrap: str, python: str) -> tuple[str, ...]:
    try:
        help_text = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        help_text = ""
    return tuple(["--unshare-all", "--unshare-user"]
                 + (["--disable-userns"] if "--disable-userns" in help_text else [])
                 + ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
                    "--uid", "65534", "--gid", "65534", "--hostname", "skill"]
                 + _binds(python)
                 + ["--remount-ro", "/", "--chdir", "/"])


# Run by the probe inside the jail: refuses to load unless the jail is in effect.
_SELF_TEST = """
import os
if os.path.exists("/etc") or os.path.exists("/proc") or os.getuid() != 65534:
    raise RuntimeError("the jail is not in effect")
"""


@functools.lru_cache(maxsize=None)
def _probe(bwrap: str, python: str) -> _Jail:
    """Check once per (bwrap, interpreter) that a jailed Python starts, is jailed and answers (failures are
    not cached)."""
    jail = _Jail(bwrap, python, _jail_args(bwrap, python), seccomp_filter())
    r, stderr = _execute(jail, [_SELF_TEST], None, lambda a: ("", False), Limits(timeout_s=30),
                         capture_stderr=True)
    if not r.ok:
        detail = (stderr.decode(errors="replace").strip() or r.error)[-500:]
        raise JailUnavailable(
            f"bubblewrap ({bwrap}) cannot start a jailed Python here: {detail}. Code skills run only inside "
            "the jail; it needs unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; "
            "on Ubuntu >= 23.10 an AppArmor profile that allows bwrap to create them).")
    return jail


def jail() -> _Jail:
    """The jail code skills run in; raises JailUnavailable (with the install hint) when there is none."""
    if not sys.platform.startswith("linux"):
        raise JailUnavailable("code skills run only inside a bubblewrap jail, which needs Linux "
                              f"(this is {sys.platform})")
    bwrap = find_bwrap()
    if bwrap is None:
        raise JailUnavailable("code skills run only inside a bubblewrap jail and `bwrap` is not installed; "
                              + INSTALL_HINT)
    return _probe(bwrap, interpreter())


def jail_status() -> str:
    """'' when code skills can run here, else why not."""
    try:
        jail()
        return ""
    except JailUnavailable as e:
        return str(e)


# -- the protocol ------------------------------------------------------------------------------------------

class _Stop(Exception):
    """The child misbehaved or ran out of time: the message becomes SkillRun.error."""


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _message(line: bytes, calling: bool) -> dict:
    """The child's message, if it is exactly one of the four allowed shapes."""
    try:
        msg = json.loads(line.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _Stop(f"the skill broke the protocol: not a JSON message: {line[:80]!r}") from None
    ok = isinstance(msg, dict) and (
        (calling and msg.keys() == {"cmd", "action"} and msg["cmd"] == "step" and isinstance(msg["action"], str))
        or (calling and msg.keys() == {"result"} and isinstance(msg["result"], str))
        or (not calling and msg.keys() == {"loaded"} and msg["loaded"] is True)
        or (msg.keys() == {"error"} and isinstance(msg["error"], str)))
    if ok:
        try:
            "".join(v for v in msg.values() if isinstance(v, str)).encode("utf-8")
        except UnicodeEncodeError:
            ok = False
    if not ok:
        raise _Stop(f"the skill broke the protocol: unexpected message {line[:80]!r}")
    return msg


class _Pipe:
    """Non-blocking reads and writes to the child, all bounded by one deadline."""

    def __init__(self, proc: subprocess.Popen, deadline: float, timeout_s: float):
        self.proc, self.deadline, self.timeout_s = proc, deadline, timeout_s
        self.rfd, self.wfd = proc.stdout.fileno(), proc.stdin.fileno()
        os.set_blocking(self.rfd, False)
        os.set_blocking(self.wfd, False)
        self.rsel, self.wsel = selectors.DefaultSelector(), selectors.DefaultSelector()
        self.rsel.register(self.rfd, selectors.EVENT_READ)
        self.wsel.register(self.wfd, selectors.EVENT_WRITE)
        self.buf = bytearray()

    def close(self):
        self.rsel.close()
        self.wsel.close()

    def _wait(self, sel):
        remaining = self.deadline - time.perf_counter()
        if remaining <= 0 or not sel.select(timeout=remaining):
            raise _Stop(f"timed out after {self.timeout_s:g} s")

    def _died(self) -> str:
        try:
            code = self.proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            return "the skill process closed its output"
        return f"the skill process died (exit code {code})"

    def send(self, obj) -> None:
        view = memoryview((json.dumps(obj) + "\n").encode())
        while view:
            self._wait(self.wsel)
            try:
                view = view[os.write(self.wfd, view):]
            except BlockingIOError:
                continue
            except OSError:                       # EPIPE: the child closed its input or died
                raise _Stop(self._died()) from None

    def receive(self, calling: bool) -> dict:
        while True:
            i = self.buf.find(b"\n")
            if i > MAX_MESSAGE or (i < 0 and len(self.buf) > MAX_MESSAGE):
                raise _Stop(f"the skill broke the protocol: a message longer than {MAX_MESSAGE} bytes")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 1]
                return _message(line, calling)
            self._wait(self.rsel)
            try:
                chunk = os.read(self.rfd, 1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                raise _Stop(self._died())
            self.buf += chunk


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL bwrap's process group; its pid namespace (the skill and anything it started) dies with it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.kill()
    proc.wait()


def _execute(jail: _Jail, definitions: list[str], call, step, limits: Limits,
             capture_stderr: bool = False) -> tuple[SkillRun, bytes]:
    t0 = time.perf_counter()
    run_ = SkillRun(ok=False)
    argv = [jail.bwrap, *jail.args]
    seccomp_r = None
    if jail.seccomp is not None:
        seccomp_r, seccomp_w = os.pipe()
        os.write(seccomp_w, jail.seccomp)           # a few hundred bytes: fits in the pipe buffer
        os.close(seccomp_w)
        argv += ["--seccomp", str(seccomp_r)]
    argv += ["--", jail.python, "-I", "-S", "-c", CHILD]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE if capture_stderr else subprocess.DEVNULL, cwd="/",
                                env={}, start_new_session=True, pass_fds=() if seccomp_r is None else (seccomp_r,))
    except OSError as e:                            # bwrap vanished since it was probed
        _probe.cache_clear()
        raise JailUnavailable(f"cannot start bubblewrap ({jail.bwrap}): {e}; {INSTALL_HINT}") from None
    finally:
        if seccomp_r is not None:
            os.close(seccomp_r)
    pipe = _Pipe(proc, t0 + limits.timeout_s, limits.timeout_s)
    stderr = b""
    try:
        pipe.send({"definitions": definitions, "call": call,
                   "limits": {"memory_bytes": limits.memory_mb << 20, "cpu_seconds": limits.cpu_seconds}})
        while True:
            msg = pipe.receive(calling=call is not None)
            if "cmd" in msg:
                if len(run_.commands) >= limits.max_commands:
                    raise _Stop(f"more than {limits.max_commands} commands")
                action = msg["action"][:200]
                observation, done = step(action)        # the parent's own errors propagate
                run_.commands.append((action, observation))
                if done:
                    run_.done = run_.ok = True
                    break
                pipe.send({"observation": observation})
            elif "error" in msg:
                run_.error = msg["error"][:500] or "error"
                break
            else:
                run_.ok, run_.result = True, msg.get("result", "")[:300]
                break
    except _Stop as e:
        run_.error = str(e)
    finally:
        pipe.close()
        _kill(proc)
        if capture_stderr:
            stderr = proc.stderr.read(4096)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
    run_.seconds = time.perf_counter() - t0
    return run_, stderr


def run(definitions: list[str], call: tuple[str, list] | None, step, limits: Limits | None = None) -> SkillRun:
    """Load `definitions` in the jail and optionally call one function with `env` first.

    `step(action) -> (observation, done)` executes a command in the real environment. Whatever the child
    does, the answer is a SkillRun (its `error` says what went wrong, `commands` keep the steps taken);
    raises JailUnavailable when code skills cannot run on this machine.
    """
    return _execute(jail(), definitions, call, step, limits or Limits())[0]


def load_check(definitions: list[str], limits: Limits | None = None) -> str:
    """'' when the definitions load (define their functions without error) in the jail, else the error.

    Their top-level code runs only inside the jail; raises JailUnavailable when there is none."""
    r = run(definitions, None, lambda a: ("", False), limits or Limits(timeout_s=5, cpu_seconds=2))
    return "" if r.ok else (r.error or "did not load")
