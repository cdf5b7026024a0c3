"""Shared machinery of the two Java-backed benchmarks: one JVM per adapter, every call under a deadline,
a failed JVM replaced whole.

All that is true of one simulator process (its JVM, the game it has loaded, the task it is playing, that
task's instruction and valid actions) lives in one `Simulator` object. Any failure of a call into it (the
JVM died, hung past the deadline, lost its connection, raised) kills that JVM, drops the object and raises
`EnvError` for the episode in flight; the next call builds a new `Simulator` from nothing, so no fact about
a dead JVM can reach the next episode. The adapter itself keeps only configuration and history.
"""
from __future__ import annotations

import json
import logging
import queue
import shutil
import threading
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

from py4j.java_gateway import GatewayClient
from py4j.protocol import Py4JError, Py4JJavaError

from ..io import atomic_write_json, cache_dir
from .base import SPLITS, EnvError, SimulatorError, StepResult, Task, TaskIdError, check_split, parse_task_id

JAVA_MISSING = ("Java (a JRE >= 11) is required by ScienceWorld and TextWorldExpress but `java` is not on PATH. "
                "Install it, e.g. `sudo apt-get install -y default-jre-headless` (Debian/Ubuntu) or "
                "`brew install openjdk` (macOS), then retry.")

# Deadlines. Measured on 2 busy cores: a JVM starts in 0.3 s (TWX) to 1.5 s (ScienceWorld), the first load
# and reset on it take up to ~4 s, a step up to ~0.3 s, a gold path ~1 s. A language model sharing the
# cores can slow all of that several times over, hence the margins.
LAUNCH_TIMEOUT_S = 60.0  # starting a JVM, and the first call on it (class loading, JIT warm-up)
CALL_TIMEOUT_S = 30.0    # each later call into it (reset, step, gold path, listing)
SOCKET_MARGIN_S = 5.0    # py4j's own socket reads end this long after the call deadline (see _bound_socket_reads)

_LAUNCH_LOCK = threading.Lock()  # one JVM start at a time in this process, so a hung start's JVM can be told apart


def require_java() -> None:
    if shutil.which("java") is None:
        raise EnvError(JAVA_MISSING)


@dataclass(eq=False)
class Simulator:
    """Everything bound to one simulator process, and only that. A failure discards the whole object; a
    new JVM gets a new one. New per-simulator state belongs here, never on the adapter."""

    handle: Any                  # the package's env object (TextWorldExpressEnv / ScienceWorldEnv)
    proc: Any                    # its JVM (subprocess.Popen), or None if the package hides it
    loaded: Any = None           # what is loaded, as the subclass records it (TextWorldExpress: (game, params))
    episode: Task | None = None  # the task it is playing; None between episodes
    instruction: str = ""
    valid: list[str] = field(default_factory=list)
    calls: int = 0               # calls answered; the first one gets the launch deadline
    discarded: bool = False

    @property
    def pid(self) -> int | None:
        return getattr(self.proc, "pid", None)

    def exit_code(self, wait_s: float = 0.0) -> int | None:
        """The JVM's exit code once it has ended (waiting up to `wait_s` for it), else None."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=wait_s) if wait_s else self.proc.poll()
        except Exception:
            return None

    def end_episode(self) -> None:
        self.episode, self.instruction, self.valid = None, "", []


def _quietly(fn: Callable, *args) -> None:
    try:
        fn(*args)
    except Exception:
        pass


def _process_of(handle) -> Any:
    return getattr(getattr(handle, "_gateway", None), "java_process", None)


def _client_of(handle) -> Any:
    return getattr(getattr(handle, "_gateway", None), "_gateway_client", None)


def _kill(proc) -> None:
    """SIGKILL (which also ends a SIGSTOPped JVM) and reap it, so it is neither left running nor a zombie."""
    if proc is None:
        return
    _quietly(lambda: proc.poll() is None and proc.kill())
    _quietly(proc.wait, 10)
    _quietly(lambda: proc.stdin and proc.stdin.close())


def _dispose(sim: Simulator) -> None:
    """Kill a simulator's JVM and let go of its py4j gateway without talking to the JVM again."""
    if sim.discarded:
        return
    sim.discarded = True
    sim.end_episode()
    gateway = getattr(sim.handle, "_gateway", None)
    if gateway is not None:
        # Mark the client disconnected first: a py4j retry in an abandoned call, or the package's own
        # close() at garbage collection, then fails at once instead of reconnecting to a dead port.
        _quietly(setattr, getattr(gateway, "_gateway_client", None), "is_connected", False)
        _quietly(lambda: gateway.close(keep_callback_server=True))
    _kill(sim.proc)
    if gateway is not None:
        _quietly(lambda: gateway.shutdown_callback_server())


def _bound_socket_reads(handle, seconds: float) -> None:
    """A read timeout on the gateway's sockets. Our deadline (a worker thread, then SIGKILL) governs the
    calls we make; this bounds the ones py4j makes on its own (the releases of collected proxies, sent from
    the background thread of `_release_proxies_in_background`), which a hung JVM would otherwise block for ever."""
    client = _client_of(handle)
    if client is None:
        return
    _quietly(setattr, client.gateway_parameters, "read_timeout", seconds)  # connections opened from now on
    for connection in list(client.deque):                                   # and those already open
        _quietly(lambda c=connection: c.socket.settimeout(seconds))


# py4j tells the JVM about each garbage-collected proxy from whichever thread runs the collection, and waits
# for its answer. On a hung JVM that thread (often the caller's, in the middle of its own call) would wait out
# the socket timeout once per proxy: a 1 s deadline once took 71 s. The releases go to one background thread
# instead; it may wait on a hung JVM, nothing else does, and `_dispose` makes the ones still queued no-ops.
_RELEASES: queue.SimpleQueue = queue.SimpleQueue()
_RELEASER_LOCK = threading.Lock()
_releaser: threading.Thread | None = None


_RELEASER_NAME = "py4j releases"


class _QuietReleases(logging.Filter):
    """py4j reports a failed send with `logging.exception` on the *root* logger. A release that meets a JVM
    just killed (it was in flight when the JVM died, or the JVM died under a connected client) fails by
    design and costs nothing, but its traceback reached a chapter's page as stderr (chapter 06). Dropped
    here for the releaser thread only; every other py4j message is untouched."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.threadName == _RELEASER_NAME
                    and record.getMessage().startswith("Exception while sending command"))


_QUIET_RELEASES = _QuietReleases()


def _release_queued() -> None:
    while True:
        client, target_id = _RELEASES.get()
        _quietly(GatewayClient.garbage_collect_object, client, target_id)  # a no-op once disconnected


def _release_proxies_in_background(handle) -> None:
    """Route this gateway's releases to the background thread (started here, never from a finalizer: the
    finalizer only puts on a SimpleQueue, which is safe to call from one)."""
    global _releaser
    client = _client_of(handle)
    if client is None:
        return
    with _RELEASER_LOCK:
        if _releaser is None or not _releaser.is_alive():
            logging.getLogger().addFilter(_QUIET_RELEASES)     # once: a filter is added only if absent
            _releaser = threading.Thread(target=_release_queued, name=_RELEASER_NAME, daemon=True)
            _releaser.start()
    # An instance attribute: py4j's finalizers look the method up on the client when they run.
    _quietly(setattr, client, "garbage_collect_object", lambda target_id: _RELEASES.put((client, target_id)))


def _gateway_children() -> dict[int, Any]:
    """This process's py4j JVMs (psutil processes by pid); empty if psutil is unavailable."""
    try:
        import psutil  # deferred: optional (the test extra); without it there is nothing to list
    except ImportError:
        return {}
    out = {}
    for p in psutil.Process().children():
        try:
            if "py4j.GatewayServer" in p.cmdline():
                out[p.pid] = p
        except psutil.Error:
            pass
    return out


class _DeadOnArrival(Exception):
    """A JVM found dead by the first call that used it after its last answer (internal)."""


class JavaEnv:
    """Base of ScienceWorld and TextWorldExpress adapters.

    Subclasses provide `_launch()` (a new package env object, which starts a JVM) and the calls, each
    given the `Simulator` to act on: `_split_ids(sim, task_type, split)` (the official variation numbers
    / seeds), `_load(sim, task)`, `_raw_step(sim, action)`, `_gold(sim, task)`. They record what they load
    on `sim`, never on `self`, and return plain Python values (a py4j proxy read later would reach the
    JVM outside the deadline). Every call runs through `_call`: in a worker thread under a deadline
    (`launch_timeout_s` to start a JVM and for the first call on it, `call_timeout_s` for each later
    call). A JVM that died, hung or lost its connection raises `SimulatorError` (infrastructure); a Java
    or Python exception from the simulator raises `EnvError`. Either way the JVM is killed, the episode
    in flight is lost, and the next call starts a fresh JVM.
    """

    name = ""
    conversational = False
    gold_depends_on_history = False
    TASK_TEXT = "instruction+observation"
    TASK_TYPES: tuple[str, ...] = ()

    def __init__(self, step_limit: int = 1000, call_timeout_s: float = CALL_TIMEOUT_S,
                 launch_timeout_s: float = LAUNCH_TIMEOUT_S):
        require_java()
        if not (call_timeout_s > 0 and launch_timeout_s > 0):
            raise ValueError(f"deadlines must be positive, not call_timeout_s={call_timeout_s}, "
                             f"launch_timeout_s={launch_timeout_s}")
        self.step_limit = step_limit
        self.call_timeout_s = float(call_timeout_s)
        self.launch_timeout_s = float(launch_timeout_s)
        self._sim: Simulator | None = None  # the only reference to per-simulator state
        self._lock = threading.RLock()      # one call into the simulator at a time
        self._split_cache: dict[tuple[str, str], list[int]] = {}
        self._lost: str | None = None       # why the last episode ended in a failure (until the next reset)
        self.restarts = 0                   # JVMs killed after a failure
        self.errors: list[str] = []         # their messages, in order

    # -- subclass hooks ---------------------------------------------------------------------------
    @abstractmethod
    def _launch(self): ...

    @abstractmethod
    def _split_ids(self, sim: Simulator, task_type: str, split: str) -> list[int]: ...

    @abstractmethod
    def _load(self, sim: Simulator, task: Task) -> tuple[str, dict]: ...

    @abstractmethod
    def _raw_step(self, sim: Simulator, action: str) -> StepResult: ...

    @abstractmethod
    def _gold(self, sim: Simulator, task: Task) -> list[str]: ...

    # -- JVM lifecycle ----------------------------------------------------------------------------
    @property
    def jvm_pid(self) -> int | None:
        """Process id of the JVM now in use (None before the first call and after a failure or close)."""
        sim = self._sim
        return sim.pid if sim is not None else None

    def _call(self, what: str, fn: Callable, *args, task: Task | None = None, continues: bool = False,
              keeps_episode: bool = False):
        """`fn(sim, *args)` on the simulator, under a deadline.

        continues=True (a step): the call belongs to the episode in flight and needs the JVM that started
        it. Otherwise a dead JVM is replaced before the call, and the call ends any episode unless
        keeps_episode (a read-only query)."""
        with self._lock:
            sim = self._sim
            if continues:
                assert sim is not None and sim.episode is not None
                code = sim.exit_code()
                if code is not None:
                    self._fail(sim, what, task, f"the JVM (pid {sim.pid}) had died{_code(code)}", SimulatorError)
            else:
                code = sim.exit_code() if sim is not None else None
                if code is not None:
                    # Died between calls. No step is in flight; an episode still open is lost.
                    msg = (f"{self.name}: the JVM (pid {sim.pid}) had died{_code(code)} before {what}; "
                           "started a fresh one (JVM restarted)")
                    if sim.episode is not None:
                        msg += f"; episode {sim.episode.id} is lost"
                        self._lost = msg
                    self._record(msg)
                    self._discard(sim)
                    self.restarts += 1
                    sim = None
                inherited = sim is not None
                if sim is None:
                    sim = self._sim = self._start(what, task)
                if not keeps_episode:
                    sim.end_episode()
                    self._lost = None
                if inherited:
                    episode = sim.episode
                    try:
                        return self._run(sim, what, task, fn, args, dead_on_arrival=True)
                    except _DeadOnArrival as e:
                        # It died just before this call (too recently for the check above): no step was
                        # in flight, so the call runs once more on a fresh JVM.
                        msg = f"{self.name}: {e}; started a fresh one (JVM restarted)"
                        if episode is not None:
                            msg += f"; episode {episode.id} is lost"
                            self._lost = msg
                        self._record(msg)
                        self.restarts += 1
                        sim = self._sim = self._start(what, task)
            return self._run(sim, what, task, fn, args)

    def _run(self, sim: Simulator, what: str, task: Task | None, fn: Callable, args: tuple,
             dead_on_arrival: bool = False):
        deadline = self.call_timeout_s if sim.calls else max(self.call_timeout_s, self.launch_timeout_s)
        box: dict = {}
        done = threading.Event()

        def work():  # touches only `sim` (dropped by the adapter if this call times out) and its handle
            try:
                box["value"] = fn(sim, *args)
            except BaseException as e:  # noqa: BLE001 - reported to the caller below
                box["error"] = e
            finally:
                done.set()

        threading.Thread(target=work, name=f"{self.name} {what}", daemon=True).start()
        try:
            answered = done.wait(deadline)
        except BaseException:  # e.g. KeyboardInterrupt: the call may still be running, so that JVM goes
            self._lost = f"{self.name}: {what} was interrupted; JVM restarted"
            self._discard(sim)
            raise
        if not answered:
            self._fail(sim, what, task, f"the JVM (pid {sim.pid}) gave no answer within {deadline:g} s (hung); "
                                        "killed it", SimulatorError)
        if "error" in box:
            why, cls = self._diagnose(sim, box["error"])
            if dead_on_arrival and cls is SimulatorError and sim.exit_code() is not None:
                self._discard(sim)
                raise _DeadOnArrival(f"{what}: {why}")
            self._fail(sim, what, task, why, cls, cause=box["error"])
        if not sim.calls:  # from now on py4j's own waits end soon after the call deadline
            _bound_socket_reads(sim.handle, self.call_timeout_s + SOCKET_MARGIN_S)
        sim.calls += 1
        return box["value"]

    def _diagnose(self, sim: Simulator, e: BaseException) -> tuple[str, type[EnvError]]:
        if isinstance(e, EnvError):
            return str(e), type(e)
        py4j_failure = isinstance(e, Py4JError) and not isinstance(e, Py4JJavaError)
        code = sim.exit_code(wait_s=1.0)  # a killed JVM closes its socket a moment before it can be reaped
        if code is not None:
            return f"the JVM (pid {sim.pid}) died{_code(code)} ({type(e).__name__}: {e})", SimulatorError
        if py4j_failure:
            return f"lost the connection to the JVM (pid {sim.pid}): {type(e).__name__}: {e}", SimulatorError
        return f"the simulator raised {type(e).__name__}: {e}", EnvError

    def _fail(self, sim: Simulator, what: str, task: Task | None, why: str, cls: type[EnvError],
              cause: BaseException | None = None):
        on = f" on {task.id}" if task is not None else ""
        msg = (f"{self.name}: {what}{on} failed: {why}; JVM restarted (a fresh one at the next call), "
               "the episode in flight is lost")
        self._record(msg)
        self._lost = msg
        self._discard(sim)
        self.restarts += 1
        raise cls(msg) from cause

    def _record(self, msg: str) -> None:
        self.errors.append(msg)

    def _discard(self, sim: Simulator) -> None:
        if self._sim is sim:
            self._sim = None
        _dispose(sim)

    def _start(self, what: str, task: Task | None) -> Simulator:
        """A new JVM, under the launch deadline. A start that hangs is killed, even before py4j knows its pid."""
        box: dict = {}
        done, guard = threading.Event(), threading.Lock()

        def work():
            try:
                handle = self._launch()
            except BaseException as e:  # noqa: BLE001
                box["error"] = e
                done.set()
                return
            with guard:
                if box.get("abandoned"):  # the caller gave up: this JVM must not outlive the start
                    _dispose(Simulator(handle, _process_of(handle)))
                else:
                    box["value"] = handle
            done.set()

        with _LAUNCH_LOCK:
            before = _gateway_children()
            threading.Thread(target=work, name=f"{self.name} JVM start", daemon=True).start()
            try:
                done.wait(self.launch_timeout_s)
            finally:
                with guard:
                    if "value" not in box and "error" not in box:
                        box["abandoned"] = True
                if box.get("abandoned"):
                    for pid, p in _gateway_children().items():
                        if pid not in before:
                            _quietly(p.kill)
                            _quietly(p.wait, 10)
        on = f" for {what}" + (f" on {task.id}" if task is not None else "")
        if box.get("abandoned"):
            msg = (f"{self.name}: starting a JVM{on} failed: no answer within {self.launch_timeout_s:g} s (hung); "
                   "killed it")
            self._record(msg)
            raise SimulatorError(msg)
        if "error" in box:
            e = box["error"]
            if isinstance(e, (ImportError, EnvError)):  # a missing package or Java: not a passing failure
                raise e
            msg = f"{self.name}: starting a JVM{on} failed: {type(e).__name__}: {e}"
            self._record(msg)
            raise SimulatorError(msg) from e
        handle = box["value"]
        _release_proxies_in_background(handle)
        _bound_socket_reads(handle, max(self.call_timeout_s, self.launch_timeout_s) + SOCKET_MARGIN_S)
        return Simulator(handle, _process_of(handle))

    def close(self) -> None:
        """Kill the JVM this adapter started (the adapter stays usable: the next call starts a new one)."""
        with self._lock:
            sim, self._sim = self._sim, None
            if sim is not None:
                _dispose(sim)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- tasks ------------------------------------------------------------------------------------
    def task_types(self) -> list[str]:
        return list(self.TASK_TYPES)

    def _check_type(self, task_type: str) -> str:
        if task_type not in self.TASK_TYPES:
            raise TaskIdError(f"unknown {self.name} task type {task_type!r}; valid: {', '.join(self.TASK_TYPES)}")
        return task_type

    _PACKAGE = ""  # the PyPI distribution whose official splits these are

    def splits_file(self):
        """Where this simulator's official splits are listed once per package version and configuration
        (the units and gold-length caches are named after it)."""
        return cache_dir() / "splits" / f"{self.name}-{version(self._PACKAGE)}-{self._config_tag()}.json"

    def _config_tag(self) -> str:
        return "default"

    def split_ids(self, task_type: str, split: str) -> list[int]:
        """Official variation numbers / seeds of a split; listed once per package version, then read from disk."""
        key = (self._check_type(task_type), check_split(split))
        if key in self._split_cache:
            return self._split_cache[key]
        path = self.splits_file()
        stored = json.loads(path.read_text()) if path.exists() else {}
        name = "/".join(key)
        if name not in stored:
            stored[name] = list(self._call(f"listing {name} tasks", self._split_ids, *key))
            atomic_write_json(path, stored)
        self._split_cache[key] = stored[name]
        return stored[name]

    def tasks(self, split: str, task_types: list[str] | None = None) -> list[Task]:
        check_split(split)
        out = []
        for tt in task_types or self.TASK_TYPES:
            out += [Task(self.name, tt, split, i, nid) for i, nid in enumerate(self.split_ids(tt, split))]
        return out

    def task(self, task_id: str) -> Task:
        env, tt, split, index = parse_task_id(task_id)
        if env != self.name:
            raise TaskIdError(f"task id {task_id!r} belongs to env {env!r}, not {self.name!r}")
        ids = self.split_ids(tt, split)
        if not 0 <= index < len(ids):
            raise TaskIdError(f"task index {index} out of range for {self.name}/{tt}/{split}: valid 0..{len(ids) - 1}")
        return Task(self.name, tt, split, index, ids[index])

    def _as_task(self, task: Task | str) -> Task:
        return self.task(task) if isinstance(task, str) else task

    # -- episodes ---------------------------------------------------------------------------------
    def reset(self, task: Task | str) -> str:
        task = self._as_task(task)
        with self._lock:
            obs, info = self._call("reset", self._load, task, task=task)
            sim = self._sim
            sim.episode, sim.instruction, sim.valid = task, info.get("instruction", ""), list(info.get("valid", []))
        return obs

    def step(self, action: str) -> StepResult:
        with self._lock:
            sim = self._sim
            if sim is None or sim.episode is None:
                if self._lost:  # the episode ended in a failure; only a reset starts another
                    raise SimulatorError(f"{self.name}: step({action!r}) after the episode was lost: {self._lost}")
                raise RuntimeError(f"{self.name}: step() before reset()")
            r = self._call(f"step({action!r})", self._raw_step, action, task=sim.episode, continues=True)
            sim.valid = list(r.info.get("valid", sim.valid))
        return r

    @property
    def current(self) -> Task | None:
        """The task being played (None before a reset, after gold_actions, and after a failure)."""
        sim = self._sim
        return sim.episode if sim is not None else None

    def valid_actions(self) -> list[str]:
        sim = self._sim
        return list(sim.valid) if sim is not None else []

    def action_templates(self) -> list[str]:
        """Action forms of this benchmark, for prompts when the valid-action list is too long to show."""
        return []

    @property
    def instruction(self) -> str:
        sim = self._sim
        return sim.instruction if sim is not None else ""

    def gold_actions(self, task: Task | str) -> list[str]:
        """The benchmark's own gold action sequence for a task (resets the simulator to it; ends any episode)."""
        task = self._as_task(task)
        return list(self._call("gold path", self._gold, task, task=task))


def _code(code: int | None) -> str:
    return f" (exit code {code})" if code else ""


__all__ = ["JavaEnv", "Simulator", "require_java", "JAVA_MISSING", "SPLITS", "CALL_TIMEOUT_S", "LAUNCH_TIMEOUT_S"]
