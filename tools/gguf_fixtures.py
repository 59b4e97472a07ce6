#!/usr/bin/env python3
"""Makes the GGUF test fixtures of crates/rlx-gguf with gguf-py (pip install gguf numpy).

Writes, under crates/rlx-gguf/tests/fixtures/:
  meta_v3.gguf + .json  gguf-py writer: every metadata type, nested arrays, general.alignment = 64
  meta_v2.gguf + .json  the same bytes with the version field set to 2 (v2 and v3 share one layout)
  meta_v1.gguf + .json  packed by hand here with v1's 32-bit counts (gguf-py cannot write v1)
  dequant.gguf          per type: random packed blocks and gguf-py's numpy dequantization of them
  quant.gguf            from quant_ours.gguf (written by `cargo run -p rlx-gguf --example
                        quant_fixture`): our quantizer's blocks, gguf-py's dequantization of them,
                        and gguf-py's own Q4_0/Q8_0 quantization of the same input; when
                        llama-cpp-python is installed, also llama.cpp's quantize_row_*_ref output
The .json files hold the intended metadata and the tensor table as gguf-py's reader sees it.
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T, GGUFValueType as V

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "crates/rlx-gguf/tests/fixtures"
RNG = np.random.default_rng(20261121)

NAMES = {V.UINT8: "u8", V.INT8: "i8", V.UINT16: "u16", V.INT16: "i16", V.UINT32: "u32", V.INT32: "i32",
         V.FLOAT32: "f32", V.BOOL: "bool", V.STRING: "string", V.ARRAY: "array", V.UINT64: "u64",
         V.INT64: "i64", V.FLOAT64: "f64"}
PACK = {V.UINT8: "<B", V.INT8: "<b", V.UINT16: "<H", V.INT16: "<h", V.UINT32: "<I", V.INT32: "<i",
        V.FLOAT32: "<f", V.BOOL: "<?", V.UINT64: "<Q", V.INT64: "<q", V.FLOAT64: "<d"}


def f32(x):
    return float(np.float32(x))


# Metadata: (key, type, value, element type for arrays). Nested arrays are ("nested", elem, items).
SCALARS = [
    ("t.u8", V.UINT8, 200), ("t.i8", V.INT8, -100), ("t.u16", V.UINT16, 60000), ("t.i16", V.INT16, -30000),
    ("t.u32", V.UINT32, 4000000000), ("t.i32", V.INT32, -2000000000), ("t.f32", V.FLOAT32, f32(3.14159)),
    ("t.bool", V.BOOL, True), ("t.bool_false", V.BOOL, False), ("t.string", V.STRING, "héllo, GGUF ✓"),
    ("t.u64", V.UINT64, 2**63 + 5), ("t.i64", V.INT64, -(2**62)), ("t.f64", V.FLOAT64, -2.718281828459045),
    ("t.empty_string", V.STRING, ""),
]
ARRAYS = [
    ("a.u8", V.UINT8, [0, 1, 255]), ("a.i8", V.INT8, [-128, 0, 127]), ("a.u16", V.UINT16, [1, 65535]),
    ("a.i16", V.INT16, [-32768, 32767]), ("a.u32", V.UINT32, [7, 4294967295]), ("a.i32", V.INT32, [-1, 2, -3]),
    ("a.f32", V.FLOAT32, [f32(0.1), f32(-1e30), f32(6.5)]), ("a.bool", V.BOOL, [True, False, True]),
    ("a.string", V.STRING, ["a", "", "tokens ✓"]), ("a.u64", V.UINT64, [0, 2**64 - 1]),
    ("a.i64", V.INT64, [-(2**63), 2**63 - 1]), ("a.f64", V.FLOAT64, [1e300, -0.5]),
]
# Each nested item: (element type, items); items of an ARRAY element type are nested items again.
NESTED = [
    ("n.ints", [(V.INT32, [1, 2, 3]), (V.INT32, [4, 5])]),
    ("n.strings", [(V.STRING, ["x", "yz"]), (V.STRING, ["w"])]),
    ("n.mixed", [(V.INT32, [7]), (V.STRING, ["s"]), (V.FLOAT32, [f32(0.25)])]),
    ("n.deep", [(V.ARRAY, [(V.INT32, [1]), (V.INT32, [2, 3])]), (V.ARRAY, [(V.STRING, ["deep"])])]),
]


def json_array(elem, items):
    if elem == V.ARRAY:
        items = [json_array(e, i) for e, i in items]
    return {"elem": NAMES[elem], "items": items}


def expected_metadata(extra=()):
    kv = [[k, NAMES[t], v] for k, t, v in SCALARS]
    kv += [[k, "array", json_array(t, v)] for k, t, v in ARRAYS]
    kv += [[k, "array", json_array(V.ARRAY, items)] for k, items in NESTED]
    return list(extra) + kv


def table(path):
    """The tensor table as gguf-py's reader sees it (dims in ggml order, offsets relative to data)."""
    r = gguf.GGUFReader(path)
    base = min(t.data_offset for t in r.tensors) - min(int(t.field.parts[-1][0]) for t in r.tensors)
    return {
        "data_offset": int(base),
        "tensors": [{"name": t.name, "type": T(t.tensor_type).name, "dims": [int(d) for d in t.shape],
                     "offset": int(t.data_offset - base), "n_bytes": int(t.n_bytes)} for t in r.tensors],
    }


def meta_tensors():
    return [
        ("f32.matrix", RNG.standard_normal((3, 5)).astype(np.float32), None),
        ("f16.vector", RNG.standard_normal(7).astype(np.float16), None),
        ("i8.vector", np.arange(-3, 6, dtype=np.int8), None),
        ("q8_0.rows", random_blocks(T.Q8_0, 4).reshape(2, 68), T.Q8_0),
    ]


def write_meta_v3():
    w = gguf.GGUFWriter(str(OUT / "meta_v3.gguf"), arch="fixture")
    w.add_custom_alignment(64)
    for k, t, v in SCALARS:
        w.add_key_value(k, v, t)
    for k, t, v in ARRAYS:
        w.add_key_value(k, v, V.ARRAY, sub_type=t)
    for k, items in NESTED:
        # gguf-py packs nested lists itself; element types of the inner lists come from the Python values.
        w.add_key_value(k, [nested_py(e, i) for e, i in items], V.ARRAY)
    for name, arr, raw in meta_tensors():
        w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    extra = [["general.architecture", "string", "fixture"], ["general.alignment", "u32", 64]]
    return {"version": 3, "alignment": 64, "metadata": expected_metadata(extra), **table(OUT / "meta_v3.gguf")}


def nested_py(elem, items):
    """gguf-py infers inner element types from Python values: ints become i32, floats f32."""
    assert elem in (V.INT32, V.STRING, V.FLOAT32, V.ARRAY), elem
    return [nested_py(e, i) for e, i in items] if elem == V.ARRAY else list(items)


def pack_v1_value(t, v, n):
    if t == V.STRING:
        b = v.encode()
        return struct.pack(n, len(b)) + b
    if t == V.ARRAY:
        elem, items = v
        out = struct.pack("<I", elem) + struct.pack(n, len(items))
        return out + b"".join(pack_v1_value(elem, i, n) for i in items)
    return struct.pack(PACK[t], v)


def write_v1():
    """GGUF v1 by hand: u32 tensor/kv counts, string lengths, array lengths and dims."""
    n = "<I"
    kv = [("general.name", V.STRING, "v1 file"), ("v1.u32", V.UINT32, 77), ("v1.bool", V.BOOL, True),
          ("v1.f32s", V.ARRAY, (V.FLOAT32, [f32(1.5), f32(-2.25)])), ("v1.empty", V.ARRAY, (V.INT32, [])),
          ("v1.nested", V.ARRAY, (V.ARRAY, [(V.UINT8, [1, 2]), (V.STRING, ["q"])]))]
    vec = np.array([1.0, -2.0, 0.5, 8.0], dtype=np.float32)
    q4 = random_blocks(T.Q4_0, 1)
    tensors = [("vec", [4], T.F32, vec.tobytes()), ("q4", [32], T.Q4_0, q4.tobytes())]
    head = b"GGUF" + struct.pack("<I", 1) + struct.pack(n, len(tensors)) + struct.pack(n, len(kv))
    for k, t, v in kv:
        head += pack_v1_value(V.STRING, k, n) + struct.pack("<I", t) + pack_v1_value(t, v, n)
    offsets, off = [], 0
    for name, dims, ty, data in tensors:
        head += pack_v1_value(V.STRING, name, n) + struct.pack("<I", len(dims))
        head += b"".join(struct.pack(n, d) for d in dims) + struct.pack("<I", ty) + struct.pack("<Q", off)
        offsets.append(off)
        off += -(-len(data) // 32) * 32
    data_offset = -(-len(head) // 32) * 32
    body = head + b"\0" * (data_offset - len(head))
    for (_, _, _, data), o in zip(tensors, offsets):
        body += b"\0" * (data_offset + o - len(body)) + data
    (OUT / "meta_v1.gguf").write_bytes(body)

    def json_array_v1(elem, items):
        return {"elem": NAMES[elem], "items": [json_array_v1(*i) for i in items] if elem == V.ARRAY else items}
    meta = [[k, NAMES[t], json_array_v1(*v) if t == V.ARRAY else v] for k, t, v in kv]
    return {"version": 1, "alignment": 32, "metadata": meta, "data_offset": data_offset,
            "tensors": [{"name": nm, "type": T(ty).name, "dims": dims, "offset": o, "n_bytes": len(d)}
                        for (nm, dims, ty, d), o in zip(tensors, offsets)]}


# Byte ranges of the f16 scale fields of each block type, overwritten with finite values.
SCALE_FIELDS = {T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.Q2_K: [80, 82],
                T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208], T.IQ4_NL: [0], T.IQ4_XS: [0]}


def random_blocks(ty, n_blocks):
    _, type_size = gguf.GGML_QUANT_SIZES[ty]
    b = RNG.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for at in SCALE_FIELDS[ty]:
        scale = (RNG.standard_normal(n_blocks) * 10.0 ** RNG.uniform(-4, 1, n_blocks)).astype(np.float16)
        b[:, at:at + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return b


def write_dequant():
    w = gguf.GGUFWriter(str(OUT / "dequant.gguf"), arch="dequant-fixture")
    # F16: every finite bit pattern class plus infinities and signed zeros (NaN payloads differ by converter).
    f16 = RNG.integers(0, 65536, size=1024, dtype=np.uint16)
    f16 = np.where((f16 & 0x7C00) == 0x7C00, f16 & 0xFC00, f16)  # NaN -> inf of the same sign
    w.add_tensor("F16.packed", f16.view(np.float16))
    w.add_tensor("F16.expected", f16.view(np.float16).astype(np.float32))
    bf = RNG.integers(0, 65536, size=1024, dtype=np.uint16)
    w.add_tensor("BF16.packed", bf.view(np.uint8).reshape(1, -1), raw_dtype=T.BF16)
    w.add_tensor("BF16.expected", gguf.quants.dequantize(bf.view(np.uint8), T.BF16))
    for ty in SCALE_FIELDS:
        block, _ = gguf.GGML_QUANT_SIZES[ty]
        packed = random_blocks(ty, 1024 // block)
        w.add_tensor(f"{ty.name}.packed", packed.reshape(1, -1), raw_dtype=ty)
        w.add_tensor(f"{ty.name}.expected", gguf.quants.dequantize(packed.reshape(1, -1), ty).reshape(-1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_cpp_quantizers():
    """llama.cpp's reference quantizers (quantize_row_*_ref) from the libggml-base that
    `pip install llama-cpp-python` builds, or None when it is not installed (optional check)."""
    try:
        import ctypes
        import llama_cpp
    except ImportError:
        return None
    libs = sorted(Path(llama_cpp.__file__).parent.rglob("libggml-base.so*"))
    if not libs:
        return None
    lib = ctypes.CDLL(str(libs[0]))

    def quantizer(ty):
        fn = getattr(lib, f"quantize_row_{ty.name.lower().replace('_k', '_K')}_ref")
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        fn.restype = None

        def run(x):
            x = np.ascontiguousarray(x, dtype=np.float32)
            block, size = gguf.GGML_QUANT_SIZES[ty]
            out = np.zeros(x.size // block * size, dtype=np.uint8)
            fn(x.ctypes.data, out.ctypes.data, x.size)
            return out
        return run
    return quantizer


def write_quant():
    src = OUT / "quant_ours.gguf"
    if not src.exists():
        print(f"skipping quant.gguf: {src} missing (cargo run -p rlx-gguf --example quant_fixture -- {src})")
        return
    r = gguf.GGUFReader(src)
    tensors = {t.name: t for t in r.tensors}
    w = gguf.GGUFWriter(str(OUT / "quant.gguf"), arch="quant-fixture")
    llama = llama_cpp_quantizers()
    print("llama.cpp reference quantizers:", "found" if llama else "not installed (skipped)")
    for name in sorted(n for n in tensors if n.endswith(".input")):
        ty_name = name.split(".")[0]
        ty = T[ty_name]
        x = np.array(tensors[name].data, dtype=np.float32).reshape(-1)
        packed = np.array(tensors[f"{ty_name}.packed"].data, dtype=np.uint8).reshape(1, -1)
        w.add_tensor(f"{ty_name}.input", x)
        w.add_tensor(f"{ty_name}.packed", packed, raw_dtype=ty)
        if ty != T.Q8_K:  # gguf-py has no Q8_K dequantizer
            w.add_tensor(f"{ty_name}.gguf_py_dequant", gguf.quants.dequantize(packed, ty).reshape(-1))
        if ty in (T.Q4_0, T.Q8_0):
            w.add_tensor(f"{ty_name}.gguf_py_quant", gguf.quants.quantize(x.reshape(1, -1), ty), raw_dtype=ty)
        if llama is not None:
            w.add_tensor(f"{ty_name}.llama_cpp_quant", llama(ty)(x).reshape(1, -1), raw_dtype=ty)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    src.unlink()


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    v3 = write_meta_v3()
    (OUT / "meta_v3.json").write_text(json.dumps(v3, indent=1, ensure_ascii=False))
    raw = bytearray((OUT / "meta_v3.gguf").read_bytes())
    raw[4:8] = struct.pack("<I", 2)
    (OUT / "meta_v2.gguf").write_bytes(bytes(raw))
    (OUT / "meta_v2.json").write_text(json.dumps({**v3, "version": 2}, indent=1, ensure_ascii=False))
    v1 = write_v1()
    (OUT / "meta_v1.json").write_text(json.dumps(v1, indent=1, ensure_ascii=False))
    write_dequant()
    write_quant()
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote fixtures to {OUT} ({total} bytes)")


if __name__ == "__main__":
    main()
