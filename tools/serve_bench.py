#!/usr/bin/env python3
"""Throughput of `rlx serve` and llama.cpp's `llama-server` side by side under concurrent clients.

  python3 tools/tiny_llm.py --bench /tmp/bench-llama-q4_k_m.gguf     # random Llama-shaped Q4_K_M
  cargo build --release -p rlx-cli
  python3 tools/serve_bench.py /tmp/bench-llama-q4_k_m.gguf --llama-server PATH/llama-server \
      --clients 1 4 8 16 --threads 2 --rounds 3

For each client count C both servers start with C sequence slots (`rlx serve --max-batch C`,
`llama-server -np C --cont-batching`, each slot the same context, f16 KV cache on both), then C
client threads each send `--requests` streamed completions of `--prompt-tokens` token ids and
`--max-tokens` new tokens (greedy, `ignore_eos`), all at once. The figures: generated tokens per
second over the wall time of the round, time to first token and the gaps between streamed chunks
(inter-token latency), p50 and p99 over the round's requests; medians over rounds, the servers'
rounds interleaved.
"""
import argparse
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_health(url, proc, secs=300):
    t0 = time.time()
    while time.time() - t0 < secs:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} did not become healthy in {secs} s")


def start_rlx(args, clients, ctx):
    cmd = [args.rlx, "serve", "--model", args.model, "--port", "0", "--threads", str(args.threads),
           "--max-batch", str(clients), "--ctx", str(ctx)]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            # Keep draining stderr so the server never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, m.group(1)
    raise SystemExit(f"rlx serve exited: {p.wait()}")


def start_llama(args, clients, ctx, port):
    cmd = [args.llama_server, "-m", args.model, "--host", "127.0.0.1", "--port", str(port), "-t", str(args.threads),
           "-tb", str(args.threads), "-np", str(clients), "-c", str(ctx * clients), "--cont-batching",
           "-ctk", "f16", "-ctv", "f16", "--no-webui"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_health(url, p)
    return p, url


def stream(url, body, timeout=600):
    """POSTs a streamed completion; returns (arrival time of each chunk, completion tokens or None)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise SystemExit(f"{url}: HTTP {r.status}: {r.read()[:300]!r}")
    times, usage = [], None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("usage"):
            usage = chunk["usage"]["completion_tokens"]
        if chunk.get("choices"):
            times.append(time.perf_counter())
    conn.close()
    return times, usage


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def load(url, clients, args, seed):
    """One round: `clients` threads, `--requests` streamed completions each, all at once. Returns
    aggregate tok/s, TTFT p50 / p99 (s), inter-token latency p50 / p99 (ms), tokens."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(300, 30000) for _ in range(args.prompt_tokens)] for _ in range(clients * args.requests)]
    tokens, ttft, itl = [0] * len(prompts), [0.0] * len(prompts), [[] for _ in prompts]
    barrier = threading.Barrier(clients + 1)

    def client(c):
        barrier.wait()
        for r in range(args.requests):
            i = c * args.requests + r
            t0 = time.perf_counter()
            body = {"prompt": prompts[i], "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True,
                    "stream": True, "stream_options": {"include_usage": True}}
            times, usage = stream(url, body)
            ttft[i] = times[0] - t0 if times else float("nan")
            itl[i] = [b - a for a, b in zip(times, times[1:])]
            # A chunk may carry more than one token (text held back at a partial UTF-8 sequence):
            # the count is the server's usage, or max_tokens (ignore_eos) when it sends none.
            tokens[i] = usage if usage is not None else args.max_tokens

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    gaps = [g for v in itl for g in v]
    return (sum(tokens) / wall, pct(ttft, 0.5), pct(ttft, 0.99), 1e3 * pct(gaps, 0.5), 1e3 * pct(gaps, 0.99),
            sum(tokens))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--rlx", default=os.environ.get("RLX_BIN", str(ROOT / "target/release/rlx")))
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8, 16])
    ap.add_argument("--requests", type=int, default=2, help="requests per client per round")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    ctx = args.prompt_tokens + args.max_tokens + 16
    rows = []
    for clients in args.clients:
        rp, rurl = start_rlx(args, clients, ctx)
        lp, lurl = start_llama(args, clients, ctx, 18080 + clients)
        try:
            # One warm-up request each (page faults, lazy allocations).
            for url in (rurl, lurl):
                post(url + "/v1/completions", {"prompt": [300, 301], "max_tokens": 4, "temperature": 0})
            res = {"rlx": [], "llama.cpp": []}
            for r in range(args.rounds):
                for name, url in (("rlx", rurl), ("llama.cpp", lurl)) if r % 2 == 0 else (("llama.cpp", lurl), ("rlx", rurl)):
                    res[name].append(load(url, clients, args, seed=r))
                    t = res[name][-1]
                    print(f"  {clients} clients round {r} {name}: {t[0]:.1f} tok/s, TTFT p50 {t[1]:.2f} s, "
                          f"ITL p50 {t[3]:.1f} ms ({t[5]} tokens)", flush=True)
        finally:
            for p in (rp, lp):
                p.terminate()
                p.wait(timeout=30)
        med = {k: [statistics.median(x[j] for x in v) for j in range(5)] for k, v in res.items()}
        rows.append((clients, med))
    print(f"\nmodel {args.model}, {args.threads} threads, prompt {args.prompt_tokens} + {args.max_tokens} new tokens, "
          f"{args.requests} streamed requests per client, median of {args.rounds} rounds")
    print("| streams | rlx tok/s | llama.cpp tok/s | ratio | rlx TTFT p50 / p99 s | llama.cpp TTFT p50 / p99 s "
          "| rlx ITL p50 / p99 ms | llama.cpp ITL p50 / p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for clients, m in rows:
        r, l = m["rlx"], m["llama.cpp"]
        print(f"| {clients} | {r[0]:.1f} | {l[0]:.1f} | {r[0] / l[0]:.2f}x | {r[1]:.2f} / {r[2]:.2f} | "
              f"{l[1]:.2f} / {l[2]:.2f} | {r[3]:.1f} / {r[4]:.1f} | {l[3]:.1f} / {l[4]:.1f} |")


if __name__ == "__main__":
    main()
