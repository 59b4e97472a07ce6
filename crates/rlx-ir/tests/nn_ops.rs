//! Hand-checked values and error messages of the NN ops (norms, attention, rope, conv, pools).
//! Each value is checked on the reference and on the decomposition.

use rlx_ir::ops::{Attention, AvgPool2d, Conv2d, LayerNorm, MaxPool2d, RmsNorm, Rope};
use rlx_ir::{DType, Graph, HostTensor, MaskKind, Op, Sample, Shape, interp, testkit};

fn feeds(s: &Sample) -> Vec<(String, HostTensor)> {
    s.inputs.iter().enumerate().map(|(i, t)| (format!("in{i}"), t.clone())).collect()
}

fn eval(g: &Graph, f: &[(String, HostTensor)]) -> Vec<f64> {
    let f: Vec<(&str, HostTensor)> = f.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    interp::evaluate(g, &f).unwrap()[0].to_f64_vec().unwrap()
}

/// The op's output by its reference and by its decomposition.
fn both(op: impl Into<Op>, ins: Vec<HostTensor>) -> (Vec<f64>, Vec<f64>) {
    let s = Sample::new("t", op, ins);
    let (g, _) = testkit::sample_graph(&s).unwrap();
    let want = eval(&g, &feeds(&s));
    let mut d = Graph::new("d");
    let ids: Vec<_> = s.inputs.iter().enumerate().map(|(i, t)| d.input(&format!("in{i}"), t.shape.clone())).collect();
    let y = s.op.def().decompose(&mut d, &ids).unwrap();
    d.set_outputs(vec![y]);
    (want, eval(&d, &feeds(&s)))
}

fn assert_close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (a, b) in got.iter().zip(want) {
        let ok = (a.is_nan() && b.is_nan()) || (a - b).abs() < 1e-9;
        assert!(ok, "{got:?} vs {want:?}");
    }
}

fn check(op: impl Into<Op>, ins: Vec<HostTensor>, want: &[f64]) {
    let (r, d) = both(op, ins);
    assert_close(&r, want);
    assert_close(&d, want);
}

fn f64s(dims: &[usize], v: &[f64]) -> HostTensor {
    HostTensor::from_f64(dims, DType::F64, v).unwrap()
}

fn i64s(v: &[i64]) -> HostTensor {
    HostTensor::from_i64(&[v.len()], DType::I64, v).unwrap()
}

/// Error text of building one node with `op` on inputs of the given types.
fn infer_err(op: impl Into<Op>, shapes: &[Shape]) -> String {
    let mut g = Graph::new("e");
    let ids: Vec<_> = shapes.iter().enumerate().map(|(i, s)| g.input(&format!("x{i}"), s.clone())).collect();
    g.try_add(op, &ids).unwrap_err().to_string()
}

#[test]
fn layer_norm_and_rms_norm_values() {
    let s = (1.5f64).sqrt();
    check(
        LayerNorm { eps: 0.0 },
        vec![f64s(&[1, 3], &[1.0, 2.0, 3.0]), f64s(&[3], &[1.0, 1.0, 2.0]), f64s(&[3], &[0.0, 0.5, 0.0])],
        &[-s, 0.5, 2.0 * s],
    );
    let r = (12.5f64).sqrt();
    check(RmsNorm { eps: 0.0 }, vec![f64s(&[1, 2], &[3.0, 4.0]), f64s(&[2], &[1.0, 2.0])], &[3.0 / r, 8.0 / r]);
}

/// Attention with q = 0 (uniform scores over visible keys) and one-hot values: output row i
/// is the visibility pattern of query i, normalized.
fn pattern(mask: MaskKind, s: usize, t: usize) -> (Vec<f64>, Vec<f64>) {
    let mut eye = vec![0.0; t * t];
    for j in 0..t {
        eye[j * t + j] = 1.0;
    }
    both(
        Attention::new(mask, 1.0),
        vec![f64s(&[1, 1, s, 2], &vec![0.0; 2 * s]), f64s(&[1, 1, t, 2], &vec![0.5; 2 * t]), f64s(&[1, 1, t, t], &eye)],
    )
}

#[test]
fn attention_mask_patterns() {
    let (h, t3) = (0.5, 1.0 / 3.0);
    let want = [1.0, 0.0, 0.0, h, h, 0.0, t3, t3, t3];
    let (r, d) = pattern(MaskKind::Causal, 3, 3);
    assert_close(&r, &want);
    assert_close(&d, &want);
    // KV-cache decoding: 2 queries at positions 2 and 3 of 4 keys.
    let want = [t3, t3, t3, 0.0, 0.25, 0.25, 0.25, 0.25];
    let (r, d) = pattern(MaskKind::Causal, 2, 4);
    assert_close(&r, &want);
    assert_close(&d, &want);
    let want = [1.0, 0.0, 0.0, h, h, 0.0, 0.0, h, h];
    let (r, d) = pattern(MaskKind::SlidingWindow(2), 3, 3);
    assert_close(&r, &want);
    assert_close(&d, &want);
    let (r, d) = pattern(MaskKind::None, 2, 2);
    assert_close(&r, &[h; 4]);
    assert_close(&d, &[h; 4]);
    // More queries than keys: query 0 sees no key, and its row is NaN in both.
    let (r, d) = pattern(MaskKind::Causal, 3, 2);
    let want = [f64::NAN, f64::NAN, 1.0, 0.0, h, h];
    assert_close(&r, &want);
    assert_close(&d, &want);
}

#[test]
fn attention_groups_query_heads_over_kv_heads() {
    // 4 query heads over 2 kv heads equals 4 heads with kv heads repeated [0, 0, 1, 1].
    let rt = |d: &[usize], seed| {
        let n = d.iter().product();
        f64s(d, &rlx_ir::ops::util::rand_f64(n, -1.0, 1.0, seed))
    };
    let (q, k, v) = (rt(&[1, 4, 3, 2], 1), rt(&[1, 2, 3, 2], 2), rt(&[1, 2, 3, 2], 3));
    let rep = |t: &HostTensor| {
        let x = t.to_f64_vec().unwrap();
        let mut o = x[..6].to_vec();
        o.extend_from_slice(&x[..6]);
        o.extend_from_slice(&x[6..]);
        o.extend_from_slice(&x[6..]);
        f64s(&[1, 4, 3, 2], &o)
    };
    let op = Attention::new(MaskKind::Causal, 0.7);
    let (gr, gd) = both(op.clone(), vec![q.clone(), k.clone(), v.clone()]);
    let (fr, _) = both(op, vec![q, rep(&k), rep(&v)]);
    assert_close(&gr, &fr);
    assert_close(&gd, &fr);
}

#[test]
fn attention_errors() {
    let mut g = Graph::new("a");
    let q = g.input("q", Shape::new(&[1, 2, 3, 4], DType::F32));
    let k = g.input("k", Shape::new(&[1, 2, 3, 4], DType::F32));
    g.attention(q, k, k, MaskKind::Custom, 0.5);
    let e = g.check().unwrap_err().to_string();
    assert!(e.contains("attention_with_mask"), "{e}");
    let f = |d: &[usize]| Shape::new(d, DType::F32);
    let op = |mask| Attention::new(mask, 1.0);
    let e = infer_err(op(MaskKind::None), &[f(&[1, 3, 2, 4]), f(&[1, 2, 2, 4]), f(&[1, 2, 2, 4])]);
    assert!(e.contains("multiple of kv heads"), "{e}");
    let e = infer_err(op(MaskKind::None), &[f(&[1, 2, 2, 4]), f(&[1, 2, 2, 3]), f(&[1, 2, 2, 4])]);
    assert!(e.contains("head dims differ"), "{e}");
    let e = infer_err(op(MaskKind::Custom), &[f(&[1, 2, 2, 4]), f(&[1, 2, 5, 4]), f(&[1, 2, 5, 4]), f(&[3, 5])]);
    assert!(e.contains("does not broadcast"), "{e}");
    let e = infer_err(op(MaskKind::SlidingWindow(0)), &vec![f(&[1, 1, 2, 4]); 3]);
    assert!(e.contains("at least 1"), "{e}");
}

#[test]
fn rope_values() {
    // Position 0 is the identity.
    let x: Vec<f64> = (0..8).map(|i| i as f64 - 3.5).collect();
    check(Rope::new(10000.0), vec![f64s(&[1, 1, 2, 4], &x), i64s(&[0, 0])], &x);
    // d = 2 at position 1: a rotation by 1 radian.
    let (c, s) = (1f64.cos(), 1f64.sin());
    check(
        Rope::new(10000.0),
        vec![f64s(&[1, 1, 1, 2], &[2.0, 3.0]), i64s(&[1])],
        &[2.0 * c - 3.0 * s, 3.0 * c + 2.0 * s],
    );
    let e = infer_err(Rope::new(10000.0), &[Shape::new(&[1, 1, 2, 3], DType::F32), Shape::new(&[2], DType::I64)]);
    assert!(e.contains("even"), "{e}");
    let e = infer_err(Rope::new(10000.0), &[Shape::new(&[1, 1, 2, 4], DType::F32), Shape::new(&[2], DType::F32)]);
    assert!(e.contains("integers"), "{e}");
}

#[test]
fn conv2d_values() {
    let x: Vec<f64> = (0..16).map(|i| i as f64).collect();
    let mut delta = vec![0.0; 9];
    delta[4] = 1.0;
    let conv = |stride, padding, dilation, groups| Conv2d { stride, padding, dilation, groups };
    // A centered delta kernel with padding 1 is the identity.
    check(conv([1, 1], [1, 1], [1, 1], 1), vec![f64s(&[1, 1, 4, 4], &x), f64s(&[1, 1, 3, 3], &delta)], &x);
    // A 2x2 box kernel with stride 2 sums each block.
    check(
        conv([2, 2], [0, 0], [1, 1], 1),
        vec![f64s(&[1, 1, 4, 4], &x), f64s(&[1, 1, 2, 2], &[1.0; 4])],
        &[10.0, 18.0, 42.0, 50.0],
    );
    // Depthwise (groups = channels) scales each channel by its own weight.
    check(
        conv([1, 1], [0, 0], [1, 1], 2),
        vec![f64s(&[1, 2, 1, 2], &[1.0, 2.0, 3.0, 4.0]), f64s(&[2, 1, 1, 1], &[10.0, -1.0])],
        &[10.0, 20.0, -3.0, -4.0],
    );
    let f = |d: &[usize]| Shape::new(d, DType::F32);
    let e = infer_err(conv([1, 1], [0, 0], [1, 1], 2), &[f(&[1, 3, 4, 4]), f(&[2, 1, 3, 3])]);
    assert!(e.contains("divisible by groups"), "{e}");
    let e = infer_err(conv([1, 1], [0, 0], [1, 1], 1), &[f(&[1, 1, 2, 2]), f(&[1, 1, 3, 3])]);
    assert!(e.contains("padded input"), "{e}");
    let e = infer_err(conv([0, 1], [0, 0], [1, 1], 1), &[f(&[1, 1, 4, 4]), f(&[1, 1, 3, 3])]);
    assert!(e.contains(">= 1"), "{e}");
}

#[test]
fn pool_values() {
    let x: Vec<f64> = (0..16).map(|i| i as f64).collect();
    let p = |k, s, pd| (k, s, pd);
    let (k, s, pd) = p([2, 2], [2, 2], [0, 0]);
    let mp = |kernel, stride, padding| MaxPool2d { kernel, stride, padding };
    let ap = |kernel, stride, padding| AvgPool2d { kernel, stride, padding };
    check(mp(k, s, pd), vec![f64s(&[1, 1, 4, 4], &x)], &[5.0, 7.0, 13.0, 15.0]);
    check(ap(k, s, pd), vec![f64s(&[1, 1, 4, 4], &x)], &[2.5, 4.5, 10.5, 12.5]);
    // Padding: max ignores it (-inf), avg divides by the in-bounds count only.
    let x = f64s(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    check(mp([2, 2], [1, 1], [1, 1]), vec![x.clone()], &[1.0, 2.0, 2.0, 3.0, 4.0, 4.0, 3.0, 4.0, 4.0]);
    check(ap([2, 2], [1, 1], [1, 1]), vec![x], &[1.0, 1.5, 2.0, 2.0, 2.5, 3.0, 3.0, 3.5, 4.0]);
    let e = infer_err(mp([2, 2], [1, 1], [2, 0]), &[Shape::new(&[1, 1, 4, 4], DType::F32)]);
    assert!(e.contains("at most half the kernel"), "{e}");
}

#[test]
fn builders_infer_types() {
    let mut g = Graph::new("b");
    let f = |d: &[usize]| Shape::new(d, DType::F32);
    let x = g.input("x", f(&[2, 3, 8, 8]));
    let w = g.input("w", f(&[6, 3, 3, 3]));
    let c = g.conv2d(x, w, [2, 2], [1, 1], [1, 1], 1);
    let m = g.max_pool2d(c, [2, 2], [2, 2], [0, 0]);
    let a = g.avg_pool2d(c, [3, 3], [1, 1], [1, 1]);
    assert_eq!(g.shape(c).unwrap().to_string(), "f32[2,6,4,4]");
    assert_eq!(g.shape(m).unwrap().to_string(), "f32[2,6,2,2]");
    assert_eq!(g.shape(a).unwrap().to_string(), "f32[2,6,4,4]");
    let q = g.input("q", f(&[1, 4, 5, 8]));
    let kv = g.input("kv", f(&[1, 2, 7, 8]));
    let pos = g.input("pos", Shape::new(&[5], DType::I32));
    let q = g.rope(q, pos, 10000.0);
    let y = g.attention(q, kv, kv, MaskKind::Causal, 0.35);
    assert_eq!(g.shape(y).unwrap().to_string(), "f32[1,4,5,8]");
    let gm = g.input("gamma", f(&[8]));
    let n1 = g.rms_norm(y, gm, 1e-6);
    let n2 = g.layer_norm(n1, gm, gm, 1e-5);
    let mask = g.input("mask", Shape::new(&[5, 7], DType::Bool));
    let y2 = g.attention_with_mask(q, kv, kv, mask, 0.35);
    g.set_outputs(vec![m, a, n2, y2]);
    g.verify().unwrap();
    let back = Graph::from_text(&g.to_text()).unwrap();
    assert_eq!(back, g);
}

#[test]
fn dynamic_dims_and_bad_decompose_inputs() {
    use rlx_ir::Dim;
    let sym = |n: &str| Dim::Sym(n.into());
    let fx = Dim::Fixed;
    let mut g = Graph::new("dyn");
    let q = g.input("q", Shape::with_dims(vec![sym("b"), fx(4), sym("s"), fx(8)], DType::F32));
    let kv = g.input("kv", Shape::with_dims(vec![sym("b"), fx(2), sym("t"), fx(8)], DType::F32));
    let y = g.attention(q, kv, kv, MaskKind::Causal, 0.35);
    assert_eq!(g.shape(y).unwrap().to_string(), "f32[b,4,s,8]");
    let gm = g.input("gamma", Shape::new(&[8], DType::F32));
    let n = g.layer_norm(y, gm, gm, 1e-5);
    let x = g.input("x", Shape::with_dims(vec![sym("n"), fx(3), fx(8), fx(8)], DType::F32));
    let w = g.input("w", Shape::new(&[4, 3, 3, 3], DType::F32));
    let c = g.conv2d(x, w, [1, 1], [1, 1], [1, 1], 1);
    assert_eq!(g.shape(c).unwrap().to_string(), "f32[n,4,8,8]");
    g.check().unwrap();
    // Symbolic dims: attention needs static dims to decompose, layer_norm does not.
    let op = g.node(y).unwrap().op.clone();
    assert!(op.def().decompose(&mut g, &[q, kv, kv]).is_none());
    let op = g.node(n).unwrap().op.clone();
    assert!(op.def().decompose(&mut g, &[y, gm, gm]).is_some());
    // Decomposing on inputs the op rejects gives None, not a panic.
    let bad = g.input("bad", Shape::new(&[2, 3], DType::F32));
    for op in [
        Op::from(Conv2d { stride: [1, 1], padding: [0, 0], dilation: [1, 1], groups: 1 }),
        Op::from(Rope::new(1e4)),
        Op::from(MaxPool2d { kernel: [2, 2], stride: [1, 1], padding: [0, 0] }),
        Op::from(RmsNorm { eps: 1e-6 }),
        Op::from(Attention::new(MaskKind::None, 1.0)),
    ] {
        assert!(op.def().decompose(&mut g, &[bad]).is_none(), "{op:?}");
    }
}
