import pytest

from skillbook.envs import ENVS, TaskIdError, make_env, parse_task_id


@pytest.mark.parametrize("task_id, parsed", [
    ("sciworld/boil/dev/3", ("sciworld", "boil", "dev", 3)),
    ("twx/cookingworld/test/17", ("twx", "cookingworld", "test", 17)),
    ("sciworld/find-non-living-thing/train/0", ("sciworld", "find-non-living-thing", "train", 0)),
])
def test_parse_task_ids(task_id, parsed):
    assert parse_task_id(task_id) == parsed


@pytest.mark.parametrize("task_id, fragment", [
    ("sciworld/boil/3", "malformed task id"),
    ("boil", "malformed task id"),
    ("sciworld/boil/dev/x", "malformed task id"),
    ("sciworld/boil/validation/3", "unknown split 'validation'"),
])
def test_bad_task_ids(task_id, fragment):
    with pytest.raises(TaskIdError, match=fragment):
        parse_task_id(task_id)


def test_unknown_env_names_the_valid_ones():
    with pytest.raises(TaskIdError) as e:
        make_env("alfworld")
    for name in ENVS:
        assert name in str(e.value)


@pytest.mark.integration
def test_env_rejects_unknown_types_ranges_and_foreign_ids():
    sw = make_env("sciworld")
    tw = make_env("twx")
    try:
        with pytest.raises(TaskIdError, match="unknown sciworld task type 'boiling'.*boil"):
            sw.task("sciworld/boiling/dev/0")
        with pytest.raises(TaskIdError, match=r"out of range.*valid 0\.\.6"):
            sw.task("sciworld/boil/dev/7")  # boil has 7 dev variations
        with pytest.raises(TaskIdError, match="belongs to env 'twx'"):
            sw.task("twx/coin/dev/0")
        with pytest.raises(TaskIdError, match=r"valid 0\.\.999"):
            tw.task("twx/coin/test/1000")
        with pytest.raises(TaskIdError, match="unknown games"):
            make_env("twx", game_params={"cooking": "numLocations=1"})
        t = tw.task("twx/coin/test/17")
        assert t.native_id == tw.split_ids("coin", "test")[17]
        assert t.id == "twx/coin/test/17"
    finally:
        sw.close()
        tw.close()


def test_twx_game_params_as_a_mapping_are_the_benchmark_string():
    from skillbook.envs.textworld_express import TextWorldExpress
    as_text = TextWorldExpress(game_params={"twc": "numLocations=1,includeDoors=0"})
    as_map = TextWorldExpress(game_params={"twc": {"numLocations": 1, "includeDoors": 0}})
    assert as_map.game_params == {"twc": "numLocations=1,includeDoors=0"}
    assert as_map._config_tag() == as_text._config_tag()  # records made with either form stay resumable
    from skillbook.envs import canonical_options
    # the runner's resume check
    assert canonical_options("twx", {"game_params": {"twc": {"numLocations": 1}}, "step_limit": 9}) == \
        canonical_options("twx", {"game_params": {"twc": "numLocations=1"}, "step_limit": 9})
    assert canonical_options("sciworld", {"simplifications": "easy"}) == {"simplifications": "easy"}
    with pytest.raises(ValueError, match="plain names"):
        TextWorldExpress(game_params={"twc": {"numLocations": "1,includeDoors=1"}})
    with pytest.raises(ValueError, match="a mapping"):
        TextWorldExpress(game_params={"twc": ["numLocations=1"]})
