#!/usr/bin/env python3
"""Decode and prefill tok/s of `rlx generate` and llama.cpp (llama-cpp-python) side by side on one
GGUF file, same threads, alternating rounds.

  python3 tools/tiny_llm.py --bench /tmp/bench-llama-q4_k_m.gguf   # random Llama-shaped Q4_K_M
  cargo build --release -p rlx-cli
  python3 tools/llm_decode_bench.py /tmp/bench-llama-q4_k_m.gguf --threads 2 --runs 3 --prefill 64 128

Decode: both run a 16-token prompt (or `--context N` tokens), then 64 one-token decode steps with
the same KV cache dtype (`--kv-dtype`, default f16: both sides' default); the figure is the median
over runs of decode steps per second. Prefill (`--prefill N ...`): one prompt of N tokens in one
batch (llama.cpp: n_batch = n_ubatch = N), prompt tokens per second. `--flash-attn` turns on
llama.cpp's flash attention (off by default, as in llama-cpp-python).
"""
import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = [1] + list(range(300, 315))
RLX = os.environ.get("RLX_BIN", str(ROOT / "target/release/rlx"))
# The KV cache dtype of both sides (--kv-dtype) and llama.cpp's flash attention (--flash-attn).
KV = {"kv": "f16", "fa": False}
GGML_TYPE = {"f32": 0, "f16": 1, "bf16": 30}


def prompt(context):
    """The decode runs' prompt: the 16 fixed tokens, or `context` tokens (a long cache to attend to)."""
    return PROMPT if context <= len(PROMPT) else [1 + (300 + i) % 30000 for i in range(context)]


def rlx(model, threads, n, context=0):
    exe = RLX
    ids = ",".join(map(str, prompt(context)))
    out = subprocess.run([str(exe), "generate", "--threads", str(threads), "--model", model, "--prompt-ids", ids,
                          "--max-tokens", str(n + 1), "--temperature", "0", "--ignore-eos", "--json", "--kv-dtype", KV["kv"]],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["decode_tok_s"]


def rlx_prefill(model, threads, n):
    exe = RLX
    ids = ",".join(str(1 + (300 + i) % 30000) for i in range(n))
    out = subprocess.run([str(exe), "generate", "--threads", str(threads), "--model", model, "--prompt-ids", ids,
                          "--max-tokens", "1", "--temperature", "0", "--ignore-eos", "--json", "--kv-dtype", KV["kv"]],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["prefill_tok_s"]


def llama_cpp_prefill(model, threads, n):
    from llama_cpp import Llama
    llm = Llama(model_path=model, n_ctx=n + 8, n_batch=n, n_ubatch=n, n_threads=threads,
                n_threads_batch=threads, verbose=False, type_k=GGML_TYPE[KV["kv"]], type_v=GGML_TYPE[KV["kv"]],
                flash_attn=KV["fa"])
    ids = [1 + (300 + i) % 30000 for i in range(n)]
    t0 = time.perf_counter()
    llm.eval(ids)
    return n / (time.perf_counter() - t0)


def llama_cpp(model, threads, n, context=0):
    from llama_cpp import Llama
    ids = prompt(context)
    llm = Llama(model_path=model, n_ctx=len(ids) + n + 8, n_batch=512, n_threads=threads,
                n_threads_batch=threads, verbose=False, type_k=GGML_TYPE[KV["kv"]], type_v=GGML_TYPE[KV["kv"]],
                flash_attn=KV["fa"])
    llm.eval(ids)
    t0 = time.perf_counter()
    for i in range(n):
        llm.eval([300 + i % 10])
    return n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prefill", type=int, nargs="*", default=[], help="prompt lengths for prefill tok/s")
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--context", type=int, default=0,
                    help="decode after a prompt of this many tokens (default: the 16-token prompt)")
    ap.add_argument("--kv-dtype", choices=sorted(GGML_TYPE), default="f16", help="KV cache dtype of both sides")
    ap.add_argument("--flash-attn", action="store_true", help="llama.cpp's flash attention on")
    a = ap.parse_args()
    KV.update(kv=a.kv_dtype, fa=a.flash_attn)
    print(f"load before: {os.getloadavg()}; KV cache {a.kv_dtype}, llama.cpp flash attention {a.flash_attn}")
    for n in a.prefill:
        r, l = [], []
        for _ in range(a.runs):
            r.append(rlx_prefill(a.model, a.threads, n))
            l.append(llama_cpp_prefill(a.model, a.threads, n))
        mr, ml = statistics.median(r), statistics.median(l)
        print(f"prefill {n:4d} tokens: rlx {mr:8.2f} tok/s (runs {', '.join(f'{x:.1f}' for x in r)})  "
              f"llama.cpp {ml:8.2f} tok/s (runs {', '.join(f'{x:.1f}' for x in l)})  rlx / llama.cpp: {mr / ml:.2f}")
    if a.no_decode:
        print(f"load after: {os.getloadavg()}")
        return
    r, l = [], []
    for _ in range(a.runs):
        r.append(rlx(a.model, a.threads, a.tokens, a.context))
        l.append(llama_cpp(a.model, a.threads, a.tokens, a.context))
    mr, ml = statistics.median(r), statistics.median(l)
    print(f"load: {os.getloadavg()}")
    print(f"rlx decode tok/s:       {mr:.2f}  (runs {', '.join(f'{x:.2f}' for x in r)})")
    print(f"llama.cpp decode tok/s: {ml:.2f}  (runs {', '.join(f'{x:.2f}' for x in l)})")
    print(f"rlx / llama.cpp: {mr / ml:.2f}")


if __name__ == "__main__":
    main()
