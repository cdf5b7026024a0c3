import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# The Ctrl-C tests send SIGINT to this process; a suite started in the background (`make test &`) inherits
# SIGINT ignored from the shell, and those tests then failed for that reason alone.
from skillbook.run import interruptible  # noqa: E402

interruptible()

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


@pytest.fixture(scope="session")
def workshop_html(tmp_path_factory):
    """The book built once (-W, offline) from the committed workshop chapters, shared by the tests that read
    it (the -W build test and the browser test): a build takes minutes on 2 cores."""
    from skillbook.book import build
    return build("workshop", output=tmp_path_factory.mktemp("book"))


from fakes import fake_env, fake_server_factory  # noqa: E402,F401  (fixtures for control-flow tests)
