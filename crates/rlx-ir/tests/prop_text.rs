//! Property tests of the serialized forms: random small graphs survive the text form and the JSON
//! form unchanged.

use proptest::prelude::*;
use proptest::sample::select;
use rlx_ir::ops::{BinaryKind, UnaryKind};
use rlx_ir::{DType, Graph, NodeId, Shape};

/// `n` cases, unless `PROPTEST_CASES` is set (then proptest's default config reads it).
fn config(n: u32) -> ProptestConfig {
    if std::env::var_os("PROPTEST_CASES").is_some() { ProptestConfig::default() } else { ProptestConfig::with_cases(n) }
}

/// One random builder step. `u32` fields pick an existing node (modulo the node count).
#[derive(Debug, Clone)]
enum Step {
    Unary(UnaryKind, u32),
    Binary(BinaryKind, u32, u32),
    /// A binary op with a rank-0 constant of the node's dtype on the right.
    WithScalar(BinaryKind, u32, f64),
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
        (select(BinaryKind::ALL), node(), -100.0f64..100.0).prop_map(|(k, a, v)| Step::WithScalar(k, a, v)),
        (0u8..3, node(), prop::collection::vec(-4i64..4, 0..3), any::<bool>())
            .prop_map(|(k, x, a, keep)| Step::Reduce(k, x, a, keep)),
        (node(), -3i64..3).prop_map(|(x, a)| Step::Softmax(x, a)),
        (node(), prop::collection::vec(any::<u8>(), 4)).prop_map(|(x, k)| Step::Transpose(x, k)),
        (node(), 0usize..=4, prop::collection::vec(0usize..4, 1..6)).prop_map(|(x, r, d)| Step::Reshape(x, r, d)),
        (node(), node(), any::<bool>()).prop_map(|(a, b, s)| Step::MatMul(a, b, s)),
    ]
}

/// Input shapes: suffixes of one base shape with random dims set to 1, so they often broadcast.
fn inputs(dtypes: Vec<DType>) -> impl Strategy<Value = Vec<Shape>> {
    let dtypes = prop::collection::vec(select(dtypes), 1..=3);
    (prop::collection::vec(1usize..=4, 0..=3), dtypes, prop::collection::vec((0usize..=3, any::<u8>()), 3)).prop_map(
        |(base, dts, picks)| {
            dts.iter()
                .zip(&picks)
                .map(|(&dt, &(len, ones))| {
                    let dims = rlx_ir::testkit::broadcastable_suffix(&base, len, ones as u64);
                    Shape::new(&dims, dt)
                })
                .collect()
        },
    )
}

/// Applies one step to a copy of `g`; keeps the copy only when no error was recorded.
fn apply(g: &mut Graph, s: &Step) {
    let n = g.len() as u32;
    let pick = |x: u32| NodeId(x % n);
    let mut h = g.clone();
    let ty = |h: &Graph, x: NodeId| h.shape(x).cloned().expect("picked node exists");
    match s {
        Step::Unary(k, x) => {
            h.unary(*k, pick(*x));
        }
        Step::Binary(k, a, b) => {
            h.binary(*k, pick(*a), pick(*b));
        }
        Step::WithScalar(k, a, v) => {
            let dt = h.dtype(pick(*a));
            let c = h.scalar(*v, dt);
            h.binary(*k, pick(*a), c);
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
            let r = ty(&h, x).rank();
            let mut perm: Vec<usize> = (0..r).collect();
            perm.sort_by_key(|&i| (keys[i], i));
            h.transpose(x, &perm);
        }
        Step::Reshape(x, r, deal) => {
            let x = pick(*x);
            let numel = ty(&h, x).numel().expect("static");
            h.reshape(x, &rlx_ir::testkit::factorize(numel, *r, deal));
        }
        Step::MatMul(a, b, self_t) => {
            let a = pick(*a);
            let b = if *self_t {
                let r = ty(&h, a).rank();
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
    if h.check().is_ok() {
        *g = h;
    }
}

/// Builds a graph from inputs and steps; every node no other node uses becomes an output.
fn build(shapes: &[Shape], steps: &[Step]) -> Graph {
    let mut g = Graph::new("prop");
    for (i, s) in shapes.iter().enumerate() {
        g.input(&format!("x{i}"), s.clone());
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
    g
}

proptest! {
    #![proptest_config(config(64))]

    /// `from_text(to_text(g)) == g`, it reprints identically, and the JSON form round-trips.
    #[test]
    fn text_and_json_round_trip(
        shapes in inputs(DType::FLOATS.to_vec()),
        steps in prop::collection::vec(step(), 1..=12),
    ) {
        let g = build(&shapes, &steps);
        prop_assert!(g.verify().is_ok(), "{:?}", g.verify());
        let text = g.to_text();
        let back = Graph::from_text(&text);
        prop_assert!(back.is_ok(), "{:?}\n{}", back, text);
        let back = back.unwrap();
        prop_assert_eq!(&back, &g, "{}", text);
        prop_assert_eq!(back.to_text(), text);
        let json = g.to_json();
        let back = Graph::from_json(&json);
        prop_assert!(back.is_ok(), "{:?}\n{}", back, json);
        prop_assert_eq!(back.unwrap(), g);
    }
}

/// The generator is not degenerate: over a fixed seed, graphs get most op kinds.
#[test]
fn generator_covers_ops() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strat = (inputs(vec![DType::F32]), prop::collection::vec(step(), 1..=12));
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..200 {
        let (shapes, steps) = strat.new_tree(&mut runner).unwrap().current();
        let g = build(&shapes, &steps);
        for n in g.nodes() {
            seen.insert(format!("{:?}", n.op.kind()));
        }
    }
    for want in ["Unary", "Binary", "Reduce", "Softmax", "Transpose", "Reshape", "MatMul", "Constant"] {
        assert!(seen.contains(want), "{want} never generated; saw {seen:?}");
    }
}
