"""Executing the chapters and building the book; the `Lab` every chapter opens and closes.

    python -m skillbook.book execute --profile workshop [--chapters 00_laboratory,...]
    python -m skillbook.book build   --profile workshop
    python -m skillbook.book assets          # MathJax + ipywidgets runtime served from local files

A profile is a papermill parameter file (profiles/<name>.yml). Each chapter executes from
chapters/<name>.ipynb into runs/<profile>/<name>.ipynb and keeps its records and the text form of
its response cache in runs/<profile>/<name>/.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

import skillbook

from .io import atomic_write_json

CANONICAL_PROFILE = "workshop"  # the profile _toc.yml points at


class ProfileError(ValueError):
    """Unknown profile or chapter; the message lists the valid ones."""


def project_root() -> Path:
    """The checkout that holds _toc.yml: beside the editable package, else the nearest parent of cwd."""
    candidates = [Path(skillbook.__file__).resolve().parents[2], *Path.cwd().resolve().parents, Path.cwd()]
    for c in candidates:
        if (c / "_toc.yml").exists() and (c / "pyproject.toml").exists():
            return c
    raise FileNotFoundError("cannot find the skillbook checkout (a folder with _toc.yml and pyproject.toml)")


def profiles(root: Path | None = None) -> list[str]:
    return sorted(p.stem for p in ((root or project_root()) / "profiles").glob("*.yml"))


def load_profile(name: str, root: Path | None = None) -> dict:
    root = root or project_root()
    path = root / "profiles" / f"{name}.yml"
    if not path.exists():
        raise ProfileError(f"unknown profile {name!r}; valid profiles: {', '.join(profiles(root))}")
    params = yaml.safe_load(path.read_text()) or {}
    if not isinstance(params, dict):
        raise ProfileError(f"{path}: a profile is a mapping of parameter names to values")
    return params


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
    import re

    import nbformat
    nb = nbformat.read(str(notebook), as_version=4)
    cell = next((c for c in nb.cells if "parameters" in c.metadata.get("tags", [])), None)
    if cell is None:
        raise ProfileError(f"{notebook} has no cell tagged 'parameters'")
    return re.findall(r"^([A-Za-z_]\w*)\s*(?::[^=]+)?=", cell.source, re.M)


def execute(profile: str = CANONICAL_PROFILE, chapters: list[str] | None = None, *,
            output_root: Path | None = None, extra_params: dict | None = None, root: Path | None = None) -> list[Path]:
    """Execute chapters with papermill under a profile; returns the executed notebooks' paths."""
    import papermill as pm

    root = root or project_root()
    params = load_profile(profile, root)
    known = toc_chapters(root)
    chapters = chapters or known
    unknown = [c for c in chapters if c not in known]
    if unknown:
        raise ProfileError(f"unknown chapter(s) {unknown}; chapters in _toc.yml: {', '.join(known)}")
    out_dir = output_root or (root / "runs" / profile)
    out_dir.mkdir(parents=True, exist_ok=True)
    done = []
    for name in chapters:
        source = root / "chapters" / f"{name}.ipynb"
        target = out_dir / f"{name}.ipynb"
        scoped = (params.get("chapters") or {}).get(name, {})  # per-chapter overrides in a profile
        common = {k: v for k, v in params.items() if k != "chapters"}
        p = {**common, **scoped, **(extra_params or {}), "profile": profile}
        if output_root is not None:
            p["runs_root"] = str(output_root)
        declared = declared_parameters(source)
        p = {k: v for k, v in p.items() if k in declared}  # profiles are shared by all chapters
        t0 = time.time()
        print(f"[skillbook] executing {name} (profile {profile}) -> {target}", flush=True)
        pm.execute_notebook(str(source), str(target), parameters=p, kernel_name="python3",
                            cwd=str(root / "chapters"), progress_bar=False, log_output=False)
        relative_paths(target, root)
        print(f"[skillbook] {name}: {time.time() - t0:.0f} s", flush=True)
        done.append(target)
    return done


def relative_paths(notebook: Path, root: Path) -> None:
    """papermill records absolute input and output paths; a committed notebook names them from the project root."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    meta = nb.metadata.get("papermill", {})
    for key in ("input_path", "output_path"):
        path = Path(meta.get(key) or "")
        if path.is_absolute() and path.is_relative_to(root):
            meta[key] = path.relative_to(root).as_posix()
    nbformat.write(nb, notebook)


# -- assets and building ---------------------------------------------------------------------------
NPM_PACKAGES = ["mathjax@3.2.2", "requirejs@2.3.7", "@jupyter-widgets/html-manager@1.0.15"]
ASSETS_DIR = "book_assets"  # not `_static`: jupyter-book would add every .js there to every page


def assets(root: Path | None = None) -> Path:
    """MathJax and the ipywidgets runtime as local files, from the npm registry (once)."""
    root = root or project_root()
    out = root / ASSETS_DIR
    stamp = out / ".complete"
    if stamp.exists() and stamp.read_text() == json.dumps(NPM_PACKAGES):
        return out
    if shutil.which("npm") is None:
        raise RuntimeError("building the book needs npm (Node.js) once, to fetch MathJax and the ipywidgets "
                           "runtime from the npm registry: e.g. `sudo apt-get install -y npm`")
    from .llm.modelfiles import cache_dir
    npm_dir = cache_dir() / "npm-book-assets"
    npm_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(["npm", "install", "--no-save", "--no-audit", "--no-fund", "--ignore-scripts",
                    "--prefix", str(npm_dir), *NPM_PACKAGES], check=True, stdout=subprocess.DEVNULL)
    nm = npm_dir / "node_modules"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(nm / "mathjax" / "es5", out / "mathjax")
    shutil.copy(nm / "requirejs" / "require.js", out / "require.js")
    shutil.copytree(nm / "@jupyter-widgets" / "html-manager" / "dist", out / "html-manager",
                    ignore=shutil.ignore_patterns("*.map"))
    stamp.write_text(json.dumps(NPM_PACKAGES))
    return out


def build(profile: str = CANONICAL_PROFILE, output: Path | None = None, root: Path | None = None) -> Path:
    """`jupyter-book build -W -n --keep-going` over the executed notebooks of a profile."""
    root = root or project_root()
    load_profile(profile, root)
    assets(root)
    cmd = [str(Path(sys.executable).with_name("jupyter-book")), "build", "-W", "-n", "--keep-going", str(root)]
    if profile != CANONICAL_PROFILE:
        toc = (root / "_toc.yml").read_text().replace(f"runs/{CANONICAL_PROFILE}/", f"runs/{profile}/")
        gen = root / "_build" / f"_toc.{profile}.yml"
        gen.parent.mkdir(parents=True, exist_ok=True)
        gen.write_text(toc)
        cmd += ["--toc", str(gen)]
    if output is not None:
        cmd += ["--path-output", str(output)]
    subprocess.run(cmd, check=True, cwd=root)
    return (output or root) / "_build" / "html"


# -- the Lab: what every chapter opens first and reports last ---------------------------------------
class Lab:
    """One chapter run: its run directory, its response cache, its model, its environments, its clock.

    `finish()` appends the cache's new entries to its text form (responses/NNNNNN.jsonl.gz) beside the
    records and returns the table every executed chapter ends with: model, backend, cache hits, wall time.
    """

    def __init__(self, chapter: str, profile: str = CANONICAL_PROFILE, backend: str | None = None,
                 seed: int = 0, runs_root: str | None = None, records: str | None = None):
        """`records` names a run directory shared by several chapters (e.g. 'transfer'); default: the chapter's."""
        from .llm import DEFAULT_BACKEND, ResponseCache, get_llm

        self.chapter, self.profile, self.seed = chapter, profile, seed
        name = records or chapter
        if runs_root:
            self.run_dir = Path(runs_root) / name
            self.run_dir.mkdir(parents=True, exist_ok=True)
        else:
            self.run_dir = run_dir(name, profile)
        self.cache = ResponseCache.for_run(self.run_dir)
        self.llm = get_llm(backend or DEFAULT_BACKEND, self.cache, seed=seed)
        self._envs: list = []
        self.t0 = time.time()

    def env(self, name: str, **options):
        from .envs import make_env
        e = make_env(name, **options)
        self._envs.append(e)
        return e

    def summary(self) -> dict:
        d = self.llm.describe()
        d.update({"chapter": self.chapter, "profile": self.profile, "seed": self.seed,
                  "wall_seconds": round(time.time() - self.t0, 1), "python": platform.python_version(),
                  "machine": f"{platform.machine()}, {os.cpu_count()} cores", "skillbook": skillbook.__version__})
        return d

    def finish(self):
        import pandas as pd
        for e in self._envs:
            e.close()
        self.cache.save()
        s = self.summary()
        atomic_write_json(self.run_dir / f"summary-{self.chapter}.json", s, indent=1)
        return pd.DataFrame({"value": pd.Series(s, dtype=object)})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m skillbook.book", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("execute", help="execute chapters with papermill into runs/<profile>/")
    ex.add_argument("--profile", default=CANONICAL_PROFILE)
    ex.add_argument("--chapters", default="", help="comma-separated chapter names (default: all in _toc.yml)")
    bd = sub.add_parser("build", help="render the executed notebooks with jupyter-book (-W -n)")
    bd.add_argument("--profile", default=CANONICAL_PROFILE)
    sub.add_parser("assets", help="fetch MathJax and the ipywidgets runtime into book_assets/")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "execute":
            execute(args.profile, [c for c in args.chapters.split(",") if c] or None)
        elif args.cmd == "build":
            print(f"[skillbook] book: {build(args.profile) / 'index.html'}")
        else:
            print(assets())
    except ProfileError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
