"""What each chapter parameter may be: one declared domain per parameter name, checked before any model time.

`check_parameters` (book/execution.py) checks a value's type against the chapter's default; the domains
here check what the type cannot: that a backend parses, that task types, splits, envs and conditions
exist, that counts are positive. A misspelt value used to fail only inside the chapter that used it,
after the chapters before it had run live (`make book` on a laptop: hours). The domains call the same
parsers and registries the chapters use (`llm.parse_backend`, `envs.parse_task_types`, the pipelines'
condition lists), so the pre-flight and the chapter agree on what is valid.

A parameter name means the same in every chapter that declares it; every name a chapter declares is in
`SCHEMA` (a test), with `anything` where no domain is checked beyond the type (a threshold, the
machinery's `profile` and `runs_root`). A domain is a function (value, project root) -> None when the
value is valid, else what is wrong with it, naming the valid choices.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import envs  # `envs.ENVS`: the registry as it is when a value is checked (`register_env`)
from ..envs import SPLITS, TASK_TEXTS, TaskIdError, parse_task_id, parse_task_types
from ..envs.tau2 import DOMAINS
from ..llm import BackendError, parse_backend
from ..papers.assay.pipeline import OUTCOMES
from ..papers.breakdown.induction import PROMPT_LEVELS
from ..papers.breakdown.pipeline import CONDITIONS as BREAKDOWN_CONDITIONS
from ..papers.skillc.pipeline import CREDIT_SOURCES
from ..papers.skillrl.memory import MODES
from ..papers.skillrl.training import CONDITIONS as TRAINING_CONDITIONS
from ..papers.skillrl.training import check_base
from ..profiles import ProfileError, load_profile, profiles
from ..skills.agentskills import AgentSkillsError, import_skills

Domain = Callable[[Any, Path], "str | None"]


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _items(value) -> list[str]:
    """The entries of a comma-separated parameter ('a,b' or ['a', 'b'])."""
    if isinstance(value, str):
        parts = value.split(",")
    elif isinstance(value, (list, tuple)):
        parts = [str(v) for v in value]
    else:
        return []
    return [p.strip() for p in parts if p.strip()]


def anything(value, root: Path) -> str | None:
    return None


def at_least(low: int) -> Domain:
    """An integer ≥ low (1: a count of tasks, steps or workers; 0: a count that may be none)."""
    want = {0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer ≥ {low}")

    def check(value, root: Path) -> str | None:
        return None if _is_int(value) and value >= low else f"must be {want}"
    return check


def optional(domain: Domain) -> Domain:
    """None (the chapter's "not set"), or a value of `domain`."""
    return lambda value, root: None if value is None else domain(value, root)


def number(low: float, high: float | None = None, *, open_low: bool = True) -> Domain:
    """A number above `low` (or at least `low`, `open_low=False`), and below `high` if given."""
    want = (f"> {low:g}" if open_low else f"≥ {low:g}") if high is None else f"in ({low:g}, {high:g})"

    def check(value, root: Path) -> str | None:
        ok = _is_number(value) and (value > low if open_low else value >= low)
        return None if ok and (high is None or value < high) else f"must be a number {want}"
    return check


def one_of(choices: Callable[[], tuple]) -> Domain:
    """One of a registry's names (read when checked)."""
    def check(value, root: Path) -> str | None:
        valid = choices()
        return None if value in valid else f"is not one of the valid choices: {', '.join(map(str, valid))}"
    return check


def list_of(choices: Callable[[], tuple]) -> Domain:
    """A comma-separated list of at least one of a registry's names."""
    def check(value, root: Path) -> str | None:
        valid = choices()
        items = _items(value)
        bad = [i for i in items if i not in valid]
        if bad or not items:
            return (f"{'names ' + ', '.join(map(repr, bad)) if bad else 'names none'}; valid choices "
                    f"(comma-separated): {', '.join(map(str, valid))}")
        return None
    return check


def list_of_positive(value, root: Path) -> str | None:
    ok = isinstance(value, (list, tuple)) and all(_is_int(v) and v > 0 for v in value)
    return None if ok else "must be a list of positive integers"


def backend(value, root: Path) -> str | None:
    try:
        parse_backend(value)
    except BackendError as e:
        return str(e)
    return None


def backend_or_empty(value, root: Path) -> str | None:
    """"" (the agent's own model) or a backend."""
    return None if value == "" else backend(value, root)


def task_types(value, root: Path) -> str | None:
    try:
        parse_task_types(value)
    except TaskIdError as e:
        return str(e)
    return None


def catalogue_types(value, root: Path) -> str | None:
    if value in ("stream", "all"):
        return None
    problem = task_types(value, root)
    return None if problem is None else f"is 'stream', 'all' or a list of task types: {problem}"


def task_ids(value, root: Path) -> str | None:
    """Comma-separated task ids '<env>/<task type>/<split>/<index>' (the index is checked by the chapter)."""
    try:
        for item in _items(value):
            env, tt, _, _ = parse_task_id(item)
            parse_task_types(f"{env}/{tt}")
    except (TaskIdError, ValueError) as e:
        return str(e)
    return None


def _splits() -> tuple:
    return SPLITS


def split(value, root: Path) -> str | None:
    return None if value in _splits() else f"is not a split; valid splits: {', '.join(_splits())}"


def splits(value, root: Path) -> str | None:
    items = _items(value)
    bad = [s for s in items if s not in _splits()]
    if bad or not items:
        return f"names {', '.join(map(repr, bad)) or 'no split'}; valid splits: {', '.join(_splits())}"
    return None


def train_base(value, root: Path) -> str | None:
    """"" (skip the training section) or a policy model `training.check_base` accepts."""
    if value == "":
        return None
    try:
        check_base(value)
    except ValueError as e:
        return str(e)
    return None


def _profiles_with(section: str, root: Path) -> list[str]:
    """The profiles that have a `section:` (a study's design: `study`, `ceiling`); a broken one has none."""

    def has(name):
        try:
            return bool(load_profile(name, root).get(section))
        except ProfileError:
            return False
    return [p for p in profiles(root) if has(p)]


def study_profile(value, root: Path) -> str | None:
    """A profile with a `study:` section (chapter 09's design; chapter 10 reads its records)."""
    names = _profiles_with("study", root)
    return None if value in names else f"is not a profile with a study design; valid: {', '.join(names)}"


def ceiling_profile(value, root: Path) -> str | None:
    """A profile with a `ceiling:` section (the second study's design, chapter 11)."""
    names = _profiles_with("ceiling", root)
    return None if value in names else f"is not a profile with a second-study design; valid: {', '.join(names)}"


def skills_folder(value, root: Path) -> str | None:
    """"" (no imported skills) or a folder of Agent Skills that imports cleanly (relative to the project)."""
    if value == "":
        return None
    path = Path(value) if Path(value).is_absolute() else root / value
    try:
        import_skills(path)
    except AgentSkillsError as e:
        return str(e)
    return None


# -- the registries the chapters use (read when a value is checked) --------------------------------------
def _envs() -> tuple:
    return tuple(envs.ENVS)


def _assay_envs() -> tuple:
    return ("twx", "tau2")   # chapter 06's benchmarks (the ones with Assay templates)


def _breakdown_conditions() -> tuple:
    return BREAKDOWN_CONDITIONS


def _training_conditions() -> tuple:
    return TRAINING_CONDITIONS


def _prompt_levels() -> tuple:
    return PROMPT_LEVELS


def _task_texts() -> tuple:
    return TASK_TEXTS


def _outcomes() -> tuple:
    return OUTCOMES


def _domains() -> tuple:
    return DOMAINS


def _retrieval_modes() -> tuple:
    return MODES


def _credit_sources() -> tuple:
    return CREDIT_SOURCES


POSITIVE, COUNT = at_least(1), at_least(0)

SCHEMA: dict[str, Domain] = {
    # the model
    "backend": backend, "teacher_backend": backend_or_empty, "tau2_user_backend": backend_or_empty,
    "train_base": train_base,
    # tasks
    "envs": list_of(_envs), "assay_envs": list_of(_assay_envs), "demo_tasks": task_ids,
    "task_types": task_types, "assay_task_types": task_types, "skillrl_task_types": task_types,
    "skillc_task_types": task_types, "gold_task_types": task_types, "catalogue_types": catalogue_types,
    "split": split, "catalogue_splits": splits, "tau2_domain": one_of(_domains),
    "task_text": one_of(_task_texts),
    # conditions and the papers' named choices
    "conditions": list_of(_breakdown_conditions), "train_conditions": list_of(_training_conditions),
    "prompt_level": one_of(_prompt_levels), "outcome": one_of(_outcomes),
    "retrieval_mode": one_of(_retrieval_modes), "credit_source": one_of(_credit_sources),
    "study_profile": study_profile, "ceiling_profile": ceiling_profile, "skills_folder": skills_folder,
    # counts that must be at least one (tasks drawn, steps, workers, retrieved skills, samples)
    **{name: POSITIVE for name in (
        "n_tasks", "max_steps", "max_subtasks", "max_subtask_steps", "workers", "speed_trials",
        "step_cost_steps", "n_heldout", "n_ablation", "top_k", "n_buckets", "n_bins", "n_pairs", "n_train",
        "n_dev", "n_test", "tau2_n_train", "tau2_n_dev", "tau2_n_test", "tau2_max_steps", "sim_reps",
        "bank_top_k", "grpo_group", "grpo_states", "validate_every", "max_prompt_tokens", "lora_r",
        "min_len", "max_len", "max_candidates", "judge_samples", "macro_k", "n_gold", "gold_windows")},
    # counts that may be none (0: all tasks for catalogue_n, no stop for run_until, no GRPO step, ...)
    **{name: COUNT for name in (
        "seed", "difficulty_sample", "catalogue_n", "max_split", "min_keep", "rounds", "sft_epochs",
        "grpo_steps", "train_threads", "n_macros", "judged_deletions", "closed_loop_windows",
        "closed_slack", "run_until")},
    "K": at_least(2), "tau2_K": at_least(2),        # each skill needs trials with and without it
    "k_nearest": optional(POSITIVE), "catalogue_sizes": list_of_positive,
    "f": number(0, 1), "tau": number(0), "mask_temperature": number(0), "sft_lr": number(0),
    "grpo_lr": number(0), "kl_beta": number(0, open_low=False),
    # no domain beyond the type: thresholds and effects, the benchmarks' own option strings, switches,
    # and what the machinery sets (profile, runs_root)
    **{name: anything for name in (
        "threshold", "retrieval_delta", "delta", "tau_split", "tau_retire", "tau_merge", "min_credit",
        "sim_effect", "twx_params", "sciworld_simplifications", "run", "train_use_vllm", "profile",
        "runs_root")},
}


def check_values(chapter: str, params: dict, root: Path) -> list[tuple[str, Any, str]]:
    """(name, value, what is wrong) for each parameter of `chapter` outside its declared domain; names
    the schema does not know (a test project's own chapters) are left to the type check."""
    problems = []
    for name, value in params.items():
        domain = SCHEMA.get(name)
        problem = domain(value, root) if domain is not None else None
        if problem:
            problems.append((name, value, problem))
    return problems
