#!/usr/bin/python3
"""Writes tiny random Hugging Face checkpoints of the four MoE architectures, with the logits of
models/moe_reference.py (plain PyTorch following transformers' modeling code) for a fixed token
sequence. Deterministic: rerunning rewrites identical files.

    /usr/bin/python3 tests/data/hf/make_fixtures.py      (needs python3-torch, python3-numpy)

Each directory: config.json, weights (*.safetensors; mixtral sharded with an index),
tokens.txt (the input ids) and logits.f32 (float32 LE, [n_tokens x vocab_size]).
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "models"))
import moe_reference as ref  # noqa: E402

COMMON = {"vocab_size": 96, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
          "hidden_act": "silu", "num_experts_per_tok": 2, "rope_scaling": None}

CONFIGS = {
    # Sharded, F32, GQA, sliding_window null, untied head.
    "mixtral": dict(COMMON, architectures=["MixtralForCausalLM"], model_type="mixtral",
                    intermediate_size=32, num_local_experts=4, rope_theta=1e6,
                    sliding_window=None, tie_word_embeddings=False),
    # BF16, q/k/v bias, gated shared expert, raw (not renormalised) top-k weights.
    "qwen2_moe": dict(COMMON, architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe",
                      intermediate_size=64, moe_intermediate_size=32,
                      shared_expert_intermediate_size=64, num_experts=6, norm_topk_prob=False,
                      rope_theta=10000.0, use_sliding_window=False, sliding_window=None,
                      decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False),
    # F16, QK-norm over the whole projection, tied embeddings.
    "olmoe": dict(COMMON, architectures=["OlmoeForCausalLM"], model_type="olmoe",
                  intermediate_size=32, num_experts=8, norm_topk_prob=False, rope_theta=10000.0,
                  attention_bias=False, clip_qkv=None, tie_word_embeddings=True),
    # F32, per-head QK-norm, head_dim != hidden_size / heads, renormalised top-k.
    "qwen3_moe": dict(COMMON, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                      head_dim=24, intermediate_size=64, moe_intermediate_size=32, num_experts=6,
                      norm_topk_prob=True, rope_theta=1e6, attention_bias=False,
                      decoder_sparse_step=1, mlp_only_layers=[], sliding_window=None,
                      use_sliding_window=False, tie_word_embeddings=False),
}
DTYPES = {"mixtral": torch.float32, "qwen2_moe": torch.bfloat16, "olmoe": torch.float16,
          "qwen3_moe": torch.float32}
TOKENS = [1, 17, 42, 5, 88, 63, 2, 30, 71, 9, 54, 12]


def randomize(model, gen):
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 1:  # biases
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for i, (name, config) in enumerate(sorted(CONFIGS.items())):
        out = os.path.join(HERE, name)
        os.makedirs(out, exist_ok=True)
        model = ref.MoeForCausalLM(config)
        randomize(model, torch.Generator().manual_seed(100 + i))
        dtype = DTYPES[name]
        state = {k: v.detach().to(dtype) for k, v in model.state_dict().items()}
        if config.get("tie_word_embeddings"):
            state.pop("lm_head.weight", None)
        # The reference runs in float32 on exactly the stored (rounded) weights.
        model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        if name == "mixtral":  # two shards and an index
            names = sorted(state)
            half = len(names) // 2
            shards = {"model-00001-of-00002.safetensors": names[:half],
                      "model-00002-of-00002.safetensors": names[half:]}
            weight_map = {}
            for shard, keys in shards.items():
                ref.save_safetensors(os.path.join(out, shard), {k: state[k] for k in keys})
                weight_map.update({k: shard for k in keys})
            with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
                json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=1)
        else:
            ref.save_safetensors(os.path.join(out, "model.safetensors"), state, {"format": "pt"})
        with torch.no_grad():
            logits = model(torch.tensor([TOKENS]))[0].float()
        logits.numpy().astype("<f4").tofile(os.path.join(out, "logits.f32"))
        with open(os.path.join(out, "tokens.txt"), "w") as f:
            f.write(" ".join(map(str, TOKENS)) + "\n")
        print(name, "max|logit|", float(logits.abs().max()))


if __name__ == "__main__":
    main()
