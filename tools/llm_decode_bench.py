#!/usr/bin/env python3
"""Decode tok/s of `rlx generate` and llama.cpp (llama-cpp-python) side by side on one GGUF file.

  python3 tools/tiny_llm.py --bench /tmp/bench-llama-q4_k_m.gguf   # random Llama-shaped Q4_K_M
  cargo build --release -p rlx-cli
  python3 tools/llm_decode_bench.py /tmp/bench-llama-q4_k_m.gguf --threads 2 --runs 3

Both run a 16-token prompt, then 64 one-token decode steps with an F32 KV cache; the figure is
the median over runs (alternating rlx and llama.cpp) of decode steps per second.
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


def rlx(model, threads, n):
    exe = ROOT / "target/release/rlx"
    ids = ",".join(map(str, PROMPT))
    out = subprocess.run([str(exe), "generate", "--threads", str(threads), "--model", model, "--prompt-ids", ids,
                          "--max-tokens", str(n + 1), "--temperature", "0", "--ignore-eos", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["decode_tok_s"]


def llama_cpp(model, threads, n):
    from llama_cpp import Llama
    llm = Llama(model_path=model, n_ctx=len(PROMPT) + n + 8, n_batch=64, n_threads=threads,
                n_threads_batch=threads, verbose=False, type_k=0, type_v=0, flash_attn=False)
    llm.eval(PROMPT)
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
    a = ap.parse_args()
    r, l = [], []
    for _ in range(a.runs):
        r.append(rlx(a.model, a.threads, a.tokens))
        l.append(llama_cpp(a.model, a.threads, a.tokens))
    mr, ml = statistics.median(r), statistics.median(l)
    print(f"load: {os.getloadavg()}")
    print(f"rlx decode tok/s:       {mr:.2f}  (runs {', '.join(f'{x:.2f}' for x in r)})")
    print(f"llama.cpp decode tok/s: {ml:.2f}  (runs {', '.join(f'{x:.2f}' for x in l)})")
    print(f"rlx / llama.cpp: {mr / ml:.2f}")


if __name__ == "__main__":
    main()
