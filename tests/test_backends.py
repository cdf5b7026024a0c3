import pytest

from skillbook.llm import DEFAULT_BACKEND, LLM, BackendError, parse_backend


def test_default_is_the_embedded_1_5b_model():
    spec = parse_backend(DEFAULT_BACKEND)
    assert (spec.kind, spec.model) == ("embedded", "qwen2.5-coder-1.5b")


@pytest.mark.parametrize("backend, kind, model, base_url", [
    ("embedded:qwen2.5-coder-0.5b", "embedded", "qwen2.5-coder-0.5b", ""),
    ("openai:http://localhost:8000/v1#Qwen/Qwen2.5-7B-Instruct", "openai", "Qwen/Qwen2.5-7B-Instruct",
     "http://localhost:8000/v1"),
    ("openai:https://api.example.org/v1/#gpt-x", "openai", "gpt-x", "https://api.example.org/v1"),
    ("vllm:Qwen/Qwen2.5-7B-Instruct", "vllm", "Qwen/Qwen2.5-7B-Instruct", ""),
])
def test_parse_valid_backends(backend, kind, model, base_url):
    spec = parse_backend(backend)
    assert (spec.kind, spec.model, spec.base_url) == (kind, model, base_url)
    assert parse_backend(str(spec)) == spec  # the string form round-trips


@pytest.mark.parametrize("backend, fragment", [
    ("qwen", "malformed backend"),
    ("ollama:llama3", "unknown backend kind 'ollama'"),
    ("embedded:qwen2.5-coder-7b", "unknown embedded model 'qwen2.5-coder-7b'"),
    ("openai:http://localhost:8000/v1", "lacks '#<model>'"),
    ("openai:localhost:8000#m", "not an http(s) URL"),
    ("openai:http://localhost:8000/v1#", "empty model name"),
    ("vllm:", "needs a model id"),
])
def test_bad_backend_strings_name_the_valid_choices(backend, fragment):
    with pytest.raises(BackendError) as e:
        parse_backend(backend)
    assert fragment in str(e.value)
    assert "embedded:qwen2.5-coder-1.5b" in str(e.value)  # the message lists the valid backends


def test_vllm_without_the_gpu_extra_is_a_clear_error():
    import importlib.util
    if importlib.util.find_spec("vllm") is not None:  # only GPU machines install the `gpu` extra
        pytest.skip("vllm is installed here")
    llm = LLM("vllm:Qwen/Qwen2.5-7B-Instruct")
    with pytest.raises(BackendError, match=r"\[gpu\]"):
        llm.warm_up()
