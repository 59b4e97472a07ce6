"""JAX peer of the char-GPT training step for `rlx-bench train` (a line server on stdin/stdout).

The model, batch and optimizer are those of RLX's `gpt_step` example and of the shared peers'
gpt_train.py: vocab 65, ctx 128, 4 layers, 4 heads, d 128, MLP 4x GELU-tanh, pre-norm
LayerNorm, learned positions, tied head; batch 16; optax.adamw(1e-3, b1 .9, b2 .99, wd .1);
one jitted step (forward + backward + AdamW) with params and state donated.

Commands, one per line: `init` (jit and run the first step; answers first-call seconds),
`run N` (N steps; answers each step's seconds and the last loss), `quit`.
"""
import json
import math
import sys
import time

import jax
import jax.numpy as jnp
import optax

V, T, NLAYER, NHEAD, D, B = 65, 128, 4, 4, 128, 16
HD = D // NHEAD


def init(key):
    ks = iter(jax.random.split(key, 64))

    def n(shape, s=0.02):
        return s * jax.random.normal(next(ks), shape, jnp.float32)

    p = {"wte": n((V, D)), "wpe": n((T, D)), "lnf_g": jnp.ones(D), "lnf_b": jnp.zeros(D), "layers": []}
    proj_s = 0.02 / math.sqrt(2 * NLAYER)
    for _ in range(NLAYER):
        p["layers"].append({
            "ln1_g": jnp.ones(D), "ln1_b": jnp.zeros(D), "ln2_g": jnp.ones(D), "ln2_b": jnp.zeros(D),
            "w_qkv": n((D, 3 * D)), "b_qkv": jnp.zeros(3 * D), "w_o": n((D, D), proj_s), "b_o": jnp.zeros(D),
            "w_fc": n((D, 4 * D)), "b_fc": jnp.zeros(4 * D), "w_pr": n((4 * D, D), proj_s), "b_pr": jnp.zeros(D)})
    return p


def ln(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + eps) * g + b


def forward(p, idx):
    bn, tn = idx.shape
    x = p["wte"][idx] + p["wpe"][:tn][None]
    causal = jnp.tril(jnp.ones((tn, tn), bool))
    for layer in p["layers"]:
        h = ln(x, layer["ln1_g"], layer["ln1_b"])
        qkv = h @ layer["w_qkv"] + layer["b_qkv"]
        q, k, v = (t.reshape(bn, tn, NHEAD, HD).transpose(0, 2, 1, 3) for t in jnp.split(qkv, 3, axis=-1))
        s = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(HD)
        s = jnp.where(causal, s, -1e30)
        a = jax.nn.softmax(s, axis=-1) @ v
        x = x + a.transpose(0, 2, 1, 3).reshape(bn, tn, D) @ layer["w_o"] + layer["b_o"]
        h = ln(x, layer["ln2_g"], layer["ln2_b"])
        x = x + jax.nn.gelu(h @ layer["w_fc"] + layer["b_fc"], approximate=True) @ layer["w_pr"] + layer["b_pr"]
    x = ln(x, p["lnf_g"], p["lnf_b"])
    return x @ p["wte"].T


def loss_fn(p, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(forward(p, x), y).mean()


OPT = optax.adamw(1e-3, b1=0.9, b2=0.99, weight_decay=0.1)


def step(p, s, x, y):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
    upd, s = OPT.update(g, s, p)
    return optax.apply_updates(p, upd), s, loss


def main():
    p = init(jax.random.PRNGKey(0))
    s = OPT.init(p)
    data = jax.random.randint(jax.random.PRNGKey(1), (8, B, T + 1), 0, V)
    xs, ys = data[:, :, :-1], data[:, :, 1:]
    js = jax.jit(step, donate_argnums=(0, 1))
    i = 0
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        try:
            n = 1 if cmd[0] == "init" else int(cmd[1])
            secs, loss = [], float("nan")
            for _ in range(n):
                t = time.perf_counter()
                p, s, loss = js(p, s, xs[i % 8], ys[i % 8])
                jax.block_until_ready((p, s, loss))
                secs.append(time.perf_counter() - t)
                i += 1
            ans = {"seconds": secs, "loss": float(loss), "jax": jax.__version__}
        except Exception as e:  # noqa: BLE001 - the answer carries the reason to the Rust side
            ans = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(ans), flush=True)


if __name__ == "__main__":
    main()
