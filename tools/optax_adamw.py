"""Writes crates/rlx-nn/tests/fixtures/optax_mlp.json: a tiny MLP trained 3 steps by optax.

Model: x[8,4] -> Linear(4,16) -> tanh -> Linear(16,3) -> softmax cross-entropy on int labels.
Two runs from the same initial params and data:
  adamw: optax.adamw(1e-2, b1=0.9, b2=0.99, eps=1e-8, weight_decay=0.1)
  sgd:   optax.chain(clip_by_global_norm(0.5), sgd(warmup_cosine_decay_schedule(0, 0.1, 2, 6, 0.01),
         momentum=0.9, nesterov=True))
The Rust test (crates/rlx-nn/tests/optax.rs) checks its params after each step within 1e-5.
Usage: pip install jax optax && python3 tools/optax_adamw.py
"""
import json
import numpy as np
import jax
import jax.numpy as jnp
import optax

jax.config.update("jax_platforms", "cpu")
rng = np.random.default_rng(0)
params = {
    "fc1.w": rng.normal(0, 0.5, (4, 16)).astype(np.float32),
    "fc1.b": rng.normal(0, 0.1, (16,)).astype(np.float32),
    "fc2.w": rng.normal(0, 0.5, (16, 3)).astype(np.float32),
    "fc2.b": rng.normal(0, 0.1, (3,)).astype(np.float32),
}
x = rng.normal(0, 1, (8, 4)).astype(np.float32)
y = rng.integers(0, 3, (8,)).astype(np.int32)


def loss_fn(p, x, y):
    h = jnp.tanh(x @ p["fc1.w"] + p["fc1.b"])
    logits = h @ p["fc2.w"] + p["fc2.b"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def run(opt, steps=3):
    p = {k: jnp.asarray(v) for k, v in params.items()}
    s = opt.init(p)
    out = []
    for _ in range(steps):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        u, s = opt.update(g, s, p)
        p = optax.apply_updates(p, u)
        out.append({"loss": float(loss), "params": {k: np.asarray(v).ravel().tolist() for k, v in p.items()}})
    return out


adamw = optax.adamw(1e-2, b1=0.9, b2=0.99, eps=1e-8, weight_decay=0.1)
sched = optax.warmup_cosine_decay_schedule(0.0, 0.1, 2, 6, 0.01)
sgd = optax.chain(optax.clip_by_global_norm(0.5), optax.sgd(sched, momentum=0.9, nesterov=True))
fixture = {
    "versions": {"jax": jax.__version__, "optax": optax.__version__},
    "init": {k: {"dims": list(v.shape), "data": v.ravel().tolist()} for k, v in params.items()},
    "x": x.ravel().tolist(),
    "y": y.tolist(),
    "adamw": run(adamw),
    "sgd": run(sgd, 4),
}
path = "crates/rlx-nn/tests/fixtures/optax_mlp.json"
with open(path, "w") as f:
    json.dump(fixture, f)
print(f"{path}: adamw losses {[round(r['loss'], 6) for r in fixture['adamw']]}, "
      f"sgd losses {[round(r['loss'], 6) for r in fixture['sgd']]}")
