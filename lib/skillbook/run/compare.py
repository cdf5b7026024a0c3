"""Are two record folders the same run? The check behind "a live re-run from empty caches gives the same
records" (issue 13), usable on any two executions of a chapter or the study.

    python -m skillbook.run.compare runs/workshop/01_agents /tmp/replicate/01_agents \
        [--save runs/workshop/01_agents/replicate.json]

`--save` writes what was found (identical or not, how many episodes and entries, the first differences,
the date) as JSON beside the records, for the chapter that shows it (chapter 01); no path is saved.

Every record file under the two folders is read and compared after dropping what measures the machine
rather than the run — wall-clock and latency fields, llama.cpp's timings and prompt-cache counters,
session logs — and after putting entries whose order is the scheduler's (response-cache lines, episode
lines of concurrently run streams) in a canonical order. Everything the agent saw, said and scored must be
equal: every prompt, every reply, every action, every skill written, every claims table.
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import json
import sys
from pathlib import Path

from ..io import atomic_write_json

# Keys whose values are measurements of the machine, not of the run (see the module docstring).
VOLATILE = frozenset({
    "wall_s", "latency_s", "elapsed_s", "seconds", "wall_seconds", "live_seconds", "started", "finished",
    "execution", "server_timings", "cached", "new_prompt_tokens", "response_sha256", "cache_hits",
    "live_calls", "python", "machine", "host", "pid",
})
# Files that log invocations (how often a run was resumed, by whom), not records of the run.
SKIPPED = ("sessions.jsonl", ".lock", "replicate.json")
SKIPPED_PREFIXES = (".responses.sqlite", "summary-", ".")


def _strip(x):
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in sorted(x.items()) if k not in VOLATILE}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _lines(path: Path) -> list:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _key(entry) -> str:
    return json.dumps(entry, sort_keys=True, ensure_ascii=False)


def canonical(root: str | Path) -> dict[str, object]:
    """{group: canonical content} for one record folder. Episode lines of one run directory are one group
    (sealed chunks and the open file together, ordered by stream and position, since the chunk boundary
    depends on when a run was resumed); response-cache lines are one group per folder, ordered by key."""
    root = Path(root)
    groups: dict[str, list] = {}
    out: dict[str, object] = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.name in SKIPPED or p.name.startswith(SKIPPED_PREFIXES):
            continue
        rel = p.relative_to(root)
        if p.suffix == ".ipynb":
            continue                              # executed notebooks carry timings; their records are here
        if rel.parent.name in ("episodes", "responses") and (p.name.endswith(".jsonl")
                                                             or p.name.endswith(".jsonl.gz")):
            groups.setdefault(str(rel.parent), []).extend(_strip(e) for e in _lines(p))
        elif p.name.endswith((".jsonl", ".jsonl.gz")):
            out[str(rel)] = [_strip(e) for e in _lines(p)]
        elif p.suffix == ".json":
            out[str(rel)] = _strip(json.loads(p.read_text(encoding="utf-8")))
        else:
            out[str(rel)] = p.read_bytes()
    for g, entries in groups.items():
        if g.endswith("responses"):
            entries = sorted(entries, key=lambda e: (e.get("key", ""), _key(e)))
        else:   # a resumed stream may have re-run an episode: the last line of a position wins
            last = {}
            for e in entries:
                last[(e.get("stream"), e.get("position"))] = e
            entries = [last[k] for k in sorted(last, key=lambda k: (str(k[0]), k[1] or 0))]
        out[g] = entries
    return out


def compare_records(a: str | Path, b: str | Path, limit: int = 10) -> list[str]:
    """The differences between two record folders (empty when they are the same run), at most `limit`."""
    return _differences(a, b, canonical(a), canonical(b), limit)


def _differences(a, b, ca: dict, cb: dict, limit: int) -> list[str]:
    diffs = [f"only in {a}: {k}" for k in sorted(set(ca) - set(cb))]
    diffs += [f"only in {b}: {k}" for k in sorted(set(cb) - set(ca))]
    for k in sorted(set(ca) & set(cb)):
        if ca[k] != cb[k]:
            diffs.append(f"{k}: {_first_difference(ca[k], cb[k])}")
    return diffs[:limit] + ([f"… and {len(diffs) - limit} more"] if len(diffs) > limit else [])


def _first_difference(x, y, path: str = "") -> str:
    if isinstance(x, list) and isinstance(y, list):
        for i, (u, v) in enumerate(zip(x, y)):
            if u != v:
                return _first_difference(u, v, f"{path}[{i}]")
        return f"{path or 'entries'}: {len(x)} vs {len(y)} entries"
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y)):
            if x.get(k) != y.get(k):
                return _first_difference(x.get(k), y.get(k), f"{path}.{k}")
    return f"{path or 'content'}: {str(x)[:120]!r} vs {str(y)[:120]!r}"


def replicate_summary(a: str | Path, b: str | Path, limit: int = 10) -> dict:
    """What `compare_records` found, as a record: identical, the number of episodes and of entries compared
    (prompts and replies, episodes, skills, claims), the first `limit` differences, today's date."""
    ca = canonical(a)
    episodes = sum(len(v) for k, v in ca.items() if Path(k).name == "episodes" and isinstance(v, list))
    diffs = _differences(a, b, ca, canonical(b), limit)
    return {"identical": not diffs, "episodes": episodes,
            "entries": sum(len(v) if isinstance(v, list) else 1 for v in ca.values()),
            "differences": diffs, "compared_on": datetime.date.today().isoformat()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m skillbook.run.compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--save", default=None, help="write the summary as JSON to this file")
    args = ap.parse_args(argv)
    for d in (args.a, args.b):
        if not Path(d).is_dir():
            sys.exit(f"error: {d} is not a folder of records")
    summary = replicate_summary(args.a, args.b)
    if args.save:
        # the folders' own paths are a machine's: the record says only what was compared and found
        atomic_write_json(Path(args.save), summary)
    if summary["differences"]:
        print("different records:\n  " + "\n  ".join(summary["differences"]))
        sys.exit(1)
    print(f"identical records ({summary['episodes']} episodes, {summary['entries']} entries compared; "
          "timings and session logs ignored)")


if __name__ == "__main__":
    main()
