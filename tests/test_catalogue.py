"""The gold-path lengths of the task catalogue (chapter 00's difficulty signal), kept in the per-user cache.
Real case: under load a ScienceWorld JVM hung past its deadline while planning one task, and the whole
pass was lost because the cache was written only at the end."""
import importlib
import json

import pytest

from skillbook.envs import SimulatorError, Task

# the module (the package exports a function of that name)
catalogue = importlib.import_module("skillbook.envs.catalogue")


class Planner:
    """A FAKE env for control flow only: a gold path of `index + 1` actions; `hang` fails those tasks once
    as a hung JVM does, `broken` fails them always as the benchmark itself would."""
    name = "fake"

    def __init__(self, hang=(), broken=()):
        self.hang, self.broken, self.calls = set(hang), set(broken), []

    def gold_actions(self, task):
        self.calls.append(task.index)
        if task.index in self.broken:
            raise RuntimeError(f"no gold path for {task.id}")
        if task.index in self.hang:
            self.hang.discard(task.index)
            raise SimulatorError("the JVM gave no answer within 30 s (hung)")
        return ["look"] * (task.index + 1)


def tasks(n):
    return [Task("fake", "count", "dev", i, i) for i in range(n)]


@pytest.fixture
def cache_file(tmp_path, monkeypatch):
    path = tmp_path / "gold.json"
    monkeypatch.setattr(catalogue, "_difficulty_file", lambda env: path)
    return path


def test_a_hung_simulator_is_asked_again_and_the_lengths_are_kept(cache_file):
    env = Planner(hang={1})
    assert catalogue.gold_lengths(env, tasks(3), progress=False) == {
        "fake/count/dev/0": 1, "fake/count/dev/1": 2, "fake/count/dev/2": 3}
    assert env.calls == [0, 1, 1, 2]
    again = Planner()
    assert catalogue.gold_lengths(again, tasks(3), progress=False)["fake/count/dev/2"] == 3
    assert again.calls == []   # all from the cache


def test_what_was_computed_before_a_failure_is_kept(cache_file):
    with pytest.raises(RuntimeError, match="no gold path for fake/count/dev/2"):
        catalogue.gold_lengths(Planner(broken={2}), tasks(4), progress=False)
    assert json.loads(cache_file.read_text()) == {"fake/count/dev/0": 1, "fake/count/dev/1": 2}
    env = Planner()
    catalogue.gold_lengths(env, tasks(4), progress=False)
    assert env.calls == [2, 3]   # the resumed pass plans only what is missing
