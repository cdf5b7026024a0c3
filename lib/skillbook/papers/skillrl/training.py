"""SkillRL's weight updates (the third paper, §3.3, Algorithm 1 lines 16–31): cold-start SFT, then GRPO
with the SkillBank in the prompt, the bank evolving between validation rounds.

    data         the project's own records become training data, without a model call: each recorded
                 episode is replayed through the one agent loop (`Agent`) with the SkillBank as its memory
                 and a scripted model that answers with the episode's recorded replies, so every prompt is
                 exactly the one the agent sends at test time — bank block, example, valid actions. A
                 successful episode is one SFT conversation (`sft.jsonl`); every model call of every episode
                 is one GRPO state (`states-roundN.jsonl`). Both formats are below.
    sft          TRL's SFTTrainer, a PEFT LoRA adapter, loss on the assistant turns whose action was valid
    grpo         TRL's GRPOTrainer (unmodified: prompt → G sampled replies → reward functions), a fresh LoRA
                 on top of the SFT policy merged into the weights, so that π_ref — the adapter switched off —
                 is π_sft, as the paper sets it (KL coefficient β = 0.01)
    reward       `StepReward`: the benchmark's own score. TextWorldExpress is deterministic per seed, so a
                 state is restored by resetting its task and replaying the action prefix; a sampled reply is
                 parsed as the agent parses it and stepped: reward = score increment + success bonus, or
                 −0.1 (the paper's invalid-action penalty) for a reply that names no valid action
    export       the adapters merged into the packaged GGUF (the targeted matrices stored dequantised, F32;
                 every other tensor copied byte for byte), served by the same embedded llama.cpp server as
                 `embedded:<model>+lora-<digest>`: test episodes run through the same agent loop, response
                 cache and records, and the digest keeps every cache key and fingerprint apart from the base
                 model's. The base model itself is exported the same way with no adapter ("base"), so before
                 and after differ only by the training, not by quantisation.
    train_policy the stages in order, each resumed from its records (adapters, logs, bank files, runs)

**Per-step grouping, and why.** The paper (and verl-agent's GRPO) samples G whole episodes per task and gives
every step of an episode that episode's normalised success. Here a group is G replies sampled in one *state*
— the conversation at one step of a recorded episode, restored in the simulator by replaying its action
prefix — the anchor-state grouping of GiGPO, with the step's score increment as reward:
  * the G replies of a group differ only in the one action being judged; whole episodes differ in every
    step, and with G = 4–8 one lucky early move decides the comparison;
  * TextWorldExpress scores subgoals, so the increment is a dense, exact signal (a whole episode gives one
    bit);
  * cost: on 2 cores one reply of the 0.5B model is seconds, a whole episode minutes; a group of G episodes
    of 15–30 steps would be one GRPO step per hour;
  * the trainer stays TRL's own single-turn GRPO (prompt → G completions → reward), so the same code runs
    with vLLM generation on a GPU (`use_vllm`).
What it gives up: credit is myopic (a move that pays off later is not rewarded now), and the states come
from recorded runs (the chapter's training runs), not from the current policy's own rollouts — an
off-policy state distribution with on-policy actions. Both are stated where the results are shown.

Formats (one JSON object per line, UTF-8):

    sft.jsonl     {"task_id", "task_type", "source", "score", "skills": [ids shown in the prompt],
                   "messages": [{"role": "system"|"user"|"assistant", "content"}, ...],
                   "train": [bool per assistant message: its action was valid, so it is trained on]}
    states-roundN.jsonl
                  {"task_id", "task_type", "source", "step", "prefix": [actions stepped before],
                   "score": score before the step, "messages": [... ending with the user turn the
                   policy answers]}

**Models.** `base` is a packaged model ("qwen2.5-coder-0.5b": dequantised from its GGUF, trained in
float32 on the CPU, exported back to GGUF and served by llama.cpp) or "hf:<model id or folder>" (any causal
LM of the Hugging Face hub, e.g. "hf:Qwen/Qwen2.5-7B-Instruct", the paper's: bfloat16 on a CUDA GPU, float32
on a CPU; GRPO samples with vLLM when `use_vllm` is set; the adapters are merged into a copy of its weights
in the per-user cache and served as `vllm:<id>+lora-<digest>`, the untrained model as `vllm:<id>`).

Training needs the optional `train` extra (trl, peft, accelerate, gguf, datasets); `require_extra` says
so before any model time. Nothing here runs a model unless a stage is missing from the records.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd
from safetensors.numpy import load_file

from ...agent import Agent, AgentConfig
from ...agent.parsing import match_action, parse_reply
from ...envs import make_env
from ...io import atomic_write_json, atomic_write_text, write_json_if_changed
from ...llm import EMBEDDED_MODELS, Completion, LLMError, get_llm
from ...llm.cache import ReplayMiss
from ...llm.modelfiles import gguf_path, merged_gguf_path, merged_hf_path
from ...records import Episode
from ...run import Condition, load_episodes, run_condition
from ...skills.library import SkillLibrary
from .. import check_agent
from .memory import SkillBankMemory
from .pipeline import StaleRecords, Teacher, evolution_round, evolution_rows, load_bank, save_bank

TRAIN_EXTRA = ("trl", "peft", "accelerate", "gguf", "datasets")
# HF module names of a Qwen2 decoder layer → the GGUF tensor names of llama.cpp
GGUF_NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
              "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
CONDITIONS = ("base", "sft", "sft+grpo")


class TrainingUnavailable(RuntimeError):
    """The optional `train` extra is not installed; the message names what is missing and how to add it."""


def missing_extra() -> list[str]:
    return [m for m in TRAIN_EXTRA if importlib.util.find_spec(m) is None]


def require_extra() -> None:
    missing = missing_extra()
    if missing:
        raise TrainingUnavailable(
            f"SkillRL training needs the optional `train` extra (missing: {', '.join(missing)}); install it "
            "with `.venv/bin/pip install -e '.[train]'` (`make install` does)")


# -- configuration --------------------------------------------------------------------------------------
@dataclass
class TrainSettings:
    """Every training choice; a laptop run sizes them down. From the paper (Table 4 and §4): the learning
    rates, SFT batch and epochs, G = 8, 16 states per step (its batch of 16; it also accumulates 4 steps),
    the KL coefficient, the invalid-action penalty, 150 GRPO steps, validation every 5 and the 6,000-token
    prompt limit. Ours, where the paper gives none or needs a GPU: LoRA (rank, alpha, target modules), the
    SFT cut at sft_max_tokens, the success bonus, temperature, and 48 completion tokens (the paper: 1,024;
    our agent's replies are one short action)."""
    lora_r: int = 8
    lora_alpha: int = 16
    targets: tuple = ("q_proj", "k_proj", "v_proj", "o_proj")
    # cold-start SFT (paper: lr 1e-4, batch 16, 3 epochs)
    sft_lr: float = 1e-4
    sft_epochs: int = 3
    sft_batch: int = 16
    sft_max_tokens: int = 6000          # a longer conversation is cut at its end (the bank is at its start)
    # GRPO (paper: lr 1e-6, group 8, KL 0.01, invalid-action penalty 0.1, 150 steps, validation every 5)
    grpo_lr: float = 1e-6
    group: int = 8                      # G: replies sampled per state
    states_per_step: int = 16           # groups per optimizer step (the paper's batch of 16 tasks)
    kl: float = 0.01                    # β, KL to π_ref = π_sft
    invalid_penalty: float = 0.1
    success_bonus: float = 1.0          # added to the score increment of the step that completes the task
    grpo_steps: int = 150
    validate_every: int = 5             # GRPO steps per round; the bank evolves after each round's validation
    temperature: float = 1.0
    max_completion_tokens: int = 48     # the agent's max_tokens: a sampled reply is as long as a real one
    max_prompt_tokens: int = 6000       # states with a longer conversation are left out (paper: 6,000)
    seed: int = 0
    threads: int = 0                    # torch threads (0: torch's default)
    use_vllm: bool = False              # GRPO samples its G replies with vLLM (a CUDA GPU and the `gpu` extra)

    def validate(self) -> TrainSettings:
        for name in ("lora_r", "lora_alpha", "sft_epochs", "sft_batch", "sft_max_tokens", "group",
                     "states_per_step", "grpo_steps", "validate_every", "max_completion_tokens",
                     "max_prompt_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"training parameter {name} must be a positive integer, got {v!r}")
        if self.group < 2:
            raise ValueError(f"group must be at least 2 (GRPO normalises within a group), got {self.group}")
        for name in ("sft_lr", "grpo_lr"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(f"{name} must be in (0, 1), got {getattr(self, name)!r}")
        for name in ("kl", "invalid_penalty", "success_bonus"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be ≥ 0, got {getattr(self, name)!r}")
        if not isinstance(self.use_vllm, bool):
            raise ValueError(f"use_vllm must be true or false, got {self.use_vllm!r}")
        bad = [t for t in self.targets if t not in GGUF_NAMES]
        if bad or not self.targets:
            raise ValueError(f"unknown LoRA target(s) {bad or '(none)'}; valid: {', '.join(GGUF_NAMES)}")
        return self

    @property
    def rounds(self) -> int:
        return -(-self.grpo_steps // self.validate_every)

    def row(self) -> dict:
        return {k: (", ".join(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


PAPER = TrainSettings()   # the paper's numbers, for the chapter's side-by-side table


def config_from(**params) -> TrainSettings:
    """TrainSettings from keyword parameters; an unknown name is an error naming the valid ones."""
    names = {f.name for f in fields(TrainSettings)}
    bad = sorted(set(params) - names)
    if bad:
        raise ValueError(f"unknown training parameter(s) {bad}; valid: {', '.join(sorted(names))}")
    if "targets" in params and isinstance(params["targets"], str):
        params["targets"] = tuple(t.strip() for t in params["targets"].split(",") if t.strip())
    return TrainSettings(**params).validate()


# -- data: recorded episodes replayed through the agent loop ---------------------------------------------
class ScriptedModel:
    """A model for `Agent` that answers with one recorded episode's replies, in order, and keeps every
    conversation it was sent. A resample (the loop asks again with the same messages) gets the same reply:
    the recorded step holds the reply the loop finally used. Each reply carries its recorded token counts,
    so the loop drops old turns near its context limit exactly where the recorded run did."""

    backend = identity = "scripted:recorded-replies"
    deterministic = True

    def __init__(self, replies: list[tuple[str, int, int]], seed: int = 0):
        self.replies, self.seed = list(replies), seed
        self.calls: list[tuple[list[dict], str]] = []

    def chat(self, messages, *, temperature=0.0, max_tokens=256, seed=None, stop=None, top_p=None,
             role="") -> Completion:
        if self.calls and self.calls[-1][0] == messages:
            return Completion(*self.replies[len(self.calls) - 1], 0.0)
        if len(self.calls) >= len(self.replies):
            raise LLMError("the replay asked for more replies than the episode recorded", retryable=False)
        text, prompt_tokens, completion_tokens = self.replies[len(self.calls)]
        self.calls.append(([dict(m) for m in messages], text))
        return Completion(text, prompt_tokens, completion_tokens, 0.0)


def agent_config(episode: Episode) -> AgentConfig:
    names = {f.name for f in fields(AgentConfig)}
    return AgentConfig(**{k: v for k, v in episode.config.items() if k in names})


def transcribe(episode: Episode, env, memory) -> dict | None:
    """The episode replayed through the agent loop with `memory` in its prompts: its conversations and
    states, or None when the replay does not take the recorded actions (then it is not a demonstration of
    this loop)."""
    if episode.agent != "task" or episode.error:
        return None
    model = ScriptedModel([(s.raw, s.call.prompt_tokens, s.call.completion_tokens)
                           for s in episode.steps if s.call is not None], episode.seed)
    replay = Agent(model, agent_config(episode), memory).run(env, episode.task_id)
    if [(s.action, s.valid) for s in replay.steps] != [(s.action, s.valid) for s in episode.steps] \
            or replay.success != episode.success or len(model.calls) != len(replay.steps):
        return None
    states, prefix, score = [], [], 0.0
    for i, ((messages, _), step) in enumerate(zip(model.calls, replay.steps)):
        states.append({"task_id": episode.task_id, "task_type": episode.task_type, "step": i,
                       "prefix": list(prefix), "score": score, "messages": messages})
        if step.valid:
            prefix.append(step.action)
            score = step.score
    last, reply = model.calls[-1]
    messages = last + [{"role": "assistant", "content": reply.strip()}]
    n_assistant = sum(m["role"] == "assistant" for m in messages)
    # the loop may have dropped its oldest turns near the context limit: turns are matched from the end
    train = [s.valid for s in replay.steps][-n_assistant:]
    return {"task_id": episode.task_id, "task_type": episode.task_type, "score": replay.score,
            "success": replay.success, "skills": list(replay.retrieved), "messages": messages, "train": train,
            "states": states}


def training_data(episodes: list, bank: SkillLibrary, env_options: dict | None = None, source: str = "",
                  **memory_kw) -> tuple[list[dict], list[dict], list[str]]:
    """(SFT rows from the successful episodes, GRPO states from all of them, why any was left out)."""
    sft, states, skipped = [], [], []
    envs: dict[str, object] = {}
    try:
        for e in episodes:
            if e.env not in envs:
                envs[e.env] = make_env(e.env, **(env_options or {}).get(e.env, {}))
            t = transcribe(e, envs[e.env], SkillBankMemory(bank, **memory_kw))
            if t is None:
                skipped.append(f"{e.task_id}: the replay did not take the recorded actions")
                continue
            for s in t.pop("states"):
                states.append({**s, "source": source})
            if t.pop("success"):
                sft.append({"task_id": t["task_id"], "task_type": t["task_type"], "source": source,
                            "score": t["score"], "skills": t["skills"], "messages": t["messages"],
                            "train": t["train"]})
    finally:
        for env in envs.values():
            env.close()
    return sft, states, skipped


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    return atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


# -- tokenisation: loss on the assistant turns ------------------------------------------------------------
def sft_features(tokenizer, messages: list[dict], train: list[bool], max_tokens: int) -> dict:
    """input_ids and labels of one conversation: labels are the tokens of the assistant turns marked in
    `train` (their text and the end-of-turn token), -100 elsewhere. Spans are found by rendering the chat
    template turn by turn, which works for any prefix-preserving template (an error says so otherwise)."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    spans, k = [], 0
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        start = len(tokenizer.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True))
        upto = tokenizer.apply_chat_template(messages[: i + 1], tokenize=False)
        if not text.startswith(upto):
            raise ValueError("the chat template does not render a conversation as its turns one after the other; "
                             "assistant turns cannot be located")
        if train[k]:
            spans.append((start, len(upto)))
        k += 1
    enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    ids = enc["input_ids"][:max_tokens]
    labels = [t if any(s <= a and b <= e for s, e in spans) else -100
              for t, (a, b) in zip(ids, enc["offset_mapping"])]
    return {"input_ids": ids, "labels": labels}


# -- models ------------------------------------------------------------------------------------------------
HF = "hf:"   # a policy from the Hugging Face hub or a local folder of one (see the module docstring)


def hf_model(base: str) -> str:
    """The model id (or folder) of an "hf:<id>" policy; "" for a packaged one."""
    return base[len(HF):].strip() if base.startswith(HF) else ""


def check_base(base: str) -> str:
    """`base` if it names a policy model; else a ValueError naming the valid choices (before any model time)."""
    if base in EMBEDDED_MODELS or hf_model(base):
        return base
    raise ValueError(f"unknown policy model {base!r}; valid: {', '.join(EMBEDDED_MODELS)} (the packaged models, "
                     "trained on the CPU and exported back to GGUF) or 'hf:<model id>', e.g. "
                     "'hf:Qwen/Qwen2.5-7B-Instruct' (any Hugging Face causal LM; a GPU, served by vLLM)")


def cuda_available() -> bool:
    import torch  # deferred: importing torch takes ~1.5 s; only training needs it (the train extra's stack)
    return torch.cuda.is_available()


def load_base(base: str, threads: int = 0):
    """(model, tokenizer) of the policy to train: a packaged model dequantised from its GGUF to float32 (CPU
    training), or an "hf:" model in bfloat16 on a GPU (float32 on a CPU)."""
    check_base(base)
    require_extra()
    # deferred: torch and transformers take seconds to import; only training needs them (the train extra)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if threads:
        torch.set_num_threads(threads)
    if hf_model(base):
        name, cuda = hf_model(base), cuda_available()
        try:
            tokenizer = AutoTokenizer.from_pretrained(name)
            model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16 if cuda else torch.float32,
                                                         device_map="auto" if cuda else None)
        except OSError as e:   # not in the local HF cache and the hub not reachable (HF_HUB_OFFLINE=1)
            raise TrainingUnavailable(f"cannot load {name!r}: {e}. Download it once (unset HF_HUB_OFFLINE, or "
                                      "`huggingface-cli download <id>`) or give a local folder: 'hf:/path'") from e
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return model, tokenizer
    path = gguf_path(base)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    # the weights are dequantised to float32 on load, but transformers still marks the model as GGUF-quantised
    # and its Trainer refuses to train that: from here on it is an ordinary float32 model
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    return model, tokenizer


def merged(model):
    """A PEFT model's adapter merged into its weights: a plain model again (PEFT leaves its `peft_config` behind,
    and the next adapter would then be wrapped as a second one beside a ghost)."""
    plain = model.merge_and_unload()
    if hasattr(plain, "peft_config"):
        del plain.peft_config
    return plain


def _lora(config: TrainSettings):
    from peft import LoraConfig  # deferred: the train extra (optional, slow to import); only training needs it
    return LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0,
                      target_modules=list(config.targets), task_type="CAUSAL_LM")


def _last_checkpoint(folder: Path) -> str | None:
    found = sorted(folder.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1])) if folder.exists() else []
    return str(found[-1]) if found else None


def _common_args(out: Path, config: TrainSettings) -> dict:
    # checkpoints every step: a killed laptop run resumes from its last step (they are not records: the
    # folder is ignored by git and removed when the stage is done)
    return dict(output_dir=str(out / ".checkpoints"), logging_steps=1, save_strategy="steps", save_steps=1,
                save_total_limit=1, report_to="none", use_cpu=not cuda_available(), bf16=cuda_available(),
                seed=config.seed, data_seed=config.seed, dataloader_num_workers=0, disable_tqdm=True)


def save_adapter(model, folder: Path) -> Path:
    """The LoRA adapter only (its config and weights: what `policy_id`, `export_policy` and a resumed stage
    read). Trainer.save_model would add the tokenizer (11 MB, the base model's own) and pickled training
    arguments to every committed record."""
    model.save_pretrained(str(folder))
    (Path(folder) / "README.md").unlink(missing_ok=True)   # PEFT's model-card template
    return Path(folder)


def sft(model, tokenizer, rows: list[dict], out: Path, config: TrainSettings) -> dict:
    """Cold-start SFT with a LoRA adapter; the adapter goes to `out/adapter`, the log to `out/log.json`.
    Resumes from the last checkpoint; returns the log (per-step loss)."""
    require_extra()
    # deferred: datasets and trl are the train extra (optional, slow to import); only training needs them
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer
    out = Path(out)
    data = [sft_features(tokenizer, r["messages"], r["train"], config.sft_max_tokens) for r in rows]
    data = [d for d in data if any(x != -100 for x in d["labels"])]
    if not data:
        raise ValueError("no SFT example has a trained token (no successful episode with a valid action)")
    batch = min(config.sft_batch, len(data))
    args = SFTConfig(**_common_args(out, config), learning_rate=config.sft_lr, num_train_epochs=config.sft_epochs,
                     per_device_train_batch_size=1, gradient_accumulation_steps=batch, max_length=None,
                     lr_scheduler_type="constant", warmup_steps=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(data), processing_class=tokenizer,
                         peft_config=_lora(config))
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=_last_checkpoint(out / ".checkpoints"))
    save_adapter(trainer.model, out / "adapter")
    log = {"stage": "sft", "examples": len(data), "tokens": sum(len(d["input_ids"]) for d in data),
           "trained_tokens": sum(sum(x != -100 for x in d["labels"]) for d in data),
           "seconds": round(time.perf_counter() - t0, 1), "config": config.row(),
           "history": [h for h in trainer.state.log_history if "loss" in h or "train_loss" in h]}
    atomic_write_json(out / "log.json", log, indent=1)
    return {"model": trainer.model, "log": log}


class StepReward:
    """GRPO's reward for one sampled reply in a restored state: the benchmark's score increment, plus
    `success_bonus` when the step completes the task, or −`invalid_penalty` when the reply names no valid
    action. The state is restored by resetting the task and replaying its action prefix (TextWorldExpress is
    deterministic per seed); a prefix that does not reach the recorded score is an error, never a reward."""

    __name__ = "step_reward"      # TRL logs a reward function by its name

    def __init__(self, env_options: dict | None = None, invalid_penalty: float = 0.1, success_bonus: float = 1.0):
        self.env_options, self.invalid_penalty, self.success_bonus = env_options or {}, invalid_penalty, success_bonus
        self.envs: dict[str, object] = {}

    def env(self, task_id: str):
        name = task_id.split("/")[0]
        if name not in self.envs:
            self.envs[name] = make_env(name, **self.env_options.get(name, {}))
        return self.envs[name]

    def restore(self, task_id: str, prefix: list[str], score: float | None = None):
        env = self.env(task_id)
        env.reset(task_id)
        now = 0.0
        for a in prefix:
            r = env.step(a)
            if r.done:
                raise RuntimeError(f"{task_id}: replaying the prefix ended the episode at {a!r}")
            now = r.score
        if score is not None and abs(now - score) > 1e-9:
            raise RuntimeError(f"{task_id}: the replayed prefix scores {now}, the record {score}: the environment "
                               "is not deterministic here (other game parameters?)")
        return env, now

    def reward(self, task_id: str, prefix: list[str], score: float | None, reply: str) -> float:
        env, before = self.restore(task_id, prefix, score)
        # the agent's stop strings end its replies there; a sampled reply is read the same way
        reply = reply.split("\nObservation")[0].split("\nObs:")[0]
        valid = env.valid_actions()
        parsed = parse_reply(reply, lambda a: match_action(a, valid) is not None)
        action = match_action(parsed.action, valid) if parsed.action else None
        if action is None:
            return -self.invalid_penalty
        r = env.step(action)
        return (r.score - before) + self.success_bonus * float(bool(r.info.get("success")))

    def __call__(self, prompts, completions, task_id, prefix, score=None, **_) -> list[float]:
        score = score if score is not None else [None] * len(task_id)
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [self.reward(t, p, s, x) for t, p, s, x in zip(task_id, prefix, score, texts)]

    def close(self) -> None:
        for env in self.envs.values():
            env.close()
        self.envs.clear()


def grpo(model, tokenizer, states: list[dict], out: Path, config: TrainSettings, reward: StepReward,
         steps: int) -> dict:
    """`steps` GRPO steps over `states` (each an anchor state: G replies sampled from its conversation).
    `model` is the policy to improve: a plain model gets a fresh LoRA adapter (its weights are π_ref), a
    PEFT model keeps training its adapter. The adapter goes to `out/adapter`, the log to `out/log.json`."""
    require_extra()
    # deferred: datasets and trl are the train extra (optional, slow to import); only training needs them
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    out = Path(out)
    # the cost of a GRPO step grows with the prompt (G replies are sampled from it, then scored by the policy
    # and the reference): states beyond max_prompt_tokens are left out, as the paper caps its prompts
    states = [s for s in states if len(tokenizer.apply_chat_template(s["messages"], add_generation_prompt=True,
                                                                     tokenize=True, return_dict=True)["input_ids"])
              <= config.max_prompt_tokens]
    if not states:
        raise ValueError(f"GRPO needs at least one state within max_prompt_tokens={config.max_prompt_tokens}")
    vllm = {}
    if config.use_vllm:
        if not cuda_available() or importlib.util.find_spec("vllm") is None:
            raise TrainingUnavailable("use_vllm needs a CUDA GPU and vLLM (`pip install -e '.[gpu]'`); set "
                                      "use_vllm: false to sample with transformers")
        vllm = dict(use_vllm=True, vllm_mode="colocate")   # generation in the trainer's own process and GPU
    data = Dataset.from_list([{"prompt": s["messages"], "task_id": s["task_id"], "prefix": s["prefix"],
                               "score": s["score"]} for s in states])
    args = GRPOConfig(**_common_args(out, config), learning_rate=config.grpo_lr, max_steps=steps,
                      per_device_train_batch_size=config.group, gradient_accumulation_steps=config.states_per_step,
                      num_generations=config.group, max_completion_length=config.max_completion_tokens,
                      temperature=config.temperature, beta=config.kl, loss_type="grpo", scale_rewards="group",
                      num_iterations=1, lr_scheduler_type="constant", warmup_steps=0, **vllm)
    from peft import PeftModel  # deferred: the train extra (optional, slow to import)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data, processing_class=tokenizer,
                          peft_config=None if isinstance(model, PeftModel) else _lora(config))
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=_last_checkpoint(out / ".checkpoints"))
    save_adapter(trainer.model, out / "adapter")
    log = {"stage": "grpo", "states": len(states), "steps": steps, "seconds": round(time.perf_counter() - t0, 1),
           "config": config.row(), "history": [h for h in trainer.state.log_history if "reward" in h or "loss" in h]}
    atomic_write_json(out / "log.json", log, indent=1)
    return {"model": trainer.model, "log": log}


def generate(model, tokenizer, messages: list[dict], max_new_tokens: int = 48) -> str:
    """One greedy reply of a (possibly PEFT) model to a conversation: what a rollout asks of the policy."""
    import torch  # deferred: importing torch takes ~1.5 s; only training needs it
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                        return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
    return tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)


# -- export: adapters merged into the packaged GGUF --------------------------------------------------------
def _adapter_files(folder: Path) -> tuple[dict, Path]:
    folder = Path(folder)
    cfg = json.loads((folder / "adapter_config.json").read_text())
    return cfg, folder / "adapter_model.safetensors"


def policy_id(adapters: list[Path], targets: tuple) -> str:
    """"lora-<16 hex>": the digest of what is merged — each adapter's weights and rank/alpha/targets, in
    order, and the target matrices stored in F32 — never a path, so equal adapters name equal models."""
    parts = []
    for a in adapters:
        cfg, weights = _adapter_files(a)
        parts.append({"r": cfg["r"], "alpha": cfg["lora_alpha"], "targets": sorted(cfg["target_modules"]),
                      "rslora": bool(cfg.get("use_rslora")),
                      "weights": hashlib.sha256(weights.read_bytes()).hexdigest()})
    return "lora-" + digest({"adapters": parts, "f32": sorted(targets)})[:16]


def lora_deltas(adapter: Path) -> dict[str, np.ndarray]:
    """GGUF tensor name → scale · B·A of one adapter (float32, shaped as the weight: out × in)."""
    cfg, weights = _adapter_files(adapter)
    scale = cfg["lora_alpha"] / (np.sqrt(cfg["r"]) if cfg.get("use_rslora") else cfg["r"])
    w = load_file(str(weights))
    out = {}
    for key, a in w.items():
        if ".lora_A." not in key:
            continue
        b = w[key.replace(".lora_A.", ".lora_B.")]
        parts = key.split(".")
        layer, module = int(parts[parts.index("layers") + 1]), parts[parts.index("lora_A") - 1]
        out[f"blk.{layer}.{GGUF_NAMES[module]}.weight"] = (scale * (b.astype(np.float32) @ a.astype(np.float32)))
    return out


def write_merged_gguf(src: Path, dst: Path, deltas: dict[str, np.ndarray], f32: set[str]) -> Path:
    """A copy of GGUF `src` at `dst` in which every tensor named in `f32` is stored dequantised as F32 plus
    its delta (if any); every other tensor and every metadata field is copied unchanged. Atomic."""
    import gguf  # deferred: the train extra (optional); only exporting a policy needs it
    reader = gguf.GGUFReader(str(src))
    unknown = sorted(set(deltas) - {t.name for t in reader.tensors})
    if unknown:
        raise ValueError(f"{src.name} has no tensor(s) {unknown[:3]}…: the adapters were trained on another model")
    arch = reader.fields["general.architecture"].contents()
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        writer = gguf.GGUFWriter(str(tmp), arch)
        for key, f in reader.fields.items():
            if key.startswith("GGUF.") or key == "general.architecture":
                continue
            sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(key, f.contents(), f.types[0], sub_type=sub)
        for t in reader.tensors:
            if t.name in f32:
                w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
                w = w.reshape(tuple(int(x) for x in reversed(t.shape)))
                if t.name in deltas:
                    w = w + deltas[t.name]
                writer.add_tensor(t.name, np.ascontiguousarray(w, dtype=np.float32))
            else:
                writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dst


def export_hf_policy(name: str, adapters: list[Path], pid: str) -> Path:
    """The weights of HF model `name` with `adapters` merged in, saved (with its tokenizer) as a folder in
    the per-user cache that vLLM serves; written to a temporary folder and renamed into place."""
    from peft import PeftModel  # deferred: the train extra (optional, slow to import)
    dst = merged_hf_path(name, pid)
    model, tokenizer = load_base(HF + name)
    for a in adapters:
        model = merged(PeftModel.from_pretrained(model, str(a)))
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        tmp.rename(dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dst


def export_policy(base: str, adapters: list[Path], targets: tuple, export: bool = True) -> str:
    """The backend string of `base` with `adapters` merged (none: the base through the same F32 path),
    exporting its GGUF into the per-user cache unless it is there already (or `export` is False: a replay
    whose answers are all recorded needs the name only, never the model). An "hf:" base is merged into a
    copy of its weights (`export_hf_policy`) and served by vLLM; with no adapter it is served as it is."""
    if hf_model(base):
        name = hf_model(base)
        if not adapters:
            return f"vllm:{name}"
        pid = policy_id(adapters, targets)
        if export and not (merged_hf_path(name, pid) / "config.json").exists():
            require_extra()
            export_hf_policy(name, adapters, pid)
        return f"vllm:{name}+{pid}"
    pid = policy_id(adapters, targets)
    dst = merged_gguf_path(base, pid)
    if export and not dst.exists():
        require_extra()
        import gguf  # deferred: the train extra (optional); only exporting a policy needs it
        src = gguf_path(base)
        fields_ = gguf.GGUFReader(str(src)).fields
        n = int(fields_[f"{fields_['general.architecture'].contents()}.block_count"].contents())
        deltas: dict[str, np.ndarray] = {}
        for a in adapters:
            for k, v in lora_deltas(a).items():
                deltas[k] = deltas[k] + v if k in deltas else v
        f32 = {f"blk.{i}.{GGUF_NAMES[t]}.weight" for i in range(n) for t in targets}
        write_merged_gguf(src, dst, deltas, f32)
    return f"embedded:{base}+{pid}"


# -- the stages in order --------------------------------------------------------------------------------------
@dataclass
class TrainingRun:
    policies: dict                 # condition → backend string (base, sft, sft+grpo)
    sft_log: dict
    grpo_logs: list                # one per round
    banks: list                    # the bank of each GRPO round, then the final one
    history: pd.DataFrame          # per round and category: validation success of the policy, triggered, added
    test: pd.DataFrame             # one row per test episode and condition
    sft_rows: int = 0
    states: int = 0
    skipped: list = field(default_factory=list)

    def rewards(self) -> pd.DataFrame:
        """Per GRPO step: mean and std of the group rewards, KL to π_ref, loss."""
        rows = []
        for r, log in enumerate(self.grpo_logs):
            for h in log["history"]:
                if "reward" in h:
                    rows.append({"round": r, "step": int(h.get("step", 0)), "reward": h["reward"],
                                 "reward_std": h.get("reward_std"), "kl": h.get("kl"), "loss": h.get("loss")})
        return pd.DataFrame(rows, columns=["round", "step", "reward", "reward_std", "kl", "loss"])

    def sft_loss(self) -> pd.DataFrame:
        return pd.DataFrame([{"step": int(h.get("step", i + 1)), "loss": h["loss"]}
                             for i, h in enumerate(self.sft_log.get("history", [])) if "loss" in h],
                            columns=["step", "loss"])


def train_policy(run_dir: Path, cache, teacher, bank: SkillLibrary, episodes: list, tasks: dict[str, list[str]],
                 agent: AgentConfig, config: TrainSettings, base: str = "qwen2.5-coder-0.5b",
                 env_options: dict | None = None, seed: int = 0, conditions=CONDITIONS, delta: float = 0.4,
                 memory_options: dict | None = None) -> TrainingRun:
    """Algorithm 1, lines 16–31, resumed from `run_dir` (the chapter's `train/` folder):

        data      SFT rows and round-0 states from `episodes` (recorded TRAIN runs) with `bank` in the prompt
        sft       LoRA SFT of `base` → sft/adapter
        rounds    per round r: GRPO `validate_every` steps (a fresh LoRA on π_sft, continued across rounds) on
                  the states with bank_r → grpo/round{r}/adapter; the policy exported and run on the dev tasks
                  (records in validation/round{r}/); evolution (the frozen pipeline's `evolution_round`, same δ)
                  → bank/round{r+1}.json; the next round's states are the same episodes with the new bank
        test      `conditions` (base, sft, sft+grpo) on the TEST tasks with the final bank, through the agent
                  loop, the response cache `cache` and the run records (test/<condition>/)

    `memory_options` are SkillBankMemory's (mode, delta, top_k) — the frozen stage's retrieval; `delta` is
    evolution's trigger. Everything recorded is reused; the model is loaded only when a stage is missing."""
    config.validate()
    bad = [c for c in conditions if c not in CONDITIONS]
    if bad:
        raise ValueError(f"unknown training condition(s) {bad}; valid: {', '.join(CONDITIONS)}")
    check_base(base)
    run_dir = Path(run_dir)
    memory_kw = dict(memory_options or {})
    SkillBankMemory(SkillLibrary(), **memory_kw)          # its parameters are checked before any model time
    cfg = check_agent(agent, "task", "SkillRL training")
    memory = lambda b, label: (lambda: SkillBankMemory(b, label=label, **memory_kw))  # noqa: E731

    def live(what: str) -> None:
        """A replay (SKILLBOOK_REPLAY_ONLY) that would have to train stops here, before any model time, as
        a missing model answer does."""
        if os.environ.get("SKILLBOOK_REPLAY_ONLY"):
            raise ReplayMiss(f"SKILLBOOK_REPLAY_ONLY is set and {what} is not in the records of {run_dir} "
                             "(a replay that would need training)")

    # the policy in memory: None, or (model, tokenizer, round) — round −1 is π_sft merged into the weights,
    # round r a PEFT model carrying GRPO's adapter after round r
    state: dict = {"policy": None}

    def policy_for(r: int):
        """π for GRPO round r: what this process trained last if it is round r − 1, else rebuilt from the
        recorded adapters (base + SFT merged = π_ref, then round r − 1's adapter, trainable)."""
        if state["policy"] is not None and state["policy"][2] == r - 1:
            return state["policy"][:2]
        from peft import PeftModel  # deferred: the train extra (optional, slow to import)
        m, tok = load_base(base, config.threads)
        if (run_dir / "sft" / "adapter").exists():
            m = merged(PeftModel.from_pretrained(m, str(run_dir / "sft" / "adapter")))
        if r:
            m = PeftModel.from_pretrained(m, str(run_dir / "grpo" / f"round{r - 1}" / "adapter"), is_trainable=True)
        return m, tok

    # data (a pure function of the records and the bank: rewritten only when that changes)
    data_dir = run_dir / "data"
    key = digest({"episodes": [(e.task_id, e.stream, e.position, [s.raw for s in e.steps]) for e in episodes],
                  "bank": bank.state()["skills"]})
    meta = data_dir / "source.json"
    if meta.exists() and json.loads(meta.read_text()).get("key") != key and (run_dir / "sft").exists():
        raise StaleRecords(f"{run_dir} was trained from other recorded runs or another bank than these; remove "
                           f"{run_dir} to train again")
    if not meta.exists() or json.loads(meta.read_text()).get("key") != key:
        rows, states, skipped = training_data(episodes, bank, env_options, source="collect", **memory_kw)
        write_jsonl(data_dir / "sft.jsonl", rows)
        write_jsonl(data_dir / "states-round0.jsonl", states)
        atomic_write_json(meta, {"key": key, "skipped": skipped}, indent=1)
    rows = read_jsonl(data_dir / "sft.jsonl")
    skipped = json.loads(meta.read_text())["skipped"]

    # cold-start SFT
    sft_dir = run_dir / "sft"
    if not (sft_dir / "log.json").exists():
        if rows:
            live("the cold-start SFT")
            m, tok = load_base(base, config.threads)
            state["policy"] = (merged(sft(m, tok, rows, sft_dir, config)["model"]), tok, -1)
        else:
            # no success to demonstrate (a tiny run): no cold start; GRPO starts from the base, which is then π_ref
            atomic_write_json(sft_dir / "log.json", {"stage": "sft", "examples": 0, "history": [], "skipped":
                              f"no successful recorded run among {len(episodes)} (not replayable: {len(skipped)})"})
    sft_log = json.loads((sft_dir / "log.json").read_text())
    sft_adapters = [sft_dir / "adapter"] if (sft_dir / "adapter").exists() else []

    def policy(name: str, extra: list[Path] = (), runs: Path | None = None, n: int = 0) -> str:
        """The backend of a policy; its GGUF is exported only if `runs` still lacks some of its n episodes."""
        needed = runs is None or len(load_episodes(runs)) < n
        return export_policy(base, sft_adapters + list(extra) if name != "base" else [], config.targets, needed)

    # GRPO rounds with validation and evolution
    banks, logs, rows_h = [bank], [], []
    teacher_ = Teacher(teacher)
    reward = StepReward(env_options, config.invalid_penalty, config.success_bonus)
    done_steps = 0
    try:
        for r in range(config.rounds):
            steps = min(config.validate_every, config.grpo_steps - done_steps)
            rdir = run_dir / "grpo" / f"round{r}"
            states_path = data_dir / f"states-round{r}.jsonl"
            if not states_path.exists():
                write_jsonl(states_path, training_data(episodes, banks[-1], env_options, source="collect",
                                                       **memory_kw)[1])
            if not (rdir / "log.json").exists():
                live(f"GRPO round {r}")
                m, tok = policy_for(r)
                out = grpo(m, tok, read_jsonl(states_path), rdir, config, reward, steps)
                state["policy"] = (out["model"], tok, r)
            logs.append(json.loads((rdir / "log.json").read_text()))
            done_steps += steps
            vdir = run_dir / "validation" / f"round{r}"
            backend = policy(f"round{r}", [rdir / "adapter"], vdir, len(tasks["dev"]))
            llm = get_llm(backend, cache, seed=seed)
            val = run_condition(vdir, llm, Condition(f"round{r}", cfg, memory(banks[-1], f"train-round{r}")),
                                tasks["dev"], env_options, 1, desc=f"validation round {r}").episodes
            _stop(llm)
            nxt = run_dir / "bank" / f"round{r + 1}.json"
            if not nxt.exists():
                b = banks[-1].filtered(lambda s: True)
                info = evolution_round(teacher_, b, val, delta)
                save_bank(nxt, b, {"round": r + 1, "evolution": info, "teacher_errors": list(teacher_.errors)})
            b, meta_b = load_bank(nxt)
            banks.append(b)
            rows_h += evolution_rows(r, meta_b["evolution"], b)
    finally:
        reward.close()

    # before and after on the held-out TEST tasks, the final bank in every prompt
    last = run_dir / "grpo" / f"round{config.rounds - 1}" / "adapter"
    extra = {"base": [], "sft": [], "sft+grpo": [last]}
    backends = {c: policy(c, extra[c], run_dir / "test" / c, len(tasks["test"]) if c in conditions else 0)
                for c in CONDITIONS}
    frames = []
    for name in conditions:
        llm = get_llm(backends[name], cache, seed=seed)
        eps = run_condition(run_dir / "test" / name, llm, Condition(name, cfg, memory(banks[-1], "train-final")),
                            tasks["test"], env_options, 1, desc=f"test: {name}").episodes
        _stop(llm)
        frames.append(pd.DataFrame([e.row() for e in eps]).assign(condition=name, backend=backends[name]))
    write_json_if_changed(run_dir / "policies.json", {k: backends[k] for k in backends}, indent=1)
    return TrainingRun({k: backends[k] for k in conditions}, sft_log, logs, banks, pd.DataFrame(rows_h),
                       pd.concat(frames, ignore_index=True), len(rows),
                       len(read_jsonl(data_dir / "states-round0.jsonl")), skipped)


def _stop(llm) -> None:
    """Stop a policy's llama.cpp server once its episodes are recorded (one merged model in memory at a time)."""
    server = getattr(llm, "_server", None)
    if server is not None:
        server.stop()


__all__ = ["TRAIN_EXTRA", "CONDITIONS", "TrainingUnavailable", "missing_extra", "require_extra", "TrainSettings",
           "HF", "hf_model", "check_base", "cuda_available", "export_hf_policy", "save_adapter",
           "PAPER", "config_from", "ScriptedModel", "transcribe", "training_data", "write_jsonl", "read_jsonl",
           "sft_features", "load_base", "merged", "sft", "StepReward", "grpo", "generate", "policy_id", "lora_deltas",
           "write_merged_gguf", "export_policy", "TrainingRun", "train_policy"]
