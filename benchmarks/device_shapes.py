"""What the device check's two files share: Qwen3's shapes (Qwen3-4B's real one, a tiny one), a random-weight Qwen3
built from a shape, the course's LoRA targets, a tiny LoRA model, and the GPU's peak memory. Imported by ``device_check.py`` and
``device_check_scale.py``; nothing here imports either."""

from __future__ import annotations

import torch

from alfrl.agent.models import LoraSpec

QWEN3_4B = dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
"""Qwen/Qwen3-4B's config.json, the fields that size it."""
TINY_QWEN3 = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, tie_word_embeddings=True)
"""A Qwen3 of a few hundred thousand weights, for checks of behaviour rather than scale."""


def peak_gb(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def qwen3(shape: dict, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """A Qwen3 causal LM of ``shape`` with random weights, built on ``device`` in ``dtype``."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(seed)
    config = Qwen3Config(**shape, attn_implementation="sdpa")
    with torch.device(device):  # built in float32, then cast: the same weights for every dtype (transformers
        model = Qwen3ForCausalLM(config)  # 5.17 draws other random weights when built in bfloat16)
    return model.to(dtype).eval()


SEVEN = list(LoraSpec().target_modules)
"""Every projection of a Qwen3 layer: the course's LoRA targets (alfrl.agent.models.LoraSpec)."""


def tiny_lora(device: torch.device, dtype: torch.dtype, shape: dict = TINY_QWEN3):
    """A random Qwen3 of ``shape`` (the tiny one by default) in ``dtype`` with a float32 rank-4 LoRA on all seven
    projections, B moved off zero (so the gradient reaches A too, and the adapter changes the outputs). The same
    random weights for every dtype."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(qwen3(shape, device, dtype), LoraConfig(r=4, lora_alpha=8, target_modules=SEVEN,
                                                                   task_type="CAUSAL_LM"))
    torch.manual_seed(3)
    for name, p in model.named_parameters():
        if p.requires_grad:
            p.data = p.data.float()
            if "lora_B" in name:
                p.data.normal_(0, 0.02)
    return model
