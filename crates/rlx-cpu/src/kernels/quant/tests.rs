//! The SIMD paths against the portable path (bit for bit: same integer math) and against the
//! exact f32 product with rlx-ir's block dequantizer (within the 8-bit activation error).

use super::dot::{Q8K, Q80, quantize_q8k, quantize_q80};
use super::{Isa, RowDot};
use rlx_ir::QuantScheme;
use rlx_ir::ops::util::rand_f64;

const SCHEMES: [QuantScheme; 5] =
    [QuantScheme::Q4_0, QuantScheme::Q8_0, QuantScheme::Q4_K, QuantScheme::Q5_K, QuantScheme::Q6_K];

fn rand(n: usize, scale: f64, seed: u64) -> Vec<f32> {
    rand_f64(n, -scale, scale, seed).into_iter().map(|v| v as f32).collect()
}

/// The row dot of `scheme` on `isa` for packed `w` (one row) and activations `x`.
fn run(scheme: QuantScheme, isa: Isa, w: &[u8], x: &[f32]) -> f32 {
    run_with(scheme, isa, true, w, x)
}

/// As `run`, with the four-block kernels (`four`) or the one-block ones.
fn run_with(scheme: QuantScheme, isa: Isa, four: bool, w: &[u8], x: &[f32]) -> f32 {
    match super::row_dot_with(scheme, isa, four).expect("scheme has an int8 path") {
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
    // Every byte pattern at its extremes: all 0xFF blocks except finite scales.
    for s in [QuantScheme::Q4_K, QuantScheme::Q5_K, QuantScheme::Q6_K, QuantScheme::Q4_0] {
        let mut w = vec![0xFFu8; s.block_bytes()];
        let d = half::f16::from_f32(0.25).to_le_bytes();
        let at = if s == QuantScheme::Q6_K { 208 } else { 0 };
        w[at..at + 2].copy_from_slice(&d);
        if s == QuantScheme::Q4_K || s == QuantScheme::Q5_K {
            w[2..4].copy_from_slice(&d);
        }
        let x = rand(s.block_size(), 1.0, 9);
        let want = run(s, Isa::Scalar, &w, &x);
        assert!(want.is_finite());
        for isa in Isa::available() {
            assert_eq!(run(s, isa, &w, &x).to_bits(), want.to_bits(), "{s} {isa:?}");
        }
    }
}

#[test]
fn four_block_and_one_block_kernels_match_the_portable_path_exactly() {
    let mut checked = 0;
    // Q5_K and Q4_0 have one form only (`four` picks the same kernel).
    let schemes = [QuantScheme::Q4_K, QuantScheme::Q6_K, QuantScheme::Q8_0, QuantScheme::Q5_K, QuantScheme::Q4_0];
    for (si, s) in schemes.into_iter().enumerate() {
        // Every tail length of the four-block step.
        for blocks in 1..=9usize {
            let k = blocks * s.block_size();
            let seed = 1000 + 10 * si as u64 + blocks as u64;
            let mut w = s.quantize_rows(&rand(k, [1.0, 30.0, 1e-3][blocks % 3], seed), k).unwrap();
            // One all-0xFF block with finite scales: every bit pattern at its extreme.
            let bb = s.block_bytes();
            let last = (blocks - 1) * bb;
            w[last..last + bb].fill(0xFF);
            let at = if s == QuantScheme::Q6_K { bb - 2 } else { 0 };
            w[last + at..last + at + 2].copy_from_slice(&half::f16::from_f32(0.25).to_le_bytes());
            if s == QuantScheme::Q4_K || s == QuantScheme::Q5_K {
                w[last + 2..last + 4].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
            }
            let x = rand(k, 1.0, seed + 1);
            let want = run_with(s, Isa::Scalar, true, &w, &x);
            for isa in Isa::available() {
                for four in [true, false] {
                    let got = run_with(s, isa, four, &w, &x);
                    assert_eq!(got.to_bits(), want.to_bits(), "{s} k={k} {isa:?} four={four}: {got} vs {want}");
                    checked += 1;
                }
            }
        }
    }
    eprintln!("row kernels checked: {checked}");
}

/// `y[m, n]` through the batched (prefill) kernel on `isa`.
#[cfg(target_arch = "x86_64")]
fn run_gemm(s: QuantScheme, isa: Isa, w: &[u8], n: usize, x: &[f32], k: usize) -> Vec<f32> {
    let m = x.len() / k;
    let rb = s.row_bytes(k).unwrap();
    let mut y = vec![f32::NAN; m * n];
    let out = super::OutPtr(y.as_mut_ptr());
    if s.block_size() == 256 {
        let mut a = vec![Q8K::default(); m * k / 256];
        for (x, a) in x.chunks_exact(k).zip(a.chunks_exact_mut(k / 256)) {
            quantize_q8k(x, a);
        }
        super::gemm::gemm_k(isa, s, &a, (m, k), w, rb, n, out, &mut super::gemm::Scratch::new(m, k));
    } else {
        let mut a = vec![Q80::default(); m * k / 32];
        for (x, a) in x.chunks_exact(k).zip(a.chunks_exact_mut(k / 32)) {
            quantize_q80(x, a);
        }
        super::gemm::gemm_0(isa, s, &a, (m, k), w, rb, n, out, &super::gemm::Scratch::new(m, k));
    }
    y
}

#[cfg(target_arch = "x86_64")]
#[test]
fn batched_path_matches_dequantized_f32_matmul_and_the_row_path() {
    let mut checked = 0;
    for (si, s) in SCHEMES.into_iter().enumerate() {
        // Odd m and n (tails of every micro-kernel shape), k odd multiples of the block size, and
        // m past one block of activation rows.
        for (m, n, blocks, scale) in
            [(5usize, 7usize, 3usize, 1.0f64), (9, 37, 1, 20.0), (2, 3, 5, 1e-2), (17, 18, 2, 1.0), (71, 3, 1, 1.0)]
        {
            let k = blocks * s.block_size();
            let seed = 7000 + 100 * si as u64 + m as u64;
            let w = s.quantize_rows(&rand(n * k, scale, seed), k).unwrap();
            let rb = s.row_bytes(k).unwrap();
            let x = rand(m * k, 1.0, seed + 1);
            let mut deq = vec![0f32; n * k];
            s.dequantize_rows(&w, k, &mut deq).unwrap();
            for isa in Isa::available() {
                if !super::gemm::supported(s, isa) {
                    continue;
                }
                let y = run_gemm(s, isa, &w, n, &x, k);
                for i in 0..m {
                    let xi = &x[i * k..(i + 1) * k];
                    for j in 0..n {
                        let wj = &deq[j * k..(j + 1) * k];
                        let exact: f64 = xi.iter().zip(wj).map(|(a, b)| *a as f64 * *b as f64).sum();
                        let mag: f64 = wj.iter().map(|v| v.abs() as f64).sum();
                        // 8-bit activations: half a step (1/254 of the block max) per value.
                        let bound = mag / 254.0 + 1e-5 * mag;
                        let got = y[i * n + j] as f64;
                        assert!(
                            (got - exact).abs() <= bound,
                            "{s} {isa:?} m={m} n={n} k={k} ({i},{j}): {got} vs {exact}"
                        );
                        // Same integer sums as the row path, only the float order differs.
                        let row = run(s, Isa::Scalar, &w[j * rb..(j + 1) * rb], xi) as f64;
                        let tol = 1e-5 * (mag + 1.0) * xi.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
                        assert!((got - row).abs() <= tol, "{s} {isa:?} ({i},{j}): {got} vs row path {row}");
                    }
                }
                checked += 1;
            }
        }
    }
    eprintln!("batched cases checked: {checked}");
    assert!(checked > 0 || Isa::detect() == Isa::Scalar);
}

/// K-quant rows (`n` x `blocks` blocks) with random values and one all-0xFF block (finite scales).
fn k_rows(s: QuantScheme, n: usize, blocks: usize, seed: u64) -> Vec<u8> {
    let k = 256 * blocks;
    let mut w = s.quantize_rows(&rand(n * k, [1.0, 30.0, 1e-3][seed as usize % 3], seed), k).unwrap();
    let bb = s.block_bytes();
    let last = (n * blocks - 1) * bb;
    w[last..last + bb].fill(0xFF);
    let at = if s == QuantScheme::Q6_K { bb - 2 } else { 0 };
    w[last + at..last + at + 2].copy_from_slice(&half::f16::from_f32(0.25).to_le_bytes());
    if s != QuantScheme::Q6_K {
        w[last + 2..last + 4].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
    }
    w
}

#[test]
fn repacked_groups_match_the_row_path_exactly_and_the_dequantized_reference() {
    use super::repack;
    let mut checked = 0;
    for (si, s) in [QuantScheme::Q4_K, QuantScheme::Q5_K, QuantScheme::Q6_K].into_iter().enumerate() {
        // Row counts around the group of eight (tails of 1..7 rows) and several block counts.
        for (n, blocks) in [(1usize, 1usize), (7, 3), (8, 1), (9, 2), (17, 8), (30, 1)] {
            let k = 256 * blocks;
            let seed = 5000 + 100 * si as u64 + n as u64;
            let w = k_rows(s, n, blocks, seed);
            let rb = s.row_bytes(k).unwrap();
            let mut x = rand(k, 1.0, seed + 1);
            // Activations of -128 against the all-ones last block of `k_rows`: the largest
            // partial sums the i16 accumulation of the AVX2 kernels must hold.
            x[k - 256..].fill(-1.0);
            let mut a = vec![Q8K::default(); blocks];
            quantize_q8k(&x, &mut a);
            let mut ps = vec![[0i32; 4]; blocks];
            repack::pair_sums(&a, &mut ps);
            let gb = repack::group_block_bytes(s).unwrap() * blocks;
            let mut packed = vec![0u8; n.div_ceil(repack::ROWS) * gb];
            repack::repack(s, &w, n, k, &mut packed);
            let mut deq = vec![0f32; n * k];
            s.dequantize_rows(&w, k, &mut deq).unwrap();
            let mut isas = Isa::available();
            isas.retain(|&i| i != Isa::Scalar);
            for isa in [Isa::Scalar].into_iter().chain(isas) {
                let mut y = vec![f32::NAN; n];
                if isa == Isa::Scalar {
                    // The layout read back value by value.
                    for (g, ys) in y.chunks_mut(repack::ROWS).enumerate() {
                        let mut out = [0f32; repack::ROWS];
                        repack::scalar(s, &packed[g * gb..(g + 1) * gb], &a, &mut out);
                        ys.copy_from_slice(&out[..ys.len()]);
                    }
                } else {
                    repack::matvec(isa, s, &packed, &a, &ps, n, k, super::OutPtr(y.as_mut_ptr()));
                }
                for j in 0..n {
                    let want = run(s, Isa::Scalar, &w[j * rb..(j + 1) * rb], &x);
                    assert_eq!(y[j].to_bits(), want.to_bits(), "{s} {isa:?} n={n} k={k} row {j}: {} vs {want}", y[j]);
                    let wj = &deq[j * k..(j + 1) * k];
                    let exact: f64 = x.iter().zip(wj).map(|(a, b)| *a as f64 * *b as f64).sum();
                    let mag: f64 = wj.iter().map(|v| v.abs() as f64).sum();
                    let bound = mag / 254.0 + 1e-5 * mag;
                    assert!((y[j] as f64 - exact).abs() <= bound, "{s} {isa:?} row {j}: {} vs exact {exact}", y[j]);
                }
                checked += 1;
            }
            // Rows past n in the last group are zero.
            let tail = n % repack::ROWS;
            if tail != 0 {
                let mut out = [f32::NAN; repack::ROWS];
                repack::scalar(s, &packed[packed.len() - gb..], &a, &mut out);
                assert!(out[tail..].iter().all(|&v| v == 0.0), "{s} n={n}: {out:?}");
            }
        }
    }
    eprintln!("repacked cases checked: {checked}");
}

#[test]
fn compiled_decode_repacks_per_param_version() {
    use rlx_ir::{DType, Graph, Shape};
    let cpu = crate::CpuBackend::new();
    // 21 rows: a pair of full groups then a short one alone; 12: a full group paired with a
    // short one (the 512-bit pair kernels where the CPU has them).
    for (s, n) in [QuantScheme::Q4_K, QuantScheme::Q5_K, QuantScheme::Q6_K, QuantScheme::Q8_0]
        .into_iter()
        .flat_map(|s| [(s, 21), (s, 12)])
    {
        let k = 512;
        let rb = s.row_bytes(k).unwrap();
        let mut g = Graph::new("decode");
        let x = g.input("x", Shape::new(&[1, k], DType::F32));
        let w = g.param("w", Shape::new(&[n, rb], DType::U8));
        let y = g.qmatmul(x, w, s, k);
        g.set_outputs(vec![y]);
        let (legal, _) = rlx_driver::legalize(&g, &cpu).unwrap();
        let mut exe = rlx_driver::compile_graph(&cpu, &legal).unwrap();
        let xv = rand(k, 1.0, 77);
        let xb: Vec<u8> = xv.iter().flat_map(|v| v.to_le_bytes()).collect();
        for round in 0..3u64 {
            let wb = s.quantize_rows(&rand(n * k, 1.0, 900 + round), k).unwrap();
            exe.set_param(0, &wb).unwrap();
            let want: Vec<f32> = (0..n).map(|j| run(s, Isa::Scalar, &wb[j * rb..(j + 1) * rb], &xv)).collect();
            // The first run of a version makes the repacked copy, later ones reuse it.
            for r in 0..3 {
                let mut out = vec![0u8; n * 4];
                exe.run(&[&xb], &mut [out.as_mut_slice()]).unwrap();
                let got: Vec<f32> = out.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
                for j in 0..n {
                    assert_eq!(got[j].to_bits(), want[j].to_bits(), "{s} round {round} run {r} row {j}");
                }
            }
        }
    }
}

#[test]
fn q6k_value_unpacking_paths_agree() {
    let w = k_rows(QuantScheme::Q6_K, 1, 4, 31);
    for blk in w.chunks_exact(210) {
        let want = super::repack::q6_values_scalar(blk);
        assert_eq!(super::repack::q6_values(blk), want);
        let mut deq = [0f32; 256];
        QuantScheme::Q6_K.dequantize_rows(blk, 256, &mut deq).unwrap();
        let d = half::f16::from_le_bytes([blk[208], blk[209]]).to_f32();
        for (e, (&q, &x)) in want.iter().zip(&deq).enumerate() {
            let sc = blk[192 + e / 16] as i8 as f32;
            assert_eq!(d * sc * (q as f32 - 32.0), x, "value {e}");
        }
    }
}

/// Asserts that `y` (m x n, from a repacked kernel on `isa`) equals the scalar row path over the
/// original weight rows `w` and activations `x`, bit for bit.
fn same_as_row_path(s: QuantScheme, isa: Isa, y: &[f32], w: &[u8], x: &[f32], (m, k, n): (usize, usize, usize)) {
    let rb = s.row_bytes(k).unwrap();
    for i in 0..m {
        for j in 0..n {
            let want = run(s, Isa::Scalar, &w[j * rb..(j + 1) * rb], &x[i * k..(i + 1) * k]);
            let got = y[i * n + j];
            assert_eq!(got.to_bits(), want.to_bits(), "{s} {isa:?} m={m} n={n} k={k} ({i},{j}): {got} vs {want}");
        }
    }
}

#[test]
#[cfg(target_arch = "x86_64")]
fn repacked_prefill_matches_the_row_path_exactly() {
    use super::{repack, x8gemm};
    let mut isas = Isa::available();
    isas.retain(|&i| i != Isa::Scalar);
    let mut checked = 0;
    for (si, s) in [QuantScheme::Q4_K, QuantScheme::Q5_K, QuantScheme::Q6_K].into_iter().enumerate() {
        // Row counts around the group of eight; m around every micro-kernel tail and past one
        // block of activation rows (64).
        for (n, blocks, ms) in
            [(7usize, 3usize, &[2usize, 3, 5][..]), (9, 1, &[4, 9]), (17, 2, &[2, 65, 70]), (8, 1, &[64])]
        {
            let k = 256 * blocks;
            let seed = 8000 + 100 * si as u64 + n as u64;
            let w = k_rows(s, n, blocks, seed);
            let gb = repack::group_block_bytes(s).unwrap() * blocks;
            let mut packed = vec![0u8; n.div_ceil(repack::ROWS) * gb];
            repack::repack(s, &w, n, k, &mut packed);
            for &m in ms {
                let mut x = rand(m * k, 1.0, seed + m as u64);
                // Row 0's last block at -128 (see the decode test).
                x[k - 256..k].fill(-1.0);
                let mut a = vec![Q8K::default(); m * blocks];
                for (x, a) in x.chunks_exact(k).zip(a.chunks_exact_mut(blocks)) {
                    quantize_q8k(x, a);
                }
                let mut ps = vec![[0i32; 4]; m * blocks];
                repack::pair_sums(&a, &mut ps);
                for &isa in &isas {
                    let mut y = vec![f32::NAN; m * n];
                    x8gemm::gemm(isa, s, &packed, &a, &ps, (m, k), n, super::OutPtr(y.as_mut_ptr()));
                    same_as_row_path(s, isa, &y, &w, &x, (m, k, n));
                    checked += 1;
                }
            }
        }
    }
    eprintln!("repacked prefill cases checked: {checked}");
    assert!(checked > 0 || Isa::detect() == Isa::Scalar);
}

#[test]
fn decode_and_prefill_graphs_share_one_repacked_copy_per_version() {
    use rlx_driver::Executable;
    use rlx_ir::{DType, Graph, Shape};
    let cpu = crate::CpuBackend::new();
    let compile = |s: QuantScheme, m: usize, n: usize, k: usize| {
        let mut g = Graph::new("q");
        let x = g.input("x", Shape::new(&[m, k], DType::F32));
        let w = g.param("w", Shape::new(&[n, s.row_bytes(k).unwrap()], DType::U8));
        let y = g.qmatmul(x, w, s, k);
        g.set_outputs(vec![y]);
        let (legal, _) = rlx_driver::legalize(&g, &cpu).unwrap();
        rlx_driver::compile_graph(&cpu, &legal).unwrap()
    };
    let f32s =
        |b: &[u8]| -> Vec<f32> { b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect() };
    for s in [QuantScheme::Q4_K, QuantScheme::Q5_K, QuantScheme::Q6_K, QuantScheme::Q8_0] {
        let (n, k) = (19, 512);
        let rb = s.row_bytes(k).unwrap();
        let mut dec = compile(s, 1, n, k);
        // Prefill graphs at m around the micro-kernel tails, sharing the decode graph's param.
        let mut pre: Vec<(usize, Box<dyn Executable>)> =
            [2usize, 5, 15, 16].into_iter().map(|m| (m, compile(s, m, n, k))).collect();
        for (_, e) in &mut pre {
            e.bind_param(0, dec.share_param(0).unwrap()).unwrap();
        }
        for round in 0..2u64 {
            let wb = s.quantize_rows(&rand(n * k, 1.0, 950 + round), k).unwrap();
            // A new version through the decode graph: every sharer sees it.
            dec.set_param(0, &wb).unwrap();
            let x = rand(16 * k, 1.0, 960 + round);
            let want: Vec<f32> = (0..16 * n)
                .map(|e| run(s, Isa::Scalar, &wb[(e % n) * rb..(e % n + 1) * rb], &x[(e / n) * k..(e / n + 1) * k]))
                .collect();
            let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            let mut out = vec![0u8; n * 4];
            dec.run(&[&xb[..k * 4]], &mut [out.as_mut_slice()]).unwrap();
            assert_eq!(
                f32s(&out).iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want[..n].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{s} decode round {round}"
            );
            for (m, e) in &mut pre {
                let mut out = vec![0u8; *m * n * 4];
                e.run(&[&xb[..*m * k * 4]], &mut [out.as_mut_slice()]).unwrap();
                let got = f32s(&out);
                // The AMX prefill rounds activations to bf16, not Q8: close, not bit for bit.
                let tol =
                    if super::amx_rows(s, *m, k) { 2e-2 * want.iter().fold(0f32, |a, v| a.max(v.abs())) } else { 0.0 };
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    if tol == 0.0 {
                        assert_eq!(g.to_bits(), w.to_bits(), "{s} m={m} round {round} element {i}: {g} vs {w}");
                    } else {
                        assert!((g - w).abs() <= tol, "{s} m={m} (AMX) round {round} element {i}: {g} vs {w}");
                    }
                }
            }
            // One copy for all four graphs (none where decode does not repack: the portable path,
            // aarch64); the previous version's is gone.
            let want = usize::from(super::repacked(s, Isa::detect()));
            assert_eq!(super::packed::live_copies(s, n, k), want, "{s} round {round}");
        }
    }
}

#[test]
fn repacked_q8_0_matches_the_row_path_exactly() {
    use super::{repack, x8q80};
    let s = QuantScheme::Q8_0;
    let mut checked = 0;
    for (n, blocks, ms) in [(7usize, 3usize, &[1usize, 2, 5][..]), (9, 8, &[1, 4]), (17, 1, &[1, 3, 66]), (8, 5, &[1])]
    {
        let k = 32 * blocks;
        let rb = s.row_bytes(k).unwrap();
        let mut w = s.quantize_rows(&rand(n * k, [1.0, 30.0, 1e-3][n % 3], 9100 + n as u64), k).unwrap();
        // Weights of -128 (legal in GGUF files) in the last block.
        w[rb * n - 34 + 2..rb * n].fill(0x80);
        let mut packed = vec![0u8; n.div_ceil(repack::ROWS) * blocks * x8q80::Q80_GB];
        repack::repack(s, &w, n, k, &mut packed);
        for &m in ms {
            let x = rand(m * k, 1.0, 9200 + m as u64);
            let mut a = vec![Q80::default(); m * blocks];
            for (x, a) in x.chunks_exact(k).zip(a.chunks_exact_mut(blocks)) {
                quantize_q80(x, a);
            }
            for isa in Isa::available() {
                let mut y = vec![f32::NAN; m * n];
                x8q80::gemm(isa, &packed, &a, (m, k), n, super::OutPtr(y.as_mut_ptr()));
                same_as_row_path(s, isa, &y, &w, &x, (m, k, n));
                checked += 1;
            }
        }
    }
    eprintln!("repacked Q8_0 cases checked: {checked}");
}

#[test]
fn scratch_pool_reuses_one_buffer_and_grows_it_once() {
    let pool: super::Pool<u32> = super::Pool::new();
    pool.reserve(100);
    pool.reserve(40);
    let first = pool.with(50, |v| {
        assert!(v.len() >= 100, "reserve keeps the largest size");
        v.as_ptr() as usize
    });
    // Sequential calls (one graph running node after node) get the same buffer back.
    assert_eq!(pool.with(80, |v| v.as_ptr() as usize), first);
    // A call while the buffer is out (another thread's graph) gets a buffer of its own.
    pool.with(10, |outer| {
        let inner = pool.with(10, |v| v.as_ptr() as usize);
        assert_ne!(inner, outer.as_ptr() as usize);
    });
    // Growing past the reserve resizes the buffer a call takes.
    assert!(pool.with(500, |v| v.len()) >= 500);
}
