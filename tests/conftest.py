import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

SMALL_MODEL = "embedded:qwen2.5-coder-0.5b"


@pytest.fixture(scope="session")
def small_llm(tmp_path_factory):
    """The real 0.5B model behind the embedded llama.cpp server, with a fresh response cache."""
    from skillbook.llm import LLM, ResponseCache
    cache = ResponseCache(tmp_path_factory.mktemp("cache") / "responses.sqlite")
    llm = LLM(SMALL_MODEL, cache)
    yield llm
    if llm._server is not None:
        llm._server.stop()


from fakes import fake_env, fake_server_factory  # noqa: E402,F401  (fixtures for control-flow tests)
