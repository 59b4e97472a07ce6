//! Randomized writer/reader round trip: random metadata trees of every value type (arrays nested up
//! to four deep) and random tensors, in every version, must read back equal.

use rlx_gguf::{Array, GgmlType, GgufFile, GgufWriter, Value};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn string(&mut self) -> String {
        const PIECES: [&str; 6] = ["a", "Ġthe", "✓", "", "<0x0A>", "日本"];
        (0..self.below(4)).map(|_| PIECES[self.below(6) as usize]).collect()
    }
}

fn random_array(r: &mut Rng, depth: usize) -> Array {
    let n = r.below(5) as usize;
    let kind = if depth >= 4 { r.below(12) } else { r.below(13) };
    match kind {
        0 => Array::U8((0..n).map(|_| r.next() as u8).collect()),
        1 => Array::I8((0..n).map(|_| r.next() as i8).collect()),
        2 => Array::U16((0..n).map(|_| r.next() as u16).collect()),
        3 => Array::I16((0..n).map(|_| r.next() as i16).collect()),
        4 => Array::U32((0..n).map(|_| r.next() as u32).collect()),
        5 => Array::I32((0..n).map(|_| r.next() as i32).collect()),
        6 => Array::F32((0..n).map(|_| f32::from_bits(r.next() as u32 & 0x7F7F_FFFF)).collect()),
        7 => Array::Bool((0..n).map(|_| r.below(2) == 1).collect()),
        8 => Array::String((0..n).map(|_| r.string()).collect()),
        9 => Array::U64((0..n).map(|_| r.next()).collect()),
        10 => Array::I64((0..n).map(|_| r.next() as i64).collect()),
        11 => Array::F64((0..n).map(|_| f64::from_bits(r.next() & 0x7FEF_FFFF_FFFF_FFFF)).collect()),
        _ => Array::Array((0..n).map(|_| random_array(r, depth + 1)).collect()),
    }
}

fn random_value(r: &mut Rng) -> Value {
    match r.below(13) {
        0 => Value::U8(r.next() as u8),
        1 => Value::I8(r.next() as i8),
        2 => Value::U16(r.next() as u16),
        3 => Value::I16(r.next() as i16),
        4 => Value::U32(r.next() as u32),
        5 => Value::I32(r.next() as i32),
        6 => Value::F32(f32::from_bits(r.next() as u32 & 0x7F7F_FFFF)),
        7 => Value::Bool(r.below(2) == 1),
        8 => Value::String(r.string()),
        9 => Value::U64(r.next()),
        10 => Value::I64(r.next() as i64),
        11 => Value::F64(f64::from_bits(r.next() & 0x7FEF_FFFF_FFFF_FFFF)),
        _ => Value::Array(random_array(r, 1)),
    }
}

#[test]
fn random_files_round_trip() {
    let mut r = Rng(0xC0FF_EE00_1234_5678);
    let types = [GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q6_K, GgmlType::IQ4_XS, GgmlType::I64];
    for case in 0..300 {
        let version = 1 + (case % 3) as u32;
        let mut w = GgufWriter::with_version(version).unwrap();
        let metadata: Vec<(String, Value)> =
            (0..r.below(12)).map(|i| (format!("k{i}.{}", r.string()), random_value(&mut r))).collect();
        for (k, v) in &metadata {
            w.add_metadata(k.clone(), v.clone()).unwrap();
        }
        let mut tensors = Vec::new();
        for i in 0..r.below(5) {
            let ty = types[r.below(types.len() as u64) as usize];
            let dims = vec![ty.block_size() as u64 * (1 + r.below(3)), 1 + r.below(3)];
            let bytes = (dims[0] * dims[1]) as usize / ty.block_size() * ty.type_size();
            let data: Vec<u8> = (0..bytes).map(|_| r.next() as u8).collect();
            w.add_tensor(format!("t{i}"), &dims, ty, data.clone()).unwrap();
            tensors.push((format!("t{i}"), dims, ty, data));
        }
        let file = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        assert_eq!(file.gguf().version(), version);
        assert_eq!(file.gguf().metadata(), metadata.as_slice(), "case {case}");
        for (name, dims, ty, data) in &tensors {
            let t = file.tensor(name).unwrap();
            assert_eq!((&t.info.dims, t.info.ty, t.data), (dims, *ty, data.as_slice()), "case {case} {name}");
        }
    }
}
