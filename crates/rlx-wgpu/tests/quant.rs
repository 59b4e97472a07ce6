//! Packed GGUF weights on wgpu past the op samples: every scheme the WGSL decoders claim, with
//! weight row counts that do not fill a tile, m = 1 (matrix-vector kernel) and m > 8 (tiled
//! GEMM), against the reference interpreter (exact dequantization, f64 dot products).

mod common;

use common::require_gpu;
use rlx_driver::run_host;
use rlx_ir::ops::quant::packed;
use rlx_ir::ops::util::rand_f64;
use rlx_ir::quant::QuantScheme;
use rlx_ir::testkit::compare_within;
use rlx_ir::{DType, Graph, HostTensor, Shape, interp};
use rlx_wgpu::WgpuBackend;

const SCHEMES: [QuantScheme; 5] =
    [QuantScheme::Q8_0, QuantScheme::Q4_0, QuantScheme::Q4_K, QuantScheme::Q5_K, QuantScheme::Q6_K];

/// Runs `g` on wgpu and on the reference interpreter; compares within `tol` (abs, rel).
fn check(g: &Graph, feeds: &[(&str, HostTensor)], tol: (f64, f64)) {
    let got = run_host(&WgpuBackend::new(), g, feeds).expect("wgpu run");
    let want = interp::evaluate(g, feeds).expect("reference");
    for (a, b) in got.iter().zip(&want) {
        compare_within(a, b, Some(tol)).unwrap_or_else(|e| panic!("{}: {e}", g.name()));
    }
}

#[test]
fn dequantize_matches_the_gguf_reference() {
    if require_gpu() {
        return;
    }
    for (i, s) in SCHEMES.into_iter().enumerate() {
        let (n, k) = (5, 512);
        let w = packed(s, &[n], k, 7 + i as u64);
        let mut g = Graph::new(format!("dequantize/{s}"));
        let x = g.param("w", w.shape.clone());
        let y = g.dequantize(x, s, k);
        g.set_outputs(vec![y]);
        // Weights are a * q + b in f32: at most one rounding away from the reference.
        check(&g, &[("w", w)], (1e-6, 1e-6));
    }
}

#[test]
fn qmatmul_matvec_and_gemm_match_the_reference() {
    if require_gpu() {
        return;
    }
    for (i, s) in SCHEMES.into_iter().enumerate() {
        let k = 512;
        // 37 weight rows leave a partial 32-row tile; m = 1 and 3 take the matrix-vector
        // kernel, 40 and [2, 21] the GEMM with a partial row tile.
        for (j, xd) in [vec![1, k], vec![3, k], vec![40, k], vec![2, 21, k]].into_iter().enumerate() {
            let seed = 100 + 10 * i as u64 + j as u64;
            let n = 37;
            let w = packed(s, &[n], k, seed);
            let xs =
                HostTensor::from_f64(&xd, DType::F32, &rand_f64(xd.iter().product(), -1.0, 1.0, seed + 5)).expect("x");
            let mut g = Graph::new(format!("qmatmul/{s}/{xd:?}"));
            let x = g.input("x", Shape::new(&xd, DType::F32));
            let wp = g.param("w", w.shape.clone());
            let y = g.qmatmul(x, wp, s, k);
            g.set_outputs(vec![y]);
            // f32 accumulation of 512 products of |x|, |w| <= 1: well under 1e-4.
            check(&g, &[("x", xs), ("w", w)], (1e-4, 1e-4));
        }
    }
}

#[test]
fn qmatmul_with_f16_activations_rounds_only_at_the_store() {
    if require_gpu() || !rlx_wgpu::gpu::has_f16() {
        eprintln!("no shader-f16 on this adapter: f16 activations are refused (see no_f16.rs)");
        return;
    }
    let (s, k, n) = (QuantScheme::Q4_K, 256, 33);
    for m in [1, 12] {
        let w = packed(s, &[n], k, 3);
        let xs = HostTensor::from_f64(&[m, k], DType::F16, &rand_f64(m * k, -1.0, 1.0, 4)).expect("x");
        let mut g = Graph::new(format!("qmatmul/f16/{m}"));
        let x = g.input("x", Shape::new(&[m, k], DType::F16));
        let wp = g.param("w", w.shape.clone());
        let y = g.qmatmul(x, wp, s, k);
        g.set_outputs(vec![y]);
        // One f16 rounding of outputs up to ~10 in size.
        check(&g, &[("x", xs), ("w", w)], (1e-2, 2e-3));
    }
}

#[test]
fn byte_rows_gather_and_move_like_the_reference() {
    if require_gpu() {
        return;
    }
    // Packed rows of 34 bytes (not a whole number of words): gathered by i64 token ids, then
    // transposed and concatenated (byte movement assembling words from two inputs).
    let vals: Vec<i64> = (0..7 * 34).map(|i| (i * 37 % 256) as i64).collect();
    let table = HostTensor::from_i64(&[7, 34], DType::U8, &vals).expect("table");
    let ids = HostTensor::from_i64(&[1, 5], DType::I64, &[6, 0, 3, 3, 1]).expect("ids");
    let mut g = Graph::new("byte rows");
    let t = g.param("table", table.shape.clone());
    let i = g.input("ids", ids.shape.clone());
    let rows = g.gather(t, i, 0);
    let flat = g.reshape(rows, &[5, 34]);
    let tr = g.transpose(flat, &[1, 0]);
    let cat = g.concat(&[t, flat], 0);
    g.set_outputs(vec![rows, tr, cat]);
    check(&g, &[("table", table), ("ids", ids)], (0.0, 0.0));
}
