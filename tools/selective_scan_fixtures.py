#!/usr/bin/env python3
"""Reference values for RLX's `selective_scan` op: a numpy transcription of mamba's
`selective_scan_ref` (mamba_ssm/ops/selective_scan_interface.py, "variable B/C" case), float64.

Writes
  crates/rlx-cpu/tests/fixtures/selective_scan_numpy.json   inputs and output per case

Run: python3 tools/selective_scan_fixtures.py   (numpy only)
"""
import json
import os

import numpy as np

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "rlx-cpu", "tests", "fixtures",
                   "selective_scan_numpy.json")
rng = np.random.RandomState(39)


def softplus(x):
    return np.logaddexp(0.0, x)


def selective_scan_ref(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    """mamba's selective_scan_ref in numpy: u, delta, z [b, d, l]; A [d, n]; B, C [b, n, l];
    D, delta_bias [d]. Returns [b, d, l]."""
    if delta_bias is not None:
        delta = delta + delta_bias[..., None]
    if delta_softplus:
        delta = softplus(delta)
    batch, dim, _ = u.shape
    dstate = A.shape[1]
    x = np.zeros((batch, dim, dstate))
    ys = []
    deltaA = np.exp(np.einsum("bdl,dn->bdln", delta, A))
    deltaB_u = np.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    for i in range(u.shape[2]):
        x = deltaA[:, :, i] * x + deltaB_u[:, :, i]
        ys.append(np.einsum("bdn,bn->bd", x, C[:, :, i]))
    y = np.stack(ys, axis=2) if ys else np.zeros_like(u)
    out = y if D is None else y + u * D[:, None]
    if z is not None:
        out = out * (z / (1.0 + np.exp(-z)))
    return out


def enc(a):
    a = np.asarray(a, dtype=np.float64)
    return {"shape": list(a.shape), "data": a.ravel().tolist()}


# (label, (b, d, n, l), has_d, has_z, has_bias, delta_softplus)
CASES = [
    ("full", (2, 3, 4, 7), True, True, True, True),
    ("plain", (1, 4, 3, 6), False, False, False, False),
    ("z_d", (2, 2, 5, 9), True, True, False, False),
    ("bias_softplus", (3, 2, 2, 5), False, False, True, True),
    ("long", (1, 3, 16, 64), True, True, True, True),
]


def main():
    cases = []
    for label, (b, d, n, l), has_d, has_z, has_bias, sp in CASES:
        u = rng.uniform(-1, 1, (b, d, l))
        delta = rng.uniform(-1, 0.5, (b, d, l)) if sp else rng.uniform(0.05, 0.8, (b, d, l))
        A = -np.exp(rng.uniform(-1.5, 1.0, (d, n)))
        B = rng.uniform(-1, 1, (b, n, l))
        C = rng.uniform(-1, 1, (b, n, l))
        D = rng.uniform(-1, 1, (d,)) if has_d else None
        z = rng.uniform(-1, 1, (b, d, l)) if has_z else None
        bias = rng.uniform(-0.5, 0.5, (d,)) if has_bias else None
        y = selective_scan_ref(u, delta, A, B, C, D, z, bias, sp)
        case = {"label": label, "delta_softplus": sp, "u": enc(u), "delta": enc(delta), "A": enc(A),
                "B": enc(B), "C": enc(C), "y": enc(y)}
        for k, v in (("D", D), ("z", z), ("delta_bias", bias)):
            if v is not None:
                case[k] = enc(v)
        cases.append(case)
    with open(OUT, "w") as f:
        json.dump({"source": "tools/selective_scan_fixtures.py (numpy selective_scan_ref, f64)",
                   "cases": cases}, f)
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
