//! The native composite kernels (attention, softmax, log_softmax, layer_norm, rms_norm, rope)
//! on shapes the op samples do not reach: long sequences that span several tiles, grouped-query
//! heads, every mask kind, empty rows and numerically hard rows. Each is checked against the
//! reference interpreter, and each graph is checked to keep the op native (not decomposed).

use rlx_cpu::CpuBackend;
use rlx_ir::ops::util::rand_f64;
use rlx_ir::ops::{Attention, LayerNorm, LogSoftmax, MaskKind, RmsNorm, Rope, Softmax};
use rlx_ir::testkit::{run_samples, sample_graph};
use rlx_ir::{DType, HostTensor, Sample};

fn rand(dims: &[usize], dt: DType, lo: f64, hi: f64, seed: u64) -> HostTensor {
    HostTensor::from_f64(dims, dt, &rand_f64(dims.iter().product(), lo, hi, seed)).expect("tensor")
}

/// Runs the samples on the CPU, after checking that legalize keeps every op native.
fn check(samples: Vec<Sample>) {
    let cpu = CpuBackend::new();
    for s in &samples {
        let (g, _) = sample_graph(s).expect("graph");
        let (legal, _) = rlx_driver::legalize(&g, &cpu).expect("legalize");
        let name = s.op.def().name();
        assert!(legal.nodes().iter().any(|n| n.op.def().name() == name), "{}: `{name}` was decomposed", s.label);
    }
    run_samples(samples, |g, feeds| rlx_driver::run_host(&cpu, g, feeds)).assert_all_pass();
}

fn attn(label: &str, mask: MaskKind, dims: [usize; 7], dt: DType, seed: u64, extra: Option<HostTensor>) -> Sample {
    let [b, h, kvh, s, t, d, dv] = dims;
    let mut ins = vec![
        rand(&[b, h, s, d], dt, -1.5, 1.5, seed),
        rand(&[b, kvh, t, d], dt, -1.5, 1.5, seed + 1),
        rand(&[b, kvh, t, dv], dt, -1.5, 1.5, seed + 2),
    ];
    ins.extend(extra);
    Sample::new(label, Attention::new(mask, 1.0 / (d as f64).sqrt()), ins)
}

#[test]
fn attention_long_sequences_grouped_heads_and_built_in_masks() {
    check(vec![
        // Several query and key tiles, head dims that are not multiples of the register tile.
        attn("none/long", MaskKind::None, [1, 2, 2, 130, 200, 24, 20], DType::F32, 1, None),
        attn("causal/gqa", MaskKind::Causal, [2, 8, 2, 97, 97, 16, 16], DType::F32, 2, None),
        attn("causal/kv-cache", MaskKind::Causal, [1, 4, 1, 5, 300, 32, 32], DType::F32, 3, None),
        attn("causal/decode", MaskKind::Causal, [1, 6, 3, 1, 513, 64, 64], DType::F32, 4, None),
        attn("window/long", MaskKind::SlidingWindow(50), [1, 4, 2, 260, 260, 8, 12], DType::F32, 5, None),
        attn("window/1", MaskKind::SlidingWindow(1), [1, 2, 1, 40, 40, 4, 4], DType::F32, 6, None),
        attn("causal/f64", MaskKind::Causal, [1, 4, 2, 70, 70, 8, 8], DType::F64, 7, None),
        attn("window/f16", MaskKind::SlidingWindow(17), [1, 2, 2, 66, 66, 16, 16], DType::F16, 8, None),
        attn("causal/bf16", MaskKind::Causal, [1, 2, 1, 33, 33, 8, 8], DType::BF16, 9, None),
        // More queries than keys: the first rows see no key and give NaN, as the reference.
        attn("causal/empty-rows", MaskKind::Causal, [1, 1, 1, 6, 3, 4, 4], DType::F32, 10, None),
    ]);
}

#[test]
fn attention_custom_masks() {
    let (b, h, s, t) = (2, 4, 70, 90);
    // A bool mask per batch with whole rows hidden (NaN rows) and a padding-style key mask.
    let bits: Vec<bool> = (0..b * s * t).map(|i| (i / t) % 11 != 3 && (i * 7919) % 5 != 0).collect();
    let rows = HostTensor::from_bool(&[b, 1, s, t], &bits).expect("mask");
    let keys: Vec<bool> = (0..b * t).map(|i| i % t < t - 9 * (i / t + 1)).collect();
    let pad = HostTensor::from_bool(&[b, 1, 1, t], &keys).expect("mask");
    // An additive float mask with -inf entries, broadcast over batch and heads.
    let mut add = rand_f64(s * t, -3.0, 0.0, 40);
    add.iter_mut().enumerate().filter(|(i, _)| i % 13 == 0).for_each(|(_, x)| *x = f64::NEG_INFINITY);
    let add = HostTensor::from_f64(&[s, t], DType::F32, &add).expect("mask");
    let per_head = rand(&[1, h, s, t], DType::F64, -2.0, 2.0, 41);
    check(vec![
        attn("custom/bool-rows", MaskKind::Custom, [b, h, 2, s, t, 16, 8], DType::F32, 20, Some(rows)),
        attn("custom/bool-pad", MaskKind::Custom, [b, h, 4, s, t, 32, 32], DType::F32, 21, Some(pad)),
        attn("custom/add", MaskKind::Custom, [b, h, 1, s, t, 8, 8], DType::F32, 22, Some(add)),
        attn("custom/add-f64", MaskKind::Custom, [1, h, h, s, t, 8, 8], DType::F64, 23, Some(per_head)),
    ]);
}

#[test]
fn softmax_and_log_softmax_on_hard_rows_and_any_axis() {
    let mut big = rand_f64(4 * 300, -5.0, 5.0, 50);
    big.iter_mut().take(300).for_each(|x| *x = *x * 2000.0 + 1e4);
    big.iter_mut()
        .skip(300)
        .take(300)
        .enumerate()
        .filter(|(i, _)| i % 3 == 0)
        .for_each(|(_, x)| *x = f64::NEG_INFINITY);
    big[600..900].iter_mut().for_each(|x| *x = f64::NEG_INFINITY);
    let hard = HostTensor::from_f64(&[4, 300], DType::F32, &big).expect("x");
    let mut out = vec![];
    for (i, op) in [0i64, 1, -1].into_iter().enumerate() {
        let x = rand(&[3, 130, 5], DType::F32, -30.0, 30.0, 60 + i as u64);
        out.push(Sample::new(format!("softmax/axis{op}"), Softmax { axis: op }, vec![x.clone()]));
        out.push(Sample::new(format!("log_softmax/axis{op}"), LogSoftmax { axis: op }, vec![x]));
    }
    out.push(Sample::new("softmax/hard", Softmax { axis: -1 }, vec![hard.clone()]));
    out.push(Sample::new("log_softmax/hard", LogSoftmax { axis: -1 }, vec![hard]));
    out.push(Sample::new("softmax/f16", Softmax { axis: -1 }, vec![rand(&[64, 257], DType::F16, -8.0, 8.0, 70)]));
    // Large enough to be split across threads.
    out.push(Sample::new("softmax/big", Softmax { axis: -1 }, vec![rand(&[96, 1000], DType::F32, -9.0, 9.0, 71)]));
    check(out);
}

#[test]
fn norms_on_offset_rows_and_large_inputs() {
    let n = 384;
    // Rows far from zero with a small spread: a one-pass variance would lose every digit.
    let mut x = rand_f64(8 * n, -0.1, 0.1, 80);
    x.iter_mut().enumerate().for_each(|(i, v)| *v += [1e4, -3e3, 0.0, 1.0][i / n % 4]);
    let off = HostTensor::from_f64(&[8, n], DType::F32, &x).expect("x");
    let (gm, bt) = (rand(&[n], DType::F32, 0.5, 1.5, 81), rand(&[n], DType::F32, -0.5, 0.5, 82));
    let big = rand(&[200, n], DType::F32, -3.0, 3.0, 83);
    check(vec![
        Sample::new("layer_norm/offset", LayerNorm { eps: 1e-12 }, vec![off, gm.clone(), bt.clone()]),
        Sample::new("layer_norm/threaded", LayerNorm { eps: 1e-5 }, vec![big.clone(), gm.clone(), bt]),
        Sample::new("rms_norm/threaded", RmsNorm { eps: 1e-6 }, vec![big, gm]),
        Sample::new(
            "layer_norm/bf16",
            LayerNorm { eps: 1e-5 },
            vec![
                rand(&[5, 100], DType::BF16, -2.0, 2.0, 84),
                rand(&[100], DType::BF16, 0.5, 1.5, 85),
                rand(&[100], DType::BF16, -0.5, 0.5, 86),
            ],
        ),
    ]);
}

#[test]
fn rope_long_positions_and_dtypes() {
    let pos: Vec<i64> = (0..300).map(|i| i * 37 % 5000).collect();
    let p = HostTensor::from_i64(&[300], DType::I64, &pos).expect("pos");
    let p32 = HostTensor::from_i64(&[300], DType::I32, &pos).expect("pos");
    check(vec![
        Sample::new("rope/f32", Rope::new(10000.0), vec![rand(&[2, 4, 300, 64], DType::F32, -2.0, 2.0, 90), p]),
        Sample::new(
            "rope/f64",
            Rope::new(500000.0),
            vec![rand(&[1, 2, 300, 32], DType::F64, -2.0, 2.0, 91), p32.clone()],
        ),
        Sample::new(
            "rope/f32/bshd",
            Rope::new(10000.0).with_layout(rlx_ir::ops::HeadLayout::Bshd),
            vec![rand(&[2, 300, 4, 64], DType::F32, -2.0, 2.0, 92), p32],
        ),
    ]);
}

#[test]
fn fused_broadcasts_across_chunk_boundaries() {
    use rlx_ir::ops::fused::{Fused, Instr::*};
    use rlx_ir::ops::{BinaryKind, UnaryKind};
    // gelu(x + bias) * row_scale + grid: a bias (suffix), a per-row value (prefix) and a general
    // broadcast, over more elements than one chunk and with rows that do not divide it.
    let program = vec![
        Input(0),
        Input(1),
        Binary(BinaryKind::Add, 0, 1),
        Unary(UnaryKind::Gelu, 2),
        Input(2),
        Binary(BinaryKind::Mul, 3, 4),
        Input(3),
        Binary(BinaryKind::Add, 5, 6),
    ];
    let mut out = vec![];
    for (i, dt) in [DType::F32, DType::F64, DType::BF16].into_iter().enumerate() {
        let s = 100 + 10 * i as u64;
        let ins = vec![
            rand(&[3, 7, 37], dt, -3.0, 3.0, s),
            rand(&[37], dt, -1.0, 1.0, s + 1),
            rand(&[1, 3, 7, 1], dt, 0.5, 2.0, s + 2),
            rand(&[3, 1, 37], dt, -1.0, 1.0, s + 3),
        ];
        out.push(Sample::new(format!("fused/broadcasts/{dt}"), Fused { program: program.clone() }, ins));
    }
    let cpu = CpuBackend::new();
    run_samples(out, |g, feeds| rlx_driver::run_host(&cpu, g, feeds)).assert_all_pass();
}

#[test]
fn reductions_over_contiguous_axes_rows_columns_and_strided_fallback() {
    use rlx_ir::ops::{Reduce, ReduceKind};
    let mut samples = vec![];
    let shapes: [(&[usize], &[i64]); 7] = [
        (&[16, 128, 128], &[2]),    // rows, threaded
        (&[3, 37], &[-1]),          // short rows with a tail
        (&[16, 128, 384], &[0, 1]), // columns (bias gradient), several column blocks
        (&[4, 300, 7], &[1]),       // middle axis, narrow inner
        (&[5, 6, 7], &[0, 2]),      // not contiguous: the index-map path
        (&[2, 0, 3], &[1]),         // empty reduction
        (&[9], &[0]),
    ];
    for (i, (dims, axes)) in shapes.iter().enumerate() {
        for (j, kind) in [ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max, ReduceKind::Min].into_iter().enumerate() {
            let seed = (i * 4 + j) as u64;
            let r = Reduce { kind, axes: axes.to_vec(), keep_dims: j % 2 == 0 };
            samples.push(Sample::new(
                format!("{kind:?}/{dims:?}/{axes:?}"),
                r,
                vec![rand(dims, DType::F32, -2.0, 2.0, seed)],
            ));
        }
    }
    samples.push(Sample::new(
        "sum/f64",
        Reduce { kind: ReduceKind::Sum, axes: vec![1], keep_dims: false },
        vec![rand(&[33, 65], DType::F64, -1.0, 1.0, 99)],
    ));
    check(samples);
}

#[test]
fn elementwise_broadcast_runs_every_form_and_op_and_threaded_sizes() {
    // Same-shaped operands and unary ops too, at sizes split across threads.
    use rlx_ir::ops::{Binary, BinaryKind};
    use rlx_ir::ops::{Unary, UnaryKind};
    let mut samples = vec![];
    // (a, b): a bias (suffix), a per-row value (prefix), both broadcast, a scalar-like row; the
    // first two large enough to split across threads, one with runs too short to vectorize.
    let pairs: [(&[usize], &[usize]); 7] = [
        (&[64, 4, 600], &[64, 4, 600]),
        (&[64, 4, 600], &[600]),
        (&[64, 4, 600], &[64, 4, 1]),
        (&[1, 600], &[70, 1]),
        (&[70, 1], &[1, 600]),
        (&[30, 20], &[20]),
        (&[9, 5], &[9, 1]),
    ];
    let kinds =
        [BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul, BinaryKind::Div, BinaryKind::Maximum, BinaryKind::Pow];
    for (i, (a, b)) in pairs.iter().enumerate() {
        for (j, kind) in kinds.into_iter().enumerate() {
            let seed = (i * 8 + j) as u64;
            let (lo, hi) = if kind == BinaryKind::Pow { (0.5, 2.0) } else { (-2.0, 2.0) };
            samples.push(Sample::new(
                format!("{kind:?}/{a:?}/{b:?}"),
                Binary { kind },
                vec![rand(a, DType::F32, lo, hi, seed), rand(b, DType::F32, lo, hi, seed + 100)],
            ));
        }
    }
    for (i, kind) in [UnaryKind::Exp, UnaryKind::Gelu, UnaryKind::Silu, UnaryKind::Neg].into_iter().enumerate() {
        for dt in [DType::F32, DType::BF16] {
            let x = rand(&[64, 4, 600], dt, -3.0, 3.0, 500 + i as u64);
            samples.push(Sample::new(format!("{kind:?}/{dt:?}"), Unary { kind }, vec![x]));
        }
    }
    check(samples);
}

#[test]
fn scatter_add_rows_in_every_float_type_with_repeated_indices() {
    use rlx_ir::ops::ScatterAdd;
    let mut samples = vec![];
    // An embedding gradient (rows of 300, indices repeated), a middle axis, and rows of one.
    // (target dims, axis, index dims, update dims)
    type Case = (&'static [usize], i64, &'static [usize], &'static [usize]);
    let cases: [Case; 3] =
        [(&[65, 300], 0, &[40], &[40, 300]), (&[3, 7, 5], 1, &[9], &[3, 9, 5]), (&[11], 0, &[20], &[20])];
    for (c, (target, axis, idx_dims, upd)) in cases.iter().enumerate() {
        for (d, dt) in [DType::F32, DType::F64, DType::BF16, DType::F16].into_iter().enumerate() {
            let len = target[*axis as usize] as i64;
            let n: usize = idx_dims.iter().product();
            let idx: Vec<i64> = (0..n as i64).map(|j| (j * 7 + 3) % len).collect();
            let seed = (c * 4 + d) as u64;
            samples.push(Sample::new(
                format!("scatter_add/{dt:?}/{target:?}"),
                ScatterAdd { axis: *axis },
                vec![
                    rand(target, dt, -2.0, 2.0, seed),
                    HostTensor::from_i64(idx_dims, DType::I64, &idx).expect("indices"),
                    rand(upd, dt, -2.0, 2.0, seed + 50),
                ],
            ));
        }
    }
    check(samples);
}

#[test]
fn where_with_scalar_conditions_and_branches_and_broadcasts() {
    use rlx_ir::ops::Where;
    let dims = [40, 70];
    let n: usize = dims.iter().product();
    let full_c = HostTensor::from_bool(&dims, &(0..n).map(|i| i % 3 == 0).collect::<Vec<_>>()).expect("cond");
    let row_c = HostTensor::from_bool(&[40, 1], &(0..40).map(|i| i % 2 == 0).collect::<Vec<_>>()).expect("cond");
    let mut samples = vec![];
    for (d, dt) in [DType::F32, DType::BF16, DType::F64, DType::F16].into_iter().enumerate() {
        let seed = 700 + 10 * d as u64;
        let full = |s: u64| rand(&dims, dt, -2.0, 2.0, s);
        let one = |s: u64| rand(&[], dt, -2.0, 2.0, s);
        let cases = [
            ("scalar-true", HostTensor::from_bool(&[], &[true]).expect("cond"), full(seed), full(seed + 1)),
            ("scalar-false", HostTensor::from_bool(&[], &[false]).expect("cond"), full(seed + 2), one(seed + 3)),
            ("full/x-splat", full_c.clone(), one(seed + 4), full(seed + 5)),
            ("full/y-splat", full_c.clone(), full(seed + 6), one(seed + 7)),
            ("full/both-splat", full_c.clone(), one(seed + 8), one(seed + 9)),
            ("rows/map", row_c.clone(), full(seed + 10), rand(&[70], dt, -2.0, 2.0, seed + 11)),
        ];
        for (label, c, x, y) in cases {
            samples.push(Sample::new(format!("where/{dt:?}/{label}"), Where {}, vec![c, x, y]));
        }
    }
    check(samples);
}
