#!/usr/bin/env python3
"""Makes the tiny Hugging Face checkpoint fixtures of crates/rlx-models/tests/llm_hf.rs and their
references (pip install numpy safetensors gguf tokenizers jinja2; no torch).

Writes, under crates/rlx-models/tests/fixtures/hf/:
  {qwen3,llama}-bf16/         HF folders: config.json, two shards model-0000N-of-00002.safetensors
                              with model.safetensors.index.json, tokenizer.json (a byte-level BPE
                              trained here with the `tokenizers` package: Qwen2's / Llama 3's
                              pre-tokenizer regex and special tokens), tokenizer_config.json with
                              a chat_template, generation_config.json. hidden 64, 2 layers, 4 heads,
                              2 KV heads, head dim 16, ffn 64, vocabulary 304 (the tokenizer's ~300
                              padded, as HF checkpoints pad theirs). The weights are drawn, then
                              rounded to bf16, so that an F32 copy of a folder (llm_hf.rs widens
                              the shards into a temp dir rather than committing twice the bytes)
                              holds the same values and shares the references. Qwen3 ties the LM head to the embedding (no lm_head.weight), Llama not.
  {qwen3,llama}-bf16.gguf     the bf16 folder converted as llama.cpp's convert_hf_to_gguf.py does:
                              BF16 matrices, F32 norms, Llama's q_proj/k_proj rows permuted to the
                              adjacent-pair RoPE order, the BPE vocabulary as tokenizer.ggml.*
  {qwen3,llama}.json          references: the prompt and its ids (the `tokenizers` package's), logits
                              of every prompt position from an f64 numpy forward written from HF's
                              modeling code (Qwen3: q_norm / k_norm per head before RoPE; Llama: none;
                              rotate_half RoPE), 16 greedy f64 tokens and their margins, a chat
                              rendered by jinja2 from the chat template and its ids; for Llama also
                              the logits with a `llama3` rope_scaling (the test writes that config).
`hf_tiny_llm.py --big DIR` instead writes a bigger f32 Llama folder (~330 MB, for
examples/hf_memory.rs; not committed); `--big-bf16 DIR` the same model in bf16 (~165 MB).
"""
import json
import sys
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from qwen3_numpy import rms  # noqa: E402
from tiny_llm import CORPUS, PROMPT  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "crates/rlx-models/tests/fixtures/hf"
VOCAB = 304
GREEDY = 16
QWEN2_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA3_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3_CHAT = ("{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n'"
               " + m['content'] | trim + '<|eot_id|>' }}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello world, the tiny model"}]
ARCH = {
    "qwen3": dict(regex=QWEN2_RE, pre="qwen2", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                  bos=None, eos="<|im_end|>", gen_eos=["<|im_end|>", "<|endoftext|>"], chat=CHATML,
                  theta=1000000.0, eps=1e-6, tied=True, seed=11),
    "llama": dict(regex=LLAMA3_RE, pre="llama-bpe", specials=["<|begin_of_text|>", "<|end_of_text|>",
                  "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], bos="<|begin_of_text|>",
                  eos="<|eot_id|>", gen_eos=["<|end_of_text|>", "<|eot_id|>"], chat=LLAMA3_CHAT,
                  theta=500000.0, eps=1e-5, tied=False, seed=12),
}
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 64}


def make_tokenizer(a, n_bpe=296):
    """A byte-level BPE trained on tiny_llm's corpus, with the architecture's regex and specials."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(a["regex"]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=n_bpe, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([CORPUS], trainer)
    tok.add_special_tokens(a["specials"])
    if a["bos"]:
        bos = a["bos"]
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, tok.token_to_id(bos))])
    return tok


def bf16_round(x):
    """float32 values rounded (to nearest even) to bf16, as float32, and their bf16 bits."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32), bits


def weights(cfg, seed, tied):
    """HF-named weights (float32 values that bf16 holds exactly), scaled as tiny_llm.py's."""
    rng = np.random.default_rng(seed)
    h, nh, kvh, hd, ffn, v = (cfg[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                                "head_dim", "intermediate_size", "vocab_size"))
    mat = lambda r, c, s=1.0: rng.standard_normal((r, c), dtype=np.float32) * (s / np.sqrt(c))
    norm = lambda n: 1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)
    W = {"model.embed_tokens.weight": 0.5 * rng.standard_normal((v, h), dtype=np.float32)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        W[p + "input_layernorm.weight"] = norm(h)
        W[p + "self_attn.q_proj.weight"] = mat(nh * hd, h, 2.0)
        W[p + "self_attn.k_proj.weight"] = mat(kvh * hd, h, 2.0)
        W[p + "self_attn.v_proj.weight"] = mat(kvh * hd, h)
        W[p + "self_attn.o_proj.weight"] = mat(h, nh * hd, 3.0)
        if cfg["model_type"] == "qwen3":
            W[p + "self_attn.q_norm.weight"] = norm(hd)
            W[p + "self_attn.k_norm.weight"] = norm(hd)
        W[p + "post_attention_layernorm.weight"] = norm(h)
        W[p + "mlp.gate_proj.weight"] = mat(ffn, h)
        W[p + "mlp.up_proj.weight"] = mat(ffn, h)
        W[p + "mlp.down_proj.weight"] = mat(h, ffn, 3.0)
    W["model.norm.weight"] = norm(h)
    if not tied:
        W["lm_head.weight"] = mat(v, h, 4.0)
    return {k: bf16_round(x)[0] for k, x in W.items()}


def write_safetensors(path, tensors, bf16):
    """A safetensors file written by hand (numpy has no bf16 dtype): 8-byte header length,
    JSON header padded to 8 bytes, then the data in header order."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, x in tensors.items():
        data = bf16_round(x)[1].tobytes() if bf16 else np.ascontiguousarray(x, np.float32).tobytes()
        header[name] = {"dtype": "BF16" if bf16 else "F32", "shape": list(x.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def write_folder(d, cfg, W, tok, a, bf16):
    d.mkdir(parents=True, exist_ok=True)
    cfg = dict(cfg, torch_dtype="bfloat16" if bf16 else "float32")
    (d / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    names = list(W)
    split = names.index("model.layers.1.input_layernorm.weight")
    shards = {"model-00001-of-00002.safetensors": names[:split], "model-00002-of-00002.safetensors": names[split:]}
    weight_map, total = {}, 0
    for f, ns in shards.items():
        write_safetensors(d / f, {n: W[n] for n in ns}, bf16)
        weight_map.update({n: f for n in ns})
        total += sum(W[n].size * (2 if bf16 else 4) for n in ns)
        if not bf16:  # the safetensors package reads back what was written by hand
            back = load_file(d / f)
            assert all(np.array_equal(back[n], W[n]) for n in ns)
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1) + "\n")
    tok.save(str(d / "tokenizer.json"))
    tc = {"model_max_length": cfg["max_position_embeddings"], "eos_token": a["eos"], "chat_template": a["chat"],
          "tokenizer_class": "PreTrainedTokenizerFast"}
    if a["bos"]:
        tc["bos_token"] = a["bos"]
    (d / "tokenizer_config.json").write_text(json.dumps(tc, indent=1) + "\n")
    gen = {"eos_token_id": [tok.token_to_id(t) for t in a["gen_eos"]]}
    if a["bos"]:
        gen["bos_token_id"] = tok.token_to_id(a["bos"])
    (d / "generation_config.json").write_text(json.dumps(gen, indent=1) + "\n")


def inv_freq(cfg):
    """HF's RoPE inverse frequencies, with `rope_scaling` applied (`_compute_llama3_parameters`)."""
    hd = cfg["head_dim"]
    inv = cfg["rope_theta"] ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    s = cfg.get("rope_scaling")
    if not s:
        return inv
    f, lo, hi, old = s["factor"], s["low_freq_factor"], s["high_freq_factor"], s["original_max_position_embeddings"]
    wavelen = 2 * np.pi / inv
    scaled = np.where(wavelen > old / lo, inv / f, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
    return np.where(medium, (1 - smooth) * scaled / f + smooth * scaled, scaled)


def rope(x, pos, inv):
    """HF's `q * cos + rotate_half(q) * sin` over x [n, heads, d]."""
    half = x.shape[-1] // 2
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * c - b * s, b * c + a * s], -1)


def forward(W, cfg, ids):
    """f64 logits [n, vocab] of every position, from HF's Qwen3 / Llama modeling equations."""
    W = {k: v.astype(np.float64) for k, v in W.items()}
    n, nh, kvh, hd, eps = len(ids), cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["rms_norm_eps"]
    inv, pos = inv_freq(cfg), np.arange(n, dtype=np.float64)
    mask = np.triu(np.full((n, n), -np.inf), 1)
    x = W["model.embed_tokens.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, W[p + "input_layernorm.weight"], eps)
        q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(n, nh, hd)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(n, kvh, hd)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(n, kvh, hd)
        if cfg["model_type"] == "qwen3":
            q, k = rms(q, W[p + "self_attn.q_norm.weight"], eps), rms(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k = rope(q, pos, inv), rope(k, pos, inv)
        k, v = np.repeat(k, nh // kvh, axis=1), np.repeat(v, nh // kvh, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        x = x + np.einsum("hqk,khd->qhd", s, v).reshape(n, nh * hd) @ W[p + "self_attn.o_proj.weight"].T
        h = rms(x, W[p + "post_attention_layernorm.weight"], eps)
        g, u = h @ W[p + "mlp.gate_proj.weight"].T, h @ W[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "mlp.down_proj.weight"].T
    x = rms(x, W["model.norm.weight"], eps)
    return x @ W.get("lm_head.weight", W["model.embed_tokens.weight"]).T


def greedy(W, cfg, ids, steps):
    ids, out, margins = list(ids), [], []
    for _ in range(steps):
        l = forward(W, cfg, ids)[-1]
        t, s = int(np.argmax(l)), np.sort(l)
        out.append(t)
        margins.append(float(s[-1] - s[-2]))
        ids.append(t)
    return out, margins


def permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py's LlamaModel.permute: HF's rotate-half q/k rows to adjacent pairs."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
              "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
              "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
              "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def gguf_name(n):
    if n == "model.embed_tokens.weight":
        return "token_embd.weight"
    if n == "model.norm.weight":
        return "output_norm.weight"
    if n == "lm_head.weight":
        return "output.weight"
    _, _, l, rest = n.split(".", 3)
    return f"blk.{l}.{GGUF_NAMES[rest.removesuffix('.weight')]}.weight"


def write_gguf(path, arch, cfg, W, tok, a):
    """The bf16 checkpoint as convert_hf_to_gguf.py writes it (BF16 matrices, F32 vectors)."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{arch}-hf")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [f"[PAD{i}]" for i in range(cfg["vocab_size"])]
    types = [gguf.TokenType.UNUSED] * cfg["vocab_size"]
    for t, i in vocab.items():
        tokens[i] = t
        types[i] = gguf.TokenType.CONTROL if t in a["specials"] else gguf.TokenType.NORMAL
    merges = json.loads(tok.to_str())["model"]["merges"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(a["pre"])
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_eos_token_id(tok.token_to_id(a["eos"]))
    if a["bos"]:
        w.add_bos_token_id(tok.token_to_id(a["bos"]))
    w.add_add_bos_token(bool(a["bos"]))
    w.add_chat_template(a["chat"])
    nh, kvh = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    for n, x in W.items():
        if arch == "llama" and n.endswith("q_proj.weight"):
            x = permute(x, nh, nh)
        elif arch == "llama" and n.endswith("k_proj.weight"):
            x = permute(x, nh, kvh)
        if x.ndim == 1:
            w.add_tensor(gguf_name(n), x.astype(np.float32))
        else:
            q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.BF16)
            w.add_tensor(gguf_name(n), q, raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def config(arch, a, vocab=VOCAB, hidden=64, layers=2, heads=4, kv=2, ffn=64):
    cfg = {"architectures": ["Qwen3ForCausalLM" if arch == "qwen3" else "LlamaForCausalLM"], "model_type": arch,
           "hidden_size": hidden, "intermediate_size": ffn, "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hidden // heads,
           "hidden_act": "silu", "rms_norm_eps": a["eps"], "rope_theta": a["theta"], "rope_scaling": None,
           "max_position_embeddings": 256, "tie_word_embeddings": a["tied"], "vocab_size": vocab,
           "attention_bias": False}
    if arch == "qwen3":
        cfg["use_sliding_window"] = False
    else:
        cfg["mlp_bias"] = False
    return cfg


def main():
    import jinja2
    if len(sys.argv) == 3 and sys.argv[1] in ("--big", "--big-bf16"):
        a = ARCH["llama"]
        cfg = config("llama", a, vocab=32000, hidden=768, layers=6, heads=12, kv=4, ffn=2048)
        bf16 = sys.argv[1] == "--big-bf16"
        write_folder(Path(sys.argv[2]), cfg, weights(cfg, 7, False), make_tokenizer(a), a, bf16=bf16)
        print(f"wrote {sys.argv[2]}")
        return
    OUT.mkdir(parents=True, exist_ok=True)
    for arch, a in ARCH.items():
        cfg = config(arch, a)
        tok = make_tokenizer(a)
        assert tok.get_vocab_size(with_added_tokens=True) <= VOCAB
        W = weights(cfg, a["seed"], a["tied"])
        write_folder(OUT / f"{arch}-bf16", cfg, W, tok, a, bf16=True)
        write_gguf(OUT / f"{arch}-bf16.gguf", arch, cfg, W, tok, a)
        ids = tok.encode(PROMPT).ids
        toks, margins = greedy(W, cfg, ids, GREEDY)
        chat = jinja2.Template(a["chat"]).render(messages=MESSAGES, add_generation_prompt=True,
                                                 bos_token=a["bos"] or "")
        ref = {"prompt": PROMPT, "prompt_ids": ids, "vocab": VOCAB,
               "logits": [round(float(x), 7) for x in forward(W, cfg, ids).ravel()],
               "greedy": toks, "greedy_margins": [round(m, 4) for m in margins],
               "chat": chat, "chat_ids": tok.encode(chat, add_special_tokens=False).ids,
               "stop_ids": [tok.token_to_id(t) for t in [a["eos"]] + [e for e in a["gen_eos"] if e != a["eos"]]]}
        if arch == "llama":
            scaled = dict(cfg, rope_scaling=LLAMA3_SCALING)
            ref["rope_scaling"] = LLAMA3_SCALING
            ref["rope_scaling_logits"] = [round(float(x), 7) for x in forward(W, scaled, ids).ravel()]
        (OUT / f"{arch}.json").write_text(json.dumps(ref) + "\n")
        print(f"{arch}: prompt {ids}, greedy {toks}, smallest margin {min(margins):.3f}")
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"{OUT}: {total} bytes")


if __name__ == "__main__":
    main()
