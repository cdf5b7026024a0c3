"""Executing chapters with papermill: the chapters of _toc.yml, their parameters (names and types against each
chapter's parameters cell, values against `parameters.SCHEMA`, all before any model time), the environment of
their kernels (executor, serving), and each executed copy normalised so that replays compare equal."""
from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import tempfile
import time
from pathlib import Path

import nbformat
import yaml
from jupyter_client.manager import KernelManager

from ..io import atomic_write_text
from ..profiles import ProfileError, load_profile, project_root
from ..run.distributed import ENV_ACTORS, ENV_ADDRESS, ENV_EXECUTOR, ENV_TIMEOUT, parse_executor
from .lab import ENV_SERVING, SERVING
from .parameters import check_values
from .reading import prepare_for_reading

CANONICAL_PROFILE = "workshop"  # the profile _toc.yml points at


def toc_chapters(root: Path | None = None) -> list[str]:
    """Chapter names in _toc.yml order (entries 'runs/<profile>/<name>')."""
    root = root or project_root()
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    names: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            f = node.get("file")
            if isinstance(f, str) and f.startswith(f"runs/{CANONICAL_PROFILE}/"):
                names.append(f.split("/", 2)[2])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(toc)
    return names


def run_dir(chapter: str, profile: str = CANONICAL_PROFILE, root: Path | None = None) -> Path:
    path = (root or project_root()) / "runs" / profile / chapter
    path.mkdir(parents=True, exist_ok=True)
    return path


# -- executing chapters ----------------------------------------------------------------------------
def declared_parameters(notebook: Path) -> list[str]:
    """Names assigned at the top level of a chapter's `parameters` cell."""
    return list(parameter_defaults(notebook))


def parameter_defaults(notebook: Path) -> dict:
    """name → default value of a chapter's `parameters` cell (what papermill can override)."""
    nb = nbformat.read(str(notebook), as_version=4)
    cell = next((c for c in nb.cells if "parameters" in c.metadata.get("tags", [])), None)
    if cell is None:
        raise ProfileError(f"{notebook} has no cell tagged 'parameters'")
    out = {}
    for name in re.findall(r"^([A-Za-z_]\w*)\s*(?::[^=]+)?=", cell.source, re.M):
        node = next(n for n in ast.parse(cell.source).body
                    if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == name for t in n.targets))
        out[name] = ast.literal_eval(node.value)
    return out


def check_parameters(chapter: str, params: dict, defaults: dict, where: str = "") -> None:
    """Refuse a parameter the chapter does not declare, or a value of another type than its default's
    (None accepts any value; an int is a float; a bool is not an int) — before any model time."""
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise ProfileError(f"{where}unknown parameter(s) {unknown} for chapter {chapter}; "
                           f"its parameters: {', '.join(defaults)}")
    for name, value in params.items():
        default = defaults[name]
        if default is None or value is None:
            continue
        want = type(default)
        ok = (isinstance(value, want) and not (isinstance(value, bool) and want is not bool)) or \
            (want is float and isinstance(value, int) and not isinstance(value, bool))
        if not ok:
            raise ProfileError(f"{where}parameter {name!r} of chapter {chapter} must be a {want.__name__} "
                               f"(like its default {default!r}), got {value!r}")


def slowest_cells(notebook: Path, k: int = 3) -> list[tuple[int, float]]:
    """The `k` code cells that took longest in an executed notebook, as (execution count, seconds), read
    from papermill's clock before `normalize_notebook` takes it out: where a chapter's time goes."""
    nb = nbformat.read(notebook, as_version=4)
    timed = [(c.get("execution_count"), c.metadata.get("papermill", {}).get("duration")) for c in nb.cells
             if c.cell_type == "code"]
    timed = [(n, float(d)) for n, d in timed if n is not None and d is not None]
    return sorted(timed, key=lambda t: -t[1])[:k]


def normalize_notebook(notebook: Path, root: Path) -> None:
    """What makes two executions of the same records differ, taken out of an executed notebook: papermill's
    clock (start and end times, durations), the kernel's timestamps, the random id of its injected-parameters
    cell, random widget ids (renumbered in order of appearance), and absolute paths (named from the project
    root). Then the copy is prepared for
    reading (`reading.prepare_for_reading`: one parameters cell, setup code folded, one line per progress
    bar, an anchor on the claims cell)."""
    nb = nbformat.read(notebook, as_version=4)
    meta = nb.metadata.get("papermill", {})
    for key in ("start_time", "end_time", "duration"):
        meta.pop(key, None)
    for key in ("input_path", "output_path"):
        path = Path(meta.get(key) or "")
        if path.is_absolute() and path.is_relative_to(root):
            meta[key] = path.relative_to(root).as_posix()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        for key in ("start_time", "end_time", "duration"):
            cell.metadata.get("papermill", {}).pop(key, None)
        if "injected-parameters" in cell.metadata.get("tags", []):
            cell["id"] = "injected-parameters"    # papermill draws a new random id on every execution
    prepare_for_reading(nb, notebook.stem)
    widgets = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    state = widgets.get("state", {})
    text = nbformat.writes(nb)
    shown = re.findall(r'"model_id": "([0-9a-f]{32})"', text)   # ipywidgets ids: uuid4().hex
    ids: dict[str, str] = {}
    for i in _widget_order(shown, state):
        ids.setdefault(i, f"{len(ids) + 1:032x}")
    if ids:
        pattern = re.compile(r"(?<![0-9a-f])(" + "|".join(ids) + r")(?![0-9a-f])")
        text = pattern.sub(lambda m: ids[m.group(1)], text)
        # written again: nbformat sorts keys, so the widget state now comes in the new numbering's order,
        # not in that of the random ids (which an execution draws anew)
        text = nbformat.writes(nbformat.reads(text, as_version=4))
    atomic_write_text(notebook, text)


def _widget_order(shown: list[str], state: dict) -> list[str]:
    """Widget model ids in a canonical order: those the outputs show, in order, each followed by the models
    it references (depth first: its layout, its style, its children), then any model nothing reaches,
    ordered by its own content. Renumbering in this order gives the same ids to the same widgets whatever
    random ids and creation order an execution gave them (tqdm's bars and the skill explorer's models
    were stored in a different order by two replays of chapter 05)."""

    refs = {k: re.findall(r"IPY_MODEL_([0-9a-f]{32})", json.dumps(v.get("state", {}), sort_keys=True))
            for k, v in state.items()}
    order: list[str] = []
    seen: set[str] = set()

    def visit(i: str) -> None:
        stack = [i]
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            order.append(k)
            stack.extend(reversed(refs.get(k, [])))

    for i in shown:
        visit(i)
    rest = [k for k in state if k not in seen]
    masked = lambda k: re.sub(r"[0-9a-f]{32}", "", json.dumps(state[k], sort_keys=True))  # noqa: E731
    for k in sorted(rest, key=masked):
        visit(k)
    return order


def execution_plan(profile: str = CANONICAL_PROFILE, chapters: list[str] | None = None, *,
                   output_root: Path | None = None, extra_params: dict | None = None,
                   root: Path | None = None) -> list[tuple[str, Path, dict]]:
    """(chapter, source notebook, parameters) for each chapter, exactly as `execute` runs them: the
    profile's top-level keys that the chapter declares, its `chapters:` overrides, then `extra_params`.
    Every parameter of every chapter is checked here, before anything runs: its name and type against the
    chapter's parameters cell (`check_parameters`), its value against the parameter's declared domain
    (`parameters.SCHEMA`: a backend that parses, task types, splits and conditions that exist, positive
    counts). Every value outside its domain is named in one error, with the chapters it reaches."""
    root = root or project_root()
    params = load_profile(profile, root)
    known = toc_chapters(root)
    chapters = chapters or known
    unknown = [c for c in chapters if c not in known]
    if unknown:
        raise ProfileError(f"unknown chapter(s) {unknown}; chapters in _toc.yml: {', '.join(known)}")
    scoped_all = params.get("chapters") or {}
    bad = sorted(set(scoped_all) - set(known))
    if bad:
        raise ProfileError(f"profile {profile}: overrides for unknown chapter(s) {bad}; chapters: {', '.join(known)}")
    plans = []
    extra = dict(extra_params or {})
    declared = {name: parameter_defaults(root / "chapters" / f"{name}.ipynb") for name in chapters}
    nowhere = sorted(k for k in extra if not any(k in d for d in declared.values()))
    if nowhere:
        raise ProfileError(f"unknown parameter(s) {nowhere} for chapter(s) {', '.join(chapters)}; their parameters: "
                           + ", ".join(sorted({k for d in declared.values() for k in d})))
    outside: dict[tuple, list[str]] = {}   # (parameter, value, where it was given, problem) -> chapters
    for name in chapters:   # every chapter's parameters are checked before any chapter runs
        source = root / "chapters" / f"{name}.ipynb"
        defaults = declared[name]
        scoped = scoped_all.get(name, {}) or {}
        common = {k: v for k, v in params.items() if k != "chapters" and k in defaults}  # shared by all chapters
        check_parameters(name, {**common, **scoped}, defaults, f"profile {profile}: ")
        mine = {k: v for k, v in extra.items() if k in defaults}
        check_parameters(name, mine, defaults)
        given = {**common, **scoped, **mine}
        for key, value, problem in check_values(name, given, root):
            where = ("given with --set" if key in mine else
                     f"profile {profile}, chapters: {name}" if key in scoped else f"profile {profile}")
            outside.setdefault((key, repr(value), where, problem), []).append(name)
        p = {**given, "profile": profile}
        if output_root is not None:
            out = Path(output_root).resolve()
            # the kernel runs in chapters/: a folder inside the project is named relative to it, so that
            # no machine's path appears in an executed notebook
            p["runs_root"] = (os.path.relpath(out, root / "chapters") if out.is_relative_to(root.resolve())
                              else str(out))
        plans.append((name, source, {k: v for k, v in p.items() if k in defaults}))
    if outside:
        # all at once: a profile with several typos is fixed in one round, not one chapter at a time
        lines = [f"  {key!r} = {value} ({where}; chapter{'s' if len(names) > 1 else ''} {', '.join(names)}): "
                 f"{problem}" for (key, value, where, problem), names in outside.items()]
        raise ProfileError("parameter value(s) outside their domain, found before any chapter ran:\n"
                           + "\n".join(lines))
    return plans


def execution_environment(executor: str = "threads", ray_address: str | None = None, actors: int | None = None,
                          episode_timeout_s: float | None = None, serving: str | None = None,
                          probe: bool = True) -> dict[str, str]:
    """The environment variables that tell every chapter's runner where episodes run (`run.distributed`)
    and how the model serves (`lab.serving`). Checked here, before any chapter runs: an unknown
    executor or serving mode, a missing Ray (`pip install -e '.[cluster]'`), a cluster that cannot be
    joined (`probe`, for a given address) are errors before any model time is spent."""
    ray = parse_executor(executor, ray_address, actors, episode_timeout_s)
    serving = serving or ("concurrent" if ray else "deterministic")
    if serving not in SERVING:
        raise ProfileError(f"unknown serving mode {serving!r}; valid: {', '.join(SERVING)}")
    if ray is not None and probe and ray.address not in (None, "", "local"):
        ray_module = ray.connect()   # the cluster answers now, or the error says how to start one
        ray_module.shutdown()        # each chapter's kernel joins it again
    env = {ENV_EXECUTOR: "ray" if ray else "threads", ENV_SERVING: serving}
    if ray is not None:
        env[ENV_ADDRESS] = ray.address or ""
        env[ENV_ACTORS] = str(ray.actors or "")
        env[ENV_TIMEOUT] = f"{ray.episode_timeout_s:g}"
    return env


def execute(profile: str = CANONICAL_PROFILE, chapters: list[str] | None = None, *,
            output_root: Path | None = None, extra_params: dict | None = None, root: Path | None = None,
            environment: dict[str, str] | None = None) -> list[Path]:
    """Execute chapters with papermill under a profile; returns the executed notebooks' paths.
    `environment` (`execution_environment`) is set for the chapters' kernels, e.g. the Ray executor."""
    import papermill as pm  # deferred: ~0.3 s to import; `from skillbook.book import Lab` does not need it

    root = root or project_root()
    plans = execution_plan(profile, chapters, output_root=output_root, extra_params=extra_params, root=root)
    saved = {k: os.environ.get(k) for k in environment or {}}
    os.environ.update(environment or {})   # the kernels papermill starts inherit this process's environment
    try:
        return _execute_plans(plans, profile, output_root, root, pm)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def kernel_transport():
    """papermill's keyword arguments for where the kernel it starts listens. On POSIX: IPC sockets in a
    private temporary folder (removed afterwards), not TCP on localhost, which every kernel start warned
    was unencrypted and which any local user could reach; elsewhere papermill's default."""
    if os.name != "posix":
        yield {}
        return
    with tempfile.TemporaryDirectory(prefix="skillbook-kernel-") as folder:   # mode 0700

        class IPCKernelManager(KernelManager):
            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                self.transport, self.ip = "ipc", os.path.join(folder, "kernel")

        yield {"kernel_manager_class": IPCKernelManager}


def _execute_plans(plans, profile: str, output_root: Path | None, root: Path, pm) -> list[Path]:
    out_dir = output_root or (root / "runs" / profile)
    out_dir.mkdir(parents=True, exist_ok=True)
    done = []
    for name, source, p in plans:
        target = out_dir / f"{name}.ipynb"
        t0 = time.time()
        print(f"[skillbook] executing {name} (profile {profile}) -> {target}", flush=True)
        slow = []
        try:
            with kernel_transport() as transport:
                pm.execute_notebook(str(source), str(target), parameters=p, kernel_name="python3",
                                    cwd=str(root / "chapters"), progress_bar=False, log_output=False,
                                    **transport)
        finally:   # a failed execution is read too (where it stopped): normalise it as well
            if target.exists():
                slow = slowest_cells(target)
                normalize_notebook(target, root)
        # where the time went, by cell (the executed copy keeps no clock, so that replays compare equal)
        where = ", ".join(f"[{n}] {d:.0f} s" for n, d in slow)
        print(f"[skillbook] {name}: {time.time() - t0:.0f} s" + (f" (slowest cells: {where})" if where else ""),
              flush=True)
        done.append(target)
    return done
