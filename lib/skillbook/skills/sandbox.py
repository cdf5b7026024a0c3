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
* identity: uid/gid 65534 inside a user namespace, no capabilities, no groups, no further user
  namespaces. On the host the skill is the calling user or, when root runs the book, uid/gid 65534: bwrap
  sets the jail up as root in a user namespace made once per process (`_root_userns`, so that it reads
  an interpreter under /root) and the child drops to 65534 before any skill code runs — so root-only
  files among the system libraries stay unreadable;
* processes: a new pid namespace (the agent and every other process are invisible, so they cannot be
  signalled), a new session (no terminal to inject into), killed with the agent (`--die-with-parent`)
  and, with everything it started, when the parent kills the jail's init; the parent reaps that init
  too (when it is a container's PID 1 the init is re-parented to it);
* network and IPC: a new network namespace with no interface up (and `socket()` refused by seccomp), new
  IPC, UTS and cgroup namespaces;
* system calls (x86-64 and arm64): a seccomp filter refuses process creation (clone, fork, clone3),
  namespace and mount calls, ptrace and cross-process memory access, bpf, perf, userfaultfd, io_uring,
  keyrings, sockets, SysV and POSIX IPC (shm*, sem*, msg*, mq_*: a shared memory segment escapes
  RLIMIT_AS) and syslog (the kernel log); other architectures run without this filter (the namespaces
  still apply);
* limits inside (a second layer): RLIMIT_AS (memory), RLIMIT_CPU, RLIMIT_FSIZE = 0, RLIMIT_NPROC = 0,
  RLIMIT_NOFILE = 3, RLIMIT_CORE = 0, and the process is made non-dumpable;
* protocol: the child's first message says the jail is up; then the parent reads and writes with one
  wall-clock deadline (no blocking `readline`), accepts only messages of an exact schema and at most
  MAX_MESSAGE bytes, and a command budget. Whatever the skill does, `run` returns a `SkillRun` whose
  `error` says what happened and whose `commands` keep the steps already taken; it raises only for the
  parent's own errors (from `step`), `JailUnavailable` (no jail on this machine) and `JailStartError`
  (this call's jail failed before its first message, e.g. at the process limit: an infrastructure
  error, never counted against the skill).

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
import resource
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
out = sys.stdout
def send(msg):
    out.write(json.dumps(msg) + "\n"); out.flush()
req = json.loads(sys.stdin.readline())
lim = req["limits"]
for fd in req["close"]:                # bwrap passes its --userns descriptor on
    os.close(fd)
if os.getuid() == 0:
    # Root's jail: bwrap set it up as host root (to read an interpreter under /root); become the host's
    # uid/gid 65534, with no groups, before any skill code runs. Leaving uid 0 clears every capability.
    import ctypes
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    header, no_caps = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()
    if ctypes.CDLL(None).capset(header, no_caps) != 0:     # the inheritable set too
        sys.exit("could not clear the capability sets")
    if os.getresuid() != (65534,) * 3 or os.getresgid() != (65534,) * 3 or os.getgroups():
        sys.exit("could not drop to uid/gid 65534")
try:                                   # not dumpable: no core file, no ptrace by same-uid processes
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
except Exception:
    pass
for name, value in (("RLIMIT_CORE", 0), ("RLIMIT_AS", lim["memory_bytes"]), ("RLIMIT_CPU", lim["cpu_seconds"]),
                    ("RLIMIT_FSIZE", 0), ("RLIMIT_NPROC", 0), ("RLIMIT_NOFILE", 3)):
    resource.setrlimit(getattr(resource, name), (value, value))
send({"ready": True})                  # the jail is up: from here on, what happens is the skill's doing
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
READY = b'{"ready": true}'     # the child's first message: the jail started and the limits are set
NOBODY = 65534                 # the uid and gid a skill runs as
INSTALL_HINT = ("install bubblewrap: `sudo apt-get install bubblewrap` (Debian/Ubuntu), "
                "`sudo dnf install bubblewrap` (Fedora), `sudo pacman -S bubblewrap` (Arch)")


class JailUnavailable(RuntimeError):
    """Code skills cannot run here: bubblewrap is missing or cannot create its namespaces."""


class JailStartError(RuntimeError):
    """This call's jail did not start (bwrap failed after the probe passed, e.g. at the process limit, or the
    machine was too slow to start it in time): no skill code ran, so it is not the skill's failure. An
    infrastructure error, like a simulator's (`EnvError.infrastructure`): the agent ends the episode with
    `error` set, the runner logs it and retries the episode, and hygiene deletes nothing (it propagates)."""

    infrastructure = True


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
    # resource is an extension module: its directory is lib-dynload
    dynload = os.path.realpath(os.path.dirname(getattr(resource, "__file__", None) or os.__file__))
    for d in dict.fromkeys([stdlib, dynload]):
        args += ["--ro-bind", d, d]
    site = os.path.join(stdlib, "site-packages")
    if os.path.isdir(site) and not os.path.islink(site):
        args += ["--tmpfs", site, "--remount-ro", site]
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and len(files) > 1:
        args += ["--setenv", "LD_LIBRARY_PATH", os.path.dirname(files[1])]
    return args


def _parents(args: list[str]) -> list[str]:
    """bwrap arguments that create the directories above the mount points, mode 0755: bwrap makes them 0700,
    owned by the uid it sets the jail up as, which in root's jail is not the skill's uid."""
    mounts = [args[i + 2] if args[i] in ("--ro-bind", "--symlink") else args[i + 1]
              for i in range(len(args)) if args[i] in ("--ro-bind", "--symlink", "--tmpfs")]
    inside = lambda d: any(d == m or d.startswith(m.rstrip("/") + "/") for m in mounts)  # noqa: E731
    dirs = {p for m in mounts for p in _ancestors(m) if not inside(p)}
    return [a for d in sorted(dirs) for a in ("--perms", "0755", "--dir", d)]


def _ancestors(path: str) -> list[str]:
    """'/a/b/c' -> ['/a', '/a/b']."""
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[:i + 1]) for i in range(len(parts))]


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
    # SysV and POSIX IPC: a shared memory segment outlives its detachment and counts against no rlimit, so
    # shmget/shmat in a loop held 1.3 GB against a 256 MB RLIMIT_AS (the IPC namespace is only a namespace)
    "shmget": (29, 194), "shmat": (30, 196), "shmctl": (31, 195), "shmdt": (67, 197),
    "semget": (64, 190), "semop": (65, 193), "semctl": (66, 191), "semtimedop": (220, 192),
    "msgget": (68, 186), "msgsnd": (69, 189), "msgrcv": (70, 188), "msgctl": (71, 187),
    "mq_open": (240, 180), "mq_unlink": (241, 181), "mq_timedsend": (242, 182), "mq_timedreceive": (243, 183),
    "mq_notify": (244, 184), "mq_getsetattr": (245, 185),
    # the kernel log (otherwise refused only where the host sets kernel.dmesg_restrict=1)
    "syslog": (103, 116),
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
    fds: tuple[int, ...] = ()   # descriptors bwrap needs (root's user namespace); the child closes them


def _jail_args(bwrap: str, python: str, userns: int | None) -> tuple[str, ...]:
    """bwrap's options; `userns`: root's user namespace (see _root_userns), None for any other user."""
    try:
        help_text = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        help_text = ""
    has = lambda option: [option] if option in help_text else []  # noqa: E731 — options of bwrap >= 0.8
    if userns is None:   # bwrap maps uid/gid 65534 inside to the calling user
        identity = (["--unshare-user"] + has("--disable-userns")
                    + ["--uid", str(NOBODY), "--gid", str(NOBODY), "--cap-drop", "ALL"])
    else:                # set up as uid 0 (host root) in root's namespace; the child drops to 65534 (CHILD)
        identity = (["--userns", str(userns)] + has("--assert-userns-disabled")
                    + ["--uid", "0", "--gid", "0", "--cap-drop", "ALL", "--cap-add", "CAP_SETUID",
                       "--cap-add", "CAP_SETGID"])
    binds = _binds(python)
    return tuple(identity
                 + ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                    "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv",
                    "--hostname", "skill"]
                 + (_parents(binds) if "--perms" in help_text else []) + binds
                 + ["--remount-ro", "/", "--chdir", "/"])


# Run by root, unjailed: enters a new user namespace, waits for the parent to write its uid/gid maps, and
# disables nested user namespaces in it (bwrap's --disable-userns cannot be combined with --userns).
_USERNS_HELPER = r"""
import ctypes, os, sys
if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0:       # CLONE_NEWUSER
    sys.exit("unshare(CLONE_NEWUSER): " + os.strerror(ctypes.get_errno()))
print("entered", flush=True)
sys.stdin.readline()
with open("/proc/sys/user/max_user_namespaces", "w") as f:
    f.write("0")
print("ready", flush=True)
sys.stdin.readline()
"""


def _root_userns(python: str) -> int:
    """For root: a descriptor of a user namespace where uid/gid 0 are host root and 65534 is host 65534.

    With its own user namespace, bwrap run by root maps the skill's uid 65534 to host root, which reads
    every root-only file the jail shows (e.g. a 0600 file under /usr/lib). Running bwrap as 65534 instead
    fails where the interpreter lives under /root. So bwrap sets the jail up as root inside this namespace
    and the child becomes host uid 65534 before any skill code runs. The descriptor keeps it alive."""
    helper = subprocess.Popen([python, "-I", "-S", "-c", _USERNS_HELPER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/", env={})
    assert helper.stdin is not None and helper.stdout is not None and helper.stderr is not None   # all PIPEs

    def failed() -> OSError:
        helper.kill()
        assert helper.stderr is not None   # a PIPE (narrowing does not reach into this function)
        return OSError(helper.stderr.read().strip()[-300:] or "the helper process failed")
    try:
        if helper.stdout.readline() != "entered\n":
            raise failed()
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{helper.pid}/{name}", "w") as f:
                f.write(f"0 0 1\n{NOBODY} {NOBODY} 1\n")
        helper.stdin.write("\n")
        helper.stdin.flush()
        if helper.stdout.readline() != "ready\n":
            raise failed()
        return os.open(f"/proc/{helper.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        helper.kill()
        helper.wait()
        for stream in (helper.stdin, helper.stdout, helper.stderr):
            try:
                stream.close()
            except OSError:
                pass


# Run by the probe inside the jail: refuses to load unless the jail is in effect.
_SELF_TEST = """
import os
if os.path.exists("/etc") or os.path.exists("/proc") or os.getuid() != 65534:
    raise RuntimeError("the jail is not in effect")
"""


@functools.cache
def _probe(bwrap: str, python: str) -> _Jail:
    """Check once per (bwrap, interpreter) that a jailed Python starts, is jailed and answers (failures are
    not cached)."""
    userns = None
    try:
        if os.geteuid() == 0:
            try:
                userns = _root_userns(python)
            except OSError as e:
                raise JailUnavailable(f"root cannot create the user namespace code skills run in: {e}") \
                    from None
        jail = _Jail(bwrap, python, _jail_args(bwrap, python, userns), seccomp_filter(),
                     () if userns is None else (userns,))
        try:
            r, stderr = _execute(jail, [_SELF_TEST], None, lambda a: ("", False), Limits(timeout_s=30))
            detail = (stderr.decode(errors="replace").strip() or r.error)[-500:]
        except JailStartError as e:
            r, detail = SkillRun(ok=False), str(e)[-500:]
        if not r.ok:
            raise JailUnavailable(
                f"bubblewrap ({bwrap}) cannot start a jailed Python here: {detail}. Code skills run only "
                "inside the jail; it needs unprivileged user namespaces (sysctl "
                "kernel.unprivileged_userns_clone=1; on Ubuntu >= 23.10 an AppArmor profile that allows "
                "bwrap to create them).")
    except BaseException:
        if userns is not None:
            os.close(userns)
        raise
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
    """Non-blocking reads and writes to the child, all bounded by one deadline. The child's stderr is read
    meanwhile (so that no amount of it blocks the child); its first 4 KiB are kept for bwrap's own errors."""

    def __init__(self, proc: subprocess.Popen, deadline: float, timeout_s: float):
        self.proc, self.deadline, self.timeout_s = proc, deadline, timeout_s
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None   # all PIPEs
        self.rfd, self.wfd, self.efd = proc.stdout.fileno(), proc.stdin.fileno(), proc.stderr.fileno()
        for fd in (self.rfd, self.wfd, self.efd):
            os.set_blocking(fd, False)
        self.rsel, self.wsel = selectors.DefaultSelector(), selectors.DefaultSelector()
        self.rsel.register(self.rfd, selectors.EVENT_READ)
        self.wsel.register(self.wfd, selectors.EVENT_WRITE)
        for sel in (self.rsel, self.wsel):
            sel.register(self.efd, selectors.EVENT_READ)
        self.buf, self.err, self.err_open = bytearray(), bytearray(), True

    def close(self):
        self.rsel.close()
        self.wsel.close()

    def _wait(self, sel, fd: int):
        """Until `fd` is ready, reading stderr meanwhile."""
        while True:
            remaining = self.deadline - time.perf_counter()
            events = sel.select(timeout=remaining) if remaining > 0 else []
            if not events:
                raise _Stop(f"timed out after {self.timeout_s:g} s")
            ready = {key.fd for key, _ in events}
            if self.efd in ready:
                self.read_stderr()
            if fd in ready:
                return

    def read_stderr(self) -> bool:
        """One read of the child's stderr, never blocking; False when there was nothing to read. At its end,
        stop watching it."""
        if not self.err_open:
            return False
        try:
            chunk = os.read(self.efd, 1 << 16)
        except BlockingIOError:
            return False
        except OSError:
            chunk = b""
        if chunk:
            self.err += chunk[:4096 - len(self.err)]
            return True
        self.err_open = False
        for sel in (self.rsel, self.wsel):
            if sel.get_map() is not None and self.efd in sel.get_map():
                sel.unregister(self.efd)
        return False

    def _died(self) -> str:
        try:
            code = self.proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            return "the skill process closed its output"
        return f"the skill process died (exit code {code})"

    def send(self, obj) -> None:
        view = memoryview((json.dumps(obj) + "\n").encode())
        while view:
            self._wait(self.wsel, self.wfd)
            try:
                view = view[os.write(self.wfd, view):]
            except BlockingIOError:
                continue
            except OSError:                       # EPIPE: the child closed its input or died
                raise _Stop(self._died()) from None

    def line(self) -> bytes:
        """The child's next line (without the newline)."""
        while True:
            i = self.buf.find(b"\n")
            if i > MAX_MESSAGE or (i < 0 and len(self.buf) > MAX_MESSAGE):
                raise _Stop(f"the skill broke the protocol: a message longer than {MAX_MESSAGE} bytes")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 1]
                return line
            self._wait(self.rsel, self.rfd)
            try:
                chunk = os.read(self.rfd, 1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                raise _Stop(self._died())
            self.buf += chunk

    def receive(self, calling: bool) -> dict:
        return _message(self.line(), calling)


def _jail_init(bwrap_pid: int) -> int | None:
    """A pidfd of bwrap's only child, the jail's init (None before bwrap started it, or without pidfds).

    Listed again after the pidfd is opened, so that the pidfd is that child and not a process that reused
    its pid."""
    path = f"/proc/{bwrap_pid}/task/{bwrap_pid}/children"
    try:
        with open(path) as f:
            children = f.read().split()
        if len(children) != 1:
            return None
        pidfd = os.pidfd_open(int(children[0]))
    except (OSError, AttributeError):
        return None
    try:
        with open(path) as f:
            if f.read().split() == children:
                return pidfd
    except OSError:
        pass
    os.close(pidfd)
    return None


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the jail and reap all of it.

    The jail's init (bwrap's child, pid 1 of the jail's pid namespace: the skill and anything it started die
    with it) is killed first, then bwrap's process group. When bwrap dies before it reaped its child, the
    child is re-parented to the nearest subreaper, which is this process when it is a container's PID 1:
    it is reaped here, or every call would leave a zombie."""
    init = _jail_init(proc.pid)
    try:
        if init is not None:
            try:
                signal.pidfd_send_signal(init, signal.SIGKILL)
            except ProcessLookupError:      # it has exited already
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.kill()
        proc.wait()
        if init is not None:
            try:
                os.waitid(os.P_PIDFD, init, os.WEXITED)
            except ChildProcessError:       # not re-parented to this process: bwrap or init reaped it
                pass
    finally:
        if init is not None:
            os.close(init)


def _execute(jail: _Jail, definitions: list[str], call, step, limits: Limits) -> tuple[SkillRun, bytes]:
    """Run the child in the jail; (its SkillRun, the start of its stderr). Raises JailStartError when the
    jail did not start (no skill code ran)."""
    t0 = time.perf_counter()
    run_ = SkillRun(ok=False)
    argv = [jail.bwrap, *jail.args]
    seccomp_r = None
    try:
        if jail.seccomp is not None:
            seccomp_r, seccomp_w = os.pipe()
            os.write(seccomp_w, jail.seccomp)           # a few hundred bytes: fits in the pipe buffer
            os.close(seccomp_w)
            argv += ["--seccomp", str(seccomp_r)]
        argv += ["--", jail.python, "-I", "-S", "-c", CHILD]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd="/", env={}, start_new_session=True,
                                pass_fds=jail.fds + (() if seccomp_r is None else (seccomp_r,)))
    except OSError as e:        # e.g. the process or descriptor limit; or bwrap vanished since it was probed
        if isinstance(e, (FileNotFoundError, PermissionError)):
            _probe.cache_clear()    # the next call probes again (and says JailUnavailable)
        raise JailStartError(f"cannot start bubblewrap ({jail.bwrap}): {e}") from None
    finally:
        if seccomp_r is not None:
            os.close(seccomp_r)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None   # all PIPEs
    pipe = _Pipe(proc, t0 + limits.timeout_s, limits.timeout_s)
    started = False
    try:
        pipe.send({"definitions": definitions, "call": call, "close": list(jail.fds),
                   "limits": {"memory_bytes": limits.memory_mb << 20, "cpu_seconds": limits.cpu_seconds}})
        if pipe.line() != READY:
            raise _Stop("the jail's first message was not the ready message")
        started = True
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
        _kill(proc)
        while len(pipe.err) < 4096 and pipe.read_stderr():     # what bwrap wrote before it died
            pass
        pipe.close()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
    stderr = bytes(pipe.err)
    if not started:
        said = stderr.decode(errors="replace").strip()[-500:]
        exited = proc.returncode not in (None, -signal.SIGKILL)        # by itself, not killed here
        why = f"bwrap exited with code {proc.returncode}" if exited else run_.error
        raise JailStartError(f"the jail did not start: {why}" + (f": {said}" if said else ""))
    run_.seconds = time.perf_counter() - t0
    return run_, stderr


def run(definitions: list[str], call: tuple[str, list] | None, step, limits: Limits | None = None) -> SkillRun:
    """Load `definitions` in the jail and optionally call one function with `env` first.

    `step(action) -> (observation, done)` executes a command in the real environment. Whatever the child
    does, the answer is a SkillRun (its `error` says what went wrong, `commands` keep the steps taken);
    raises JailUnavailable when code skills cannot run on this machine, JailStartError when this call's
    jail did not start (infrastructure: no skill code ran).
    """
    return _execute(jail(), definitions, call, step, limits or Limits())[0]


def load_check(definitions: list[str], limits: Limits | None = None) -> str:
    """'' when the definitions load (define their functions without error) in the jail, else the error.

    Their top-level code runs only inside the jail; raises JailUnavailable when there is none and
    JailStartError when the jail did not start (which says nothing about the definitions)."""
    r = run(definitions, None, lambda a: ("", False), limits or Limits(timeout_s=5, cpu_seconds=2))
    return "" if r.ok else (r.error or "did not load")
