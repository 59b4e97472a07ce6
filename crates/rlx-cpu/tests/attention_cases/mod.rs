//! The whole-row f32 attention path (encoders, prefill; rows past 2048 keys in chunks) against the reference
//! interpreter: BERT-shaped key-padding masks, odd lengths, head dims that are not multiples of
//! the register tiles, grouped-query heads, per-query masks, NaN keys hidden by a bool mask, and
//! rows of several key chunks. Shared by the test binaries that run them with AVX-512
//! (`attention_dense.rs`, where the CPU has it; NEON on aarch64) and with AVX2 only
//! (`attention_dense_avx2.rs`).

use rlx_cpu::CpuBackend;
use rlx_ir::ops::util::rand_f64;
use rlx_ir::ops::{Attention, HeadLayout, MaskKind};
use rlx_ir::testkit::run_samples;
use rlx_ir::{DType, Graph, HostTensor, Sample, Shape};

fn rand(dims: &[usize], dt: DType, seed: u64) -> HostTensor {
    HostTensor::from_f64(dims, dt, &rand_f64(dims.iter().product(), -1.5, 1.5, seed)).expect("tensor")
}

/// `[b, h, s, d]` queries over `[b, kvh, t, d]` keys and `[b, kvh, t, dv]` values.
fn attn(label: &str, mask: MaskKind, dims: [usize; 7], dt: DType, seed: u64, extra: Option<HostTensor>) -> Sample {
    let [b, h, kvh, s, t, d, dv] = dims;
    let mut ins =
        vec![rand(&[b, h, s, d], dt, seed), rand(&[b, kvh, t, d], dt, seed + 1), rand(&[b, kvh, t, dv], dt, seed + 2)];
    ins.extend(extra);
    Sample::new(label, Attention::new(mask, 1.0 / (d as f64).sqrt()), ins)
}

/// A key-padding mask `[b, 1, 1, t]`: sequence `i` has its last `pad(i)` keys hidden.
fn padding(b: usize, t: usize, pad: impl Fn(usize) -> usize) -> HostTensor {
    let bits: Vec<bool> = (0..b * t).map(|i| i % t < t - pad(i / t)).collect();
    HostTensor::from_bool(&[b, 1, 1, t], &bits).expect("mask")
}

fn check(samples: Vec<Sample>) {
    let cpu = CpuBackend::new();
    run_samples(samples, |g, feeds| rlx_driver::run_host(&cpu, g, feeds)).assert_all_pass();
}

pub fn bert_shaped_padding_masks() {
    check(vec![
        attn(
            "minilm/1x128",
            MaskKind::Custom,
            [1, 12, 12, 128, 128, 32, 32],
            DType::F32,
            1,
            Some(padding(1, 128, |_| 0)),
        ),
        attn(
            "minilm/3x128-pad",
            MaskKind::Custom,
            [3, 12, 12, 128, 128, 32, 32],
            DType::F32,
            4,
            Some(padding(3, 128, |i| 40 * i)),
        ),
        // Odd lengths: spans that end inside a 16-key tile and inside an 8-lane group.
        attn(
            "odd/37x53",
            MaskKind::Custom,
            [2, 3, 3, 37, 53, 32, 32],
            DType::F32,
            7,
            Some(padding(2, 53, |i| 5 + 6 * i)),
        ),
        attn("none/odd", MaskKind::None, [1, 2, 2, 5, 7, 32, 32], DType::F32, 10, None),
    ]);
}

pub fn head_dims_and_grouped_heads() {
    check(vec![
        attn("d64", MaskKind::None, [1, 4, 4, 64, 64, 64, 64], DType::F32, 20, None),
        // d not a multiple of 8, dv with an 8-wide and a scalar column tail.
        attn("d20/dv28", MaskKind::None, [1, 2, 2, 33, 45, 20, 28], DType::F32, 23, None),
        attn("d3/dv5", MaskKind::Causal, [1, 2, 1, 9, 9, 3, 5], DType::F32, 26, None),
        attn("gqa/causal", MaskKind::Causal, [2, 8, 2, 50, 50, 32, 32], DType::F32, 29, None),
        attn("gqa/window", MaskKind::SlidingWindow(7), [1, 6, 3, 40, 64, 16, 16], DType::F32, 32, None),
        attn("gqa/prefill-into-cache", MaskKind::Causal, [1, 4, 2, 24, 100, 32, 32], DType::F32, 35, None),
    ]);
}

pub fn per_query_masks_half_storage_and_long_rows() {
    let (b, h, s, t) = (2, 2, 19, 70);
    let bits: Vec<bool> = (0..b * h * s * t).map(|i| (i * 7919) % 3 != 0 && (i / t) % 7 != 2).collect();
    let rows = HostTensor::from_bool(&[b, h, s, t], &bits).expect("mask");
    let mut add = rand_f64(s * t, -3.0, 0.0, 40);
    add.iter_mut().enumerate().filter(|(i, _)| i % 5 == 0).for_each(|(_, x)| *x = f64::NEG_INFINITY);
    let add = HostTensor::from_f64(&[s, t], DType::F32, &add).expect("mask");
    let add16 = HostTensor::from_f64(&[1, 1, 1, t], DType::F16, &rand_f64(t, -2.0, 0.0, 41)).expect("mask");
    check(vec![
        attn("bool/per-head-rows", MaskKind::Custom, [b, h, h, s, t, 32, 32], DType::F32, 50, Some(rows)),
        attn("add/-inf", MaskKind::Custom, [b, h, 1, s, t, 16, 16], DType::F32, 53, Some(add)),
        attn("f16/add", MaskKind::Custom, [1, 2, 2, 20, t, 32, 32], DType::F16, 56, Some(add16)),
        attn("bf16/pad", MaskKind::Custom, [2, 2, 2, 20, 40, 16, 16], DType::BF16, 59, Some(padding(2, 40, |i| 3 * i))),
        // 1100 keys: one chunk of the whole-row path.
        attn("long/1100", MaskKind::Causal, [1, 1, 1, 40, 1100, 16, 16], DType::F32, 62, None),
    ]);
}

/// NaN keys that a bool mask hides never reach the softmax (the reference adds -inf to NaN, so
/// it is checked against the same problem without the hidden keys).
pub fn nan_in_hidden_keys_does_not_leak() {
    let (s, t, vis, d) = (16, 48, 30, 32);
    let run = |t: usize| {
        let mut g = Graph::new("att");
        let q = g.input("q", Shape::new(&[1, 2, s, d], DType::F32));
        let k = g.input("k", Shape::new(&[1, 2, t, d], DType::F32));
        let v = g.input("v", Shape::new(&[1, 2, t, d], DType::F32));
        let m = g.input("m", Shape::new(&[1, 1, 1, t], DType::Bool));
        let y = g.attention_with_mask(q, k, v, m, 0.2);
        g.set_outputs(vec![y]);
        // Rows of [2 heads, 48 keys, d]; the first `vis` keys of each head are the same in both
        // problems, the rest are NaN (hidden) or absent.
        let keys = |seed| -> Vec<f32> {
            let full: Vec<f32> = rand_f64(2 * 48 * d, -1.0, 1.0, seed).iter().map(|&v| v as f32).collect();
            (0..2)
                .flat_map(|h| (0..t).flat_map(move |j| (0..d).map(move |c| (h, j, c))))
                .map(|(h, j, c)| if j < vis { full[(h * 48 + j) * d + c] } else { f32::NAN })
                .collect()
        };
        let (kd, vd) = (keys(2), keys(3));
        let bits: Vec<bool> = (0..t).map(|j| j < vis).collect();
        let qd: Vec<f32> = rand_f64(2 * s * d, -1.0, 1.0, 1).iter().map(|&v| v as f32).collect();
        let feeds = [
            ("q", HostTensor::from_f32(&[1, 2, s, d], &qd).unwrap()),
            ("k", HostTensor::from_f32(&[1, 2, t, d], &kd).unwrap()),
            ("v", HostTensor::from_f32(&[1, 2, t, d], &vd).unwrap()),
            ("m", HostTensor::from_bool(&[1, 1, 1, t], &bits).unwrap()),
        ];
        rlx_driver::run_host(&CpuBackend::new(), &g, &feeds).unwrap()[0].to_f64_vec().unwrap()
    };
    let (with_nan, without) = (run(t), run(vis));
    assert!(with_nan.iter().all(|x| x.is_finite()));
    for (a, b) in with_nan.iter().zip(&without) {
        assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{a} vs {b}");
    }
}

/// Rows longer than one key chunk (2048): chunks joined by rescaling, a chunk every row hides,
/// rows whose first chunk is hidden, additive -inf, grouped heads.
pub fn chunked_long_rows() {
    let (s, t) = (12, 4200);
    // Keys 10..4000 hidden for every row: the middle chunk is empty.
    let sparse: Vec<bool> = (0..t).map(|j| !(10..4000).contains(&j)).collect();
    let sparse = HostTensor::from_bool(&[1, 1, 1, t], &sparse).expect("mask");
    // Row i sees keys from 300 * i (row 9 on: nothing in the first chunk), every 7th key hidden.
    let late: Vec<bool> = (0..s * t).map(|x| (x % t) >= 300 * (x / t) && (x % t) % 7 != 3).collect();
    let late = HostTensor::from_bool(&[1, 1, s, t], &late).expect("mask");
    let mut add = rand_f64(s * t, -2.0, 0.0, 70);
    add.iter_mut().enumerate().filter(|(i, _)| (i % t) < 2500 && i % 3 != 0).for_each(|(_, x)| *x = f64::NEG_INFINITY);
    let add = HostTensor::from_f64(&[1, 1, s, t], DType::F32, &add).expect("mask");
    check(vec![
        attn("chunks/causal-gqa", MaskKind::Causal, [1, 4, 2, 40, t, 16, 16], DType::F32, 71, None),
        attn("chunks/empty-middle", MaskKind::Custom, [1, 2, 2, s, t, 16, 16], DType::F32, 74, Some(sparse)),
        attn("chunks/late-rows", MaskKind::Custom, [1, 1, 1, s, t, 32, 16], DType::F32, 77, Some(late)),
        attn("chunks/add-inf", MaskKind::Custom, [1, 1, 1, s, t, 16, 32], DType::F32, 80, Some(add)),
        attn("chunks/window", MaskKind::SlidingWindow(3000), [1, 2, 1, 20, t, 16, 16], DType::BF16, 83, None),
    ]);
}

/// `attn` with q, k, v and the output in `[batch, seq, heads, dim]` order.
fn attn_bshd(label: &str, mask: MaskKind, dims: [usize; 7], dt: DType, seed: u64, extra: Option<HostTensor>) -> Sample {
    let [b, h, kvh, s, t, d, dv] = dims;
    let mut ins =
        vec![rand(&[b, s, h, d], dt, seed), rand(&[b, t, kvh, d], dt, seed + 1), rand(&[b, t, kvh, dv], dt, seed + 2)];
    ins.extend(extra);
    let op = Attention::new(mask, 1.0 / (d as f64).sqrt()).with_layout(HeadLayout::Bshd);
    Sample::new(label, op, ins)
}

/// The `[batch, seq, heads, dim]` layout on every path: whole-row (padding masks, grouped
/// heads, f16), online over transposed K (f64) and over K's rows (decode).
pub fn bshd_layout() {
    check(vec![
        attn_bshd(
            "bshd/minilm-3x128-pad",
            MaskKind::Custom,
            [3, 12, 12, 128, 128, 32, 32],
            DType::F32,
            90,
            Some(padding(3, 128, |i| 30 * i)),
        ),
        attn_bshd("bshd/gqa-causal", MaskKind::Causal, [2, 8, 2, 50, 70, 32, 24], DType::F32, 93, None),
        attn_bshd("bshd/f16-window", MaskKind::SlidingWindow(9), [1, 4, 2, 33, 33, 16, 16], DType::F16, 96, None),
        attn_bshd("bshd/f64", MaskKind::Causal, [2, 4, 2, 20, 20, 8, 8], DType::F64, 99, None),
        attn_bshd("bshd/decode", MaskKind::Causal, [2, 8, 2, 1, 100, 32, 32], DType::F32, 102, None),
        attn_bshd("bshd/decode-3", MaskKind::None, [1, 4, 4, 3, 40, 16, 8], DType::F32, 105, None),
    ]);
}

/// `x` (`[a, b, c, d]`, row-major; `a` follows from the length) with axes 1 and 2 swapped.
fn swap_middle(x: &[f32], [_, b, c, d]: [usize; 4]) -> Vec<f32> {
    let mut y = vec![0.0; x.len()];
    for (n, row) in x.chunks_exact(d).enumerate() {
        let (i, j, k) = (n / (b * c), n / c % b, n % c);
        y[((i * c + k) * b + j) * d..][..d].copy_from_slice(row);
    }
    y
}

/// The layouts agree bit for bit: the same problem with its inputs transposed runs the same
/// arithmetic in the same order (whole-row, long-cache and decode paths).
pub fn bshd_matches_bhsd_exactly() {
    for (s, t, mask) in [(128, 128, MaskKind::None), (40, 300, MaskKind::Causal), (1, 77, MaskKind::Causal)] {
        let (b, h, kvh, d) = (2, 6, 3, 32);
        let data = |h: usize, s: usize, seed: u64| -> Vec<f32> {
            rand_f64(b * h * s * d, -1.0, 1.0, seed).iter().map(|&x| x as f32).collect()
        };
        let (q, k, v) = (data(h, s, 1), data(kvh, t, 2), data(kvh, t, 3));
        let run = |layout: HeadLayout| {
            let mut g = Graph::new("att");
            let dims = |h: usize, s: usize| layout.dims([b, h, s, d]);
            let qi = g.input("q", Shape::new(&dims(h, s), DType::F32));
            let ki = g.input("k", Shape::new(&dims(kvh, t), DType::F32));
            let vi = g.input("v", Shape::new(&dims(kvh, t), DType::F32));
            let y = g.add_node(Attention::new(mask, 0.3).with_layout(layout), &[qi, ki, vi]);
            g.set_outputs(vec![y]);
            let feed = |x: &[f32], h: usize, s: usize| {
                let x = if layout == HeadLayout::Bshd { swap_middle(x, [b, h, s, d]) } else { x.to_vec() };
                HostTensor::from_f32(&dims(h, s), &x).unwrap()
            };
            let feeds = [("q", feed(&q, h, s)), ("k", feed(&k, kvh, t)), ("v", feed(&v, kvh, t))];
            let y = rlx_driver::run_host(&CpuBackend::new(), &g, &feeds).unwrap()[0].to_f32_vec().unwrap();
            if layout == HeadLayout::Bshd { swap_middle(&y, [b, s, h, d]) } else { y }
        };
        let (heads_first, seq_first) = (run(HeadLayout::Bhsd), run(HeadLayout::Bshd));
        for (n, (x, y)) in heads_first.iter().zip(&seq_first).enumerate() {
            assert_eq!(x.to_bits(), y.to_bits(), "s {s} t {t}: element {n}: {x} vs {y}");
        }
    }
}

/// Every case above.
pub fn all() {
    bshd_layout();
    bshd_matches_bhsd_exactly();
    bert_shaped_padding_masks();
    head_dims_and_grouped_heads();
    per_query_masks_half_storage_and_long_rows();
    nan_in_hidden_keys_does_not_leak();
    chunked_long_rows();
}
