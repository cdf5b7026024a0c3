"""The stack that decides replayed numbers is the one constraints.txt pins (issue 38: a book that promises
byte-identical replays cannot leave numpy, pandas or sentence-transformers to whatever pip resolves)."""
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, ver = line.partition("==")
            out[name] = ver
    return out


def test_the_installed_stack_is_the_pinned_one():
    wrong = {}
    for name, ver in pins().items():
        try:
            have = version(name)
        except PackageNotFoundError:
            have = "not installed"
        if have != ver:
            wrong[name] = f"{have} (pinned {ver})"
    assert not wrong, f"reinstall with `make install` (pip -c constraints.txt): {wrong}"


def test_every_pin_is_a_dependency_or_a_tool_of_the_project():
    text = (ROOT / "pyproject.toml").read_text().lower()
    for name in ("numpy", "pandas", "scipy", "statsmodels", "seaborn", "sentence-transformers", "ruff", "mypy"):
        assert f'"{name}' in text, f"{name} is pinned but not declared in pyproject.toml"
    assert "-c constraints.txt" in (ROOT / "Makefile").read_text()
