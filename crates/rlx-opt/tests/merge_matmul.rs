//! Sibling matmul merging: random groups of matmuls that share their left input (plain, with a
//! bias, with bias + gelu, transposed weights, another n, an epilogue reading a sibling, SwiGLU
//! pairs with and without biases, one whose up product is also an output) go
//! through the CPU pipeline; the reference interpreter and the CPU must give the values of the
//! graph as built, and identical siblings must end up in one `stacked_matmul`.

use proptest::prelude::*;
use rlx_ir::ops::util::rand_f64;
use rlx_ir::{DType, Graph, HostTensor, NodeId, Op, Shape, interp, testkit};
use rlx_opt::{CompileOptions, FusionKind, PrecisionPolicy, Reason};

fn config(n: u32) -> ProptestConfig {
    if std::env::var_os("PROPTEST_CASES").is_some() { ProptestConfig::default() } else { ProptestConfig::with_cases(n) }
}

/// What one sibling computes from `x`.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Plain,
    Bias,
    BiasGelu,
    /// Weight stored `[n, k]` (a transposed matmul).
    Transposed,
    /// n + 1 columns: never merged with the others.
    OtherN,
    /// `x @ w + exp(prev)`: prev is the previous sibling of this kind (a dependency).
    Chained,
    /// SwiGLU: `silu(x @ wg [+ bg]) * (x @ wu [+ bu])`, weights `[n, k]`; with `true`, biases.
    SwiGlu(bool),
    /// SwiGLU whose up product is also a graph output (so it cannot be folded away).
    SwiGluShared,
}

#[derive(Debug, Clone)]
struct Case {
    batch: usize,
    rows: usize,
    k: usize,
    n: usize,
    kinds: Vec<Kind>,
}

fn case() -> impl Strategy<Value = Case> {
    let kind = prop_oneof![
        Just(Kind::Plain),
        Just(Kind::Bias),
        Just(Kind::BiasGelu),
        Just(Kind::Transposed),
        Just(Kind::OtherN),
        Just(Kind::Chained),
        Just(Kind::SwiGlu(false)),
        Just(Kind::SwiGlu(true)),
        Just(Kind::SwiGluShared),
    ];
    (0usize..3, 1usize..10, 1usize..12, 1usize..20, prop::collection::vec(kind, 1..6))
        .prop_map(|(batch, rows, k, n, kinds)| Case { batch, rows, k, n, kinds })
}

fn build(c: &Case) -> Graph {
    let mut g = Graph::new("siblings");
    let t = |d: &[usize]| Shape::new(d, DType::F32);
    let lead: Vec<usize> = if c.batch > 0 { vec![c.batch, c.rows] } else { vec![c.rows] };
    let dims = |last: usize| [lead.clone(), vec![last]].concat();
    let x = g.input("x", t(&dims(c.k)));
    let mut prev: NodeId = g.input("r", t(&dims(c.n)));
    let mut outs = vec![];
    for (i, kind) in c.kinds.iter().enumerate() {
        let w = |g: &mut Graph, d: &[usize]| g.input(&format!("w{i}"), t(d));
        let b = |g: &mut Graph, n: usize| g.input(&format!("b{i}"), t(&[n]));
        let y = match kind {
            Kind::Plain => {
                let w = w(&mut g, &[c.k, c.n]);
                g.matmul(x, w)
            }
            Kind::Bias | Kind::BiasGelu => {
                let (w, b) = (w(&mut g, &[c.k, c.n]), b(&mut g, c.n));
                let y = g.matmul(x, w);
                let y = g.add(y, b);
                if matches!(kind, Kind::BiasGelu) { g.gelu(y) } else { y }
            }
            Kind::Transposed => {
                let w = w(&mut g, &[c.n, c.k]);
                g.matmul_t(x, w, false, true)
            }
            Kind::OtherN => {
                let w = w(&mut g, &[c.k, c.n + 1]);
                g.matmul(x, w)
            }
            Kind::Chained => {
                let w = w(&mut g, &[c.k, c.n]);
                let y = g.matmul(x, w);
                let e = g.exp(prev);
                let y = g.add(y, e);
                prev = y;
                y
            }
            Kind::SwiGlu(bias) => {
                let (wg, wu) = (w(&mut g, &[c.n, c.k]), g.input(&format!("u{i}"), t(&[c.n, c.k])));
                let mut gate = g.matmul_t(x, wg, false, true);
                let mut up = g.matmul_t(x, wu, false, true);
                if *bias {
                    let (bg, bu) = (b(&mut g, c.n), g.input(&format!("c{i}"), t(&[c.n])));
                    (gate, up) = (g.add(gate, bg), g.add(up, bu));
                }
                let act = g.silu(gate);
                g.mul(act, up)
            }
            Kind::SwiGluShared => {
                let (wg, wu) = (w(&mut g, &[c.k, c.n]), g.input(&format!("u{i}"), t(&[c.k, c.n])));
                let gate = g.matmul(x, wg);
                let up = g.matmul(x, wu);
                outs.push(up);
                let act = g.silu(gate);
                g.mul(act, up)
            }
        };
        outs.push(y);
    }
    g.set_outputs(outs);
    g
}

fn feeds(g: &Graph) -> Vec<(String, HostTensor)> {
    g.nodes()
        .iter()
        .enumerate()
        .filter_map(|(i, n)| match &n.op {
            Op::Input(x) => {
                let d = x.shape.fixed_dims().unwrap();
                let v = rand_f64(d.iter().product(), -1.0, 1.0, 500 + i as u64);
                Some((x.name.clone(), HostTensor::from_f64(&d, DType::F32, &v).unwrap()))
            }
            _ => None,
        })
        .collect()
}

fn cpu() -> &'static rlx_cpu::CpuBackend {
    static B: std::sync::OnceLock<rlx_cpu::CpuBackend> = std::sync::OnceLock::new();
    B.get_or_init(rlx_cpu::CpuBackend::new)
}

/// Compiles with and without merging; checks values; returns the merged graph and its report.
fn check(g: &Graph) -> (Graph, rlx_opt::FusionReport) {
    check_within(g, None)
}

/// `check` with a tolerance for the CPU (sums over a long k round differently).
fn check_within(g: &Graph, tol: Option<(f64, f64)>) -> (Graph, rlx_opt::FusionReport) {
    let f = feeds(g);
    let fr: Vec<(&str, HostTensor)> = f.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let want = interp::evaluate(g, &fr).unwrap();
    let (opt, rep) = rlx_opt::compile_pipeline(g.clone(), cpu(), PrecisionPolicy::F32).unwrap();
    for (a, b) in interp::evaluate(&opt, &fr).unwrap().iter().zip(&want) {
        testkit::compare(a, b).unwrap();
    }
    for (a, b) in rlx_driver::run_host(cpu(), &opt, &fr).unwrap().iter().zip(&want) {
        testkit::compare_within(a, b, tol).unwrap();
    }
    let off = CompileOptions { merge_matmuls: false, ..Default::default() };
    let (plain, _) = rlx_opt::compile_with(g.clone(), cpu(), &off).unwrap();
    assert!(!plain.nodes().iter().any(|n| matches!(n.op, Op::StackedMatMul(_))));
    (opt, rep.fusion)
}

fn stacked(g: &Graph) -> Vec<usize> {
    let of = |n: &rlx_ir::Node| if let Op::StackedMatMul(s) = &n.op { (!s.combine).then_some(s.groups) } else { None };
    g.nodes().iter().filter_map(of).collect()
}

/// Combining stacked matmuls of `g`.
fn combined(g: &Graph) -> usize {
    g.nodes().iter().filter(|n| matches!(&n.op, Op::StackedMatMul(s) if s.combine)).count()
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn merging_preserves_values(c in case()) {
        let (opt, rep) = check(&build(&c));
        let count = |k: fn(&Kind) -> bool| c.kinds.iter().filter(|x| k(x)).count();
        // Plain siblings share one weight type and no epilogue: they always merge.
        let plain = count(|k| matches!(k, Kind::Plain));
        let groups = stacked(&opt);
        if plain >= 2 {
            prop_assert!(groups.iter().any(|&gs| gs >= plain), "{groups:?}\n{}", opt.to_text());
        }
        prop_assert_eq!(rep.count(FusionKind::StackedMatMul), groups.len());
        // Every SwiGLU pair whose up product has no other reader combines.
        let swiglu = count(|k| matches!(k, Kind::SwiGlu(_)));
        prop_assert_eq!(combined(&opt), swiglu, "{}", opt.to_text());
        prop_assert_eq!(rep.count(FusionKind::CombinedMatMul), swiglu);
    }
}

#[test]
fn swiglu_pairs_combine_and_a_shared_up_stays_out() {
    let c = Case {
        batch: 1,
        rows: 9,
        k: 7,
        n: 13,
        kinds: vec![Kind::SwiGlu(true), Kind::SwiGlu(false), Kind::SwiGluShared, Kind::Plain],
    };
    let (opt, rep) = check(&build(&c));
    assert_eq!(combined(&opt), 2, "{}", opt.to_text());
    let why = rep.rejected(|r| matches!(r, Reason::NotMergeable(w) if w.contains("2 consumers")));
    assert_eq!(why, 1, "{rep}");
    // Off switch: no combining either.
    let off = CompileOptions { merge_matmuls: false, ..Default::default() };
    let (plain, _) = rlx_opt::compile_with(build(&c), cpu(), &off).unwrap();
    assert_eq!(combined(&plain), 0);
}

#[test]
fn swiglu_at_model_size_runs_on_the_cpu() {
    // Qwen3-0.6B's MLP: 3072 x 1024 gate and up on 40 rows (several row and column blocks).
    // Products are ~10 in size; f32 sums over k = 1024 differ from the reference by ~1e-4.
    let c = Case { batch: 0, rows: 40, k: 1024, n: 3072, kinds: vec![Kind::SwiGlu(false)] };
    let (opt, _) = check_within(&build(&c), Some((1e-3, 1e-3)));
    assert_eq!(combined(&opt), 1, "{}", opt.to_text());
}

#[test]
fn a_sibling_reading_another_stays_out() {
    // Two chained siblings have one epilogue program and one extra type, but the second's extra
    // is computed from the first: merging would form a cycle.
    let c = Case { batch: 0, rows: 8, k: 5, n: 7, kinds: vec![Kind::Chained, Kind::Chained, Kind::Plain] };
    let (opt, rep) = check(&build(&c));
    assert!(stacked(&opt).is_empty(), "{}", opt.to_text());
    let why = rep.rejected(|r| matches!(r, Reason::NotMergeable(w) if w.contains("depends on a sibling")));
    assert_eq!(why, 1, "{rep}");
}

#[test]
fn qkv_at_model_size_runs_on_the_cpu() {
    // MiniLM's shapes: 128 x 384 times three 384 x 384 weights with biases, batched x.
    let c = Case { batch: 2, rows: 64, k: 384, n: 384, kinds: vec![Kind::Bias, Kind::Bias, Kind::Bias] };
    let (opt, rep) = check(&build(&c));
    assert_eq!(stacked(&opt), vec![3], "{rep}");
    let n = opt.nodes().iter().filter(|n| matches!(n.op, Op::MatMul(_) | Op::FusedMatMul(_))).count();
    assert_eq!(n, 0, "{}", opt.to_text());
}
