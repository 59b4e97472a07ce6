#!/usr/bin/env python3
"""Writes pyrlx/tests/fixtures/jax_reference.npz: the JAX results (jit, grad, value_and_grad,
vmap, jvp and their compositions) of the functions in pyrlx/tests/jaxfuncs.py, so that the
pyrlx tests compare against JAX without installing it. Needs jax (CPU): pip install jax."""

import os
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pyrlx", "tests"))
import jaxfuncs  # noqa: E402

jax.config.update("jax_enable_x64", False)
tr = types.SimpleNamespace(jit=jax.jit, grad=jax.grad, value_and_grad=jax.value_and_grad, vmap=jax.vmap, jvp=jax.jvp)
# jax.numpy plus the jax.nn functions that rlx.numpy also has.
ns = types.SimpleNamespace(**{k: getattr(jnp, k) for k in ("sum", "mean", "tanh", "sin", "exp", "sqrt")})
ns.log_softmax = jax.nn.log_softmax
out = {}
for name, thunk in jaxfuncs.cases(ns, tr, jaxfuncs.inputs()).items():
    for i, leaf in enumerate(jaxfuncs.flatten(thunk())):
        out[f"{name}/{i}"] = leaf
path = os.path.join(HERE, "..", "pyrlx", "tests", "fixtures", "jax_reference.npz")
np.savez_compressed(path, jax_version=np.array(jax.__version__), **out)
print(f"wrote {len(out)} arrays to {os.path.normpath(path)} (jax {jax.__version__})")
