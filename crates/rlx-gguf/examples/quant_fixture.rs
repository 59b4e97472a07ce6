//! Writes `quant_ours.gguf`: deterministic test inputs and our quantizer's blocks for each type we
//! quantize. `tools/gguf_fixtures.py` then adds gguf-py's dequantization of those blocks.
//!
//! Run: `cargo run -p rlx-gguf --example quant_fixture -- crates/rlx-gguf/tests/fixtures/quant_ours.gguf`

use rlx_gguf::{GgmlType, GgufWriter, quantize};

/// A small deterministic generator (splitmix64), so the inputs need no extra crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }

    fn normal(&mut self) -> f32 {
        let (u, v) = (self.uniform().max(1e-7), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
    }
}

/// 1024 values in 256-element segments of different character: normal, uniform positive,
/// normal with outliers, and a mix of zero, constant and tiny blocks.
fn inputs(seed: u64) -> Vec<f32> {
    let mut r = Rng(seed);
    let mut x = Vec::with_capacity(1024);
    x.extend((0..256).map(|_| r.normal() * 0.05));
    x.extend((0..256).map(|_| r.uniform() * 3.0));
    x.extend((0..256).map(|i| if i % 37 == 0 { r.normal() * 8.0 } else { r.normal() * 0.3 }));
    x.extend((0..256).map(|i| match i / 32 {
        0 => 0.0,
        1 => 0.75,
        2 => r.normal() * 1e-4,
        _ => r.normal() - 0.5,
    }));
    x
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: quant_fixture OUT.gguf")?;
    let mut w = GgufWriter::new();
    let types = [GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K];
    for (i, ty) in types.into_iter().enumerate() {
        let x = inputs(i as u64 + 1);
        let packed = quantize(ty, &x)?;
        w.add_tensor(format!("{ty}.input"), &[x.len() as u64], GgmlType::F32, bytemuck::cast_slice(&x).to_vec())?;
        w.add_tensor(format!("{ty}.packed"), &[x.len() as u64], ty, packed)?;
    }
    w.write_file(&path)?;
    println!("wrote {path}");
    Ok(())
}
