"""Measures a trained tiny-brown-moe (called by train.py on the saved float16 weights).

Writes, next to the model:
  heldout_sample.txt / heldout_sample.ids  the text `moe-cli perplexity` is tested on, and
                                           SentencePiece's token ids of it
  reference_logits.f32 / reference_logits.json  PyTorch logits of a few held-out sentences
and returns a report (perplexities, routing statistics, samples) for training_report.json.
"""
import collections
import json
import os
import re

import numpy as np
import torch

import train

FUNCTION_WORDS = set("""the of and to a in that is was he for it with as his on be at by i
this had not are but from or have an they which one you were her all she there would their we
him been has when who will more no if out so said what up its about into than them can only
other new some could time these two may then do first any my now such like our over man me even
most made after also did many before must through back years where much your way well down
should because each just those people how too little state good very make world still own see
men work long get here between both life being under never day same another know while last
might us great old year off come since against go came right used take three""".split())


def classify(piece):
    text = piece.replace("\u2581", "")
    if not text:
        return "space"
    if piece.startswith("<0x"):
        return "byte"
    if all(not c.isalnum() for c in text):
        return "punctuation"
    if any(c.isdigit() for c in text):
        return "number"
    if piece.startswith("\u2581") and text.lower() in FUNCTION_WORDS:
        return "function word"
    if text[0].isupper():
        return "capitalised"
    return "other word"


def perplexity(model, ids):
    nll, n = train.sliding_window_nll(model, ids)
    return float(np.exp(nll / n)), n


def routing_statistics(model, sp, ids, n_layer, n_expert):
    """Top-k choices per layer/expert over `ids` (in CTX windows) and, per expert, the share of
    each token class among the tokens whose first choice it is, against that class's base rate."""
    choice = np.zeros((n_layer, n_expert), dtype=np.int64)
    first = [[collections.Counter() for _ in range(n_expert)] for _ in range(n_layer)]
    classes = collections.Counter()
    with torch.no_grad():
        for start in range(0, len(ids), train.CTX):
            window = ids[start:start + train.CTX]
            _, routing = model(torch.tensor(window)[None], return_routing=True)
            kinds = [classify(sp.id_to_piece(t)) for t in window]
            classes.update(kinds)
            for l, (_, selected) in enumerate(routing):
                sel = selected.numpy()
                for e in range(n_expert):
                    choice[l, e] += int((sel == e).sum())
                for row, kind in enumerate(kinds):
                    first[l][sel[row, 0]][kind] += 1
    total = sum(classes.values())
    base = {k: v / total for k, v in classes.items()}
    layers = []
    for l in range(n_layer):
        experts = []
        for e in range(n_expert):
            n = sum(first[l][e].values())
            shares = {k: first[l][e][k] / n for k in base} if n else {}
            lifts = {k: shares[k] / base[k] for k in base if n and base[k] > 0.01}
            top = max(lifts, key=lifts.get) if lifts else None
            experts.append({"chosen_fraction": choice[l, e] / choice[l].sum(),
                            "first_choice_tokens": n,
                            "class_share": {k: round(v, 4) for k, v in shares.items()},
                            "most_over_represented": top,
                            "lift": round(lifts[top], 2) if top else None})
        layers.append(experts)
    return {"tokens": total, "class_base_rate": {k: round(v, 4) for k, v in base.items()},
            "layers": layers}


def sample(model, ids, n, generator, temperature=0.8, top_k=40):
    ids = list(ids)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor(ids[-train.CTX:])[None])[0, -1].double() / temperature
            kth = torch.topk(logits, top_k).values[-1]
            logits[logits < kth] = float("-inf")
            tok = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator))
            if tok == 2:
                break
            ids.append(tok)
    return ids


def dictionary_fraction(texts):
    words_path = "/usr/share/dict/words"
    if not os.path.exists(words_path):
        return None, 0
    with open(words_path, encoding="utf-8", errors="ignore") as f:
        dictionary = {w.strip().lower() for w in f}
    words = [w.lower() for t in texts for w in re.findall(r"[A-Za-z]+(?:'[a-z]+)?", t)]
    ok = sum(1 for w in words if w in dictionary or re.sub(r"'s$", "", w) in dictionary)
    return ok / max(1, len(words)), len(words)


def evaluate(model, sp, config, train_ids, heldout_docs, out):
    vocab = config["vocab_size"]
    report = {}
    heldout_text = "\n".join(d for _, d in heldout_docs)
    heldout_ids = [1] + sp.encode(heldout_text)
    ppl, n = perplexity(model, heldout_ids)
    uni_nll, uni_n = train.unigram_nll(train_ids, heldout_ids, vocab)
    report["heldout"] = {"documents": [name for name, _ in heldout_docs], "tokens_scored": n,
                         "perplexity": round(ppl, 4),
                         "unigram_perplexity": round(float(np.exp(uni_nll / uni_n)), 4),
                         "window": train.CTX, "stride": train.STRIDE}
    print(f"held-out perplexity {ppl:.3f} (unigram {report['heldout']['unigram_perplexity']:.3f})",
          flush=True)

    # The sample moe-cli perplexity is tested on: the first two held-out documents.
    sample_text = "\n".join(d for _, d in heldout_docs[:2]) + "\n"
    with open(os.path.join(out, "heldout_sample.txt"), "w", encoding="utf-8") as f:
        f.write(sample_text)
    sample_ids = [1] + sp.encode(sample_text)
    with open(os.path.join(out, "heldout_sample.ids"), "w") as f:
        f.write(" ".join(map(str, sample_ids)) + "\n")
    sppl, sn = perplexity(model, sample_ids)
    report["heldout_sample"] = {"file": "heldout_sample.txt", "tokens_scored": sn,
                                "perplexity": round(sppl, 6)}

    # Reference logits of three held-out sentences (PyTorch, float32 on the float16 weights).
    sentences = []
    for _, d in heldout_docs[2:5]:
        first = re.split(r"(?<=[.?!]) ", d.split("\n")[0])[0]
        ids = [1] + sp.encode(first)[:23]
        sentences.append({"text": sp.decode(ids[1:]), "ids": ids})
    rows = []
    with torch.no_grad():
        for s in sentences:
            rows.append(model(torch.tensor(s["ids"])[None])[0].float().numpy())
    np.concatenate(rows).astype("<f4").tofile(os.path.join(out, "reference_logits.f32"))
    with open(os.path.join(out, "reference_logits.json"), "w") as f:
        json.dump({"n_vocab": vocab, "dtype": "f32", "layout": "rows of n_vocab, sentence after "
                   "sentence, one row per token", "sentences": sentences}, f, indent=1)

    report["routing"] = routing_statistics(model, sp, heldout_ids[:16384],
                                           config["num_hidden_layers"],
                                           config["num_local_experts"])

    gen = torch.Generator().manual_seed(train.SEED)
    prompts = ["The jury said", "In the morning", "He was", "The first thing", "She looked at",
               "The government of the United States", "It is", "When the war"]
    samples = []
    for p in prompts * 2:
        ids = sample(model, [1] + sp.encode(p), 48, gen)
        samples.append(sp.decode(ids[1:]))
    frac, n_words = dictionary_fraction([s for s in samples])
    report["samples"] = samples[:4]
    report["generated_dictionary_words"] = {"fraction": round(frac, 4) if frac is not None else None,
                                            "words": n_words, "dictionary": "/usr/share/dict/words"}
    counts = {"total": sum(p.numel() for p in model.parameters())}
    expert = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    counts["routed_experts"] = expert
    counts["active_per_token"] = counts["total"] - expert + expert * config["num_experts_per_tok"] // config["num_local_experts"]
    report["parameters"] = counts
    return report
