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


def lora_model(shape: dict, device: torch.device, dtype: torch.dtype = torch.bfloat16, rank: int = 32,
               b_std: float = 0.01, seed: int = 5):
    """A random Qwen3 of ``shape`` in ``dtype`` with a float32 rank-``rank`` LoRA (alpha 2 x rank) on all seven
    projections, its B drawn from N(0, ``b_std``) with ``seed`` so that the adapter changes the outputs (a trained
    adapter does) and the gradient reaches A too. The same random weights for every dtype. The defaults are the 4B
    checks' (device_check_scale)."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(qwen3(shape, device, dtype), LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=SEVEN,
                                                                   task_type="CAUSAL_LM"))
    torch.manual_seed(seed)
    for name, p in model.named_parameters():
        if p.requires_grad:
            p.data = p.data.float()
            if "lora_B" in name:
                p.data.normal_(0, b_std)
    return model


def tiny_lora(device: torch.device, dtype: torch.dtype, shape: dict = TINY_QWEN3):
    """:func:`lora_model` of rank 4 on the tiny Qwen3 (or ``shape``), for checks of behaviour."""
    return lora_model(shape, device, dtype, rank=4, b_std=0.02, seed=3)
