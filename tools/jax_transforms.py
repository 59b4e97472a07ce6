#!/usr/bin/env python3
"""Reference values for rlx-autodiff from JAX (float64): grads, jvps, hvps and vmaps of an MLP,
a transformer block (attention + layer_norm + gelu), softmax cross-entropy and a scan-based RNN.

Writes crates/rlx-autodiff/tests/fixtures/jax_<model>.json. Run: pip install jax; python3 tools/jax_transforms.py
"""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)
OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "rlx-autodiff", "tests", "fixtures")
rng = np.random.RandomState(0)


def r(*shape, scale=1.0):
    return (rng.uniform(-1.0, 1.0, size=shape) * scale).astype(np.float64)


def enc(d):
    return {k: {"shape": list(np.shape(v)), "data": np.asarray(v, dtype=np.float64).ravel().tolist()} for k, v in d.items()}


def save(name, inputs, params, tangents, results):
    doc = {"inputs": enc(inputs), "params": enc(params), "tangents": enc(tangents), "results": enc(results)}
    with open(os.path.join(OUT, f"jax_{name}.json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))


def standard(name, loss, inputs, params, tangent_of, per_example=None):
    """loss(inputs, params) -> scalar. Grads wrt every param, hvp and jvp along tangents."""
    names = list(params)
    vals = [jnp.asarray(params[n]) for n in names]

    def f(*ps):
        return loss(inputs, dict(zip(names, ps)))

    l, grads = jax.value_and_grad(f, argnums=tuple(range(len(names))))(*vals)
    tans = {n: r(*np.shape(params[n]), scale=0.5) for n in tangent_of}
    tvec = [jnp.asarray(tans.get(n, np.zeros(np.shape(params[n])))) for n in names]
    _, dl = jax.jvp(f, tuple(vals), tuple(tvec))
    gfun = jax.grad(f, argnums=tuple(range(len(names))))
    _, hv = jax.jvp(gfun, tuple(vals), tuple(tvec))
    res = {"loss": l, "jvp_loss": dl}
    for n, g, h in zip(names, grads, hv):
        res[f"grad_{n}"] = g
        res[f"hvp_{n}"] = h
    if per_example is not None:
        res.update(per_example(dict(zip(names, vals))))
    save(name, inputs, params, {f"tangent_{n}": v for n, v in tans.items()}, res)


def layer_norm(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / jnp.sqrt(v + eps) * g + b


def mlp():
    inputs = {"x": r(4, 3), "target": r(4, 2)}
    params = {"w1": r(3, 5), "b1": r(5), "w2": r(5, 2), "b2": r(2)}

    def net(x, p):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return h @ p["w2"] + p["b2"]

    def loss(i, p):
        return jnp.mean((net(i["x"], p) - i["target"]) ** 2)

    def per_example(p):
        # vmap of grad: per-example gradients of w1, one row of x at a time.
        def one(x, t):
            return jax.grad(lambda w: jnp.sum((net(x[None], {**p, "w1": w}) - t[None]) ** 2))(p["w1"])

        return {"per_example_grad_w1": jax.vmap(one)(inputs["x"], inputs["target"])}

    standard("mlp", loss, inputs, params, ["w1", "b2"], per_example)


def transformer():
    b, s, d, h = 2, 4, 8, 2
    dh = d // h
    inputs = {"x": r(b, s, d), "proj": r(b, s, d)}
    params = {
        "g1": 1.0 + r(d, scale=0.1), "be1": r(d, scale=0.1),
        "wq": r(d, d, scale=0.5), "wk": r(d, d, scale=0.5), "wv": r(d, d, scale=0.5), "wo": r(d, d, scale=0.5),
        "g2": 1.0 + r(d, scale=0.1), "be2": r(d, scale=0.1),
        "w_up": r(d, 2 * d, scale=0.5), "w_down": r(2 * d, d, scale=0.5),
    }

    def heads(t):
        return t.reshape(b, s, h, dh).transpose(0, 2, 1, 3)

    def block(x, p):
        a = layer_norm(x, p["g1"], p["be1"])
        q, k, v = heads(a @ p["wq"]), heads(a @ p["wk"]), heads(a @ p["wv"])
        sc = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh)
        mask = np.tril(np.ones((s, s), dtype=bool))
        sc = jnp.where(mask, sc, -jnp.inf)
        o = jax.nn.softmax(sc, axis=-1) @ v
        o = o.transpose(0, 2, 1, 3).reshape(b, s, d)
        x = x + o @ p["wo"]
        m = layer_norm(x, p["g2"], p["be2"])
        return x + jax.nn.gelu(m @ p["w_up"], approximate=False) @ p["w_down"]

    def loss(i, p):
        return jnp.sum(block(i["x"], p) * i["proj"])

    def extra(p):
        tx = r(b, s, d, scale=0.5)
        y, ty = jax.jvp(lambda x: block(x, p), (jnp.asarray(inputs["x"]),), (jnp.asarray(tx),))
        return {"tangent_x": tx, "out": y, "jvp_out": ty}

    standard("transformer", loss, inputs, params, ["wq", "g2"], extra)


def cross_entropy():
    n, c = 5, 4
    labels = np.array([0, 3, 1, 1, 2])
    inputs = {"x": r(n, 3), "labels": labels}
    params = {"w": r(3, c), "bias": r(c)}

    def loss(i, p):
        logits = i["x"] @ p["w"] + p["bias"]
        ls = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(ls, jnp.asarray(i["labels"])[:, None], axis=1))

    def per_example(p):
        def one(x, lab):
            ls = jax.nn.log_softmax(x @ p["w"] + p["bias"])
            return -ls[lab]

        return {"per_example_loss": jax.vmap(one)(jnp.asarray(inputs["x"]), jnp.asarray(labels))}

    standard("cross_entropy", loss, inputs, params, ["w"], per_example)


def rnn():
    t, n, d, hd = 5, 2, 3, 4
    inputs = {"xs": r(t, n, d), "h0": r(n, hd)}
    params = {"wx": r(d, hd), "wh": r(hd, hd), "b": r(hd)}

    def loss(i, p):
        def step(hc, x):
            hn = jnp.tanh(x @ p["wx"] + hc @ p["wh"] + p["b"])
            return hn, hn

        hT, hs = jax.lax.scan(step, jnp.asarray(i["h0"]), jnp.asarray(i["xs"]))
        return jnp.sum(hs ** 2) + jnp.sum(hT)

    standard("rnn", loss, inputs, params, ["wh", "b"])


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    mlp()
    transformer()
    cross_entropy()
    rnn()
    print("wrote", sorted(os.listdir(OUT)))
