"""Retry and error control flow of the LLM client, against a FAKE OpenAI-compatible server.

The fake server only exercises HTTP error handling; no test of model behaviour uses it.
"""
import pytest

from skillbook.llm import LLM, LLMError


def test_5xx_is_retried_then_answered(fake_server_factory):
    fake = fake_server_factory(failures=2)
    llm = LLM(fake.backend, backoff_s=0.01, max_retries=3)
    c = llm.chat([{"role": "user", "content": "hi"}])
    assert c.text == "fake answer" and (c.prompt_tokens, c.completion_tokens) == (5, 2)
    assert fake.requests == 3
    assert (c.temperature, c.seed) == (0.0, 0)  # sampling is recorded with the answer


def test_persistent_failure_raises_llmerror_after_the_budget(fake_server_factory):
    fake = fake_server_factory(failures=100)
    llm = LLM(fake.backend, backoff_s=0.01, max_retries=2)
    with pytest.raises(LLMError, match="after 3 attempts"):
        llm.chat([{"role": "user", "content": "hi"}])
    assert fake.requests == 3 and llm.stats.errors == 1


def test_client_errors_are_not_retried(fake_server_factory):
    fake = fake_server_factory(failures=100, status=400)
    llm = LLM(fake.backend, backoff_s=0.01, max_retries=3)
    with pytest.raises(LLMError, match="HTTP 400"):
        llm.chat([{"role": "user", "content": "hi"}])
    assert fake.requests == 1


def test_connection_refused_is_an_llmerror():
    llm = LLM("openai:http://127.0.0.1:9/v1#nothing-listens", backoff_s=0.01, max_retries=1)
    with pytest.raises(LLMError, match="APIConnectionError"):
        llm.chat([{"role": "user", "content": "hi"}])


def test_second_identical_request_is_served_by_the_cache(fake_server_factory):
    fake = fake_server_factory(failures=0)
    llm = LLM(fake.backend)
    a = llm.chat([{"role": "user", "content": "hi"}])
    b = llm.chat([{"role": "user", "content": "hi"}])
    assert fake.requests == 1 and b.cached and not a.cached and a.text == b.text
    llm.chat([{"role": "user", "content": "hi"}], temperature=0.5)
    assert fake.requests == 2  # sampling parameters are part of the key
