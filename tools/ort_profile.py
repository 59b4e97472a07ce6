"""ONNX Runtime's own per-operator profile of the MiniLM graph that `rlx-bench` runs.

Usage: python3 tools/ort_profile.py target/peers/bert_plain.onnx BATCH [RUNS] [--by-shape]
(`rlx-bench minilm` writes target/peers/bert_plain.onnx; needs onnxruntime and numpy).
`--by-shape` splits each operator type by its input shapes (the matmuls per weight shape).
Prints each operator type's time per run, its share and calls per run, with ORT_ENABLE_ALL and
2 intra-op threads, as `rlx-bench` configures ORT.
"""

import collections
import json
import os
import sys

import numpy as np
import onnxruntime as ort


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--by-shape"]
    by_shape = "--by-shape" in sys.argv
    model, batch = args[0], int(args[1])
    runs = int(args[2]) if len(args) > 2 else 30
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = 2
    so.enable_profiling = True
    so.profile_file_prefix = "/tmp/ort_profile"
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in sess.get_inputs():
        if "mask" in inp.name:
            feeds[inp.name] = np.ones((batch, 128), dtype=np.int64)
        elif "type" in inp.name:
            feeds[inp.name] = np.zeros((batch, 128), dtype=np.int64)
        else:
            feeds[inp.name] = rng.integers(1000, 2000, (batch, 128)).astype(np.int64)
    for _ in range(runs):
        sess.run(None, feeds)
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    time_us = collections.defaultdict(float)
    calls = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            op = e["args"].get("op_name", "?")
            if by_shape:
                shapes = [list(t.values())[0] for t in e["args"].get("input_type_shape", [])]
                op = f"{op} {shapes}"
            time_us[op] += e["dur"]
            calls[op] += 1
    total = sum(time_us.values())
    for op, us in sorted(time_us.items(), key=lambda x: -x[1]):
        print(f"{op:28s} {us / runs / 1000:8.2f} ms/run  {100 * us / total:5.1f}%  calls/run {calls[op] / runs:.0f}")
    print(f"total {total / runs / 1000:.2f} ms/run (kernel time, profiler on)")


if __name__ == "__main__":
    main()
