//! Checks against fixtures made by `tools/gguf_fixtures.py` with gguf-py: metadata of every type in
//! v1/v2/v3 files, the tensor table, and bit-exact dequantization of every type gguf-py implements.

use std::path::PathBuf;

use rlx_gguf::{Array, GgmlType, GgufFile, Value, dequantize, quantize};
use serde_json::{Value as Json, json};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// The script's JSON form of an array: `{"elem": type, "items": [...]}`, nested for arrays of arrays.
fn array_json(a: &Array) -> Json {
    let items: Json = match a {
        Array::U8(v) => json!(v),
        Array::I8(v) => json!(v),
        Array::U16(v) => json!(v),
        Array::I16(v) => json!(v),
        Array::U32(v) => json!(v),
        Array::I32(v) => json!(v),
        Array::F32(v) => json!(v.iter().map(|&x| x as f64).collect::<Vec<_>>()),
        Array::Bool(v) => json!(v),
        Array::String(v) => json!(v),
        Array::U64(v) => json!(v),
        Array::I64(v) => json!(v),
        Array::F64(v) => json!(v),
        Array::Array(v) => Json::Array(v.iter().map(array_json).collect()),
    };
    json!({"elem": a.element_type().name(), "items": items})
}

fn value_json(v: &Value) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::F32(x) => json!(*x as f64),
        Value::Bool(x) => json!(x),
        Value::String(x) => json!(x),
        Value::Array(a) => array_json(a),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F64(x) => json!(x),
    }
}

fn check_meta(name: &str) {
    let expected: Json =
        serde_json::from_str(&std::fs::read_to_string(fixture(&format!("{name}.json"))).unwrap()).unwrap();
    let file = GgufFile::open(fixture(&format!("{name}.gguf"))).unwrap();
    let g = file.gguf();
    assert_eq!(json!(g.version()), expected["version"], "{name} version");
    assert_eq!(json!(g.alignment()), expected["alignment"], "{name} alignment");
    assert_eq!(json!(g.data_offset()), expected["data_offset"], "{name} data offset");
    let meta: Vec<Json> = g.metadata().iter().map(|(k, v)| json!([k, v.value_type().name(), value_json(v)])).collect();
    let want = expected["metadata"].as_array().unwrap();
    assert_eq!(meta.len(), want.len(), "{name} metadata count");
    for (got, want) in meta.iter().zip(want) {
        assert_eq!(got, want, "{name} metadata entry");
    }
    let tensors: Vec<Json> = g
        .tensors()
        .iter()
        .map(|t| json!({"name": t.name, "type": t.ty.name(), "dims": t.dims, "offset": t.offset, "n_bytes": t.n_bytes}))
        .collect();
    assert_eq!(Json::Array(tensors), expected["tensors"], "{name} tensor table");
    for t in file.tensors() {
        assert_eq!(t.data.len() as u64, t.info.n_bytes);
        assert_eq!(t.data.as_ptr() as usize % g.alignment() as usize, 0, "mmap views keep the file's alignment");
    }
}

#[test]
fn metadata_v3_from_gguf_py() {
    check_meta("meta_v3");
    let file = GgufFile::open(fixture("meta_v3.gguf")).unwrap();
    let m = file.tensor("f32.matrix").unwrap();
    assert_eq!(m.info.shape(), vec![3, 5]);
    assert_eq!(m.as_f32().unwrap(), m.to_f32().unwrap().as_slice(), "zero-copy f32 view equals the conversion");
    let err = file.tensor("i8.vector").unwrap().to_f32().unwrap_err();
    assert!(err.to_string().contains("I8"), "{err}");
    assert!(file.tensor("missing").is_err());
    let text = rlx_gguf::inspect(file.gguf());
    for line in [
        "GGUF v3: 32 metadata entries, 4 tensors, 219 bytes of tensor data, alignment 64, data at offset 1472",
        "  n.deep: array[2] = [[[1], [2, 3]], [[\"deep\"]]]",
        "  a.f32: f32[3] = [0.1, -1e30, 6.5]",
        "  q8_0.rows   Q8_0     [2, 64]  offset 192  136 bytes",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line:?} in:\n{text}");
    }
}

#[test]
fn metadata_v2_same_layout() {
    check_meta("meta_v2");
}

#[test]
fn metadata_v1_hand_packed() {
    check_meta("meta_v1");
}

/// Bit-exact comparison (NaN matches NaN).
fn assert_bits_eq(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{what}[{i}]: got {a:e}, gguf-py {b:e}");
    }
}

#[test]
fn dequantize_bit_exact_with_gguf_py() {
    let file = GgufFile::open(fixture("dequant.gguf")).unwrap();
    let mut checked = Vec::new();
    for t in file.tensors().filter(|t| t.info.name.ends_with(".packed")) {
        let ty = t.info.ty;
        let expected = file.tensor(&t.info.name.replace(".packed", ".expected")).unwrap();
        let want = expected.as_f32().unwrap();
        assert_bits_eq(&t.to_f32().unwrap(), want, ty.name());
        checked.push(ty);
    }
    use GgmlType::*;
    let all = [F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS];
    assert_eq!(checked, all, "every type gguf-py dequantizes is covered");
}

/// Round-trip error bound per type, relative to each 256-element segment's largest magnitude.
fn max_rel_error(ty: GgmlType) -> f32 {
    match ty {
        GgmlType::Q4_0 => 0.13,
        GgmlType::Q4_K => 0.09,
        GgmlType::Q5_K => 0.045,
        GgmlType::Q6_K => 0.02,
        GgmlType::Q8_0 | GgmlType::Q8_K => 0.005,
        _ => unreachable!(),
    }
}

#[test]
fn our_quantizers_checked_by_gguf_py() {
    let file = GgufFile::open(fixture("quant.gguf")).unwrap();
    use GgmlType::*;
    for ty in [Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, Q8_K] {
        let input = file.tensor(&format!("{ty}.input")).unwrap();
        let x = input.as_f32().unwrap();
        let packed = file.tensor(&format!("{ty}.packed")).unwrap();
        // The committed blocks are what this quantizer produces today.
        let ours = quantize(ty, x).unwrap();
        let first_diff = ours.iter().zip(packed.data).position(|(a, b)| a != b);
        assert_eq!((ours.len(), first_diff), (packed.data.len(), None), "{ty}: quantizer output changed");
        let y = packed.to_f32().unwrap();
        if let Ok(reference) = file.tensor(&format!("{ty}.gguf_py_dequant")) {
            assert_bits_eq(&y, reference.as_f32().unwrap(), &format!("{ty} (our blocks, gguf-py dequant)"));
        }
        if let Ok(reference) = file.tensor(&format!("{ty}.gguf_py_quant")) {
            let first_diff = packed.data.iter().zip(reference.data).position(|(a, b)| a != b);
            assert_eq!(first_diff, None, "{ty}: first byte differing from gguf-py's quantizer");
        }
        if let Ok(reference) = file.tensor(&format!("{ty}.llama_cpp_quant")) {
            let first_diff = packed.data.iter().zip(reference.data).position(|(a, b)| a != b);
            assert_eq!(first_diff, None, "{ty}: first byte differing from llama.cpp's quantize_row_ref");
        }
        for (seg, (xs, ys)) in x.chunks(256).zip(y.chunks(256)).enumerate() {
            let amax = xs.iter().fold(0f32, |a, v| a.max(v.abs()));
            let err = xs.iter().zip(ys).fold(0f32, |a, (p, q)| a.max((p - q).abs()));
            let bound = max_rel_error(ty) * amax;
            assert!(err <= bound, "{ty} segment {seg}: max error {err:e} > {bound:e} (amax {amax:e})");
        }
        assert!(file.tensor(&format!("{ty}.gguf_py_dequant")).is_ok() || ty == Q8_K);
    }
}

#[test]
fn quantize_dequantize_random_rows() {
    // Root-mean-square error relative to the RMS of the data, on smooth random-ish rows.
    use GgmlType::*;
    let x: Vec<f32> = (0..4096).map(|i| ((i as f32 * 0.37).sin() + (i as f32 * 0.011).cos()) * 0.5).collect();
    let rms = (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt();
    for (ty, bound) in [(Q4_0, 0.12), (Q4_K, 0.06), (Q5_K, 0.03), (Q6_K, 0.015), (Q8_0, 0.005), (Q8_K, 0.006)] {
        let y = dequantize(ty, &quantize(ty, &x).unwrap(), x.len()).unwrap();
        let err = (x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / x.len() as f32).sqrt();
        assert!(err / rms < bound, "{ty}: relative RMS error {} >= {bound}", err / rms);
    }
}
