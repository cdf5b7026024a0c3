"""The `Lab` every chapter opens first and reports last."""
from __future__ import annotations

import errno
import json
import os
import platform
import time
import warnings
from html import escape
from pathlib import Path

import numpy as np
import pandas as pd

import skillbook

from ..analysis import claims_table, render_claims
from ..envs import make_env
from ..io import atomic_write_json, atomic_write_text, stored, write_text_if_changed
from ..llm import DEFAULT_BACKEND, ResponseCache, get_llm
from ..profiles import project_root
from ..skills.embeddings import get_embedder
from .findings import INTERIM
from .reading import claims_anchor

SERVING = ("deterministic", "concurrent")
ENV_SERVING = "SKILLBOOK_SERVING"


def serving() -> str:
    """How chapters use their model: "deterministic" (the default: one request in flight, streams in
    turn, the same records on every live run) or "concurrent" (SKILLBOOK_SERVING=concurrent, set by
    `execute --serving concurrent` and by default with `--executor ray`: a fleet serves many requests
    at once, and the response cache, not the server, makes the run replay)."""
    value = os.environ.get(ENV_SERVING, "deterministic").strip().lower() or "deterministic"
    if value not in SERVING:
        raise ValueError(f"{ENV_SERVING}={value!r}; valid: {', '.join(SERVING)}")
    return value


class FoldedTable(pd.DataFrame):
    """A DataFrame shown on a page as one summary line that unfolds into the table (<details>)."""

    _metadata = ["summary"]

    @property
    def _constructor(self):
        return pd.DataFrame          # anything derived from it is a plain frame

    def fold(self, summary: str) -> FoldedTable:
        self.summary = summary
        return self

    def _repr_html_(self):
        return (f"<details class=\"skillbook-folded\"><summary>{escape(getattr(self, 'summary', ''))}"
                f"</summary>{super()._repr_html_()}</details>")


class Lab:
    """One chapter run: its run directory, its response cache, its model, its clock.

    `root` is the profile's folder of records (`runs/<profile>`, or `runs_root` when a chapter is
    re-executed elsewhere); `run_dir` is this chapter's folder in it. `finish()` appends the response
    cache's new entries to its text form (responses/NNNNNN.jsonl.gz) beside the records and returns the
    table every executed chapter ends with.
    A replay (every answer from the cache, no episode run) writes nothing but, the first time, the
    chapter's claims record (`claims`), which is rewritten only when its content changes.
    """

    def __init__(self, chapter: str, profile: str = "workshop", backend: str | None = None,
                 seed: int = 0, runs_root: str | None = None, records: str | None = None):
        """`records` names a run directory shared by several chapters (e.g. 'transfer'); default: the chapter's."""
        self.chapter, self.profile, self.seed = chapter, profile, seed
        # Plots that draw from numpy's global generator (seaborn's stripplot jitter) are then the same on
        # every execution, so a replayed chapter rewrites no figure.
        np.random.seed(seed)
        # Nothing a reader needs is cut: pandas shortens text cells to 50 characters with "...", which hid
        # claims, notes and skill descriptions (the page wraps long cells instead).
        pd.set_option("display.max_colwidth", None)
        self.root = Path(runs_root) if runs_root else project_root() / "runs" / profile
        self.run_dir = self.root / (records or chapter)
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
            # read-only records (a share, a USB kit) without this chapter's folder (10_findings keeps none):
            # a replay writes nothing there, and the cache below is read-only (`ResponseCache.for_run`)
        self.cache = ResponseCache.for_run(self.run_dir)
        # The vectors this chapter embeds are kept beside its records and read first on a replay (see
        # skills.embeddings): the same numbers on any CPU, and nothing to embed on a fresh machine.
        get_embedder().record_to(self.run_dir / f"vectors-{chapter}.bin.gz")
        self.llm = get_llm(backend or DEFAULT_BACKEND, self.cache, seed=seed,
                           deterministic=serving() == "deterministic")
        self._envs: list = []
        self.t0 = time.time()

    @property
    def where(self) -> str:
        """The records folder as a reader should see it: relative to the project when inside it
        (`runs/workshop/02_induction/`), else the path given by `runs_root`."""
        try:
            return f"{self.run_dir.resolve().relative_to(project_root().resolve())}/"
        except ValueError:
            return f"{self.run_dir}/"

    def env(self, name: str, **options):
        """An environment for the chapter's own use (closed by `finish`)."""
        env = make_env(name, **options)
        self._envs.append(env)
        return env

    def summary(self) -> dict:
        d = self.llm.describe()
        d.update({"chapter": self.chapter, "profile": self.profile, "seed": self.seed,
                  "wall_seconds": round(time.time() - self.t0, 1), "python": platform.python_version(),
                  "machine": f"{platform.machine()}, {os.cpu_count()} cores", "skillbook": skillbook.__version__})
        return d

    def finish(self):
        """Save new cache entries and the run summary (only when this execution called the model live);
        return the closing table: backend, model identity, calls, cache hits, tokens."""
        for env in self._envs:
            env.close()
        try:
            get_embedder().save_record()
        except OSError as e:
            if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
        s = self.summary()
        if s["live_calls"]:
            # Only answers this execution asked for: a replay writes nothing, even when the SQLite cache it
            # shares holds another run's unsaved answers (a replay of chapter 09 wrote the running study's
            # as a chunk; `study stop` saves them).
            self.cache.save()
        recorded = self.run_dir / f"summary-{self.chapter}.json"
        if s["live_calls"]:
            atomic_write_json(recorded, s, indent=1)
        elif recorded.exists():
            # a replay: the page shows what the recorded live run cost, beside what this execution did
            r = json.loads(recorded.read_text())
            keep = ("backend", "model_identity", "deterministic", "calls", "live_calls", "cache_hits",
                    "prompt_tokens", "completion_tokens", "live_seconds", "recorded_model_seconds", "errors",
                    "machine")
            table = pd.DataFrame({"last live execution": pd.Series({k: r.get(k) for k in keep}, dtype=object),
                                  "this execution": pd.Series({k: s.get(k) for k in keep}, dtype=object)})
            # The summary is the last live execution's: a chapter recorded over several executions (06: the
            # TextWorldExpress runs in one, τ²-bench in the next) replayed the earlier ones' records there
            # without a call, so the line says whose counts these are.
            # Minutes of the live calls (what the chapters' own "min live" counts), not the recorded latency
            # of every answer used: that one also charges answers taken from the cache.
            live_min = r.get("live_seconds", r["recorded_model_seconds"]) / 60
            line = (f"{r['backend']}: replayed from the records. The last live execution made {r['calls']} "
                    f"model calls, {r['live_calls']} live ({live_min:.1f} min waiting for them; records it found "
                    f"from earlier executions are not counted); "
                    f"this execution {s['calls']} calls, {s['live_calls']} live")
            return FoldedTable(table).fold(line)
        shown = {k: v for k, v in s.items() if k not in ("wall_seconds", "live_seconds", "python", "machine")}
        line = (f"{s['backend']}: {s['calls']} model calls, {s['cache_hits']} answered from the response cache, "
                f"{s['live_calls']} live; {s['prompt_tokens']:,} prompt and {s['completion_tokens']:,} output tokens")
        return FoldedTable({"value": pd.Series(shown, dtype=object)}).fold(line)

    def keep_text(self, name: str, text: str) -> None:
        """Keep `text` as `<run_dir>/<name>` for pages outside the notebook (the start page includes chapter
        10's findings), written only when it changes; over read-only records it is left as it is."""
        try:
            write_text_if_changed(self.run_dir / name, text)
        except OSError as e:
            if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT):
                raise

    def stored(self, name: str, key, compute):
        """`compute()`'s result kept in `<run_dir>/stored-<chapter>-<name>.json.gz` with a digest of `key`
        (everything it is computed from): read when the key matches, computed and replaced when not
        (`io.stored`). For results a replay must not recompute: costly, or CPU-dependent in their last
        digits (chapter 05's scores against the 17,089-task catalogue)."""
        return stored(self.run_dir / f"stored-{self.chapter}-{name}.json.gz", key, compute)

    def claims(self, table, *, interim: bool = False):
        """Record the chapter's claims table (runs/<profile>/<chapter>/claims.json, read by the closing
        chapter) and return it rendered for the page (`render_claims`). `table` is a `claims_table` frame
        or the list of claims; `interim`: a study still running; its verdicts are replaced by the interim label.
        The file is rewritten only when its content changes, so a replay leaves it untouched."""
        if not isinstance(table, pd.DataFrame):
            table = claims_table(table)
        if interim:
            # No verdict before the pre-registered n, in the record as on the page: a reader of the JSON
            # alone must not take an interim "contradicted" as final. The measurements stay.
            table = table.assign(verdict=INTERIM)
        rows = json.loads(table.to_json(orient="records", double_precision=6))   # NaN -> null
        for row, exact in zip(rows, table.to_dict(orient="records")):
            for name in ("p", "p_holm"):
                # Six decimals keep records stable across machines' last bits, but would store a measured
                # p < 5e-7 as an impossible 0: such a p keeps 3 significant digits. Only p: an estimate
                # of 0 up to float noise stays 0.
                value = exact.get(name)
                if row.get(name) == 0 and isinstance(value, float) and np.isfinite(value) and value != 0:
                    row[name] = float(f"{value:.3g}")
        record = {"chapter": self.chapter, "interim": bool(interim), "anchor": claims_anchor(self.chapter),
                  "claims": rows}
        path = self.root / self.chapter / "claims.json"
        text = json.dumps(record, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
        if not path.exists() or path.read_text() != text:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(path, text)
            except OSError as e:
                if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                    raise
                # A replay from read-only records (a share, a USB kit) that measured otherwise (another
                # machine's last bits): the page shows this execution's table, the record stays as it was.
                warnings.warn(f"{path} is read-only: this execution's claims differ from the recorded ones "
                              "and were not recorded (the closing chapter reads the recorded ones)",
                              stacklevel=2)
        return render_claims(table)
