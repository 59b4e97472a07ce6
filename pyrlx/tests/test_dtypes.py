"""dtype round trips through numpy: every RLX dtype in and out unchanged, and casts that round
like numpy / ml_dtypes; zero-copy reads and fresh outputs."""

import ml_dtypes
import numpy as np
import pytest

import rlx

DTYPES = {
    "f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64,
    "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8,
    "u32": np.uint32, "bool": np.bool_, "c64": np.complex64,
}


def values(dt, n=12):
    r = np.random.default_rng(3)
    if dt == "bool":
        return r.integers(0, 2, n).astype(bool)
    if dt == "c64":
        return (r.standard_normal(n) + 1j * r.standard_normal(n)).astype(np.complex64)
    info = np.iinfo(DTYPES[dt]) if dt[0] in "iu" else None
    if info is not None:
        return r.integers(info.min, info.max, n, endpoint=True).astype(DTYPES[dt])
    return (r.standard_normal(n) * 100).astype(DTYPES[dt])


@pytest.mark.parametrize("dt", sorted(DTYPES))
def test_every_dtype_round_trips_exactly(dt):
    assert rlx.dtypes() == list(DTYPES)
    x = values(dt).reshape(3, 4)
    g = rlx.Graph()
    i = g.input("x", [3, 4], dt)
    g.set_outputs([g.reshape(g.transpose(i, [1, 0]), [12]), i])
    assert g.numpy_dtype(i) == np.dtype(DTYPES[dt]).name
    flat, same = rlx.Session().compile(g).run(x=x)
    assert flat.dtype == x.dtype and same.dtype == x.dtype
    assert flat.tobytes() == np.ascontiguousarray(x.T).reshape(12).tobytes()
    assert same.tobytes() == x.tobytes()


@pytest.mark.parametrize("src,dst", [
    ("f32", "bf16"), ("f32", "f16"), ("f64", "f32"), ("bf16", "f32"), ("f16", "f64"),
    ("i32", "f32"), ("f32", "i32"), ("bool", "f32"), ("f32", "bool"), ("i64", "i8"), ("u8", "i32"),
])
def test_casts_match_numpy(src, dst):
    x = values(src)
    if src[0] == "f" and dst[0] in "iu":
        x = x.astype(np.float64).clip(-1000, 1000).astype(DTYPES[src])
    g = rlx.Graph()
    g.set_outputs([g.cast(g.input("x", [12], src), dst)])
    out = rlx.Session().compile(g).run(x=x)[0]
    want = x.astype(DTYPES[dst])
    assert out.dtype == want.dtype
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))


def test_dtype_arguments_accept_names_numpy_dtypes_and_types():
    g = rlx.Graph()
    for arg, want in [("f32", "f32"), ("float16", "f16"), (np.float64, "f64"), (np.dtype("int8"), "i8"),
                      (ml_dtypes.bfloat16, "bf16"), (bool, "bool"), ("bfloat16", "bf16")]:
        assert rlx._rlx.canonical_dtype(arg) == want
        assert g.dtype(g.full([1], 0.0, arg)) == want


def test_inputs_are_read_in_place_and_outputs_are_fresh_arrays():
    g = rlx.Graph()
    x = g.input("x", [4, 3])
    g.set_outputs([g.mul(x, g.scalar(2.0))])
    c = rlx.Session().compile(g)
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = base.T  # not C-contiguous: copied once, with the right values
    a = c.run(x=view)[0]
    np.testing.assert_array_equal(a, 2 * view)
    b = c.run(x=np.ascontiguousarray(view) + 1)[0]
    np.testing.assert_array_equal(a, 2 * view)  # the first result was not overwritten
    np.testing.assert_array_equal(b, 2 * view + 2)
    assert a.flags.owndata and a.flags.writeable and a.flags.c_contiguous
    big_endian = np.ascontiguousarray(view).astype(">f4")
    np.testing.assert_array_equal(c.run(x=big_endian)[0], 2 * view)
    np.testing.assert_array_equal(c.run(x=view.tolist())[0], 2 * view)
