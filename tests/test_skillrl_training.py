"""SkillRL's weight updates (papers/skillrl/training.py): data from records, SFT and GRPO steps on a tiny randomly
initialised Qwen2 (seconds on a CPU), the step reward on a real TextWorldExpress state, the GGUF export, the
backend that names a merged policy. The `train` extra is needed for the model tests; they skip without it."""
import json

import numpy as np
import pytest

from skillbook.llm import LLM, BackendError, parse_backend
from skillbook.papers.skillrl.bank import bank_skill
from skillbook.papers.skillrl.training import (
    TrainSettings,
    config_from,
    missing_extra,
    policy_id,
    read_jsonl,
    sft_features,
    training_data,
    write_jsonl,
)
from skillbook.skills.library import SkillLibrary

MISSING = missing_extra()
needs_extra = pytest.mark.skipif(bool(MISSING), reason=f"the optional `train` extra is not installed (missing: "
                                 f"{', '.join(MISSING)}): pip install -e '.[train]'")

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


@pytest.fixture(scope="module")
def tokenizer():
    pytest.importorskip("tokenizers")
    return make_tokenizer()


def make_tokenizer():
    """A small byte-level BPE tokenizer with Qwen's chat tokens and a ChatML template (built in milliseconds)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["Thought: go on\nAction: take key", "Action: open door", "You are in room 3. A key lies here.",
              "Valid actions: look around, open door, take key", "General skills: Take The Key First"] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=CHATML)


def tiny_qwen2(tokenizer):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    return Qwen2ForCausalLM(config)


def warmed_qwen2(tokenizer, messages: list[dict], reply: str, steps: int = 50):
    """A tiny random Qwen2 taught the form of one reply by a few plain optimiser steps. A random model never
    names a valid action, so every GRPO group would get equal rewards (advantage 0, no gradient); after these
    steps its samples at temperature 1 mix valid and invalid replies, so a group's rewards differ."""
    import torch
    model = tiny_qwen2(tokenizer)
    f = sft_features(tokenizer, messages + [{"role": "assistant", "content": reply}], [True], 10_000)
    ids, labels = torch.tensor([f["input_ids"]]), torch.tensor([f["labels"]])
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        model(input_ids=ids, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    return model


@pytest.fixture
def one_thread():
    """Tiny models run fastest on one thread (two threads on a busy 2-core machine were 15× slower)."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def fetch_bank():
    bank = SkillLibrary()
    bank.add(bank_skill("gen_001", "Read The Room", "Look at what the room holds before acting.", "always"))
    bank.add(bank_skill("fet_001", "Take The Key First", "Take the key before opening the door.",
                        "a key lies in the room", category="fetch"))
    return bank


@pytest.fixture
def recorded(fake_env):
    """Two recorded fake episodes of the task-level agent: one success, one failure (it only looks around)."""
    from fakes import FakeModel, solve
    from skillbook.agent import Agent, AgentConfig
    from skillbook.envs import make_env
    env = make_env("fake")
    config = AgentConfig(level="task", max_steps=4, n_examples=0)
    win = Agent(FakeModel(solve), config).run(env, "fake/fetch/train/0")
    loss = Agent(FakeModel(lambda obs: "look around"), config).run(env, "fake/fetch/train/1")
    assert win.success and not loss.success
    return [win, loss]


def test_config_checks_name_the_valid_choices():
    assert TrainSettings().validate().rounds == 30          # the paper: 150 steps, validation every 5
    assert config_from(grpo_steps=3, validate_every=2).rounds == 2
    with pytest.raises(ValueError, match="valid: .*grpo_steps"):
        config_from(grpo_step=3)
    with pytest.raises(ValueError, match="valid: q_proj"):
        config_from(targets="q_proj,attention")
    with pytest.raises(ValueError, match="group must be at least 2"):
        config_from(group=1)
    with pytest.raises(ValueError, match="use_vllm must be true or false"):
        config_from(use_vllm="yes")
    from skillbook.papers.skillrl.training import check_base
    assert check_base("hf:Qwen/Qwen2.5-7B-Instruct") and check_base("qwen2.5-coder-0.5b")
    for bad in ("Qwen/Qwen2.5-7B-Instruct", "hf:", "qwen2.5-coder-7b"):
        with pytest.raises(ValueError, match=r"valid: qwen2\.5-coder-1\.5b, qwen2\.5-coder-0\.5b .*'hf:<model id>'"):
            check_base(bad)


def test_recorded_episodes_become_sft_rows_and_grpo_states_with_the_bank_in_the_prompt(recorded, tmp_path):
    sft, states, skipped = training_data(recorded, fetch_bank(), source="collect", mode="template")
    assert not skipped
    assert [r["task_id"] for r in sft] == ["fake/fetch/train/0"]           # successes only
    row = sft[0]
    first = row["messages"][1]["content"]
    assert "Take The Key First" in first and "Read The Room" in first       # the bank block, as the loop shows it
    assert row["skills"] == ["gen_001", "fet_001"]
    assert [m["content"] for m in row["messages"] if m["role"] == "assistant"] == \
        [s.raw.strip() for s in recorded[0].steps]                           # the recorded replies, in order
    assert row["train"] == [True, True]
    # one state per model call of either episode; prefixes are the actions stepped before it
    win = [s for s in states if s["task_id"] == "fake/fetch/train/0"]
    assert [s["prefix"] for s in win] == [[], ["take key"]] and [s["score"] for s in win] == [0.0, 0.5]
    assert win[1]["messages"][-1]["role"] == "user" and "take the key" in win[1]["messages"][-1]["content"].lower()
    assert len([s for s in states if s["task_id"] == "fake/fetch/train/1"]) == len(recorded[1].steps)
    path = write_jsonl(tmp_path / "sft.jsonl", sft)
    assert read_jsonl(path) == sft and path.read_text().count("\n") == 1


def test_sft_labels_cover_exactly_the_trained_assistant_turns(tokenizer):
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "A key lies here."},
                {"role": "assistant", "content": "Action: look around"}, {"role": "user", "content": "Nothing."},
                {"role": "assistant", "content": "Action: take key"}]
    f = sft_features(tokenizer, messages, [False, True], 10_000)
    trained = tokenizer.decode([t for t, label in zip(f["input_ids"], f["labels"]) if label != -100])
    assert trained == "Action: take key<|im_end|>\n"
    assert len(sft_features(tokenizer, messages, [True, True], 7)["input_ids"]) == 7


@needs_extra
def test_one_sft_step_and_one_grpo_step_end_to_end(tokenizer, recorded, fake_env, tmp_path, one_thread):
    """The real trainers (TRL, PEFT) on a tiny random Qwen2: loss finite, adapter weights changed, adapter saved
    and reloaded, a rollout generated with it; then GRPO with the step reward in the fake world."""
    import torch
    from peft import PeftModel

    from skillbook.papers.skillrl.training import StepReward, generate, grpo, merged, sft
    config = config_from(sft_epochs=1, sft_batch=1, group=8, states_per_step=1, grpo_steps=1, validate_every=1,
                         max_completion_tokens=8, lora_r=4, lora_alpha=8, sft_lr=1e-2, grpo_lr=1e-2)
    rows, states, _ = training_data(recorded, fetch_bank(), mode="template")
    model = warmed_qwen2(tokenizer, states[0]["messages"], "Action: take key")
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out = sft(model, tokenizer, rows, tmp_path / "sft", config)
    losses = [h["loss"] for h in out["log"]["history"] if "loss" in h]
    assert losses and all(np.isfinite(losses))
    b = [p for n, p in out["model"].named_parameters() if "lora_B" in n]
    assert b and any(p.abs().sum() > 0 for p in b)                         # LoRA B starts at zero
    base = tiny_qwen2(tokenizer)
    base.load_state_dict(weights)
    reloaded = PeftModel.from_pretrained(base, str(tmp_path / "sft" / "adapter"))
    # the record holds the adapter only (no tokenizer copy, no pickled trainer arguments)
    assert sorted(p.name for p in (tmp_path / "sft" / "adapter").iterdir()) == [
        "adapter_config.json", "adapter_model.safetensors"]
    for (n1, p1), (n2, p2) in zip(out["model"].named_parameters(), reloaded.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2), n1
    assert isinstance(generate(reloaded, tokenizer, rows[0]["messages"][:2], 5), str)
    assert json.loads((tmp_path / "sft" / "log.json").read_text())["examples"] == 1

    policy = merged(out["model"])                                            # π_ref = π_sft
    reward = StepReward()
    try:
        g = grpo(policy, tokenizer, states[:1], tmp_path / "grpo", config, reward, steps=1)
    finally:
        reward.close()
    history = [h for h in g["log"]["history"] if "reward" in h]
    assert len(history) == 1 and np.isfinite(history[0]["loss"])
    assert -0.1 - 1e-6 <= history[0]["reward"] <= 1.5                 # invalid −0.1 … increment + success bonus
    assert history[0]["reward_std"] > 0                                # a group with different rewards
    assert any(p.abs().sum() > 0 for n, p in g["model"].named_parameters() if "lora_B" in n)
    # π_sft rebuilt from the saved SFT adapter, GRPO's adapter reloaded on it: the same policy
    base = tiny_qwen2(tokenizer)
    base.load_state_dict(weights)
    pi_sft = merged(PeftModel.from_pretrained(base, str(tmp_path / "sft" / "adapter")))
    again = PeftModel.from_pretrained(pi_sft, str(tmp_path / "grpo" / "adapter"))
    for (n1, p1), (n2, p2) in zip(g["model"].named_parameters(), again.named_parameters()):
        assert n1 == n2 and torch.allclose(p1, p2, atol=1e-6), n1
    assert isinstance(generate(again, tokenizer, states[0]["messages"], 5), str)


def test_step_reward_on_a_real_textworld_express_state():
    """The benchmark's own score in a state restored by replaying the prefix: the gold move scores its increment,
    the last gold move adds the success bonus, a reply naming no valid action costs the invalid penalty."""
    from skillbook.envs import make_env
    from skillbook.papers.skillrl.training import StepReward
    task = "twx/twc/train/0"
    params = {"twx": {"game_params": {"twc": {"numLocations": 1, "numItemsToPutAway": 1, "includeDoors": 0,
                                              "limitInventorySize": 0}}}}
    with make_env("twx", **params["twx"]) as env:
        gold = env.gold_actions(env.task(task))
        env.reset(task)
        scores = [env.step(a).score for a in gold]
    reward = StepReward(params, invalid_penalty=0.1, success_bonus=1.0)
    try:
        k = next(i for i, s in enumerate(scores) if s > (scores[i - 1] if i else 0.0))
        before = scores[k - 1] if k else 0.0
        assert reward.reward(task, gold[:k], before, f"Thought: do it\nAction: {gold[k]}") == \
            pytest.approx(scores[k] - before + (1.0 if k == len(gold) - 1 else 0.0))
        last = len(gold) - 1
        assert reward.reward(task, gold[:last], scores[last - 1], f"Action: {gold[last]}") == \
            pytest.approx(scores[last] - scores[last - 1] + 1.0)
        assert reward([None], [[{"role": "assistant", "content": "Action: fly to the moon"}]], [task], [[]]) == [-0.1]
        with pytest.raises(RuntimeError, match="not deterministic"):
            reward.restore(task, gold[:last], score=scores[last - 1] + 0.5)
    finally:
        reward.close()


@needs_extra
def test_merged_gguf_adds_the_lora_delta_and_copies_everything_else(tmp_path):
    import gguf
    from safetensors.numpy import save_file

    from skillbook.papers.skillrl.training import lora_deltas, write_merged_gguf
    rng = np.random.default_rng(0)
    src = tmp_path / "base.gguf"
    w = rng.standard_normal((4, 32)).astype(np.float32)                       # out × in
    other = rng.standard_normal((2, 32)).astype(np.float32)
    writer = gguf.GGUFWriter(str(src), "qwen2")
    writer.add_block_count(1)
    writer.add_string("general.name", "tiny")
    writer.add_tensor("blk.0.attn_q.weight", w)
    writer.add_tensor("blk.0.ffn_up.weight", gguf.quants.quantize(other, gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file(), writer.close()
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    a, b = rng.standard_normal((2, 32)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)
    save_file({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": a,
               "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": b},
              str(adapter / "adapter_model.safetensors"))
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 2, "lora_alpha": 4, "target_modules": ["q_proj"]}))
    deltas = lora_deltas(adapter)
    np.testing.assert_allclose(deltas["blk.0.attn_q.weight"], 2.0 * b @ a, rtol=1e-6)
    dst = write_merged_gguf(src, tmp_path / "merged.gguf", deltas, {"blk.0.attn_q.weight"})
    old, new = gguf.GGUFReader(str(src)), gguf.GGUFReader(str(dst))
    t = {x.name: x for x in new.tensors}
    np.testing.assert_allclose(np.asarray(t["blk.0.attn_q.weight"].data).reshape(4, 32), w + 2.0 * b @ a, rtol=1e-6)
    up_old = next(x for x in old.tensors if x.name == "blk.0.ffn_up.weight")
    assert t["blk.0.ffn_up.weight"].tensor_type == up_old.tensor_type
    assert bytes(t["blk.0.ffn_up.weight"].data) == bytes(up_old.data)      # untouched tensors: byte for byte
    assert new.fields["general.name"].contents() == "tiny"
    # the policy's name is a digest of what was merged, not a path
    pid = policy_id([adapter], ("q_proj",))
    assert pid.startswith("lora-") and pid == policy_id([adapter], ("q_proj",)) != policy_id([], ("q_proj",))


def test_a_merged_policy_is_its_own_backend_and_cache_identity():
    spec = parse_backend("embedded:qwen2.5-coder-0.5b+lora-0123456789abcdef")
    assert (spec.model, spec.adapter, str(spec)) == ("qwen2.5-coder-0.5b", "lora-0123456789abcdef",
                                                     "embedded:qwen2.5-coder-0.5b+lora-0123456789abcdef")
    base, merged = LLM("embedded:qwen2.5-coder-0.5b"), LLM(str(spec))
    assert merged.identity.startswith(base.identity) and merged.identity != base.identity
    with pytest.raises(BackendError, match="expected 'lora-' and 16 hex"):
        parse_backend("embedded:qwen2.5-coder-0.5b+mine")
    from skillbook.llm.modelfiles import gguf_path
    with pytest.raises(BackendError, match="export_policy"):
        gguf_path("qwen2.5-coder-0.5b", "lora-ffffffffffffffff")


@needs_extra
def test_train_policy_runs_every_stage_then_resumes_from_its_records(tokenizer, fake_env, tmp_path, monkeypatch,
                                                                    one_thread):
    """Control flow of `train_policy` in the fake world with the tiny model (its loader and the GGUF export
    replaced, the policies answered by the fake model): data → SFT → two GRPO rounds, each validated with the
    bank evolved → test conditions; a second call trains nothing; a replay that would have to train stops
    before loading any model."""
    from fakes import FakeModel, solve
    from skillbook.agent import Agent, AgentConfig
    from skillbook.envs import make_env
    from skillbook.llm.cache import ReplayMiss
    from skillbook.papers.skillrl import training as T
    env = make_env("fake")
    agent = AgentConfig(level="task", max_steps=4, n_examples=0)
    episodes = [Agent(FakeModel(solve), agent).run(env, f"fake/fetch/train/{i}") for i in range(2)]
    _, states, _ = training_data(episodes[:1], fetch_bank(), mode="template")
    loads = []

    def load_base(base, threads=0):
        loads.append(base)
        return warmed_qwen2(tokenizer, states[0]["messages"], "Action: take key"), tokenizer

    exported = []
    monkeypatch.setattr(T, "load_base", load_base)
    monkeypatch.setattr(T, "export_policy", lambda base, adapters, targets, export=True: exported.append(
        (len(adapters), export)) or f"embedded:{base}+{T.policy_id(adapters, targets)}")
    monkeypatch.setattr(T, "get_llm", lambda backend, cache, seed=0: FakeModel(solve))
    tasks = {"dev": ["fake/fetch/dev/0", "fake/count/dev/0"], "test": ["fake/fetch/test/0", "fake/fetch/test/1"]}
    config = config_from(sft_epochs=1, sft_batch=2, group=4, states_per_step=1, grpo_steps=2, validate_every=1,
                         max_completion_tokens=6, lora_r=4, lora_alpha=8)
    run = lambda: T.train_policy(tmp_path, None, FakeModel(), fetch_bank(), episodes, tasks,  # noqa: E731
                                 agent, config, memory_options={"mode": "template"},
                                 conditions=("base", "sft+grpo"))
    first = run()
    assert loads == ["qwen2.5-coder-0.5b"]                                  # loaded once, trained in one process
    for f in ("data/sft.jsonl", "data/states-round0.jsonl", "data/states-round1.jsonl", "sft/adapter",
              "grpo/round0/adapter", "grpo/round1/adapter", "bank/round1.json", "bank/round2.json",
              "validation/round0/run.json", "test/base/run.json", "test/sft+grpo/run.json"):
        assert (tmp_path / f).exists(), f
    assert len(first.rewards()) == 2 and first.sft_rows == 2 and len(first.sft_loss()) == 1
    assert set(first.test.condition) == {"base", "sft+grpo"} and len(first.test) == 4
    assert first.policies["base"] != first.policies["sft+grpo"]            # other adapters, another model
    assert sorted(first.history["round"].unique()) == [0, 1]
    exported.clear()
    second = run()                                                          # everything recorded
    assert loads == ["qwen2.5-coder-0.5b"] and all(not needed for _, needed in exported)
    assert second.policies == first.policies and second.rewards().equals(first.rewards())
    # a replay that lacks a training stage stops before any model is loaded
    import shutil
    shutil.rmtree(tmp_path / "grpo" / "round1")
    monkeypatch.setenv("SKILLBOOK_REPLAY_ONLY", "1")
    with pytest.raises(ReplayMiss, match="GRPO round 1"):
        run()
    assert loads == ["qwen2.5-coder-0.5b"]


def test_train_policy_takes_a_task_level_agent_config_and_refuses_anything_else_before_any_model(tmp_path,
                                                                                                  monkeypatch):
    from skillbook.agent import AgentConfig
    from skillbook.papers.skillrl import training as T
    monkeypatch.setattr(T, "load_base", lambda *a, **k: pytest.fail("a model was loaded"))
    tasks = {"dev": ["fake/fetch/dev/0"], "test": ["fake/fetch/test/0"]}
    for agent, error, match in (({"max_steps": 4, "n_examples": 0}, TypeError, "AgentConfig"),
                                (AgentConfig(level="subtask", max_steps=4), ValueError, "task-level agent")):
        with pytest.raises(error, match=match):
            T.train_policy(tmp_path, None, None, fetch_bank(), [], tasks, agent, config_from(),
                           memory_options={"mode": "template"})
    assert not list(tmp_path.iterdir())


@needs_extra
def test_an_hf_policy_is_merged_into_a_copy_of_its_weights_and_named_for_vllm(tokenizer, tmp_path, monkeypatch,
                                                                              one_thread):
    """The GPU path of the training (train_base "hf:<id>"), on a tiny Qwen2 saved as a Hugging Face folder: it
    loads through `load_base`, a LoRA adapter is merged into a copy of its weights in the per-user cache (the
    merged model computes what base + adapter computes), and the policy is the backend vLLM serves."""
    import torch
    from peft import LoraConfig, get_peft_model

    from skillbook.llm.modelfiles import merged_hf_path
    from skillbook.llm.servers import VLLMServer
    from skillbook.papers.skillrl import training as T
    monkeypatch.setenv("SKILLBOOK_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "tiny"
    tiny_qwen2(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    base = f"hf:{folder}"
    model, tok = T.load_base(base)
    assert model.dtype == torch.float32 and tok.pad_token is not None   # a CPU: float32
    ids = torch.tensor([tok("Action: take key")["input_ids"]])
    with torch.no_grad():
        untrained = model(input_ids=ids).logits
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)                 # a trained adapter changes the outputs
    peft.save_pretrained(tmp_path / "adapter")
    with torch.no_grad():
        expected = peft(input_ids=ids).logits
    targets = ("q_proj", "v_proj")
    backend = T.export_policy(base, [tmp_path / "adapter"], targets)
    pid = T.policy_id([tmp_path / "adapter"], targets)
    assert backend == f"vllm:{folder}+{pid}"
    spec = parse_backend(backend)
    assert (spec.kind, spec.model, spec.adapter, str(spec)) == ("vllm", str(folder), pid, backend)
    merged_dir = merged_hf_path(str(folder), pid)
    assert (merged_dir / "config.json").exists() and str(tmp_path / "cache") in str(merged_dir)
    from transformers import AutoModelForCausalLM
    with torch.no_grad():
        got = AutoModelForCausalLM.from_pretrained(merged_dir).eval()(input_ids=ids).logits
    assert torch.allclose(got, expected, atol=1e-4)
    assert not torch.allclose(got, untrained, atol=1e-3)
    assert T.export_policy(base, [], targets) == f"vllm:{folder}"       # the untrained model, as it is
    # the merged policy is its own model for the response cache; served under the base model's name
    assert LLM(backend).identity == f"vllm:{folder}+{pid}" != LLM(f"vllm:{folder}").identity
    import importlib.util
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(BackendError, match="needs vLLM"):
            VLLMServer(str(folder), adapter=pid)
    else:
        server = VLLMServer(str(folder), adapter=pid)
        assert server.weights == str(merged_dir) and server.model == str(folder)
    with pytest.raises(BackendError, match="export_policy"):
        VLLMServer(str(folder), adapter="lora-ffffffffffffffff")
    with pytest.raises(BackendError, match="expected 'lora-' and 16 hex"):
        parse_backend(f"vllm:{folder}+lora-12")
