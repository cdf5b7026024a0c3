"""A newcomer's `make book` (issue 37): the committed workshop records replayed on a machine that has
never run the book — a fresh copy of the checkout, empty per-user caches, the network off — read
everything they show from the records and leave the copy's `git status` clean. The real case: a fresh
2-core machine took 26 minutes (18.7 embedding chapter 05's catalogue) and changed four tracked files
(a progress line in chapter 00, three figures, a claims record in the 6th decimal)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_replay_with_empty_caches_on_a_fresh_copy_changes_no_tracked_file(tmp_path):
    copy = tmp_path / "skillbook"
    for name in git(ROOT, "ls-files", "-z").split("\0"):
        src = ROOT / name
        if name and src.is_file():                  # the working tree's files, so uncommitted edits count
            dst = copy / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    git(copy, "init", "-q")
    git(copy, "add", "-A")
    git(copy, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "fresh")
    cache = tmp_path / "cache"
    env = {**os.environ, "SKILLBOOK_CACHE": str(cache / "skillbook"), "XDG_CACHE_HOME": str(cache),
           "SKILLBOOK_REPLAY_ONLY": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(copy / "lib")}
    env.pop("SKILLBOOK_SERVING", None)
    r = subprocess.run([sys.executable, "-m", "skillbook.book", "execute", "--profile", "workshop"],
                       cwd=copy, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    changed = git(copy, "status", "--porcelain", "--untracked-files=all")
    assert changed == "", f"the replay changed tracked files or wrote new ones:\n{changed}"
