//! Hand-made hostile files: each must give the specific error naming the offending offset or tensor.

use rlx_gguf::{Array, Error, GgmlType, Gguf, GgufFile, GgufWriter, Value, inspect, quantize};

/// A v3 file with one string key and one F32 tensor of 4 elements.
fn base() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_metadata("k", Value::String("v".into())).unwrap();
    w.add_tensor("t", &[4], GgmlType::F32, vec![0; 16]).unwrap();
    w.to_bytes().unwrap()
}

// Layout of `base()`: magic 0..4, version 4..8, n_tensors 8..16, n_kv 16..24, key len 24..32,
// key 32, value type 33..37, string len 37..45, "v" 45, then the tensor info at 46.
const N_TENSORS: usize = 8;
const N_KV: usize = 16;
const VALUE_TYPE: usize = 33;
const STR_LEN: usize = 37;
const T_NAME_LEN: usize = 46;
const T_NDIMS: usize = 55;
const T_DIM0: usize = 59;
const T_TYPE: usize = 67;
const T_OFFSET: usize = 71;

fn patch(at: usize, bytes: &[u8]) -> Vec<u8> {
    let mut b = base();
    b[at..at + bytes.len()].copy_from_slice(bytes);
    b
}

#[test]
fn base_layout_is_as_assumed() {
    let b = base();
    let g = Gguf::parse(&b).unwrap();
    assert_eq!(&b[T_NAME_LEN..T_NAME_LEN + 8], &1u64.to_le_bytes());
    assert_eq!(b[T_NAME_LEN + 8], b't');
    assert_eq!(g.tensors()[0].dims, vec![4]);
    assert_eq!(g.data_offset(), 96);
}

#[test]
fn bad_magic_and_versions() {
    assert!(matches!(Gguf::parse(b"GGUX\x03\0\0\0"), Err(Error::BadMagic { .. })));
    assert!(matches!(Gguf::parse(&patch(4, &9u32.to_le_bytes())), Err(Error::UnsupportedVersion { version: 9, .. })));
    let e = Gguf::parse(&patch(4, &3u32.to_be_bytes())).unwrap_err();
    assert!(e.to_string().contains("big-endian"), "{e}");
    assert!(matches!(Gguf::parse(b"GG"), Err(Error::Truncated { offset: 0, .. })));
}

#[test]
fn huge_counts_fail_before_allocating() {
    for (at, what) in [(N_KV, "metadata entries"), (N_TENSORS, "tensor infos"), (STR_LEN, "metadata string")] {
        let e = Gguf::parse(&patch(at, &u64::MAX.to_le_bytes())).unwrap_err();
        match e {
            Error::Truncated { what: w, needed, .. } => assert_eq!((w, needed > 1 << 40), (what, true)),
            other => panic!("{what}: {other}"),
        }
    }
    // An array of 2^61 u64 elements claimed in a tiny file.
    let mut w = GgufWriter::new();
    w.add_metadata("a", Value::Array(Array::U64(vec![1, 2]))).unwrap();
    let mut b = w.to_bytes().unwrap();
    let count_at = 24 + 8 + 1 + 4 + 4;
    b[count_at..count_at + 8].copy_from_slice(&(1u64 << 61).to_le_bytes());
    assert!(matches!(Gguf::parse(&b), Err(Error::Truncated { what: "metadata array elements", offset: 49, .. })));
}

#[test]
fn bad_values() {
    let e = Gguf::parse(&patch(VALUE_TYPE, &13u32.to_le_bytes())).unwrap_err();
    assert!(matches!(e, Error::InvalidValueType { offset: 33, raw: 13 }), "{e}");
    let e = Gguf::parse(&patch(45, &[0xFF])).unwrap_err();
    assert!(matches!(e, Error::InvalidUtf8 { offset: 45 }), "{e}");
    let mut w = GgufWriter::new();
    w.add_metadata("b", Value::Bool(true)).unwrap();
    let mut b = w.to_bytes().unwrap();
    b[24 + 8 + 1 + 4] = 2;
    assert!(matches!(Gguf::parse(&b), Err(Error::InvalidBool { offset: 37, value: 2 })));
}

#[test]
fn deep_nesting_is_refused() {
    let mut a = Array::I32(vec![1]);
    for _ in 0..20 {
        a = Array::Array(vec![a]);
    }
    let mut w = GgufWriter::new();
    w.add_metadata("deep", Value::Array(a)).unwrap();
    assert!(matches!(Gguf::parse(&w.to_bytes().unwrap()), Err(Error::NestingTooDeep { max: 16, .. })));
}

#[test]
fn bad_tensor_infos() {
    let e = Gguf::parse(&patch(T_NDIMS, &5u32.to_le_bytes())).unwrap_err();
    assert!(matches!(e, Error::TooManyDims { n_dims: 5, offset: 55, .. }), "{e}");
    let e = Gguf::parse(&patch(T_TYPE, &31u32.to_le_bytes())).unwrap_err();
    assert!(matches!(e, Error::UnknownTensorType { raw: 31, offset: 67, .. }), "{e}");
    let e = Gguf::parse(&patch(T_OFFSET, &32u64.to_le_bytes())).unwrap_err();
    assert!(matches!(e, Error::TensorOutOfBounds { start: 128, end: 144, len: 128, .. }), "{e}");
    let e = Gguf::parse(&patch(T_OFFSET, &u64::MAX.to_le_bytes())).unwrap_err();
    assert!(matches!(e, Error::MisalignedTensor { .. }), "{e}");
    let e = Gguf::parse(&patch(T_OFFSET, &(u64::MAX - 31).to_le_bytes())).unwrap_err();
    assert!(matches!(e, Error::TensorOutOfBounds { end: u64::MAX, .. }), "{e}");
    let e = Gguf::parse(&patch(T_DIM0, &(1u64 << 62).to_le_bytes())).unwrap_err();
    assert!(matches!(e, Error::SizeOverflow { .. }), "{e}");
    let e = Gguf::parse(&patch(T_TYPE, &2u32.to_le_bytes())).unwrap_err();
    assert!(e.to_string().contains("not a multiple of the Q4_0 block size 32"), "{e}");
}

#[test]
fn writer_validates() {
    let mut w = GgufWriter::new();
    w.add_metadata("k", Value::U8(1)).unwrap();
    assert!(matches!(w.add_metadata("k", Value::U8(2)), Err(Error::DuplicateKey { .. })));
    assert!(matches!(w.add_metadata("general.alignment", Value::U32(48)), Err(Error::BadAlignment { value: 48 })));
    assert!(matches!(w.add_tensor("x", &[32], GgmlType::Q4_0, vec![0; 17]), Err(Error::LengthMismatch { .. })));
    assert!(matches!(w.add_tensor("x", &[1, 1, 1, 1, 1], GgmlType::F32, vec![0; 4]), Err(Error::TooManyDims { .. })));
    w.add_tensor("x", &[32], GgmlType::Q4_0, vec![0; 18]).unwrap();
    assert!(matches!(w.add_tensor("x", &[32], GgmlType::Q4_0, vec![0; 18]), Err(Error::DuplicateTensor { .. })));
    assert!(GgufWriter::with_version(4).is_err());
}

#[test]
fn writer_round_trip_all_versions_and_alignments() {
    let x: Vec<f32> = (0..512).map(|i| (i as f32 * 0.05).sin()).collect();
    for version in 1..=3 {
        for alignment in [1u32, 8, 32, 256] {
            let mut w = GgufWriter::with_version(version).unwrap();
            w.add_metadata("general.alignment", Value::U32(alignment)).unwrap();
            w.add_metadata("nested", Value::Array(Array::Array(vec![Array::Bool(vec![true]), Array::F64(vec![])])))
                .unwrap();
            w.add_tensor("a", &[3], GgmlType::I8, vec![1, 2, 3]).unwrap();
            w.add_tensor("q", &[256, 2], GgmlType::Q4_K, quantize(GgmlType::Q4_K, &x).unwrap()).unwrap();
            w.add_tensor("f", &[512], GgmlType::F32, bytemuck_bytes(&x)).unwrap();
            let bytes = w.to_bytes().unwrap();
            let file = GgufFile::from_bytes(bytes).unwrap();
            let g = file.gguf();
            assert_eq!((g.version(), g.alignment()), (version, alignment as u64));
            assert_eq!(g.tensors().iter().map(|t| t.offset % alignment as u64).max(), Some(0));
            assert_eq!(file.tensor("a").unwrap().data, &[1, 2, 3]);
            assert_eq!(file.tensor("f").unwrap().to_f32().unwrap(), x);
            assert_eq!(file.tensor("q").unwrap().info.shape(), vec![2, 256]);
            let nested = g.get("nested").unwrap().as_array().unwrap();
            assert_eq!(nested.len(), 2);
            let text = inspect(g);
            assert!(text.contains(&format!("GGUF v{version}")) && text.contains("q  Q4_K"), "{text}");
        }
    }
}

fn bytemuck_bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn open_reports_missing_and_empty_files() {
    let e = GgufFile::open("/nonexistent/model.gguf").unwrap_err();
    assert!(e.to_string().contains("/nonexistent/model.gguf"), "{e}");
    let path = std::env::temp_dir().join(format!("rlx_gguf_empty_{}.gguf", std::process::id()));
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(GgufFile::open(&path), Err(Error::Truncated { offset: 0, .. })));
    std::fs::remove_file(&path).unwrap();
}
