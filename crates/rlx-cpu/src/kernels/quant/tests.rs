//! The SIMD paths against the portable path (bit for bit: same integer math) and against the
//! exact f32 product with rlx-gguf's dequantizer (within the 8-bit activation error).

use super::dot::{Q8K, Q80, quantize_q8k, quantize_q80};
use super::{Isa, RowDot, row_dot};
use rlx_ir::QuantScheme;
use rlx_ir::ops::util::rand_f64;

const SCHEMES: [QuantScheme; 5] =
    [QuantScheme::Q4_0, QuantScheme::Q8_0, QuantScheme::Q4_K, QuantScheme::Q5_K, QuantScheme::Q6_K];

fn rand(n: usize, scale: f64, seed: u64) -> Vec<f32> {
    rand_f64(n, -scale, scale, seed).into_iter().map(|v| v as f32).collect()
}

/// The row dot of `scheme` on `isa` for packed `w` (one row) and activations `x`.
fn run(scheme: QuantScheme, isa: Isa, w: &[u8], x: &[f32]) -> f32 {
    match row_dot(scheme, isa).expect("scheme has an int8 path") {
        RowDot::K(f) => {
            let mut a = vec![Q8K::default(); x.len() / 256];
            quantize_q8k(x, &mut a);
            f(w, &a)
        }
        RowDot::Z(f) => {
            let mut a = vec![Q80::default(); x.len() / 32];
            quantize_q80(x, &mut a);
            f(w, &a)
        }
    }
}

#[test]
fn simd_paths_match_the_portable_path_exactly_and_the_reference_closely() {
    let isas = Isa::available();
    eprintln!("quant dot paths on this CPU: {isas:?}");
    for (si, s) in SCHEMES.into_iter().enumerate() {
        for (case, (k, scale)) in [(1024usize, 1.0f64), (2048, 30.0), (512, 1e-3)].into_iter().enumerate() {
            let seed = 100 * si as u64 + 10 * case as u64;
            let wf = rand(k, scale, seed);
            let w = s.quantize_rows(&wf, k).unwrap();
            let x = rand(k, 1.0, seed + 1);
            let want = run(s, Isa::Scalar, &w, &x);
            for &isa in &isas {
                let got = run(s, isa, &w, &x);
                assert_eq!(got.to_bits(), want.to_bits(), "{s} k={k} {isa:?}: {got} vs scalar {want}");
            }
            let mut deq = vec![0f32; k];
            s.dequantize_rows(&w, k, &mut deq).unwrap();
            let exact: f64 = x.iter().zip(&deq).map(|(a, b)| *a as f64 * *b as f64).sum();
            let amax = deq.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
            // Each activation is off by at most half a step (1/254 of its block's max).
            let bound = deq.iter().map(|v| v.abs() as f64).sum::<f64>() / 254.0 + 1e-6 * amax;
            assert!((want as f64 - exact).abs() <= bound, "{s} k={k}: {want} vs exact {exact} (bound {bound})");
        }
    }
}

#[test]
fn extreme_blocks_match_across_paths() {
    // Q8_0 weights of -128 (legal in GGUF files), zero activations, and zero scales.
    let mut w = vec![0u8; 34 * 4];
    for (b, blk) in w.chunks_exact_mut(34).enumerate() {
        blk[0..2].copy_from_slice(&half::f16::from_f32(0.5 * b as f32).to_le_bytes());
        for (l, q) in blk[2..].iter_mut().enumerate() {
            *q = if l % 3 == 0 { 0x80 } else { (l as u8).wrapping_mul(37) };
        }
    }
    let mut x = rand(128, 2.0, 7);
    x[32..64].fill(0.0);
    x[64] = -2.0;
    let want = run(QuantScheme::Q8_0, Isa::Scalar, &w, &x);
    for isa in Isa::available() {
        assert_eq!(run(QuantScheme::Q8_0, isa, &w, &x).to_bits(), want.to_bits(), "{isa:?}");
    }
    // Every K-quant byte pattern at its extremes: all 0xFF blocks except finite scales.
    for s in [QuantScheme::Q4_K, QuantScheme::Q5_K, QuantScheme::Q6_K] {
        let mut w = vec![0xFFu8; s.block_bytes()];
        let d = half::f16::from_f32(0.25).to_le_bytes();
        let at = if s == QuantScheme::Q6_K { 208 } else { 0 };
        w[at..at + 2].copy_from_slice(&d);
        if s != QuantScheme::Q6_K {
            w[2..4].copy_from_slice(&d);
        }
        let x = rand(256, 1.0, 9);
        let want = run(s, Isa::Scalar, &w, &x);
        assert!(want.is_finite());
        for isa in Isa::available() {
            assert_eq!(run(s, isa, &w, &x).to_bits(), want.to_bits(), "{s} {isa:?}");
        }
    }
}
