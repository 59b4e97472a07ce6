//! Random small f32 graphs on the CPU backend against the reference interpreter.
//!
//! The reference computes each op in f64 and rounds to f32; the backend computes in f32. To keep
//! the comparison at the f32 tolerance meaningful, the generator tracks for every node an interval
//! holding its values and an estimate of the absolute error f32 arithmetic may have accumulated,
//! and drops steps that would leave [-64, 64] or exceed 1e-5 of error (half the absolute tolerance).
//! Positive-domain ops (log, sqrt, rsqrt, recip, the base of pow, a divisor) are applied to
//! `abs(x) + 0.5`; floor and round only to exactly computed values.

use proptest::prelude::*;
use proptest::sample::select;
use rlx_ir::ops::{BinaryKind, ReduceKind, UnaryKind};
use rlx_ir::shape::normalize_axes;
use rlx_ir::{DType, Data, Graph, HostTensor, NodeId, Op, Shape, interp, testkit};

/// `n` cases, unless `PROPTEST_CASES` is set (then proptest's default config reads it).
fn config(n: u32) -> ProptestConfig {
    if std::env::var_os("PROPTEST_CASES").is_some() { ProptestConfig::default() } else { ProptestConfig::with_cases(n) }
}

/// One random builder step. `u32` fields pick an existing node (modulo the node count).
#[derive(Debug, Clone)]
enum Step {
    Unary(UnaryKind, u32),
    Binary(BinaryKind, u32, u32),
    /// sum, mean or max (0, 1, 2) over axes.
    Reduce(u8, u32, Vec<i64>, bool),
    Softmax(u32, i64),
    /// Transpose by the permutation that sorts `keys[..rank]`.
    Transpose(u32, Vec<u8>),
    /// Reshape to a factorization of numel into `rank` dims, prime factors dealt by `deal`.
    Reshape(u32, usize, Vec<usize>),
    /// `a @ b`, or with `self_t`, `a @ swap_last_two(a)`.
    MatMul(u32, u32, bool),
}

fn step() -> impl Strategy<Value = Step> {
    let node = || any::<u32>();
    prop_oneof![
        (select(UnaryKind::ALL), node()).prop_map(|(k, x)| Step::Unary(k, x)),
        (select(BinaryKind::ALL), node(), node()).prop_map(|(k, a, b)| Step::Binary(k, a, b)),
        (0u8..3, node(), prop::collection::vec(-4i64..4, 0..3), any::<bool>())
            .prop_map(|(k, x, a, keep)| Step::Reduce(k, x, a, keep)),
        (node(), -3i64..3).prop_map(|(x, a)| Step::Softmax(x, a)),
        (node(), prop::collection::vec(any::<u8>(), 4)).prop_map(|(x, k)| Step::Transpose(x, k)),
        (node(), 0usize..=4, prop::collection::vec(0usize..4, 1..6)).prop_map(|(x, r, d)| Step::Reshape(x, r, d)),
        (node(), node(), any::<bool>()).prop_map(|(a, b, s)| Step::MatMul(a, b, s)),
    ]
}

/// 1..=3 f32 input shapes: suffixes of one base shape with random dims set to 1 (so they often
/// broadcast), each with 64 values in [-2, 2] (the first numel are used).
fn inputs() -> impl Strategy<Value = Vec<(Vec<usize>, Vec<f32>)>> {
    let picks = prop::collection::vec((0usize..=3, any::<u8>(), prop::collection::vec(-2.0f32..=2.0, 64)), 1..=3);
    (prop::collection::vec(1usize..=4, 0..=3), picks).prop_map(|(base, picks)| {
        picks
            .into_iter()
            .map(|(len, ones, vals)| {
                let dims = rlx_ir::testkit::broadcastable_suffix(&base, len, ones as u64);
                let n = dims.iter().product();
                (dims, vals[..n].to_vec())
            })
            .collect()
    })
}

/// What is known of a node's values: they lie in `[lo, hi]`, within about `err` of exact.
#[derive(Debug, Clone, Copy)]
struct Range {
    lo: f64,
    hi: f64,
    err: f64,
}

const U: f64 = f32::EPSILON as f64;
const MAX_MAG: f64 = 64.0;
const MAX_ERR: f64 = 1e-5;

impl Range {
    fn mag(self) -> f64 {
        self.lo.abs().max(self.hi.abs())
    }
    /// A result in `[lo, hi]` with propagated error `err` plus a rounding error of `ulps` f32
    /// epsilons of its magnitude (1 for correctly rounded arithmetic, more for the rest).
    fn new(lo: f64, hi: f64, err: f64, ulps: f64) -> Range {
        let mag = lo.abs().max(hi.abs());
        Range { lo, hi, err: err + ulps * U * mag }
    }
    /// The range of a function monotone on the interval (increasing when `up`).
    fn mono(self, f: impl Fn(f64) -> f64, up: bool, lip: f64) -> Range {
        let (a, b) = if up { (f(self.lo), f(self.hi)) } else { (f(self.hi), f(self.lo)) };
        Range::new(a, b, self.err * lip, 4.0)
    }
}

const REJECT: Range = Range { lo: f64::NAN, hi: f64::NAN, err: f64::INFINITY };

/// The range of a node from its op and its inputs' ranges (`REJECT` for anything unsupported or
/// outside the domain).
fn range_of(g: &Graph, id: usize, rs: &[Range]) -> Range {
    let n = &g.nodes()[id];
    let ins: Vec<Range> = n.inputs.iter().map(|x| rs[x.index()]).collect();
    let in_dims = |i: usize| g.shape(n.inputs[i]).and_then(Shape::fixed_dims).unwrap_or_default();
    match &n.op {
        Op::Input(_) => Range { lo: -2.0, hi: 2.0, err: 0.0 },
        Op::Constant(c) => match &c.value.data {
            Data::F(v) => {
                let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                Range { lo, hi, err: 0.0 }
            }
            _ => REJECT,
        },
        Op::Unary(u) => unary_range(u.kind, ins[0]),
        Op::Binary(b) => binary_range(b.kind, ins[0], ins[1]),
        Op::Reduce(r) => {
            let dims = in_dims(0);
            let Ok(axes) = normalize_axes(&r.axes, dims.len()) else { return REJECT };
            let c = axes.iter().map(|&a| dims[a]).product::<usize>() as f64;
            let x = ins[0];
            match r.kind {
                // Rounding of a c-term f32 sum: about c epsilons of the largest term (a random walk
                // of sqrt(c) roundings of partial sums of size sqrt(c) terms), doubled.
                ReduceKind::Sum => Range::new(c * x.lo, c * x.hi, c * x.err + 2.0 * c * U * x.mag(), 2.0),
                ReduceKind::Mean => Range::new(x.lo, x.hi, x.err + 2.0 * U * x.mag(), 2.0),
                ReduceKind::Max | ReduceKind::Min => x,
                ReduceKind::Prod => REJECT,
            }
        }
        // Each output's partial derivatives sum in absolute value to 2 p (1 - p) <= 1/2.
        Op::Softmax(s) => {
            let dims = in_dims(0);
            let Ok(a) = rlx_ir::shape::normalize_axis(s.axis, dims.len()) else { return REJECT };
            Range::new(0.0, 1.0, 0.5 * ins[0].err, 4.0 + 2.0 * dims[a] as f64)
        }
        Op::Transpose(_) | Op::Reshape(_) => ins[0],
        Op::MatMul(_) => {
            let dims = in_dims(0);
            let k = dims[dims.len() - 1] as f64;
            let (a, b) = (ins[0], ins[1]);
            let m = k * a.mag() * b.mag();
            Range::new(-m, m, k * (a.mag() * b.err + b.mag() * a.err) + 2.0 * m * U, 2.0)
        }
        _ => REJECT,
    }
}

fn unary_range(k: UnaryKind, x: Range) -> Range {
    use UnaryKind as K;
    let pos = x.lo >= 0.25;
    let m = x.mag();
    match k {
        K::Neg => Range { lo: -x.hi, hi: -x.lo, ..x },
        K::Abs if x.lo >= 0.0 => x,
        K::Abs => Range { lo: 0.0, hi: m, ..x },
        K::Relu => Range { lo: x.lo.max(0.0), hi: x.hi.max(0.0), ..x },
        K::Exp => x.mono(f64::exp, true, x.hi.exp()),
        K::Log if pos => x.mono(f64::ln, true, 1.0 / x.lo),
        K::Sqrt if pos => x.mono(f64::sqrt, true, 0.5 / x.lo.sqrt()),
        K::Rsqrt if pos => x.mono(|v| 1.0 / v.sqrt(), false, 0.5 * x.lo.powf(-1.5)),
        K::Recip if pos => x.mono(|v| 1.0 / v, false, 1.0 / (x.lo * x.lo)),
        K::Square => {
            let lo = if x.lo <= 0.0 && x.hi >= 0.0 { 0.0 } else { (x.lo * x.lo).min(x.hi * x.hi) };
            Range::new(lo, m * m, 2.0 * m * x.err, 1.0)
        }
        K::Sin | K::Cos => Range::new(-1.0, 1.0, x.err, 4.0),
        K::Tanh => x.mono(f64::tanh, true, 1.0),
        K::Sigmoid => x.mono(|v| 1.0 / (1.0 + (-v).exp()), true, 0.25),
        K::Erf => Range::new(-1.0, 1.0, 1.2 * x.err, 4.0),
        // gelu and silu are above -0.3 with slope at most 1.13.
        K::Gelu | K::GeluTanh | K::Silu => Range::new(-0.3, x.hi.max(0.0), 1.2 * x.err, 4.0),
        K::Softplus => Range::new(0.0, x.hi.max(0.0) + 0.7, x.err, 4.0),
        // Discontinuous: only on exactly computed values.
        K::Floor | K::Round if x.err == 0.0 => Range { lo: x.lo.floor() - 1.0, hi: x.hi.ceil() + 1.0, err: 0.0 },
        _ => REJECT,
    }
}

fn binary_range(k: BinaryKind, a: Range, b: Range) -> Range {
    use BinaryKind as K;
    let corners = |f: fn(f64, f64) -> f64| {
        let v = [f(a.lo, b.lo), f(a.lo, b.hi), f(a.hi, b.lo), f(a.hi, b.hi)];
        (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(f64::NEG_INFINITY, f64::max))
    };
    match k {
        K::Add => Range::new(a.lo + b.lo, a.hi + b.hi, a.err + b.err, 1.0),
        K::Sub => Range::new(a.lo - b.hi, a.hi - b.lo, a.err + b.err, 1.0),
        K::Mul => {
            let (lo, hi) = corners(|x, y| x * y);
            Range::new(lo, hi, a.mag() * b.err + b.mag() * a.err, 1.0)
        }
        K::Div if b.lo >= 0.25 => {
            let (lo, hi) = corners(|x, y| x / y);
            Range::new(lo, hi, a.err / b.lo + a.mag() * b.err / (b.lo * b.lo), 1.0)
        }
        // x^y is monotone in each argument for x > 0, so the corners bound it.
        K::Pow if a.lo >= 0.25 => {
            let (lo, hi) = corners(f64::powf);
            let ln = a.lo.ln().abs().max(a.hi.ln().abs());
            Range::new(lo, hi, hi * (b.mag() / a.lo * a.err + ln * b.err), 8.0)
        }
        K::Maximum | K::Minimum => Range { lo: a.lo.min(b.lo), hi: a.hi.max(b.hi), err: a.err.max(b.err) },
        _ => REJECT,
    }
}

/// `abs(x) + 0.5`, for positive-domain ops.
fn positive(h: &mut Graph, x: NodeId) -> NodeId {
    let a = h.abs(x);
    let c = h.scalar(0.5, DType::F32);
    h.add(a, c)
}

/// Applies one step to a copy of `g`; keeps it when no error was recorded and every new node
/// stays in range (`rs` gets their ranges).
fn apply(g: &mut Graph, rs: &mut Vec<Range>, s: &Step) {
    use UnaryKind as K;
    let n = g.len() as u32;
    let pick = |x: u32| NodeId(x % n);
    let mut h = g.clone();
    let rank = |h: &Graph, x: NodeId| h.shape(x).map_or(0, Shape::rank);
    match s {
        Step::Unary(k, x) => {
            let x =
                if matches!(k, K::Log | K::Sqrt | K::Rsqrt | K::Recip) { positive(&mut h, pick(*x)) } else { pick(*x) };
            h.unary(*k, x);
        }
        Step::Binary(k, a, b) => {
            let (mut a, mut b) = (pick(*a), pick(*b));
            match k {
                BinaryKind::Div => b = positive(&mut h, b),
                BinaryKind::Pow => a = positive(&mut h, a),
                _ => {}
            }
            h.binary(*k, a, b);
        }
        Step::Reduce(k, x, axes, keep) => {
            let x = pick(*x);
            match k {
                0 => h.sum(x, axes, *keep),
                1 => h.mean(x, axes, *keep),
                _ => h.max(x, axes, *keep),
            };
        }
        Step::Softmax(x, a) => {
            h.softmax(pick(*x), *a);
        }
        Step::Transpose(x, keys) => {
            let x = pick(*x);
            let mut perm: Vec<usize> = (0..rank(&h, x)).collect();
            perm.sort_by_key(|&i| (keys[i], i));
            h.transpose(x, &perm);
        }
        Step::Reshape(x, r, deal) => {
            let x = pick(*x);
            let numel = h.shape(x).and_then(Shape::numel).unwrap_or(1);
            h.reshape(x, &rlx_ir::testkit::factorize(numel, *r, deal));
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
    }
    if h.check().is_err() {
        return;
    }
    let mut new = rs.clone();
    for id in g.len()..h.len() {
        let r = range_of(&h, id, &new);
        if !(r.err <= MAX_ERR && r.mag() <= MAX_MAG) {
            return;
        }
        new.push(r);
    }
    *g = h;
    *rs = new;
}

/// Builds a graph from inputs and steps; every node no other node uses becomes an output.
fn build(ins: &[(Vec<usize>, Vec<f32>)], steps: &[Step]) -> (Graph, Vec<(String, HostTensor)>) {
    let mut g = Graph::new("prop");
    let mut rs = vec![];
    let mut feeds = vec![];
    for (i, (dims, vals)) in ins.iter().enumerate() {
        let name = format!("x{i}");
        g.input(&name, Shape::new(dims, DType::F32));
        rs.push(Range { lo: -2.0, hi: 2.0, err: 0.0 });
        feeds.push((name, HostTensor::from_f32(dims, vals).expect("input")));
    }
    for s in steps {
        apply(&mut g, &mut rs, s);
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

proptest! {
    #![proptest_config(config(64))]

    /// The CPU backend matches the reference interpreter on random graphs.
    #[test]
    fn cpu_matches_reference(ins in inputs(), steps in prop::collection::vec(step(), 1..=12)) {
        let (g, feeds) = build(&ins, &steps);
        let feeds: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        let want = interp::evaluate(&g, &feeds).map_err(|e| TestCaseError::fail(format!("reference: {e}")))?;
        let got = rlx_driver::run_host(&rlx_cpu::CpuBackend::new(), &g, &feeds);
        prop_assert!(got.is_ok(), "backend: {:?}\n{}", got.err(), g.to_text());
        let got = got.unwrap();
        prop_assert_eq!(got.len(), want.len());
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            if let Err(e) = testkit::compare(a, b) {
                prop_assert!(false, "output {} ({}): {}\n{}", i, g.outputs()[i], e, g.to_text());
            }
        }
    }
}

/// The generator is not degenerate: over a fixed seed, graphs get most op kinds.
#[test]
fn generator_covers_ops() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strat = (inputs(), prop::collection::vec(step(), 1..=12));
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..200 {
        let (ins, steps) = strat.new_tree(&mut runner).unwrap().current();
        for n in build(&ins, &steps).0.nodes() {
            let name = n.op.def().name();
            seen.insert(name.to_string());
        }
    }
    for want in ["log", "exp", "add", "div", "pow", "sum", "mean", "max", "softmax", "transpose", "reshape", "matmul"] {
        assert!(seen.contains(want), "{want} never generated; saw {seen:?}");
    }
}
