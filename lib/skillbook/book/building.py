"""Building the book: MathJax and the ipywidgets runtime as local files (`assets`), then `jupyter-book build`
over a profile's executed chapters, or over a rerun's overlay of them (`build`)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from ..io import cache_dir
from ..profiles import load_profile, project_root
from .execution import CANONICAL_PROFILE
from .rerun import stage_overlay

NPM_PACKAGES = ["mathjax@3.2.2", "requirejs@2.3.7", "@jupyter-widgets/html-manager@1.0.15"]
ASSETS_DIR = "book_assets"  # not `_static`: jupyter-book would add every .js there to every page


def assets(root: Path | None = None) -> Path:
    """MathJax and the ipywidgets runtime as local files, from the npm registry (once)."""
    root = root or project_root()
    out = root / ASSETS_DIR
    stamp = out / ".complete"
    if stamp.exists() and stamp.read_text() == json.dumps(NPM_PACKAGES):
        _own_static(out)
        return out
    if shutil.which("npm") is None:
        raise RuntimeError("building the book needs npm (Node.js) once, to fetch MathJax and the ipywidgets "
                           "runtime from the npm registry: e.g. `sudo apt-get install -y npm`")
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
    _own_static(out)
    return out


def _own_static(out: Path) -> None:
    """The book's own static files (lib/skillbook/book/static/: its CSS), refreshed at every build."""
    for path in (Path(__file__).parent / "static").iterdir():
        if path.is_file():
            shutil.copyfile(path, out / path.name)


def build(profile: str = CANONICAL_PROFILE, output: Path | None = None, root: Path | None = None,
          overlay: str | None = None) -> Path:
    """`jupyter-book build -W -n --keep-going` over the executed notebooks of a profile; with `overlay`,
    the chapters executed in runs/<overlay>/ (by `rerun`) replace the profile's (`rerun.stage_overlay`)."""
    root = root or project_root()
    load_profile(profile, root)
    assets(root)
    book = stage_overlay(profile, overlay, root) if overlay else root
    cmd = [str(Path(sys.executable).with_name("jupyter-book")), "build", "-W", "-n", "--keep-going", str(book)]
    if profile != CANONICAL_PROFILE and not overlay:
        toc = (root / "_toc.yml").read_text().replace(f"runs/{CANONICAL_PROFILE}/", f"runs/{profile}/")
        gen = root / "_build" / f"_toc.{profile}.yml"
        gen.parent.mkdir(parents=True, exist_ok=True)
        gen.write_text(toc)
        cmd += ["--toc", str(gen)]
    if output is not None:
        cmd += ["--path-output", str(output)]
    subprocess.run(cmd, check=True, cwd=book)
    return Path(output or book) / "_build" / "html"
