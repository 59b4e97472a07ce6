"""An independent f64 forward of a Qwen3 GGUF model in numpy: every tensor dequantized by gguf-py,
every product and norm in float64, attention over the whole prefix at each step (no cache).
tiny_llm.py uses it for the references of the Q8_0 fixtures next to llama.cpp's.

    python3 tools/qwen3_numpy.py MODEL.gguf 1,2,3 [STEPS]   # greedy tokens and the smallest margin
"""
import sys

import gguf
import numpy as np

def load(path):
    """The model's weights (float64, numpy shapes) and the config the forward needs."""
    r = gguf.GGUFReader(str(path))
    W = {}
    for t in r.tensors:
        shape = list(reversed([int(d) for d in t.shape]))
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        W[t.name] = np.asarray(a, dtype=np.float64).reshape(shape)
    f = lambda k: r.fields[k].contents()
    cfg = dict(layers=f("qwen3.block_count"), heads=f("qwen3.attention.head_count"), kvh=f("qwen3.attention.head_count_kv"),
               eps=f("qwen3.attention.layer_norm_rms_epsilon"), theta=f("qwen3.rope.freq_base"), hd=f("qwen3.attention.key_length"))
    return W, cfg

def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

def rope(x, pos, theta):
    # NEOX: rotate the two halves of each head.
    hd = x.shape[-1]; half = hd // 2
    inv = theta ** (-np.arange(half, dtype=np.float64) * 2 / hd)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * c - b * s, a * s + b * c], -1)

def forward(W, cfg, ids):
    """Logits [n, vocab] for every position of ids."""
    n = len(ids); nh, kvh, hd, eps = cfg["heads"], cfg["kvh"], cfg["hd"], cfg["eps"]
    x = W["token_embd.weight"][ids]
    pos = np.arange(n, dtype=np.float64)
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for l in range(cfg["layers"]):
        p = f"blk.{l}."
        h = rms(x, W[p + "attn_norm.weight"], eps)
        q = (h @ W[p + "attn_q.weight"].T).reshape(n, nh, hd)
        k = (h @ W[p + "attn_k.weight"].T).reshape(n, kvh, hd)
        v = (h @ W[p + "attn_v.weight"].T).reshape(n, kvh, hd)
        q = rope(rms(q, W[p + "attn_q_norm.weight"], eps), pos, cfg["theta"])
        k = rope(rms(k, W[p + "attn_k_norm.weight"], eps), pos, cfg["theta"])
        rep = nh // kvh
        k = np.repeat(k, rep, axis=1); v = np.repeat(v, rep, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True)); s /= s.sum(-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", s, v).reshape(n, nh * hd)
        x = x + o @ W[p + "attn_output.weight"].T
        h = rms(x, W[p + "ffn_norm.weight"], eps)
        g = h @ W[p + "ffn_gate.weight"].T; u = h @ W[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "ffn_down.weight"].T
    x = rms(x, W["output_norm.weight"], eps)
    head = W.get("output.weight", W["token_embd.weight"])
    return x @ head.T

def greedy(W, cfg, ids, steps):
    """`steps` greedy tokens after `ids`, and the margin between the best two logits at each."""
    ids = list(ids); out = []; margins = []
    for _ in range(steps):
        l = forward(W, cfg, ids)[-1]
        t = int(np.argmax(l)); s = np.sort(l)
        out.append(t); margins.append(float(s[-1] - s[-2])); ids.append(t)
    return out, margins

if __name__ == "__main__":
    W, cfg = load(sys.argv[1])
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    ids = [int(x) for x in sys.argv[2].split(",")]
    toks, m = greedy(W, cfg, ids, int(sys.argv[3]) if len(sys.argv) > 3 else 32)
    print(toks); print("min margin", min(m))
