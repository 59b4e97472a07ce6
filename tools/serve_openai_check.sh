#!/usr/bin/env bash
# Starts `rlx serve` on a free port with the tiny Qwen3 fixture, runs the official openai
# client against it (tools/openai_client_check.py), then stops it with SIGTERM and checks that
# it exits 0. Usage: tools/serve_openai_check.sh [path/to/rlx]
set -euo pipefail
rlx="${1:-target/debug/rlx}"
log=$(mktemp)
"$rlx" serve --model crates/rlx-models/tests/fixtures/llm/qwen3-f16.gguf --port 0 --ctx 128 2>"$log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
url=""
for _ in $(seq 600); do
    url=$(sed -n 's/^rlx serve: listening on \(http:.*\)$/\1/p' "$log")
    [ -n "$url" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "serve check: the server exited" >&2; exit 1; }
    sleep 0.1
done
[ -n "$url" ] || { cat "$log" >&2; echo "serve check: no listening line" >&2; exit 1; }
python3 tools/openai_client_check.py "$url/v1"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 0 ] || { cat "$log" >&2; echo "serve check: exit status $rc after SIGTERM" >&2; exit 1; }
echo "serve check: SIGTERM, exit 0"
