"""Real ScienceWorld and TextWorldExpress episodes: gold actions reach score 1.0; a dead JVM costs one episode."""
import psutil
import pytest

from skillbook.envs import EnvError, make_env

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("env_name, task_id", [
    ("sciworld", "sciworld/find-non-living-thing/dev/0"),
    ("sciworld", "sciworld/boil/test/0"),
    ("twx", "twx/cookingworld/test/17"),
    ("twx", "twx/coin/train/3"),
])
def test_gold_actions_reach_full_score(env_name, task_id):
    with make_env(env_name) as env:
        gold = env.gold_actions(task_id)
        assert len(gold) >= 2
        obs = env.reset(task_id)
        assert obs and env.instruction and env.valid_actions()
        scores = []
        for action in gold:
            r = env.step(action)
            scores.append(r.score)
            assert 0.0 <= r.score <= 1.0
        assert r.score == 1.0 and r.done and r.info["success"]
        assert scores[0] < 1.0  # the score is earned along the way, not given at reset


def _java_children():
    return [p for p in psutil.Process().children(recursive=True) if "java" in p.name()]


@pytest.mark.parametrize("env_name, task_id", [("twx", "twx/simonsays/dev/0"),
                                               ("sciworld", "sciworld/find-living-thing/dev/0")])
def test_dead_jvm_costs_only_the_episode_in_flight(env_name, task_id):
    with make_env(env_name) as env:
        env.reset(task_id)
        before = set(p.pid for p in _java_children())
        assert before
        for p in _java_children():
            p.kill()
        psutil.wait_procs(_java_children(), timeout=10)
        with pytest.raises(EnvError, match="JVM restarted"):
            env.step("look around")
        assert env.restarts == 1 and env.errors
        # the next episode runs on a fresh JVM
        obs = env.reset(task_id)
        assert obs and env.step("look around").observation
        assert not before & set(p.pid for p in _java_children())
