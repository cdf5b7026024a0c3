"""Executing the chapters and building the book; the `Lab` every chapter opens and closes.

    python -m skillbook.book execute --profile workshop [--chapters 00_laboratory,...]
    python -m skillbook.book execute --profile paper --executor ray --ray-address auto [--actors 64]
    python -m skillbook.book build   --profile workshop [--overlay mine]
    python -m skillbook.book rerun   05_utility --from workshop --into mine --set n_buckets=4 [--live]
    python -m skillbook.book assets          # MathJax + ipywidgets runtime served from local files
    python -m skillbook.book exercises [--check]   # chapters/exercises.yml -> each chapter's closing cell

A profile is a papermill parameter file (profiles/<name>.yml). Each chapter executes from
chapters/<name>.ipynb into runs/<profile>/<name>.ipynb and keeps its records and the text form of
its response cache in runs/<profile>/<name>/.
"""
# (this docstring is the description `python -m skillbook.book --help` prints)
from __future__ import annotations

import argparse
import sys

from ..profiles import ProfileError
from ..run.distributed import ExecutorError
from .building import assets, build
from .execution import CANONICAL_PROFILE, execute, execution_environment, execution_plan
from .exercises import main as exercises_main
from .rerun import ReplayNeedsModel, parse_sets, rerun


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m skillbook.book", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("execute", help="execute chapters with papermill into runs/<profile>/")
    ex.add_argument("--profile", default=CANONICAL_PROFILE)
    ex.add_argument("--chapters", default="", help="comma-separated chapter names (default: all in _toc.yml)")
    ex.add_argument("--executor", default="threads", help="where episodes run: threads (default) or ray")
    ex.add_argument("--ray-address", default=None,
                    help="the Ray cluster: auto (this machine ran `ray start`), "
                         "ray://<head>:10001, or local (the default) for a new local Ray")
    ex.add_argument("--actors", type=int, default=None, help="Ray episode workers (default: the profile's workers)")
    ex.add_argument("--episode-timeout", type=float, default=None, metavar="SECONDS",
                    help="an episode running longer is cancelled and recorded as an error (Ray; default 3600)")
    ex.add_argument("--serving", default=None, help="deterministic (default with threads) or concurrent "
                                                    "(default with ray)")
    bd = sub.add_parser("build", help="render the executed notebooks with jupyter-book (-W -n)")
    bd.add_argument("--profile", default=CANONICAL_PROFILE)
    bd.add_argument("--overlay", default=None, help="a runs/<name>/ folder made by `rerun`: its chapters replace "
                                                    "the profile's in the book")
    rr = sub.add_parser("rerun", help="re-execute one chapter with changed parameters into runs/<into>/")
    rr.add_argument("chapter")
    rr.add_argument("--from", dest="source", default=CANONICAL_PROFILE, help="the profile it starts from")
    rr.add_argument("--into", default="mine", help="the run folder runs/<into>/ (never a profile's)")
    rr.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE",
                    help="a changed parameter (repeatable); the value is read as YAML (4, 0.5, true, text)")
    rr.add_argument("--live", action="store_true", help="allow live model time when the replay needs it")
    sub.add_parser("assets", help="fetch MathJax and the ipywidgets runtime into book_assets/")
    xs = sub.add_parser("exercises", help="write chapters/exercises.yml as the closing cell of every chapter "
                                          "source and executed copy")
    xs.add_argument("--check", action="store_true", help="write nothing; exit 1 if a notebook's cell differs")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "execute":
            chapters = [c for c in args.chapters.split(",") if c] or None
            execution_plan(args.profile, chapters)   # parameters checked before the cluster is joined
            environment = execution_environment(args.executor, args.ray_address, args.actors,
                                                args.episode_timeout, args.serving)
            execute(args.profile, chapters, environment=environment)
        elif args.cmd == "build":
            print(f"[skillbook] book: {build(args.profile, overlay=args.overlay) / 'index.html'}")
        elif args.cmd == "rerun":
            rerun(args.chapter, args.source, args.into, parse_sets(args.sets), live=args.live)
        elif args.cmd == "exercises":
            exercises_main(args.check)
        else:
            print(assets())
    except (ProfileError, ExecutorError) as e:
        sys.exit(f"error: {e}")
    except ReplayNeedsModel as e:
        print(f"[skillbook] {e}", file=sys.stderr)
        sys.exit(3)
