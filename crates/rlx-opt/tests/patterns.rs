//! The attention pattern: primitive attention graphs become one `attention` op on backends
//! that have it, with the same values; near misses are left alone.

use rlx_ir::ops::util::rand_f64;
use rlx_ir::{DType, Graph, HostTensor, NodeId, Op, Shape, interp, testkit};
use rlx_opt::PrecisionPolicy;

fn cpu() -> &'static rlx_cpu::CpuBackend {
    static B: std::sync::OnceLock<rlx_cpu::CpuBackend> = std::sync::OnceLock::new();
    B.get_or_init(rlx_cpu::CpuBackend::new)
}

enum Mask {
    None,
    Causal,
    Additive,
    Bool,
}

/// softmax(q k^T * scale [masked]) v, written out in primitives as a user would.
fn primitive(mask: Mask, transpose_flag: bool, scale_first: bool) -> Graph {
    let (b, h, s, d) = (2, 3, 5, 8);
    let mut g = Graph::new("prim_attention");
    let sh = Shape::new(&[b, h, s, d], DType::F32);
    let q = g.input("q", sh.clone());
    let k = g.input("k", sh.clone());
    let v = g.input("v", sh);
    let sc = if transpose_flag {
        g.add_node(rlx_ir::ops::MatMul { transpose_a: false, transpose_b: true }, &[q, k])
    } else {
        let kt = g.transpose(k, &[0, 1, 3, 2]);
        g.matmul(q, kt)
    };
    let c = g.scalar(1.0 / (d as f64).sqrt(), DType::F32);
    let sc = if scale_first { g.mul(c, sc) } else { g.mul(sc, c) };
    let sc = match mask {
        Mask::None => sc,
        Mask::Causal => {
            let tri: Vec<bool> = (0..s * s).map(|i| i % s <= i / s).collect();
            let m = g.constant(HostTensor::from_bool(&[s, s], &tri).unwrap());
            let ninf = g.scalar(f64::NEG_INFINITY, DType::F32);
            g.where_(m, sc, ninf)
        }
        Mask::Additive => {
            let m = g.input("mask", Shape::new(&[b, 1, 1, s], DType::F32));
            g.add(sc, m)
        }
        Mask::Bool => {
            let m = g.input("mask", Shape::new(&[b, 1, 1, s], DType::Bool));
            let ninf = g.scalar(f64::NEG_INFINITY, DType::F32);
            g.where_(m, sc, ninf)
        }
    };
    let p = g.softmax(sc, -1);
    let o = g.matmul(p, v);
    g.set_outputs(vec![o]);
    g
}

fn feeds(g: &Graph) -> Vec<(String, HostTensor)> {
    let mut out = vec![];
    for (i, (id, name)) in g.inputs().into_iter().enumerate() {
        let s = g.shape(id).unwrap();
        let d = s.fixed_dims().unwrap();
        let n = d.iter().product();
        let t = match s.dtype {
            DType::Bool => HostTensor::from_bool(&d, &(0..n).map(|j| j % 5 != 3).collect::<Vec<_>>()).unwrap(),
            // Positions (rope): a gap and a repeat.
            DType::I64 => {
                HostTensor::from_i64(&d, DType::I64, &(0..n as i64).map(|j| j * 3 % 7).collect::<Vec<_>>()).unwrap()
            }
            _ if name == "mask" => {
                HostTensor::from_f64(&d, DType::F32, &rand_f64(n, -2.0, 0.0, 50 + i as u64)).unwrap()
            }
            dt => HostTensor::from_f64(&d, dt, &rand_f64(n, -1.0, 1.0, 40 + i as u64)).unwrap(),
        };
        out.push((name.to_string(), t));
    }
    out
}

fn attention_ops(g: &Graph) -> Vec<rlx_ir::ops::Attention> {
    g.nodes()
        .iter()
        .filter_map(|n| match &n.op {
            Op::Attention(a) => Some(a.clone()),
            _ => None,
        })
        .collect()
}

fn check(g: Graph) -> Vec<rlx_ir::ops::Attention> {
    let (opt, _) = rlx_opt::compile_pipeline(g.clone(), cpu(), PrecisionPolicy::F32).unwrap();
    let f = feeds(&g);
    let fr: Vec<(&str, HostTensor)> = f.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let want = interp::evaluate(&g, &fr).unwrap();
    let got = rlx_driver::run_host(cpu(), &opt, &fr).unwrap();
    testkit::compare(&got[0], &want[0]).unwrap();
    attention_ops(&opt)
}

#[test]
fn primitive_attention_becomes_one_op() {
    use rlx_ir::ops::MaskKind;
    let scale = 1.0 / 8f64.sqrt();
    for (mask, want) in [
        (Mask::None, MaskKind::None),
        (Mask::Causal, MaskKind::Causal),
        (Mask::Additive, MaskKind::Custom),
        (Mask::Bool, MaskKind::Custom),
    ] {
        for (flag, first) in [(false, false), (true, true)] {
            let found = check(primitive(
                match mask {
                    Mask::None => Mask::None,
                    Mask::Causal => Mask::Causal,
                    Mask::Additive => Mask::Additive,
                    Mask::Bool => Mask::Bool,
                },
                flag,
                first,
            ));
            assert_eq!(found.len(), 1, "{want:?}");
            assert_eq!(found[0].mask, want);
            assert!((found[0].scale - scale).abs() < 1e-7, "{}", found[0].scale);
        }
    }
}

#[test]
fn near_misses_are_left_alone() {
    // Softmax over the wrong axis: not attention.
    let mut g = Graph::new("near_miss");
    let sh = Shape::new(&[1, 2, 4, 4], DType::F32);
    let (q, k, v) = (g.input("q", sh.clone()), g.input("k", sh.clone()), g.input("v", sh));
    let kt = g.transpose(k, &[0, 1, 3, 2]);
    let sc = g.matmul(q, kt);
    let p = g.softmax(sc, 2);
    let o = g.matmul(p, v);
    g.set_outputs(vec![o]);
    assert!(check(g).is_empty());
    // Scale applied after the mask (a different function when the mask is additive).
    let mut g = Graph::new("scaled_after_mask");
    let sh = Shape::new(&[1, 2, 4, 4], DType::F32);
    let (q, k, v) = (g.input("q", sh.clone()), g.input("k", sh.clone()), g.input("v", sh));
    let m = g.input("mask", Shape::new(&[1, 1, 1, 4], DType::F32));
    let kt = g.transpose(k, &[0, 1, 3, 2]);
    let sc = g.matmul(q, kt);
    let sc = g.add(sc, m);
    let c = g.scalar(0.5, DType::F32);
    let sc: NodeId = g.mul(sc, c);
    let p = g.softmax(sc, -1);
    let o = g.matmul(p, v);
    g.set_outputs(vec![o]);
    assert!(check(g).is_empty());
}

#[test]
fn probabilities_read_elsewhere_keep_the_primitive_form() {
    // A training graph's backward reads the softmax output: forming attention would compute the
    // scores and softmax twice, so the pattern stays primitive.
    let mut g = primitive(Mask::Causal, false, false);
    let o = g.outputs()[0];
    let p = g.node(o).unwrap().inputs[0];
    g.set_outputs(vec![o, p]);
    assert!(check(g).is_empty());
}

/// Heads split from `[b, s, h*d]` projections by reshape and transpose, as BERT writes them
/// (and Qwen/Llama, with rope on q and k after the transpose): on the CPU the attention and the
/// ropes read `[b, s, h, d]` in place (their layout says so) and no transpose is left; the
/// values match the interpreter's on the original graph.
#[test]
fn head_transposes_fold_into_the_attention_layout() {
    use rlx_ir::ops::{HeadLayout, MaskKind};
    let (b, s, h, kvh, d) = (2, 6, 4, 2, 8);
    for (causal, rope) in [(false, false), (true, false), (true, true)] {
        let mut g = Graph::new("heads");
        let x = g.input("x", Shape::new(&[b, s, h * d], DType::F32));
        let kv = g.input("kv", Shape::new(&[b, s, 2 * kvh * d], DType::F32));
        let heads = |g: &mut Graph, x: NodeId, n: usize| {
            let r = g.reshape(x, &[b, s, n, d]);
            g.transpose(r, &[0, 2, 1, 3])
        };
        let q = heads(&mut g, x, h);
        let k = g.slice_axis(kv, 2, 0, kvh * d);
        let v = g.slice_axis(kv, 2, kvh * d, 2 * kvh * d);
        let (mut k, v) = (heads(&mut g, k, kvh), heads(&mut g, v, kvh));
        let mut q = q;
        if rope {
            // Qwen3: an rms_norm per head on q and k (after the transpose here), then rope.
            let (gq, gk) = (g.input("gq", Shape::new(&[d], DType::F32)), g.input("gk", Shape::new(&[d], DType::F32)));
            q = g.rms_norm(q, gq, 1e-6);
            k = g.rms_norm(k, gk, 1e-6);
            let pos = g.input("pos", Shape::new(&[s], DType::I64));
            q = g.rope(q, pos, 10000.0);
            k = g.rope(k, pos, 10000.0);
        }
        let mask = if causal { MaskKind::Causal } else { MaskKind::None };
        let y = g.attention(q, k, v, mask, 0.35);
        let y = g.transpose(y, &[0, 2, 1, 3]);
        let y = g.reshape(y, &[b, s, h * d]);
        g.set_outputs(vec![y]);
        let (opt, _) = rlx_opt::compile_pipeline(g.clone(), cpu(), PrecisionPolicy::F32).unwrap();
        let found = attention_ops(&opt);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].layout, found[0].mask), (HeadLayout::Bshd, mask));
        assert!(!opt.nodes().iter().any(|n| matches!(n.op, Op::Transpose(_))), "{}", opt.to_text());
        let ropes: Vec<_> =
            opt.nodes().iter().filter_map(|n| if let Op::Rope(r) = &n.op { Some(r.layout) } else { None }).collect();
        assert_eq!(ropes, if rope { vec![HeadLayout::Bshd; 2] } else { vec![] });
        let f = feeds(&g);
        let fr: Vec<(&str, HostTensor)> = f.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        let want = interp::evaluate(&g, &fr).unwrap();
        testkit::compare(&rlx_driver::run_host(cpu(), &opt, &fr).unwrap()[0], &want[0]).unwrap();
    }
}

/// Only some inputs transposed: the heads-first attention stays as it is.
#[test]
fn a_partly_transposed_attention_keeps_its_layout() {
    use rlx_ir::ops::{HeadLayout, MaskKind};
    let mut g = Graph::new("partial");
    let x = g.input("x", Shape::new(&[1, 5, 2, 8], DType::F32));
    let q = g.transpose(x, &[0, 2, 1, 3]);
    let k = g.input("k", Shape::new(&[1, 2, 5, 8], DType::F32));
    let v = g.input("v", Shape::new(&[1, 2, 5, 8], DType::F32));
    let y = g.attention(q, k, v, MaskKind::Causal, 0.5);
    g.set_outputs(vec![y]);
    let found = check(g);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].layout, HeadLayout::Bhsd);
}
