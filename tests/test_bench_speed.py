"""`make bench --speed` runs the old half with the baseline commit's library first on the path: everything
that half imports must exist there. The real case: `book/laboratory.py` was renamed `book/measurements.py`
and the old half died at its first import, after the worktree and the reference rates had cost minutes."""
import os
import re
import shutil
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASELINE = re.search(r'^BASELINE = "(\w+)"', (ROOT / "bench" / "run.py").read_text(), re.M).group(1)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_old_half_of_speed_finds_its_profile_function_in_the_baseline_library(tmp_path):
    archive = subprocess.run(["git", "archive", BASELINE, "lib"], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(tmp_path, filter="data")
    code = ("import runpy, sys; sys.argv = ['run.py']; "
            f"m = runpy.run_path({str(ROOT / 'bench' / 'run.py')!r}, run_name='bench'); "
            "f = m['profile_function'](); print(f.__module__, sys.modules['skillbook'].__file__)")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "lib"), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    module, lib = r.stdout.split()
    assert module == "skillbook.book.laboratory" and lib.startswith(str(tmp_path))
