"""Rust errors become Python exceptions with the Rust message; nothing crashes the interpreter."""

import numpy as np
import pytest

import rlx
import rlx.numpy as rnp


def compiled_mlp():
    g = rlx.Graph("mlp")
    x = g.input("x", [2, 3])
    w = g.param("w", [3, 4])
    g.set_outputs([g.matmul(x, w)])
    return g, rlx.Session().compile(g)


def test_builder_shape_error_is_value_error_and_leaves_graph_usable():
    g = rlx.Graph("g")
    x = g.input("x", [2, 3])
    n = len(g)
    with pytest.raises(ValueError, match=r"op `matmul` \(node %1\).*f32\[2,3\], f32\[2,3\]"):
        g.matmul(x, x)
    assert len(g) == n
    g.check()
    g.set_outputs([g.tanh(x)])
    g.verify()
    rlx.Session().compile(g)


def test_bad_node_and_duplicate_names():
    g = rlx.Graph("g")
    g.input("x", [2])
    with pytest.raises(ValueError, match="does not exist"):
        g.tanh(7)
    with pytest.raises(ValueError, match="already used"):
        g.input("x", [3])
    with pytest.raises(TypeError, match="expected a Node"):
        g.tanh("x")
    with pytest.raises(ValueError, match="does not exist"):
        g.set_outputs([42])
    assert len(g) == 1


def test_run_errors():
    g, c = compiled_mlp()
    x = np.ones((2, 3), np.float32)
    with pytest.raises(RuntimeError, match="param `w` .* was never set"):
        c.run(x=x)
    with pytest.raises(KeyError, match="unknown param `v`"):
        c.set_param("v", np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match=r"param `w`: expected shape f32\[3,4\]"):
        c.set_param("w", np.ones((4, 3), np.float32))
    c.set_param("w", np.ones((3, 4), np.float32))
    with pytest.raises(KeyError, match="input `x` .* was not given"):
        c.run()
    with pytest.raises(KeyError, match="unknown input `y`"):
        c.run(x=x, y=x)
    with pytest.raises(ValueError, match="input `x`: expected dtype f32, got f64"):
        c.run(x=x.astype(np.float64))
    with pytest.raises(ValueError, match=r"input `x`: expected shape f32\[2,3\]"):
        c.run(x=np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match="takes 1 inputs"):
        c.call()
    np.testing.assert_array_equal(c.run(x=x)[0], np.full((2, 4), 3.0))


def test_op_dtype_device_and_transform_errors():
    g = rlx.Graph()
    x = g.input("x", [2])
    with pytest.raises(ValueError, match="op `no_such_op`.*ops are"):
        g.op("no_such_op", [x])
    with pytest.raises(ValueError, match="op `reduce`: bad attributes"):
        g.op("reduce", [x], kind="sum")
    with pytest.raises(ValueError, match="unknown dtype `f31`"):
        g.input("y", [2], "f31")
    with pytest.raises(ValueError, match="unknown device `tpu9`"):
        rlx.Session("tpu9")
    with pytest.raises(RuntimeError, match="device mlx is not available"):
        g.set_outputs([x])
        rlx.Session("mlx").compile(g)
    with pytest.raises(ValueError, match="attention mask `diagonal`: use"):
        g.attention(x, x, x, "diagonal")
    with pytest.raises(KeyError, match="unknown input or param `nope`"):
        rlx.transforms.grad(g, ["nope"])
    h = rlx.Graph()
    y = h.input("y", [3])
    h.set_outputs([h.tanh(y)])
    with pytest.raises(ValueError, match="grad needs a scalar float loss"):
        rlx.transforms.grad(h, ["y"])
    with pytest.raises(RuntimeError, match="unknown quant scheme `Q9_9`"):
        g.dequantize(x, "Q9_9", 32)


def test_front_end_errors():
    with pytest.raises(ValueError, match="one scalar output"):
        rlx.grad(lambda x: rnp.tanh(x))(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="concrete value"):
        rlx.jit(lambda x: x if x > 0 else -x)(np.float32(1.0))
    kept = []
    rlx.jit(lambda x: kept.append(x) or x)(np.ones(2, np.float32))
    with pytest.raises(ValueError, match="escaped"):
        rlx.jit(lambda y: y + kept[0])(np.ones(2, np.float32))
    with pytest.raises(ValueError, match="batch size"):
        rlx.vmap(lambda a, b: a + b)(np.ones((2, 3), np.float32), np.ones((4, 3), np.float32))
    with pytest.raises(ValueError, match="in_axes has 1 entries for 2"):
        rlx.vmap(lambda a, b: a + b, in_axes=(0,))(np.ones(2, np.float32), np.ones(2, np.float32))
    with pytest.raises(ValueError, match="inner dims differ"):
        rlx.jit(lambda a, b: a @ b)(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
    with pytest.raises(IndexError, match="out of bounds"):
        rlx.jit(lambda a: a[5])(np.ones(3, np.float32))


def test_a_rust_panic_is_a_runtime_error_not_a_crash():
    with pytest.raises(RuntimeError, match="Rust panic.*boom"):
        rlx._rlx._panic_for_test("boom")
    assert rlx.jit(lambda x: x + 1)(np.float32(1.0)) == 2.0  # the interpreter goes on
