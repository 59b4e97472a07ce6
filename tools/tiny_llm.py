#!/usr/bin/env python3
"""Makes the tiny Qwen3 and Llama GGUF fixtures of crates/rlx-models/tests (llm_*.rs) and their
llama.cpp reference outputs (pip install gguf numpy llama-cpp-python).

Writes, under crates/rlx-models/tests/fixtures/llm/:
  {arch}-f16.gguf, {arch}-q8_0.gguf   hidden 64, 2 layers, 4 heads, 2 kv heads; random weights,
                                      real architecture metadata, a small BPE vocab (gpt2 style for
                                      qwen3, SentencePiece style for llama)
  qwen3k-q4_k_m.gguf                  hidden 256, 1 layer (k-quants need rows of 256)
  {name}.json                         per model file: the prompt ids, llama.cpp's logits for every
                                      prompt position (`logits`, row-major [n, vocab]) and 32 greedy
                                      tokens; `{arch}-f32` entries are for the F16 weights read as F32
  tokenizer.json                      llama.cpp's tokenize / detokenize of fixture strings
On a CPU with AMX, build llama-cpp-python without ggml's AMX kernels, which crashed (SIGSEGV in
ggml_backend_amx_mul_mat) on the --q8-wide model:
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_BF16=OFF" pip install llama-cpp-python
The F32 reference runs llama.cpp on an F32 copy of the F16 file (written to a temp dir, not
committed): the tests read the F16 file, whose weights are exactly those values.

`tiny_llm.py --long-reference` writes only qwen3k-q4_k_m-long.json and qwen3-f32-long.json: the
committed models with a 56-token prompt (the batched prefill kernels, two attention query blocks).
`tiny_llm.py --f16-cache-reference` writes only qwen3-f32-long-kvf16.json: the same F32 Qwen3
run with llama.cpp's default f16 KV cache.
`tiny_llm.py --q8-wide` writes only qwen3w-q8_0.gguf and qwen3w-q8_0{,-long}.json: a Qwen3 of
hidden 128 (4 heads, 2 KV heads of dim 32), ffn 384, 4 layers and a vocabulary of 512, quantized
to Q8_0 throughout by llama.cpp (the token embedding too, tied as the LM head), with llama.cpp's
logits and greedy tokens (f32 cache) for the 9-token prompt and a 40-token one, and the same from
an f64 numpy forward over the dequantized weights (qwen3_numpy.py) as `f64_logits`, `f64_greedy`.
The seed is the first from 11 whose 32 greedy tokens agree between the two references with a
margin of at least 0.1 at every step, so that the tests compare tokens, not rounding.
`tiny_llm.py --bench PATH` instead writes a bigger random Llama-shaped Q4_K_M file to PATH (for
the decode tok/s comparison; not committed).
"""
import ctypes
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import gguf

OUT = Path(__file__).resolve().parent.parent / "crates/rlx-models/tests/fixtures/llm"
CORPUS = ("the quick brown fox jumps over the lazy dog. a tiny model reads the text and the "
          "model writes the next token. hello world, hello rlx! ") * 4
PROMPT = "hello world, the tiny model"
TOKENIZE = ["hello world", "the quick brown fox", " leading space", "Hello, RLX! 123",
            "café naïve", "two  spaces\nnew line", "", "don't STOP, it's x=12345;", "emoji 🙂 ok",
            "tabs\tand\r\nCRLF   end  "]
GREEDY = 32


def bytes_to_unicode():
    """GPT-2's byte -> printable unicode map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def learn_merges(words, n):
    """Greedy BPE: the n most frequent adjacent pairs, merged in order."""
    seqs = [list(w) for w in words]
    merges = []
    for _ in range(n):
        counts = {}
        for s in seqs:
            for a, b in zip(s, s[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        (a, b), c = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        if c < 2:
            break
        merges.append((a, b))
        for s in seqs:
            i = 0
            while i < len(s) - 1:
                if s[i] == a and s[i + 1] == b:
                    s[i:i + 2] = [a + b]
                i += 1
    return merges


def gpt2_vocab(n_merges, pad_to=0):
    """Byte-level BPE vocab: 256 byte symbols, learned merges, `<|extra_i|>` control tokens up to
    `pad_to` entries in all, then Qwen's special tokens."""
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    words = ["".join(b2u[c] for c in (" " + w if i else w).encode()) for i, w in enumerate(CORPUS.split(" "))]
    merges = learn_merges(words, n_merges)
    tokens += [a + b for a, b in merges]
    types = [1] * len(tokens)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    extra = max(0, pad_to - len(tokens) - len(specials))
    tokens += [f"<|extra_{i}|>" for i in range(extra)]
    types += [3] * extra
    tokens += specials
    types += [3] * len(specials)
    return tokens, types, [f"{a} {b}" for a, b in merges], len(tokens) - 1


def spm_vocab(n_pieces):
    """SentencePiece vocab: <unk> <s> </s>, 256 byte pieces, then pieces scored by frequency."""
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(6)
    words = ["▁" + w for w in CORPUS.split(" ") if w]
    merges = learn_merges(words, n_pieces)
    pieces = []
    for w in sorted({c for w in words for c in w}):
        pieces.append(w)
    for a, b in merges:
        if a + b not in pieces:
            pieces.append(a + b)
    for i, p in enumerate(pieces):
        tokens.append(p)
        scores.append(-float(i))
        types.append(1)
    return tokens, scores, types


def write_model(path, arch, hidden, layers, heads, kv_heads, ffn, seed, big=False, vocab=0):
    rng = np.random.default_rng(seed)
    hd = hidden // heads
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{arch}")
    w.add_block_count(layers)
    w.add_context_length(256 if not big else 4096)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-6 if arch == "qwen3" else 1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if arch == "qwen3":
        w.add_rope_freq_base(1000000.0)
        w.add_key_length(hd)
        w.add_value_length(hd)
        tokens, types, merges, eos = gpt2_vocab(40, vocab)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_eos_token_id(eos)
        w.add_bos_token_id(len(tokens) - 3)
        w.add_add_bos_token(False)
    else:
        w.add_rope_freq_base(10000.0)
        w.add_rope_dimension_count(hd)
        tokens, scores, types = spm_vocab(30)
        if big:
            # A Llama-2-sized vocabulary (32000) so that the LM head weighs what it does there.
            n = 32000 - len(tokens)
            tokens += [f"<extra_{i}>" for i in range(n)]
            scores += [-1000.0 - i for i in range(n)]
            types += [1] * n
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
    vocab = len(tokens)
    wdt = np.float16

    def mat(rows, cols, scale=1.0):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * (scale / np.sqrt(cols))).astype(wdt)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)

    # A small embedding next to larger layer outputs keeps greedy decoding from echoing its input.
    w.add_tensor("token_embd.weight", (0.5 * rng.standard_normal((vocab, hidden), dtype=np.float32)).astype(wdt))
    for l in range(layers):
        p = f"blk.{l}."
        w.add_tensor(p + "attn_norm.weight", norm(hidden))
        w.add_tensor(p + "attn_q.weight", mat(heads * hd, hidden, 2.0))
        w.add_tensor(p + "attn_k.weight", mat(kv_heads * hd, hidden, 2.0))
        w.add_tensor(p + "attn_v.weight", mat(kv_heads * hd, hidden))
        w.add_tensor(p + "attn_output.weight", mat(hidden, heads * hd, 3.0))
        if arch == "qwen3":
            w.add_tensor(p + "attn_q_norm.weight", norm(hd))
            w.add_tensor(p + "attn_k_norm.weight", norm(hd))
        w.add_tensor(p + "ffn_norm.weight", norm(hidden))
        w.add_tensor(p + "ffn_gate.weight", mat(ffn, hidden))
        w.add_tensor(p + "ffn_up.weight", mat(ffn, hidden))
        w.add_tensor(p + "ffn_down.weight", mat(hidden, ffn, 3.0))
    w.add_tensor("output_norm.weight", norm(hidden))
    # Qwen3 ties the LM head to token_embd (no output.weight, as Qwen3-0.6B); Llama has its own.
    if arch == "llama":
        w.add_tensor("output.weight", mat(vocab, hidden, 4.0))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def to_f32(src, dst):
    """Copies a GGUF file with every F16 tensor widened to F32 (same values)."""
    r = gguf.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == "general.file_type":
            w.add_uint32(name, int(gguf.LlamaFileType.ALL_F32))
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_array(name, f.contents())
        elif vt == gguf.GGUFValueType.STRING:
            w.add_string(name, f.contents())
        else:
            w.add_key_value(name, f.contents(), vt)
    for t in r.tensors:
        shape = list(reversed([int(d) for d in t.shape]))
        w.add_tensor(t.name, np.asarray(t.data, dtype=np.float32).reshape(shape))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantize(src, dst, ftype):
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 1
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise SystemExit(f"llama_model_quantize({src} -> {dst}) failed: {rc}")


def load(path, kv_type=0):
    from llama_cpp import Llama
    # F32 KV cache (kv_type 0) and no flash attention: the cache then holds exactly the computed
    # K and V; kv_type 1 keeps it in f16, llama.cpp's default.
    return Llama(model_path=str(path), n_ctx=128, n_batch=128, n_threads=1, logits_all=True, verbose=False,
                 type_k=kv_type, type_v=kv_type, flash_attn=False)


def reference(path, prompt_ids, kv_type=0):
    llm = load(path, kv_type)
    llm.reset()
    llm.eval(prompt_ids)
    logits = np.array(llm.scores[: len(prompt_ids)], dtype=np.float32)
    vocab = logits.shape[1]
    tokens = []
    last = logits[-1]
    for _ in range(GREEDY):
        t = int(np.argmax(last))
        tokens.append(t)
        llm.eval([t])
        last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    # The margin between the best and second-best logit at each greedy step (how robust the test is).
    return {"prompt_ids": prompt_ids, "vocab": vocab, "logits": [round(float(x), 7) for x in logits.ravel()],
            "greedy": tokens}


def tokenizer_ref(path):
    llm = load(path)
    out = []
    for s in TOKENIZE + [PROMPT]:
        ids = llm.tokenize(s.encode(), add_bos=True, special=False)
        out.append({"text": s, "ids": ids, "detok": llm.detokenize(ids).decode("utf-8", "replace")})
    return out


def long_reference():
    """qwen3k-q4_k_m-long.json and qwen3-f32-long.json: the committed Q4_K_M and (as F32) F16
    Qwen3 models with a 56-token prompt, long enough for the batched prefill paths (AMX from 16
    rows) and for two query blocks in attention (48 rows each), which the 9-token prompt never
    reaches."""
    with tempfile.TemporaryDirectory() as d:
        f32 = Path(d) / "qwen3-f32.gguf"
        to_f32(OUT / "qwen3-f16.gguf", f32)
        for name, path in [("qwen3k-q4_k_m-long", OUT / "qwen3k-q4_k_m.gguf"), ("qwen3-f32-long", f32)]:
            vocab = load(path).n_vocab()
            ids = [1] + [(7 * i + 3) % (vocab - 10) + 5 for i in range(55)]
            (OUT / f"{name}.json").write_text(json.dumps(reference(path, ids)) + "\n")
            print(f"wrote {OUT / (name + '.json')}")


def f16_cache_reference():
    """qwen3-f32-long-kvf16.json: the 56-token prompt of qwen3-f32-long through the F32 copy of
    the F16 Qwen3 model, with llama.cpp's default f16 KV cache."""
    with tempfile.TemporaryDirectory() as d:
        f32 = Path(d) / "qwen3-f32.gguf"
        to_f32(OUT / "qwen3-f16.gguf", f32)
        vocab = load(f32).n_vocab()
        ids = [1] + [(7 * i + 3) % (vocab - 10) + 5 for i in range(55)]
        out = OUT / "qwen3-f32-long-kvf16.json"
        out.write_text(json.dumps(reference(f32, ids, kv_type=1)) + "\n")
        print(f"wrote {out}")


def q8_wide():
    import qwen3_numpy
    with tempfile.TemporaryDirectory() as d:
        for seed in range(11, 60):
            f16, f32, q8 = Path(d) / "w-f16.gguf", Path(d) / "w-f32.gguf", Path(d) / "w-q8_0.gguf"
            write_model(f16, "qwen3", 128, 4, 4, 2, 384, seed, vocab=512)
            to_f32(f16, f32)
            quantize(f32, q8, 7)  # LLAMA_FTYPE_MOSTLY_Q8_0
            W, cfg = qwen3_numpy.load(q8)
            short = load(q8).tokenize(PROMPT.encode(), add_bos=True, special=False)
            long = [(7 * i + 3) % 500 + 5 for i in range(40)]
            refs = {}
            for name, ids in [("qwen3w-q8_0", short), ("qwen3w-q8_0-long", long)]:
                r = reference(q8, ids)
                toks, margins = qwen3_numpy.greedy(W, cfg, ids, GREEDY)
                if toks != r["greedy"] or min(margins) < 0.1:
                    print(f"seed {seed}: {name} references disagree or margin {min(margins):.3f} < 0.1")
                    break
                r["f64_logits"] = [round(float(x), 5) for x in qwen3_numpy.forward(W, cfg, ids).ravel()]
                r["f64_greedy"] = toks
                refs[name] = r
            else:
                (OUT / "qwen3w-q8_0.gguf").write_bytes(q8.read_bytes())
                for name, r in refs.items():
                    (OUT / f"{name}.json").write_text(json.dumps(r) + "\n")
                print(f"seed {seed}: wrote qwen3w-q8_0.gguf and its references")
                return
    raise SystemExit("no seed in 11..59 gave agreeing references")


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--q8-wide":
        return q8_wide()
    if len(sys.argv) == 2 and sys.argv[1] == "--long-reference":
        return long_reference()
    if len(sys.argv) == 2 and sys.argv[1] == "--f16-cache-reference":
        return f16_cache_reference()
    if len(sys.argv) == 3 and sys.argv[1] == "--bench":
        dst = Path(sys.argv[2])
        with tempfile.TemporaryDirectory() as d:
            f16 = Path(d) / "bench-f16.gguf"
            write_model(f16, "llama", 2048, 8, 32, 8, 5632, 7, big=True)
            quantize(f16, dst, 15)  # LLAMA_FTYPE_MOSTLY_Q4_K_M
        print(f"wrote {dst} ({dst.stat().st_size >> 20} MiB)")
        return
    OUT.mkdir(parents=True, exist_ok=True)
    toks = {}
    with tempfile.TemporaryDirectory() as d:
        for arch, seed in [("qwen3", 1), ("llama", 2)]:
            f16 = OUT / f"{arch}-f16.gguf"
            write_model(f16, arch, 64, 2, 4, 2, 64, seed)
            f32 = Path(d) / f"{arch}-f32.gguf"
            to_f32(f16, f32)
            quantize(f32, OUT / f"{arch}-q8_0.gguf", 7)  # LLAMA_FTYPE_MOSTLY_Q8_0
            ids = load(f16).tokenize(PROMPT.encode(), add_bos=True, special=False)
            for name, path in [(f"{arch}-f32", f32), (f"{arch}-f16", f16), (f"{arch}-q8_0", OUT / f"{arch}-q8_0.gguf")]:
                (OUT / f"{name}.json").write_text(json.dumps(reference(path, ids)) + "\n")
            toks[arch] = tokenizer_ref(f16)
        f16 = Path(d) / "qwen3k-f16.gguf"
        write_model(f16, "qwen3", 256, 1, 4, 2, 256, 3)
        quantize(f16, OUT / "qwen3k-q4_k_m.gguf", 15)  # LLAMA_FTYPE_MOSTLY_Q4_K_M
        ids = load(f16).tokenize(PROMPT.encode(), add_bos=True, special=False)
        (OUT / "qwen3k-q4_k_m.json").write_text(json.dumps(reference(OUT / "qwen3k-q4_k_m.gguf", ids)) + "\n")
    (OUT / "tokenizer.json").write_text(json.dumps(toks, ensure_ascii=False, indent=1) + "\n")
    for p in sorted(OUT.iterdir()):
        print(f"{p.name:24} {p.stat().st_size:8d} bytes")


if __name__ == "__main__":
    os.environ.setdefault("LLAMA_LOG_LEVEL", "error")
    main()
