//! Soundness: every rule set, fusion and the whole pipeline preserve values on random graphs.
//! The reference interpreter evaluates the graph before and after (rewrites are exact, so the
//! comparison uses the dtype's tolerance only to absorb constant folding's rounding). The CPU
//! then runs the optimized graph (fused kernels, transposed matmuls, the planned arena with
//! reuse, in-place updates and views) against the CPU running the unoptimized one.

use proptest::prelude::*;
use proptest::sample::select;
use rlx_driver::{Backend, legalize};
use rlx_ir::ops::util::rand_f64;
use rlx_ir::ops::{BinaryKind, UnaryKind};
use rlx_ir::{DType, Graph, HostTensor, NodeId, Shape, interp, testkit};

fn config(n: u32) -> ProptestConfig {
    if std::env::var_os("PROPTEST_CASES").is_some() { ProptestConfig::default() } else { ProptestConfig::with_cases(n) }
}

/// One random builder step. `u32` fields pick an existing node (modulo the node count).
#[derive(Debug, Clone)]
enum Step {
    Unary(UnaryKind, u32),
    Binary(BinaryKind, u32, u32),
    /// A binary op with a rank-0 constant (often 0 or 1, so identities fire).
    WithScalar(BinaryKind, u32, f64, bool),
    Reduce(u8, u32, Vec<i64>, bool),
    Softmax(u32, i64),
    Transpose(u32, Vec<u8>),
    Reshape(u32, usize, Vec<usize>),
    ExpandDims(u32, i64),
    /// `a @ b`, or `a @ swap_last_two(a)` (a transpose the matmul rule folds).
    MatMul(u32, u32, bool),
    /// A constant-only chain the folder collapses.
    ConstChain(UnaryKind, f64),
    /// The same op twice (CSE).
    Twice(UnaryKind, u32),
    /// neg(neg(x)), f32 -> f64 -> f32, max(x, x), broadcast_to then add: identities to remove.
    Identity(u8, u32, u32),
}

const UNARY: &[UnaryKind] = &[
    UnaryKind::Neg,
    UnaryKind::Abs,
    UnaryKind::Exp,
    UnaryKind::Tanh,
    UnaryKind::Sigmoid,
    UnaryKind::Relu,
    UnaryKind::Silu,
    UnaryKind::Gelu,
    UnaryKind::Sin,
    UnaryKind::Square,
];
const BINARY: &[BinaryKind] =
    &[BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul, BinaryKind::Maximum, BinaryKind::Minimum, BinaryKind::Div];

fn step() -> impl Strategy<Value = Step> {
    let node = || any::<u32>();
    let scalar = prop_oneof![Just(0.0), Just(1.0), -3.0f64..3.0];
    prop_oneof![
        3 => (select(UNARY), node()).prop_map(|(k, x)| Step::Unary(k, x)),
        3 => (select(BINARY), node(), node()).prop_map(|(k, a, b)| Step::Binary(k, a, b)),
        2 => (select(BINARY), node(), scalar, any::<bool>()).prop_map(|(k, a, v, l)| Step::WithScalar(k, a, v, l)),
        1 => (0u8..3, node(), prop::collection::vec(-4i64..4, 0..3), any::<bool>())
            .prop_map(|(k, x, a, keep)| Step::Reduce(k, x, a, keep)),
        1 => (node(), -3i64..3).prop_map(|(x, a)| Step::Softmax(x, a)),
        1 => (node(), prop::collection::vec(any::<u8>(), 6)).prop_map(|(x, k)| Step::Transpose(x, k)),
        1 => (node(), 0usize..=4, prop::collection::vec(0usize..4, 1..6)).prop_map(|(x, r, d)| Step::Reshape(x, r, d)),
        1 => (node(), -2i64..2).prop_map(|(x, a)| Step::ExpandDims(x, a)),
        1 => (node(), node(), any::<bool>()).prop_map(|(a, b, s)| Step::MatMul(a, b, s)),
        1 => (select(UNARY), -2.0f64..2.0).prop_map(|(k, v)| Step::ConstChain(k, v)),
        1 => (select(UNARY), node()).prop_map(|(k, x)| Step::Twice(k, x)),
        2 => (0u8..4, node(), node()).prop_map(|(k, x, y)| Step::Identity(k, x, y)),
    ]
}

fn inputs() -> impl Strategy<Value = Vec<Shape>> {
    (prop::collection::vec(1usize..=4, 0..=3), 1usize..=3, prop::collection::vec((0usize..=3, any::<u8>()), 3))
        .prop_map(|(base, n, picks)| {
            picks[..n]
                .iter()
                .map(|&(len, ones)| {
                    let dims = rlx_ir::testkit::broadcastable_suffix(&base, len, ones as u64);
                    Shape::new(&dims, DType::F32)
                })
                .collect()
        })
}

fn apply(g: &mut Graph, s: &Step) {
    let n = g.len() as u32;
    let pick = |x: u32| NodeId(x % n);
    let mut h = g.clone();
    let rank = |h: &Graph, x: NodeId| h.shape(x).map(|s| s.rank()).unwrap_or(0);
    match s {
        Step::Unary(k, x) => {
            h.unary(*k, pick(*x));
        }
        Step::Binary(k, a, b) => {
            h.binary(*k, pick(*a), pick(*b));
        }
        Step::WithScalar(k, a, v, left) => {
            let c = h.scalar(*v, DType::F32);
            if *left {
                h.binary(*k, c, pick(*a))
            } else {
                h.binary(*k, pick(*a), c)
            };
        }
        Step::Reduce(k, x, axes, keep) => {
            match k {
                0 => h.sum(pick(*x), axes, *keep),
                1 => h.mean(pick(*x), axes, *keep),
                _ => h.max(pick(*x), axes, *keep),
            };
        }
        Step::Softmax(x, a) => {
            h.softmax(pick(*x), *a);
        }
        Step::Transpose(x, keys) => {
            let x = pick(*x);
            let mut perm: Vec<usize> = (0..rank(&h, x)).collect();
            // Axes past the generated keys (expand_dims can raise the rank) keep their order last.
            perm.sort_by_key(|&i| (keys.get(i).copied().unwrap_or(u8::MAX), i));
            h.transpose(x, &perm);
        }
        Step::Reshape(x, r, deal) => {
            let x = pick(*x);
            let numel = h.shape(x).and_then(|s| s.numel()).unwrap_or(1);
            h.reshape(x, &rlx_ir::testkit::factorize(numel, *r, deal));
        }
        Step::ExpandDims(x, a) => {
            h.expand_dims(pick(*x), *a);
        }
        Step::MatMul(a, b, self_t) => {
            let a = pick(*a);
            let b = if *self_t {
                let r = rank(&h, a);
                if r < 2 {
                    return;
                }
                let mut perm: Vec<usize> = (0..r).collect();
                perm.swap(r - 2, r - 1);
                h.transpose(a, &perm)
            } else {
                pick(*b)
            };
            h.matmul(a, b);
        }
        Step::ConstChain(k, v) => {
            let c = h.scalar(*v, DType::F32);
            let d = h.unary(*k, c);
            let e = h.add(d, c);
            h.mul(pick(0), e);
        }
        Step::Twice(k, x) => {
            let a = h.unary(*k, pick(*x));
            let b = h.unary(*k, pick(*x));
            h.add(a, b);
        }
        Step::Identity(k, x, y) => {
            let x = pick(*x);
            match k {
                0 => {
                    let a = h.neg(x);
                    h.neg(a);
                }
                1 => {
                    let a = h.cast(x, DType::F64);
                    h.cast(a, DType::F32);
                }
                2 => {
                    h.maximum(x, x);
                }
                _ => {
                    let y = pick(*y);
                    let (Some(sx), Some(sy)) = (h.shape(x).cloned(), h.shape(y).cloned()) else { return };
                    let Ok(d) = rlx_ir::shape::broadcast_dims(&sx.dims, &sy.dims) else { return };
                    let d: Vec<usize> = d.iter().map(|d| d.fixed().unwrap_or(1)).collect();
                    let b = h.broadcast_to(y, &d);
                    h.add(x, b);
                }
            }
        }
    }
    if h.check().is_ok() {
        *g = h;
    }
}

fn build(shapes: &[Shape], steps: &[Step]) -> (Graph, Vec<(String, HostTensor)>) {
    let mut g = Graph::new("prop");
    let mut feeds = vec![];
    for (i, s) in shapes.iter().enumerate() {
        let name = format!("x{i}");
        g.input(&name, s.clone());
        let d = s.fixed_dims().unwrap();
        let v = rand_f64(d.iter().product(), -2.0, 2.0, 7 + i as u64);
        feeds.push((name, HostTensor::from_f64(&d, DType::F32, &v).unwrap()));
    }
    for s in steps {
        apply(&mut g, s);
    }
    let mut used = vec![false; g.len()];
    for n in g.nodes() {
        for x in &n.inputs {
            used[x.index()] = true;
        }
    }
    let outs = (0..g.len()).filter(|&i| !used[i]).map(|i| NodeId(i as u32)).collect();
    g.set_outputs(outs);
    (g, feeds)
}

fn eval(g: &Graph, feeds: &[(String, HostTensor)]) -> Vec<HostTensor> {
    let f: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    interp::evaluate(g, &f).unwrap()
}

fn same(a: &[HostTensor], b: &[HostTensor]) -> Result<(), String> {
    if a.len() != b.len() {
        return Err(format!("{} outputs vs {}", a.len(), b.len()));
    }
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        testkit::compare(x, y).map_err(|e| format!("output {i}: {e}"))?;
    }
    Ok(())
}

/// Runs `g` on the CPU with `feeds`, legalizing only.
fn cpu(g: &Graph, feeds: &[(String, HostTensor)]) -> Vec<HostTensor> {
    let f: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    rlx_driver::run_host(cpu_backend(), g, &f).unwrap()
}

/// Values within a relative 1e-3 (f32 rounding can be amplified by chaotic random graphs), with
/// NaN and infinities matching exactly.
fn close(a: &[HostTensor], b: &[HostTensor]) -> Result<(), String> {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        prop_assert_eq_shape(x, y)?;
        let (xv, yv) = (x.to_f64_vec().unwrap(), y.to_f64_vec().unwrap());
        for (j, (p, q)) in xv.iter().zip(&yv).enumerate() {
            let ok = (p.is_nan() && q.is_nan()) || p == q || (p - q).abs() <= 1e-3 * (1.0 + q.abs());
            if !ok {
                return Err(format!("output {i} element {j}: {p} vs {q}"));
            }
        }
    }
    Ok(())
}

fn prop_assert_eq_shape(x: &HostTensor, y: &HostTensor) -> Result<(), String> {
    if x.shape != y.shape { Err(format!("{} vs {}", x.shape, y.shape)) } else { Ok(()) }
}

/// The generator reaches the rules: over fixed seeds, most rules fire somewhere.
#[test]
fn generated_graphs_exercise_the_rules() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strat = (inputs(), prop::collection::vec(step(), 1..=14));
    let mut fired = std::collections::BTreeMap::new();
    let (mut cse, mut regions) = (0, 0);
    for _ in 0..300 {
        let (shapes, steps) = strat.new_tree(&mut runner).unwrap().current();
        let (g, _) = build(&shapes, &steps);
        let (_, st) = rlx_opt::rewrite(&g, rlx_opt::rules::SIMPLIFY).unwrap();
        cse += st.cse_merged;
        for (k, v) in st.fired {
            *fired.entry(k).or_insert(0) += v;
        }
        let cpu_b = cpu_backend();
        let (_, rep) = rlx_opt::compile_pipeline(g, cpu_b, rlx_opt::PrecisionPolicy::F32).unwrap();
        regions += rep.fusion.count(rlx_opt::FusionKind::Elementwise);
    }
    for rule in [
        "fold",
        "add-zero",
        "mul-one",
        "sub-zero",
        "div-one",
        "neg-neg",
        "max-min-self",
        "cast-widen-narrow",
        "view-to-reshape",
        "reshape-reshape",
        "transpose-transpose",
        "implicit-broadcast",
        "transpose-into-matmul",
    ] {
        assert!(fired.get(rule).copied().unwrap_or(0) > 0, "rule {rule} never fired: {fired:?}");
    }
    assert!(cse > 0 && regions > 0, "cse {cse}, regions {regions}");
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn each_rule_set_preserves_values(shapes in inputs(), steps in prop::collection::vec(step(), 1..=14)) {
        let (g, feeds) = build(&shapes, &steps);
        prop_assert!(g.verify().is_ok(), "{:?}", g.verify());
        let want = eval(&g, &feeds);
        for set in ["algebraic", "cse", "fold", "views", "broadcast", "explicit-broadcast", "matmul", "simplify"] {
            let (h, _) = rlx_opt::rewrite(&g, rlx_opt::rules::set_by_name(set).unwrap()).unwrap();
            let r = same(&eval(&h, &feeds), &want);
            prop_assert!(r.is_ok(), "set {set}: {:?}\n{}\n{}", r, g.to_text(), h.to_text());
            if set != "explicit-broadcast" {
                prop_assert!(h.len() <= g.len(), "set {set} grew the graph");
            }
        }
        let cpu_b = cpu_backend();
        let (legal, _) = legalize(&g, cpu_b).unwrap();
        let (fused, _) = rlx_opt::fuse_elementwise(&legal, &|n, i| cpu_b.supports(n, i)).unwrap();
        // Decompositions round after every op, so fusion is compared with the legalized graph.
        let r = same(&eval(&fused, &feeds), &eval(&legal, &feeds));
        prop_assert!(r.is_ok(), "fuse: {:?}\n{}", r, fused.to_text());
    }

    #[test]
    fn optimized_cpu_matches_plain_cpu(shapes in inputs(), steps in prop::collection::vec(step(), 1..=14)) {
        let (g, feeds) = build(&shapes, &steps);
        let cpu_b = cpu_backend();
        let (opt, report) = rlx_opt::compile_pipeline(g.clone(), cpu_b, rlx_opt::PrecisionPolicy::F32).unwrap();
        let (legal, _) = legalize(&g, cpu_b).unwrap();
        let r = same(&eval(&opt, &feeds), &eval(&legal, &feeds));
        prop_assert!(r.is_ok(), "pipeline: {:?}\n{}", r, opt.to_text());
        prop_assert!(report.memory.arena_bytes <= report.memory.naive_bytes);
        let r = close(&cpu(&opt, &feeds), &cpu(&g, &feeds));
        prop_assert!(r.is_ok(), "cpu: {:?}\n{}\n{}", r, g.to_text(), opt.to_text());
    }
}

/// One CPU backend for the whole test binary.
fn cpu_backend() -> &'static rlx_cpu::CpuBackend {
    static B: std::sync::OnceLock<rlx_cpu::CpuBackend> = std::sync::OnceLock::new();
    B.get_or_init(rlx_cpu::CpuBackend::new)
}
