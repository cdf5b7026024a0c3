"""Executing the chapters and building the book; the `Lab` every chapter opens and closes.

`python -m skillbook.book` (`cli`) executes chapters, builds the book, reruns one chapter, fetches the
book's assets and writes the exercises. The work is done in the modules of this package:

    execution    the chapters of _toc.yml, their parameters (checked before any model time), executing them
                 with papermill into runs/<profile>/, and each executed copy normalised for replay
    building     MathJax and the ipywidgets runtime as local files (`assets`), `jupyter-book build`
    cli          the command line
    lab          the `Lab` every chapter opens first and reports last
    parameters   every chapter parameter's domain
    rerun        one chapter re-executed with changed parameters into a run folder of one's own
    reading      what an executed copy looks like to a reader
    findings     the closing chapter's table of claims
    exercises    the workshop's exercises, the closing cell of every chapter

Here are only the names other code imports from `skillbook.book` (chapters: `from skillbook.book import Lab`).
"""
from __future__ import annotations

from ..profiles import ProfileError, load_profile, profiles, project_root
from .building import ASSETS_DIR, NPM_PACKAGES, assets, build
from .cli import main
from .execution import (
    CANONICAL_PROFILE,
    check_parameters,
    declared_parameters,
    execute,
    execution_environment,
    execution_plan,
    kernel_transport,
    normalize_notebook,
    parameter_defaults,
    run_dir,
    slowest_cells,
    toc_chapters,
)
from .lab import Lab

__all__ = [
    "ASSETS_DIR", "CANONICAL_PROFILE", "NPM_PACKAGES", "Lab", "ProfileError", "assets", "build", "check_parameters",
    "declared_parameters", "execute", "execution_environment", "execution_plan", "kernel_transport", "load_profile",
    "main", "normalize_notebook", "parameter_defaults", "profiles", "project_root", "run_dir", "slowest_cells",
    "toc_chapters",
]
