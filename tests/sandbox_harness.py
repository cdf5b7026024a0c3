"""Who calls the sandbox in the tests: this process (root in CI) and an unprivileged user.

Every case is a JSON spec (see sandbox_driver.py). `in-process` runs it in the test process, in a thread
with a deadline so that a hang fails the test instead of stalling the suite. `unprivileged` runs it in a
subprocess: as root, `setpriv` drops to `nobody` (uid 65534, no groups) and the driver uses an interpreter
`nobody` can execute (the project's may live under /root, which `nobody` cannot read); as a non-root
user, the subprocess keeps that user's identity (already unprivileged). The sandbox module is copied to a
world-readable temporary directory so that the checkout's location does not matter.
"""
from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

import sandbox_driver
from skillbook.skills import sandbox

NOBODY = 65534
WHO = ["in-process", "unprivileged"]


class InProcess:
    name = "in-process"

    def __init__(self):
        self.uid, self.gid = os.getuid(), os.getgid()

    def __call__(self, spec: dict, timeout: float = 60) -> dict:
        box: dict = {}
        t = threading.Thread(target=lambda: box.update(sandbox_driver.execute(sandbox, spec)), daemon=True)
        t.start()
        t.join(timeout)
        return box if not t.is_alive() else {"hung": f"sandbox.run did not return within {timeout} s"}


class Unprivileged:
    name = "unprivileged"

    def __init__(self, prefix: list[str], python: str, workdir: Path, uid: int, gid: int):
        self.prefix, self.python, self.workdir, self.uid, self.gid = prefix, python, workdir, uid, gid
        self.secret = "secret-" + secrets.token_hex(8)

    def argv(self) -> list[str]:
        return self.prefix + [self.python, "-I", str(self.workdir / "sandbox_driver.py"),
                              str(self.workdir / "sandbox.py")]

    def env(self) -> dict:
        return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "SKILLBOOK_TEST_SECRET": self.secret}

    def __call__(self, spec: dict, timeout: float = 60) -> dict:
        p = subprocess.Popen(self.argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=self.env(), cwd="/", start_new_session=True, text=True)
        try:
            out, err = p.communicate(json.dumps(spec), timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            return {"hung": f"the driver did not finish within {timeout} s"}
        if not out.strip():
            return {"driver_died": f"exit code {p.returncode}; stderr: {err[-2000:]}"}
        return json.loads(out)

    def start(self, spec: dict) -> subprocess.Popen:
        p = subprocess.Popen(self.argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.env(), cwd="/",
                             start_new_session=True, text=True)
        p.stdin.write(json.dumps(spec))
        p.stdin.close()
        return p


def _unprivileged() -> Unprivileged | str:
    """The unprivileged runner, or why there is none."""
    if os.getuid() == 0:
        if shutil.which("setpriv") is None:
            return "running as root without `setpriv` (util-linux) to drop to an unprivileged user"
        prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
                  "--bounding-set=-all", "--"]
        uid = gid = NOBODY
    else:
        prefix, uid, gid = [], os.getuid(), os.getgid()
    workdir = Path(tempfile.mkdtemp(prefix="skillbook-jail-test-"))
    workdir.chmod(0o755)
    atexit.register(shutil.rmtree, workdir, True)
    shutil.copy(sandbox.__file__, workdir / "sandbox.py")
    shutil.copy(sandbox_driver.__file__, workdir / "sandbox_driver.py")
    for p in workdir.iterdir():
        p.chmod(0o644)
    candidates = [os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable), sys.executable,
                  "/usr/bin/python3", "/usr/local/bin/python3", shutil.which("python3") or ""]
    for python in dict.fromkeys(c for c in candidates if c):
        # setpriv resolves the program while it still holds root's capabilities, so the check has the
        # interpreter start itself again as the unprivileged user (which is what sandbox.run does).
        ok = subprocess.run(prefix + [python, "-I", "-c", "import json, ctypes, socket, subprocess, sys; "
                                      "assert sys.version_info >= (3, 9); "
                                      "subprocess.run([sys.executable, '-I', '-c', 'import json'], check=True)"],
                            capture_output=True, cwd="/", env={"PATH": "/usr/bin:/bin"}).returncode == 0
        if ok:
            return Unprivileged(prefix, python, workdir, uid, gid)
    return f"no Python >= 3.9 the unprivileged user (uid {uid}) can run among {candidates}"


_UNPRIVILEGED: list = []


def unprivileged_runner() -> Unprivileged:
    if not _UNPRIVILEGED:
        _UNPRIVILEGED.append(_unprivileged())
    r = _UNPRIVILEGED[0]
    if isinstance(r, str):
        pytest.skip(f"cannot run the sandbox as an unprivileged user: {r}")
    return r


@pytest.fixture(params=WHO)
def runner(request):
    """Each sandbox test runs twice: called by this process and by an unprivileged user."""
    return InProcess() if request.param == "in-process" else unprivileged_runner()


@pytest.fixture()
def victim(runner):
    """A directory and a world-readable file owned by the user who runs the sandbox (who could read,
    truncate and delete them without a jail)."""
    d = Path(tempfile.mkdtemp(prefix="skillbook-victim-", dir="/tmp"))
    f = d / "precious.txt"
    f.write_text("victim-" + secrets.token_hex(8))
    d.chmod(0o755)
    f.chmod(0o644)
    if os.getuid() == 0:
        os.chown(d, runner.uid, runner.gid)
        os.chown(f, runner.uid, runner.gid)
    yield f
    shutil.rmtree(d, ignore_errors=True)
