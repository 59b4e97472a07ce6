"""Fits the f32 erf polynomial of rlx-cpu (kernels/vec32.rs ERF_POLY): erf(x) = x g(x^2), g a
Chebyshev fit of erf(x)/x over x^2 in [0, HI], written in powers of t = 2 x^2 / HI - 1, then
checked in f32 arithmetic with fused multiply-adds (as erf8 runs it) against math.erf.
Run: python3 tools/fit_erf.py (numpy only)."""
import math

import numpy as np
from numpy.polynomial import chebyshev as C

HI, DEG = 14.0, 14
erf = np.vectorize(math.erf)


def fit():
    n = 20000
    t = np.cos(np.pi * (np.arange(n) + 0.5) / n)
    u = (t + 1) / 2 * HI
    x = np.sqrt(u)
    g = np.where(u > 0, erf(x) / np.where(x > 0, x, 1), 2 / np.sqrt(np.pi))
    return C.cheb2poly(C.chebfit(t, g, DEG)).astype(np.float32)


def fma(a, b, c):
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def erf_f32(p, x):
    lim = np.float32(math.sqrt(HI))
    x = x.astype(np.float32)
    xc = np.minimum(lim, np.maximum(-lim, x))
    u = (xc * xc).astype(np.float32)
    t = fma(u, np.full_like(u, np.float32(2 / HI)), np.full_like(u, np.float32(-1)))
    g = np.full_like(t, p[-1])
    for c in p[-2::-1]:
        g = fma(g, t, np.full_like(t, c))
    return np.where(np.abs(x) > lim, np.copysign(np.float32(1), x), (xc * g).astype(np.float32))


def main():
    p = fit()
    xs = np.concatenate([np.linspace(-6, 6, 1200001), np.geomspace(1e-30, 1, 20000)]).astype(np.float32)
    ref = erf(xs.astype(np.float64))
    err = np.abs(erf_f32(p, xs) - ref)
    nz = ref != 0
    print("max abs error %.3e, max relative %.3e" % (err.max(), (err[nz] / np.abs(ref[nz])).max()))
    # Shortest decimal that round-trips each f32 (what the Rust literals are).
    print("ERF_POLY (t^0 .. t^%d): [%s]" % (DEG, ", ".join(np.format_float_scientific(c, unique=True) for c in p)))


if __name__ == "__main__":
    main()
