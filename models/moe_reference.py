"""Plain-PyTorch forward passes of the four Hugging Face MoE architectures libmoe imports.

Written without the transformers package (Debian does not ship it), following its modeling code
function by function, so that checkpoints saved from here load in transformers unchanged and
the logits agree with it:
  - transformers/models/mixtral/modeling_mixtral.py: MixtralRMSNorm, MixtralRotaryEmbedding +
    rotate_half/apply_rotary_pos_emb, MixtralAttention (GQA via repeat_kv),
    MixtralBlockSparseTop2MLP (w2(silu(w1 x) * w3 x)), MixtralSparseMoeBlock (softmax in float32,
    top-k, renormalise), MixtralDecoderLayer, load_balancing_loss_func.
  - transformers/models/qwen2_moe/modeling_qwen2_moe.py: Qwen2MoeAttention (q/k/v bias),
    Qwen2MoeSparseMoeBlock (norm_topk_prob, shared_expert, sigmoid(shared_expert_gate)).
  - transformers/models/olmoe/modeling_olmoe.py: OlmoeAttention (q_norm/k_norm RMSNorm over the
    whole q/k projection, before the head split), OlmoeSparseMoeBlock.
  - transformers/models/qwen3_moe/modeling_qwen3_moe.py: Qwen3MoeAttention (q_norm/k_norm
    RMSNorm of head_dim, per head), Qwen3MoeSparseMoeBlock.
Parameter names are the checkpoints' own (state_dict keys), so save/load needs no renaming.
"""
import json
import math
import struct

import torch
import torch.nn.functional as F
from torch import nn

ARCHS = {
    "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "OlmoeForCausalLM": "olmoe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
}


class RMSNorm(nn.Module):
    """MixtralRMSNorm (identical in the other three files): normalise in float32."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(head_dim, theta, positions):
    """MixtralRotaryEmbedding: inv_freq = 1 / theta^(2i/d); emb = cat(freqs, freqs)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = torch.outer(positions.float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


class Attention(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        self.kind = kind
        self.n_head = c["num_attention_heads"]
        self.n_kv = c["num_key_value_heads"]
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.n_head
        self.theta = c.get("rope_theta", 10000.0)
        d = c["hidden_size"]
        qkv_bias = kind == "qwen2_moe" or c.get("attention_bias", False)
        self.q_proj = nn.Linear(d, self.n_head * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(self.n_head * self.head_dim, d, bias=c.get("attention_bias", False)
                                if kind != "qwen2_moe" else False)
        eps = c["rms_norm_eps"]
        if kind == "olmoe":
            self.q_norm = RMSNorm(self.n_head * self.head_dim, eps)
            self.k_norm = RMSNorm(self.n_kv * self.head_dim, eps)
        elif kind == "qwen3_moe":
            self.q_norm = RMSNorm(self.head_dim, eps)
            self.k_norm = RMSNorm(self.head_dim, eps)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.kind == "olmoe":  # OlmoeAttention: norm the whole projection first
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(b, t, self.n_head, self.head_dim)
        k = k.view(b, t, self.n_kv, self.head_dim)
        v = v.view(b, t, self.n_kv, self.head_dim)
        if self.kind == "qwen3_moe":  # Qwen3MoeAttention: per head, before the transpose
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        cos, sin = rope_cos_sin(self.head_dim, self.theta, torch.arange(t))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.n_head // self.n_kv  # repeat_kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(2, 3)) / math.sqrt(self.head_dim)
        mask = torch.full((t, t), float("-inf")).triu(1)
        probs = torch.softmax(scores.float() + mask, dim=-1).to(q.dtype)
        out = (probs @ v).transpose(1, 2).reshape(b, t, self.n_head * self.head_dim)
        return self.o_proj(out)


class Mlp(nn.Module):
    """Qwen2MoeMLP / OlmoeMLP / Qwen3MoeMLP: down(silu(gate x) * up x)."""

    def __init__(self, d, ff):
        super().__init__()
        self.gate_proj = nn.Linear(d, ff, bias=False)
        self.up_proj = nn.Linear(d, ff, bias=False)
        self.down_proj = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MixtralExpert(nn.Module):
    """MixtralBlockSparseTop2MLP: w1 = gate, w3 = up, w2 = down."""

    def __init__(self, d, ff):
        super().__init__()
        self.w1 = nn.Linear(d, ff, bias=False)
        self.w2 = nn.Linear(ff, d, bias=False)
        self.w3 = nn.Linear(d, ff, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoe(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        d = c["hidden_size"]
        self.kind = kind
        if kind == "mixtral":
            n, ff = c["num_local_experts"], c["intermediate_size"]
            self.norm_topk = True
        else:
            n = c["num_experts"]
            ff = c["moe_intermediate_size"] if kind != "olmoe" else c["intermediate_size"]
            self.norm_topk = c.get("norm_topk_prob", False)
        self.top_k = c["num_experts_per_tok"]
        self.gate = nn.Linear(d, n, bias=False)
        self.experts = nn.ModuleList(
            [MixtralExpert(d, ff) if kind == "mixtral" else Mlp(d, ff) for _ in range(n)])
        if kind == "qwen2_moe":
            self.shared_expert = Mlp(d, c["shared_expert_intermediate_size"])
            self.shared_expert_gate = nn.Linear(d, 1, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        h = x.reshape(-1, d)
        router_logits = self.gate(h)
        weights = torch.softmax(router_logits, dim=1, dtype=torch.float)
        weights, selected = torch.topk(weights, self.top_k, dim=-1)
        if self.norm_topk:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(h.dtype)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(selected == e)
            if rows.numel() == 0:
                continue
            y = expert(h[rows]) * weights[rows, slot, None]
            out.index_add_(0, rows, y.to(h.dtype))
        if self.kind == "qwen2_moe":
            out = out + torch.sigmoid(self.shared_expert_gate(h)) * self.shared_expert(h)
        return out.reshape(b, t, d), router_logits, selected


class DecoderLayer(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        eps = c["rms_norm_eps"]
        self.input_layernorm = RMSNorm(c["hidden_size"], eps)
        self.self_attn = Attention(c, kind)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], eps)
        moe = SparseMoe(c, kind)
        if kind == "mixtral":
            self.block_sparse_moe = moe
        else:
            self.mlp = moe

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        moe = self.block_sparse_moe if hasattr(self, "block_sparse_moe") else self.mlp
        y, router_logits, selected = moe(self.post_attention_layernorm(x))
        return x + y, router_logits, selected


class Inner(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([DecoderLayer(c, kind) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class MoeForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.kind = ARCHS[config["architectures"][0]]
        self.model = Inner(config, self.kind)
        self.tied = config.get("tie_word_embeddings", False)
        if not self.tied:
            self.lm_head = nn.Linear(config["hidden_size"], config["vocab_size"], bias=False)

    def forward(self, ids, return_routing=False):
        x = self.model.embed_tokens(ids)
        routing = []
        for layer in self.model.layers:
            x, router_logits, selected = layer(x)
            routing.append((router_logits, selected))
        x = self.model.norm(x)
        w = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        logits = x @ w.t()
        return (logits, routing) if return_routing else logits


def load_balancing_loss(routing, n_expert, top_k):
    """load_balancing_loss_func (Switch Transformer eq. 4-6), without attention masks."""
    logits = torch.cat([r for r, _ in routing], dim=0)
    probs = torch.softmax(logits, dim=-1)
    _, selected = torch.topk(probs, top_k, dim=-1)
    mask = F.one_hot(selected, n_expert).float()
    tokens_per_expert = mask.mean(dim=0)
    router_prob_per_expert = probs.mean(dim=0)
    return (tokens_per_expert * router_prob_per_expert.unsqueeze(0)).sum() * n_expert


SAFETENSORS_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


def save_safetensors(path, tensors, metadata=None):
    """Writes the safetensors layout: u64 LE header length, JSON header, packed data."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = bytearray(data[a:b])
        if info["dtype"] == "BF16":
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16)
        else:
            t = torch.frombuffer(raw, dtype={"F32": torch.float32, "F16": torch.float16}[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out
