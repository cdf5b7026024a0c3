"""The library's layers (docs/ARCHITECTURE.md): every import of a skillbook module, at the top of a module or
inside a function, goes to the same floor or below, and the modules' top-level imports form no cycle."""
import ast
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "lib" / "skillbook"

# The floors of docs/ARCHITECTURE.md, by the first part of the module's dotted name under skillbook.
FLOORS = {"io": 0, "text": 0, "prompts": 0, "profiles": 0,
          "records": 1, "llm": 1, "envs": 1, "skills": 1,
          "agent": 2, "memory": 2,
          "run": 3, "analysis": 3,
          "papers": 4, "libraries": 4,
          "book": 5,
          "kit": 6}                    # the offline kit packs what the book needs


def modules() -> dict[str, Path]:
    out = {}
    for path in LIB.rglob("*.py"):
        parts = path.relative_to(LIB).with_suffix("").parts
        name = ".".join(("skillbook", *parts))
        out[name.removesuffix(".__init__")] = path
    return out


def imported(name: str, path: Path, top_only: bool = False) -> set[str]:
    """The skillbook modules `name` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = tree.body if top_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("skillbook")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("skillbook"):
                found.add(mod)
                found |= {f"{mod}.{a.name}" for a in node.names}
    known = modules()
    return {m for m in found if m in known and m != name}


def floor(module: str) -> int:
    parts = module.split(".")
    return FLOORS[parts[1]] if len(parts) > 1 else 0     # the package itself: its __init__ imports nothing


def test_every_top_level_name_has_a_floor():
    missing = {m.split(".")[1] for m in modules() if m != "skillbook"} - set(FLOORS)
    assert not missing, f"give these a floor in FLOORS and docs/ARCHITECTURE.md: {sorted(missing)}"


def test_nothing_imports_upward():
    upward = [f"{name} (floor {floor(name)}) imports {m} (floor {floor(m)})"
              for name, path in modules().items() if name != "skillbook"
              for m in imported(name, path) if floor(m) > floor(name)]
    assert not upward, "\n".join(sorted(upward))


def test_top_level_imports_form_no_cycle():
    graph = {name: imported(name, path, top_only=True) for name, path in modules().items()}

    def cycle_from(start):
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    return trail + [nxt]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, trail + [nxt]))
        return None

    # a package's __init__ importing its own modules, which import the package's names, is not a cycle of
    # meaning; only cycles between modules that are not each other's package count
    cycles = []
    for name in graph:
        c = cycle_from(name)
        if c and not any(a.startswith(b + ".") or b.startswith(a + ".") for a, b in zip(c, c[1:])):
            cycles.append(" -> ".join(c))
    assert not cycles, "\n".join(sorted(cycles))


@pytest.mark.parametrize("doc", ["docs/ARCHITECTURE.md"])
def test_the_map_stays_a_map(doc):
    assert len((LIB.parents[1] / doc).read_text(encoding="utf-8").splitlines()) <= 200
