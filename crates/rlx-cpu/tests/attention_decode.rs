//! Attention with fewer than 4 query rows per head (decode over a KV cache), where the AVX-512
//! path reads K and V in place (elsewhere the online-softmax path runs): group sizes from 1 to
//! 8 query heads per kv head, head dims of 1 to 8 vectors (and one that is not a whole vector),
//! key counts around the 16-key groups and 64-key blocks, every mask kind, rows that see no key,
//! and half-precision inputs; each against the reference interpreter.

use rlx_cpu::CpuBackend;
use rlx_ir::ops::util::rand_f64;
use rlx_ir::ops::{Attention, HeadLayout, MaskKind};
use rlx_ir::testkit::run_samples;
use rlx_ir::{DType, HostTensor, Sample};

fn rand(dims: &[usize], dt: DType, seed: u64) -> HostTensor {
    HostTensor::from_f64(dims, dt, &rand_f64(dims.iter().product(), -1.5, 1.5, seed)).expect("tensor")
}

/// `[b, h, kvh, s, t, d, dv]`, a mask kind and an optional mask tensor.
fn attn(mask: MaskKind, dims: [usize; 7], dt: DType, seed: u64, extra: Option<HostTensor>) -> Sample {
    let [b, h, kvh, s, t, d, dv] = dims;
    let mut ins =
        vec![rand(&[b, h, s, d], dt, seed), rand(&[b, kvh, t, d], dt, seed + 1), rand(&[b, kvh, t, dv], dt, seed + 2)];
    ins.extend(extra);
    let label = format!("{mask:?} {dims:?} {dt:?}");
    Sample::new(label, Attention::new(mask, 1.0 / (d as f64).sqrt()), ins)
}

fn check(samples: Vec<Sample>) {
    let cpu = CpuBackend::new();
    run_samples(samples, |g, feeds| rlx_driver::run_host(&cpu, g, feeds)).assert_all_pass();
}

#[test]
fn decode_shapes_with_built_in_masks() {
    let mut all = vec![];
    let mut seed = 100;
    for (h, kvh) in [(1, 1), (4, 2), (8, 2), (8, 1), (3, 3)] {
        for s in [1, 2, 3] {
            for t in [1, 15, 16, 17, 64, 65, 130, 700] {
                for (d, dv) in [(16, 16), (64, 64), (128, 128), (32, 80), (24, 24)] {
                    // A spread of the combinations, not all of them (the reference is slow).
                    seed += 1;
                    if seed % 4 != 0 && t != 700 {
                        continue;
                    }
                    let mask = [MaskKind::None, MaskKind::Causal, MaskKind::SlidingWindow(9)][(seed % 3) as usize];
                    all.push(attn(mask, [1, h, kvh, s, t, d, dv], DType::F32, seed, None));
                }
            }
        }
    }
    // Two batches, and half-precision inputs (f32 compute).
    all.push(attn(MaskKind::Causal, [2, 4, 2, 1, 300, 64, 64], DType::F32, 1, None));
    all.push(attn(MaskKind::Causal, [1, 4, 2, 1, 100, 64, 64], DType::F16, 2, None));
    all.push(attn(MaskKind::None, [1, 4, 1, 2, 90, 32, 32], DType::BF16, 3, None));
    check(all);
}

#[test]
fn decode_with_custom_masks() {
    let (b, h, kvh, s, t) = (2, 8, 2, 2, 150);
    // A bool mask with holes inside the visible span and one query row that sees nothing.
    let bits: Vec<bool> = (0..b * s * t).map(|i| (i / t) % 4 != 3 && (i * 7919) % 5 != 0 && i % t > 7).collect();
    let holes = HostTensor::from_bool(&[b, 1, s, t], &bits).expect("mask");
    // An additive mask per head with -inf entries and finite values.
    let mut add = rand_f64(b * h * s * t, -3.0, 1.0, 40);
    add.iter_mut().enumerate().filter(|(i, _)| i % 13 == 0 || i % t > 140).for_each(|(_, x)| *x = f64::NEG_INFINITY);
    let add = HostTensor::from_f64(&[b, h, s, t], DType::F32, &add).expect("mask");
    // A cache-style additive mask: 0 on the filled slots, -inf past them (rows read only the span).
    let cache: Vec<f64> = (0..s * t).map(|i| if i % t < 40 + i / t { 0.0 } else { f64::NEG_INFINITY }).collect();
    let cache = HostTensor::from_f64(&[1, 1, s, t], DType::F32, &cache).expect("mask");
    check(vec![
        attn(MaskKind::Custom, [b, h, kvh, s, t, 64, 64], DType::F32, 10, Some(holes)),
        attn(MaskKind::Custom, [b, h, kvh, s, t, 32, 48], DType::F32, 11, Some(add)),
        attn(MaskKind::Custom, [1, h, kvh, s, t, 128, 128], DType::F32, 12, Some(cache)),
    ]);
}

#[test]
fn decode_rows_with_no_visible_key_or_a_nan_score_are_nan() {
    let (h, kvh, s, t, d) = (4, 2, 1, 40, 32);
    let none = HostTensor::from_bool(&[1, 1, s, t], &vec![false; s * t]).expect("mask");
    // A NaN in one key row of kv head 1: its two query heads give NaN, the others do not.
    let mut k = rand_f64(kvh * t * d, -1.5, 1.5, 7);
    k[(t + 5) * d + 3] = f64::NAN;
    let k = HostTensor::from_f64(&[1, kvh, t, d], DType::F32, &k).expect("k");
    let q = rand(&[1, h, s, d], DType::F32, 8);
    let v = rand(&[1, kvh, t, d], DType::F32, 9);
    let op = || Attention::new(MaskKind::None, 0.25);
    check(vec![
        attn(MaskKind::Custom, [1, h, kvh, s, t, d, d], DType::F32, 20, Some(none)),
        Sample::new("nan key", op(), vec![q, k, v]),
    ]);
}

/// f32 queries over f16/bf16 keys and values (a half-precision KV cache): decode rows (read in
/// place) and prefill rows (widened over the used keys only), a cache-style mask that leaves the
/// tail of the cache unread, and both head layouts.
#[test]
fn f32_queries_over_a_half_precision_cache() {
    let mut all = vec![];
    for (i, kv_dt) in [DType::F16, DType::BF16].into_iter().enumerate() {
        for (s, t, layout) in [
            (1, 300, HeadLayout::Bhsd),
            (3, 70, HeadLayout::Bshd),
            (40, 200, HeadLayout::Bhsd),
            (20, 90, HeadLayout::Bshd),
        ] {
            let (b, h, kvh, d) = (2, 8, 2, 64);
            let seed = 300 + 10 * i as u64 + s as u64;
            let dims = |heads: usize, pos: usize| layout.dims([b, heads, pos, d]);
            // Slots past `filled` hold huge keys: a read of them would show in the output.
            let filled = t - 17;
            let mut k = rand_f64(b * kvh * t * d, -1.5, 1.5, seed + 1);
            let pos_of = |e: usize| match layout {
                HeadLayout::Bhsd => (e / d) % t,
                HeadLayout::Bshd => (e / (d * kvh)) % t,
            };
            k.iter_mut().enumerate().filter(|(e, _)| pos_of(*e) >= filled).for_each(|(_, x)| *x = 6.0e4);
            let mask: Vec<f64> =
                (0..s * t).map(|e| if e % t < filled - s + 1 + e / t { 0.0 } else { f64::NEG_INFINITY }).collect();
            let op = Attention::new(MaskKind::Custom, 0.125).with_layout(layout);
            all.push(Sample::new(
                format!("{kv_dt:?} s{s} t{t} {layout:?}"),
                op,
                vec![
                    rand(&dims(h, s), DType::F32, seed),
                    HostTensor::from_f64(&dims(kvh, t), kv_dt, &k).expect("k"),
                    rand(&dims(kvh, t), kv_dt, seed + 2),
                    HostTensor::from_f64(&[1, 1, s, t], DType::F32, &mask).expect("mask"),
                ],
            ));
        }
        // Built-in masks over the whole cache.
        let mut plain = attn(MaskKind::Causal, [1, 4, 1, 2, 90, 32, 32], DType::F32, 50 + i as u64, None);
        plain.inputs[1] = rand(&[1, 1, 90, 32], kv_dt, 60 + i as u64);
        plain.inputs[2] = rand(&[1, 1, 90, 32], kv_dt, 70 + i as u64);
        all.push(plain);
    }
    check(all);
}

/// `[batch, seq, heads, dim]` values over many keys: the dense path copies each head's V rows
/// together first (f32 in place otherwise), with grouped heads and a causal cache offset.
#[test]
fn seq_first_values_over_many_keys() {
    let (b, h, kvh, s, t, d) = (1, 4, 2, 20, 600, 32);
    let op = Attention::new(MaskKind::Causal, 0.2).with_layout(HeadLayout::Bshd);
    let dims = |heads: usize, pos: usize| HeadLayout::Bshd.dims([b, heads, pos, d]);
    check(vec![Sample::new(
        "bshd f32 t600",
        op,
        vec![rand(&dims(h, s), DType::F32, 1), rand(&dims(kvh, t), DType::F32, 2), rand(&dims(kvh, t), DType::F32, 3)],
    )]);
}
