"""rlx.jit / grad / value_and_grad / vmap / jvp and their compositions against JAX: the committed
fixtures (tools/pyrlx_jax_fixtures.py), and live JAX when it is installed."""

import os
import types

import numpy as np
import pytest

import jaxfuncs
import rlx
import rlx.numpy as rnp

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "jax_reference.npz")
TR = types.SimpleNamespace(jit=rlx.jit, grad=rlx.grad, value_and_grad=rlx.value_and_grad, vmap=rlx.vmap, jvp=rlx.jvp)
CASES = sorted(jaxfuncs.all_cases(rnp, TR, rlx.lax, jaxfuncs.inputs()))


def reference(name):
    ref = np.load(FIXTURE)
    keys = sorted((k for k in ref.files if k.startswith(name + "/")), key=lambda k: int(k.split("/")[1]))
    assert keys, f"no fixture for {name}: run tools/pyrlx_jax_fixtures.py"
    return [ref[k] for k in keys]


@pytest.mark.parametrize("name", CASES)
def test_against_jax_fixture(name):
    got = jaxfuncs.flatten(jaxfuncs.all_cases(rnp, TR, rlx.lax, jaxfuncs.inputs())[name]())
    want = reference(name)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("name", CASES)
def test_fixture_matches_live_jax(name):
    """Guards against stale fixtures; runs only where jax is installed."""
    pytest.importorskip("jax")
    ns, tr, lax = jaxfuncs.jax_namespaces()
    live = jaxfuncs.flatten(jaxfuncs.all_cases(ns, tr, lax, jaxfuncs.inputs())[name]())
    for g, w in zip(live, reference(name)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
