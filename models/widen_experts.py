#!/usr/bin/python3
"""Widens a trained MoE checkpoint's routed experts with zero units: same outputs, more bytes.

    /usr/bin/python3 models/widen_experts.py IN_DIR OUT_DIR --intermediate 2048

Each routed expert computes down(silu(gate x) * up x). New hidden units get zero rows in gate and
up and zero columns in down: silu(0) * 0 = 0, and a zero column adds nothing, so every expert's
output, and with it the routing and the logits, stays what it was, while each expert takes
(new / old) times the bytes. This is how issue 16 gets trained routing (which a random-weight
model does not have) at a size that a memory budget must cache. Shared experts, attention, the
router and embeddings are copied unchanged.

Checks the result before saving: the reference forward pass (models/moe_reference.py, float32)
of both models on a few windows of the given text gives the same routing and logits that agree
to float32 rounding (the longer sums may round differently in the last bits).
"""
import argparse
import json
import os
import re
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_reference as ref  # noqa: E402

# Routed expert matrices and which dimension is the expert's hidden size: Mixtral's w1/w3/w2,
# the Qwen/OLMoE gate_proj/up_proj/down_proj ("experts.N." excludes the shared expert).
EXPERT_ROWS = re.compile(r"\.experts\.\d+\.(w1|w3|gate_proj|up_proj)\.weight$")
EXPERT_COLS = re.compile(r"\.experts\.\d+\.(w2|down_proj)\.weight$")


def widen(state, old, new):
    out = {}
    for name, t in state.items():
        if EXPERT_ROWS.search(name):
            assert t.shape[0] == old, (name, t.shape)
            t = torch.cat([t, torch.zeros(new - old, t.shape[1], dtype=t.dtype)], dim=0)
        elif EXPERT_COLS.search(name):
            assert t.shape[1] == old, (name, t.shape)
            t = torch.cat([t, torch.zeros(t.shape[0], new - old, dtype=t.dtype)], dim=1)
        out[name] = t
    return out


def load_model(config, state):
    model = ref.MoeForCausalLM(config)
    model.load_state_dict({k: v.float() for k, v in state.items()})
    model.eval()
    return model


def compare(config, state, wide_config, wide_state, ids, windows, ctx):
    a, b = load_model(config, state), load_model(wide_config, wide_state)
    worst, scale, same_routing = 0.0, 0.0, True
    with torch.no_grad():
        for w in range(windows):
            x = torch.tensor(ids[w * ctx:(w + 1) * ctx])[None]
            la, ra = a(x, return_routing=True)
            lb, rb = b(x, return_routing=True)
            worst = max(worst, (la - lb).abs().max().item())
            scale = max(scale, la.abs().max().item())
            same_routing &= all(torch.equal(sa, sb) for (_, sa), (_, sb) in zip(ra, rb))
    return worst, scale, same_routing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--intermediate", type=int, required=True, help="new expert hidden size")
    ap.add_argument("--check-text", help="text for the check (default: IN/heldout_sample.txt)")
    args = ap.parse_args()

    with open(os.path.join(args.input, "config.json")) as f:
        config = json.load(f)
    key = "intermediate_size" if ref.ARCHS[config["architectures"][0]] in ("mixtral", "olmoe") \
        else "moe_intermediate_size"
    old = config[key]
    if args.intermediate <= old:
        sys.exit(f"--intermediate {args.intermediate} must exceed the experts' {old}")
    state = ref.load_safetensors(os.path.join(args.input, "model.safetensors"))
    wide_state = widen(state, old, args.intermediate)
    wide_config = dict(config, **{key: args.intermediate})

    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.input, "tokenizer.model"))
    with open(args.check_text or os.path.join(args.input, "heldout_sample.txt")) as f:
        ids = [config["bos_token_id"]] + sp.encode(f.read())
    ctx = min(256, config["max_position_embeddings"])
    windows = max(1, min(4, len(ids) // ctx))
    worst, scale, same_routing = compare(config, state, wide_config, wide_state, ids, windows, ctx)
    print(f"check on {windows} windows of {ctx} tokens: routing {'identical' if same_routing else 'DIFFERS'}, "
          f"logits differ by at most {worst:.2e} (max |logit| {scale:.1f})")
    if not same_routing or worst > 1e-4 * scale:
        sys.exit("widening changed the model: not saved")

    os.makedirs(args.output, exist_ok=True)
    ref.save_safetensors(os.path.join(args.output, "model.safetensors"), wide_state, {"format": "pt"})
    with open(os.path.join(args.output, "config.json"), "w") as f:
        json.dump(wide_config, f, indent=2)
    for name in os.listdir(args.input):
        if name not in ("config.json", "model.safetensors") and \
                os.path.isfile(os.path.join(args.input, name)):
            shutil.copyfile(os.path.join(args.input, name), os.path.join(args.output, name))
    print(f"wrote {args.output}: experts {old} -> {args.intermediate} hidden units")


if __name__ == "__main__":
    main()
