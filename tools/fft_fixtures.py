#!/usr/bin/env python3
"""Reference values for RLX's FFT ops from numpy (values) and JAX (gradients), in float64.

Complex arrays are stored as a trailing axis of 2 (real, imaginary), as RLX represents them.

Writes
  crates/rlx-cpu/tests/fixtures/fft_numpy.json      numpy.fft.{fft,ifft,rfft,irfft,fft2,ifft2}, and
                                                    stft / istft written with them (Hann window)
  crates/rlx-autodiff/tests/fixtures/jax_fft.json   jax.grad of sum(w * f(x)) for the same ops

Run: pip install numpy jax; python3 tools/fft_fixtures.py
(the numpy file alone when JAX is missing).
"""
import json
import os

import numpy as np

ROOT = os.path.join(os.path.dirname(__file__), "..", "crates")
rng = np.random.RandomState(40)


def pairs(z):
    z = np.asarray(z)
    return np.stack([z.real, z.imag], axis=-1).astype(np.float64)


def enc(a):
    a = np.asarray(a, dtype=np.float64)
    return {"shape": list(a.shape), "data": a.ravel().tolist()}


def rand_complex(*shape):
    return rng.uniform(-1, 1, size=shape) + 1j * rng.uniform(-1, 1, size=shape)


# (op, input shape (complex ops: without the pair axis), n or s, norm)
CASES = [
    ("fft", (3, 8), None, "backward"),
    ("fft", (2, 5), None, "ortho"),
    ("fft", (2, 6), 9, "forward"),  # zero-padded
    ("fft", (2, 12), 7, "backward"),  # cropped
    ("fft", (64,), None, "backward"),
    ("ifft", (3, 8), None, "backward"),
    ("ifft", (2, 7), 10, "ortho"),
    ("ifft", (2, 16), None, "forward"),
    ("rfft", (3, 16), None, "backward"),
    ("rfft", (2, 15), None, "ortho"),
    ("rfft", (2, 10), 13, "forward"),
    ("rfft", (2, 20), 8, "backward"),
    ("rfft", (1024,), None, "backward"),
    ("irfft", (3, 9), None, "backward"),  # n = 16
    ("irfft", (2, 8), 15, "backward"),  # odd n: no Nyquist bin
    ("irfft", (2, 5), 12, "ortho"),  # padded spectrum
    ("irfft", (2, 9), 6, "forward"),  # cropped spectrum
    ("irfft", (513,), None, "backward"),
    ("fft2", (2, 4, 6), None, "backward"),
    ("fft2", (3, 5), (4, 7), "ortho"),
    ("ifft2", (2, 3, 8), None, "backward"),
    ("ifft2", (4, 4), (3, 6), "forward"),
    # stft / istft: n = (n_fft, hop), the periodic Hann window; istft's input is a spectrum.
    ("stft", (2, 40), (16, 4), "backward"),
    ("stft", (33,), (8, 3), "ortho"),
    ("istft", (2, 7, 9), (16, 4), "backward"),
    ("istft", (5, 5), (8, 3), "ortho"),
]
# The same ops over another axis (numpy's `axis` / `axes`, of the complex array): a fifth field.
CASES = [c + (None,) for c in CASES] + [
    ("fft", (5, 3, 4), None, "backward", 0),
    ("fft", (3, 6, 2), 8, "ortho", -2),
    ("ifft", (4, 5, 3), 6, "forward", 1),
    ("rfft", (6, 3, 2), None, "backward", 0),
    ("rfft", (2, 9, 3), 7, "ortho", 1),
    ("irfft", (5, 4), None, "backward", 0),
    ("irfft", (3, 5, 2), 9, "forward", 1),
    ("fft2", (4, 3, 5), None, "backward", (0, 2)),
    ("ifft2", (3, 4, 5), (5, 2), "ortho", (2, 0)),
]


def hann(n):
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)


def np_stft(x, n_fft, hop, norm):
    frames = 1 + (x.shape[-1] - n_fft) // hop
    idx = np.arange(frames)[:, None] * hop + np.arange(n_fft)[None, :]
    return np.fft.rfft(x[..., idx] * hann(n_fft), n=n_fft, norm=norm)


def np_istft(s, n_fft, hop, norm):
    frames = s.shape[-2]
    t = n_fft + (frames - 1) * hop
    w = hann(n_fft)
    fr = np.fft.irfft(s, n=n_fft, norm=norm) * w
    out = np.zeros(s.shape[:-2] + (t,))
    env = np.zeros(t)
    for f in range(frames):
        out[..., f * hop : f * hop + n_fft] += fr[..., f, :]
        env[f * hop : f * hop + n_fft] += w * w
    cov = env > 1e-11
    return np.where(cov, out / np.where(cov, env, 1.0), 0.0)


def np_apply(op, x, n, norm, axis=None):
    if axis is not None:
        if op in ("fft2", "ifft2"):
            return getattr(np.fft, op)(x, s=n, axes=axis, norm=norm)
        return getattr(np.fft, op)(x, n=n, axis=axis, norm=norm)
    if op == "stft":
        return np_stft(x, n[0], n[1], norm)
    if op == "istft":
        return np_istft(x, n[0], n[1], norm)
    if op in ("fft2", "ifft2"):
        return getattr(np.fft, op)(x, s=n, norm=norm)
    return getattr(np.fft, op)(x, n=n, norm=norm)


def inputs(op, shape):
    if op in ("rfft", "stft"):
        return rng.uniform(-1, 1, size=shape)
    # irfft inputs keep nonzero imaginary parts at DC and Nyquist: numpy ignores them.
    return rand_complex(*shape)


def label(op, shape, n, norm, axis=None):
    return f"{op}{list(shape)}/n={n}/{norm}" + ("" if axis is None else f"/axis={axis}")


def numpy_fixture():
    cases = []
    for op, shape, n, norm, axis in CASES:
        x = inputs(op, shape)
        y = np_apply(op, x, n, norm, axis)
        xs = x if op in ("rfft", "stft") else pairs(x)
        ys = y if op in ("irfft", "istft") else pairs(y)
        case = {"label": label(op, shape, n, norm, axis), "op": op, "n": n, "norm": norm, "x": enc(xs), "y": enc(ys)}
        if axis is not None:
            case["axis"] = axis
        cases.append(case)
    return {"numpy": np.__version__, "cases": cases}


def jax_fixture():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    cases = []
    for op, shape, n, norm, axis in CASES:
        if max(shape) > 64:
            continue
        x = inputs(op, shape)
        xs = x if op in ("rfft", "stft") else pairs(x)

        def f(xr, op=op, n=n, norm=norm, axis=axis):
            z = xr if op in ("rfft", "stft") else xr[..., 0] + 1j * xr[..., 1]
            if op == "stft":
                frames = 1 + (z.shape[-1] - n[0]) // n[1]
                idx = np.arange(frames)[:, None] * n[1] + np.arange(n[0])[None, :]
                y = jnp.fft.rfft(z[..., idx] * hann(n[0]), n=n[0], norm=norm)
            elif op == "istft":
                frames, t = z.shape[-2], n[0] + (z.shape[-2] - 1) * n[1]
                w = hann(n[0])
                fr = jnp.fft.irfft(z, n=n[0], norm=norm) * w
                out = jnp.zeros(z.shape[:-2] + (t,))
                env = np.zeros(t)
                for fi in range(frames):
                    out = out.at[..., fi * n[1] : fi * n[1] + n[0]].add(fr[..., fi, :])
                    env[fi * n[1] : fi * n[1] + n[0]] += w * w
                cov = env > 1e-11
                y = jnp.where(cov, out / np.where(cov, env, 1.0), 0.0)
            elif op in ("fft2", "ifft2"):
                y = getattr(jnp.fft, op)(z, s=n, norm=norm, axes=(-2, -1) if axis is None else axis)
            else:
                y = getattr(jnp.fft, op)(z, n=n, norm=norm, axis=-1 if axis is None else axis)
            return y if op in ("irfft", "istft") else jnp.stack([y.real, y.imag], axis=-1)

        y = f(jnp.asarray(xs))
        w = rng.uniform(-1, 1, size=y.shape)
        g = jax.grad(lambda xr: jnp.sum(w * f(xr)))(jnp.asarray(xs))
        case = {"label": label(op, shape, n, norm, axis), "op": op, "n": n, "norm": norm, "x": enc(xs), "w": enc(w), "grad": enc(g)}
        if axis is not None:
            case["axis"] = axis
        cases.append(case)
    return {"jax": jax.__version__, "cases": cases}


def write(path, doc):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    write(os.path.join(ROOT, "rlx-cpu", "tests", "fixtures", "fft_numpy.json"), numpy_fixture())
    try:
        import jax  # noqa: F401
    except ImportError:
        print("jax is not installed: skipping the gradient fixture")
    else:
        write(os.path.join(ROOT, "rlx-autodiff", "tests", "fixtures", "jax_fft.json"), jax_fixture())
