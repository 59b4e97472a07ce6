#!/usr/bin/env python3
"""Writes pyrlx/tests/fixtures/jax_reference.npz: the JAX results (jit, grad, value_and_grad,
vmap, jvp and their compositions, and jax.lax loops and branches) of the functions in pyrlx/tests/jaxfuncs.py, so that the
pyrlx tests compare against JAX without installing it. Needs jax (CPU): pip install jax."""

import os
import sys
import jax
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pyrlx", "tests"))
import jaxfuncs  # noqa: E402

jax.config.update("jax_enable_x64", False)
ns, tr, lax = jaxfuncs.jax_namespaces()
out = {}
for name, thunk in jaxfuncs.all_cases(ns, tr, lax, jaxfuncs.inputs()).items():
    for i, leaf in enumerate(jaxfuncs.flatten(thunk())):
        out[f"{name}/{i}"] = leaf
path = os.path.join(HERE, "..", "pyrlx", "tests", "fixtures", "jax_reference.npz")
np.savez_compressed(path, jax_version=np.array(jax.__version__), **out)
print(f"wrote {len(out)} arrays to {os.path.normpath(path)} (jax {jax.__version__})")
