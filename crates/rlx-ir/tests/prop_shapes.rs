//! Property tests of the shape rules: broadcasting, reductions, transpose/reshape, matmul, dtype
//! promotion, and "the builder records an error or succeeds, never panics" on arbitrary bad input.
//!
//! Every expected shape is computed here by an independent implementation of the numpy rule.

use proptest::prelude::*;
use proptest::sample::select;
use rlx_ir::shape::broadcast_dims;
use rlx_ir::{DType, DTypeClass, Data, Dim, Graph, HostTensor, Shape, interp};

/// `n` cases, unless `PROPTEST_CASES` is set (then proptest's default config reads it).
fn config(n: u32) -> ProptestConfig {
    if std::env::var_os("PROPTEST_CASES").is_some() { ProptestConfig::default() } else { ProptestConfig::with_cases(n) }
}

fn fixed(d: &[usize]) -> Vec<Dim> {
    d.iter().map(|&n| Dim::Fixed(n)).collect()
}

/// numpy's broadcasting rule, written independently: align on the right, a missing dim is 1,
/// equal dims or a 1 on either side combine; anything else is an error.
fn numpy_broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    let (mut ia, mut ib) = (a.iter().rev(), b.iter().rev());
    for o in out.iter_mut().rev() {
        let x = ia.next().copied().unwrap_or(1);
        let y = ib.next().copied().unwrap_or(1);
        *o = match (x, y) {
            _ if x == y => x,
            (1, _) => y,
            (_, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// Dims of rank 0..=4 with sizes 1..=4.
fn dims_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..=4, 0..=4)
}

/// A pair of shapes that usually broadcast: a common base, each side a suffix of it with random
/// dims replaced by 1; sometimes a dim is perturbed so that broadcasting may fail.
fn broadcast_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    let related = (
        prop::collection::vec(1usize..=4, 0..=4),
        any::<u64>(),
        any::<u64>(),
        0usize..=4,
        0usize..=4,
        prop::option::of((0usize..4, 1usize..=4)),
    )
        .prop_map(|(base, ones_a, ones_b, la, lb, perturb)| {
            let side =
                |len: usize, ones: u64| -> Vec<usize> { rlx_ir::testkit::broadcastable_suffix(&base, len, ones) };
            let a = side(la, ones_a);
            let mut b = side(lb, ones_b);
            if let Some((i, v)) = perturb
                && i < b.len()
            {
                b[i] = v;
            }
            (a, b)
        });
    prop_oneof![3 => related, 1 => (dims_strategy(), dims_strategy())]
}

fn unravel(mut flat: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for ax in (0..dims.len()).rev() {
        idx[ax] = flat % dims[ax];
        flat /= dims[ax];
    }
    idx
}

fn ravel(idx: &[usize], dims: &[usize]) -> usize {
    idx.iter().zip(dims).fold(0, |acc, (&i, &d)| acc * d + i)
}

fn floats(t: &HostTensor) -> Vec<f64> {
    match &t.data {
        Data::F(v) => v.clone(),
        other => panic!("expected floats, got {other:?}"),
    }
}

/// Small integers as f64 values: sums are exact, so results compare with `==`.
fn values(n: usize, seed: u64) -> Vec<f64> {
    (0..n as u64).map(|i| ((seed.wrapping_mul(31).wrapping_add(i * 7919)) % 17) as f64 - 8.0).collect()
}

proptest! {
    #![proptest_config(config(64))]

    /// broadcast_dims agrees with numpy's rule (errors included) and is commutative.
    #[test]
    fn broadcast_matches_numpy((a, b) in broadcast_pair()) {
        let want = numpy_broadcast(&a, &b);
        let got = broadcast_dims(&fixed(&a), &fixed(&b));
        let rev = broadcast_dims(&fixed(&b), &fixed(&a));
        match &want {
            Some(w) => prop_assert_eq!(got.as_ref().ok(), Some(&fixed(w)), "{:?} with {:?}", a, b),
            None => prop_assert!(got.is_err(), "{:?} with {:?} should fail, got {:?}", a, b, got),
        }
        prop_assert_eq!(got.ok(), rev.ok());
    }

    /// `Graph::add` of two inputs infers the broadcast shape, and records an error exactly when
    /// broadcasting is impossible.
    #[test]
    fn add_infers_broadcast_shape((a, b) in broadcast_pair()) {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&a, DType::F32));
        let y = g.input("y", Shape::new(&b, DType::F32));
        let z = g.add(x, y);
        match numpy_broadcast(&a, &b) {
            Some(w) => {
                prop_assert!(g.check().is_ok(), "{:?}", g.check());
                prop_assert_eq!(g.shape(z).cloned(), Some(Shape::new(&w, DType::F32)));
            }
            None => prop_assert!(g.check().is_err()),
        }
    }

    /// The reference `add` on broadcast inputs equals an explicit loop over output multi-indices.
    #[test]
    fn reference_add_matches_loop((a, b) in broadcast_pair(), seed in any::<u64>()) {
        let Some(od) = numpy_broadcast(&a, &b) else { return Ok(()) };
        let na: usize = a.iter().product();
        let nb: usize = b.iter().product();
        let (va, vb) = (values(na, seed), values(nb, seed ^ 0x9e37));
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&a, DType::F64));
        let y = g.input("y", Shape::new(&b, DType::F64));
        let z = g.add(x, y);
        g.set_outputs(vec![z]);
        let feeds = [
            ("x", HostTensor::from_f64(&a, DType::F64, &va).unwrap()),
            ("y", HostTensor::from_f64(&b, DType::F64, &vb).unwrap()),
        ];
        let got = floats(&interp::evaluate(&g, &feeds).unwrap()[0]);
        let n: usize = od.iter().product();
        let mut want = Vec::with_capacity(n);
        for f in 0..n {
            let oi = unravel(f, &od);
            // The input index: drop leading output axes, clamp broadcast (size-1) axes to 0.
            let pick = |dims: &[usize]| {
                let lead = od.len() - dims.len();
                let idx: Vec<usize> =
                    dims.iter().enumerate().map(|(i, &d)| if d == 1 { 0 } else { oi[lead + i] }).collect();
                ravel(&idx, dims)
            };
            want.push(va[pick(&a)] + vb[pick(&b)]);
        }
        prop_assert_eq!(got, want);
    }

    /// `sum` infers the reduced dims for any axes (negative allowed); out-of-range or repeated
    /// axes record an error instead of panicking.
    #[test]
    fn reduce_shape_rule(
        dims in dims_strategy(),
        axes in prop::collection::vec(-6i64..6, 0..=4),
        keep in any::<bool>(),
    ) {
        let r = dims.len() as i64;
        let norm: Option<Vec<usize>> = axes
            .iter()
            .map(|&a| {
                let n = if a < 0 { a + r } else { a };
                (0..r).contains(&n).then_some(n as usize)
            })
            .collect();
        let want = norm.filter(|n| {
            let mut s = n.clone();
            s.sort_unstable();
            s.dedup();
            s.len() == n.len()
        });
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&dims, DType::F32));
        let y = g.sum(x, &axes, keep);
        match want {
            Some(ax) => {
                prop_assert!(g.check().is_ok(), "{:?}", g.check());
                let out: Vec<usize> = dims
                    .iter()
                    .enumerate()
                    .filter_map(|(i, &d)| match (ax.contains(&i), keep) {
                        (false, _) => Some(d),
                        (true, true) => Some(1),
                        (true, false) => None,
                    })
                    .collect();
                prop_assert_eq!(g.shape(y).cloned(), Some(Shape::new(&out, DType::F32)));
            }
            None => prop_assert!(g.check().is_err(), "axes {:?} on rank {}", axes, r),
        }
    }

    /// Reducing a valid random subset of axes, written with random signs, gives the same shape as
    /// the non-negative form.
    #[test]
    fn reduce_negative_axes_equivalent(
        dims in prop::collection::vec(1usize..=4, 1..=4),
        pick in any::<u8>(),
        negate in any::<u8>(),
        keep in any::<bool>(),
    ) {
        let r = dims.len();
        let pos: Vec<i64> = (0..r).filter(|i| pick >> i & 1 == 1).map(|i| i as i64).collect();
        let mixed: Vec<i64> =
            pos.iter().enumerate().map(|(j, &a)| if negate >> j & 1 == 1 { a - r as i64 } else { a }).collect();
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&dims, DType::F32));
        let y1 = g.sum(x, &pos, keep);
        let y2 = g.sum(x, &mixed, keep);
        prop_assert!(g.check().is_ok());
        prop_assert_eq!(g.shape(y1), g.shape(y2));
        prop_assert_eq!(g.shape(y1).unwrap().rank(), if keep { r } else { r - pos.len() });
    }

    /// A random permutation permutes the dims; the inverse permutation through the reference
    /// interpreter gives back the input; the transposed data matches an explicit loop.
    #[test]
    fn transpose_roundtrip(
        perm in dims_strategy().prop_flat_map(|d| {
            let r = d.len();
            (Just(d), Just((0..r).collect::<Vec<_>>()).prop_shuffle())
        }),
        seed in any::<u64>(),
    ) {
        let (dims, perm) = perm;
        let mut inv = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i;
        }
        let n: usize = dims.iter().product();
        let v = values(n, seed);
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&dims, DType::F64));
        let y = g.transpose(x, &perm);
        let z = g.transpose(y, &inv);
        g.set_outputs(vec![y, z]);
        prop_assert!(g.check().is_ok(), "{:?}", g.check());
        let pd: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
        prop_assert_eq!(g.shape(y).cloned(), Some(Shape::new(&pd, DType::F64)));
        let xt = HostTensor::from_f64(&dims, DType::F64, &v).unwrap();
        let out = interp::evaluate(&g, &[("x", xt.clone())]).unwrap();
        prop_assert_eq!(&out[1], &xt);
        let yv = floats(&out[0]);
        for (f, &got) in yv.iter().enumerate() {
            let j = unravel(f, &pd);
            let mut i = vec![0; dims.len()];
            for (k, &p) in perm.iter().enumerate() {
                i[p] = j[k];
            }
            prop_assert_eq!(got, v[ravel(&i, &dims)]);
        }
    }

    /// Reshape to a random factorization of numel keeps the data; a wrong count records an error.
    #[test]
    fn reshape_keeps_data(
        dims in dims_strategy(),
        rank in 0usize..=4,
        deal in prop::collection::vec(0usize..4, 1..8),
        extra in 2usize..4,
        seed in any::<u64>(),
    ) {
        let n: usize = dims.iter().product();
        let target = rlx_ir::testkit::factorize(n, rank, &deal);
        prop_assert_eq!(target.iter().product::<usize>(), n);
        let v = values(n, seed);
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&dims, DType::F64));
        let y = g.reshape(x, &target);
        g.set_outputs(vec![y]);
        prop_assert!(g.check().is_ok(), "{:?}", g.check());
        prop_assert_eq!(g.shape(y).cloned(), Some(Shape::new(&target, DType::F64)));
        let out = interp::evaluate(&g, &[("x", HostTensor::from_f64(&dims, DType::F64, &v).unwrap())]).unwrap();
        prop_assert_eq!(floats(&out[0]), v);

        let mut wrong = target.clone();
        wrong.push(extra);
        let mut g2 = Graph::new("t");
        let x2 = g2.input("x", Shape::new(&dims, DType::F64));
        g2.reshape(x2, &wrong);
        prop_assert!(g2.check().is_err(), "{:?} -> {:?}", dims, wrong);
    }

    /// matmul: batch dims broadcast numpy-style, m and n kept; a mismatched k records an error.
    #[test]
    fn matmul_shape_rule(
        (ba, bb) in broadcast_pair(),
        (m, k, n) in (1usize..=4, 1usize..=4, 1usize..=4),
        k2 in prop::option::weighted(0.25, 1usize..=4),
    ) {
        let kb = k2.unwrap_or(k);
        let a: Vec<usize> = ba.iter().copied().chain([m, k]).collect();
        let b: Vec<usize> = bb.iter().copied().chain([kb, n]).collect();
        let mut g = Graph::new("t");
        let x = g.input("a", Shape::new(&a, DType::F32));
        let y = g.input("b", Shape::new(&b, DType::F32));
        let z = g.matmul(x, y);
        let want = numpy_broadcast(&ba, &bb).filter(|_| k == kb).map(|mut d| {
            d.extend([m, n]);
            d
        });
        match want {
            Some(w) => {
                prop_assert!(g.check().is_ok(), "{:?} @ {:?}: {:?}", a, b, g.check());
                prop_assert_eq!(g.shape(z).cloned(), Some(Shape::new(&w, DType::F32)));
            }
            None => prop_assert!(g.check().is_err(), "{:?} @ {:?}", a, b),
        }
    }

    /// Rank < 2 matmul operands record an error.
    #[test]
    fn matmul_low_rank_is_error(ra in 0usize..2, rb in 0usize..=3) {
        let mut g = Graph::new("t");
        let x = g.input("a", Shape::new(&vec![2; ra], DType::F32));
        let y = g.input("b", Shape::new(&vec![2; rb], DType::F32));
        g.matmul(x, y);
        let mut g2 = Graph::new("t");
        let y2 = g2.input("b", Shape::new(&vec![2; rb], DType::F32));
        let x2 = g2.input("a", Shape::new(&vec![2; ra], DType::F32));
        g2.matmul(y2, x2);
        prop_assert!(g.check().is_err());
        prop_assert!(g2.check().is_err());
    }
}

/// One builder call with arbitrary (often invalid) arguments.
#[derive(Debug, Clone)]
enum BadCall {
    Reduce(u8, Vec<i64>, bool),
    Softmax(i64, bool),
    Transpose(Vec<usize>),
    Reshape(Vec<usize>),
    Slice(Vec<usize>, Vec<usize>, Vec<usize>),
    SliceAxis(i64, usize, usize),
    Concat(Vec<Vec<usize>>, i64),
    Gather(Vec<usize>, bool, i64),
    ExpandDims(i64),
    Squeeze(Vec<i64>),
    Cumsum(i64),
    ArgMax(i64, bool),
    TopK(usize),
    BroadcastTo(Vec<usize>),
    MatMul(Vec<usize>),
    BadNodeId(u32),
}

fn bad_call() -> impl Strategy<Value = BadCall> {
    let axes = || prop::collection::vec(-10i64..10, 0..5);
    let small = || prop::collection::vec(0usize..6, 0..6);
    let dims = || prop::collection::vec(0usize..5, 0..5);
    prop_oneof![
        (0u8..5, axes(), any::<bool>()).prop_map(|(k, a, b)| BadCall::Reduce(k, a, b)),
        (-10i64..10, any::<bool>()).prop_map(|(a, l)| BadCall::Softmax(a, l)),
        small().prop_map(BadCall::Transpose),
        dims().prop_map(BadCall::Reshape),
        (small(), small(), small()).prop_map(|(s, e, st)| BadCall::Slice(s, e, st)),
        (-10i64..10, 0usize..6, 0usize..6).prop_map(|(a, s, e)| BadCall::SliceAxis(a, s, e)),
        (prop::collection::vec(dims(), 0..4), -10i64..10).prop_map(|(r, a)| BadCall::Concat(r, a)),
        (dims(), any::<bool>(), -10i64..10).prop_map(|(d, i, a)| BadCall::Gather(d, i, a)),
        (-10i64..10).prop_map(BadCall::ExpandDims),
        axes().prop_map(BadCall::Squeeze),
        (-10i64..10).prop_map(BadCall::Cumsum),
        (-10i64..10, any::<bool>()).prop_map(|(a, k)| BadCall::ArgMax(a, k)),
        (0usize..7).prop_map(BadCall::TopK),
        dims().prop_map(BadCall::BroadcastTo),
        dims().prop_map(BadCall::MatMul),
        (0u32..20).prop_map(BadCall::BadNodeId),
    ]
}

fn dtype_strategy() -> impl Strategy<Value = DType> {
    select(DType::ALL.to_vec())
}

/// Fills an input of any dtype with small values (integers in range as gather indices).
fn fill(shape: &Shape) -> HostTensor {
    let n = shape.numel().unwrap_or(0);
    let data = match shape.dtype.class() {
        DTypeClass::Float => Data::F((0..n).map(|i| i as f64 * 0.25 - 1.0).collect()),
        DTypeClass::Int => Data::I(vec![0; n]),
        DTypeClass::Bool => Data::B((0..n).map(|i| i % 2 == 0).collect()),
        DTypeClass::Complex => Data::C((0..n).map(|i| [i as f64, 1.0]).collect()),
    };
    HostTensor::new(shape.clone(), data).unwrap()
}

proptest! {
    #![proptest_config(config(256))]

    /// Builders record an error or succeed on arbitrary arguments; they never panic. When a call
    /// succeeds the graph verifies, and the reference interpreter does not panic either.
    #[test]
    fn builders_never_panic(
        dims in prop::collection::vec(0usize..5, 0..5),
        dtype in dtype_strategy(),
        call in bad_call(),
    ) {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&dims, dtype));
        let mut extra = vec![];
        let y = match call.clone() {
            BadCall::Reduce(k, axes, keep) => match k {
                0 => g.sum(x, &axes, keep),
                1 => g.mean(x, &axes, keep),
                2 => g.max(x, &axes, keep),
                3 => g.min(x, &axes, keep),
                _ => g.prod(x, &axes, keep),
            },
            BadCall::Softmax(a, false) => g.softmax(x, a),
            BadCall::Softmax(a, true) => g.log_softmax(x, a),
            BadCall::Transpose(p) => g.transpose(x, &p),
            BadCall::Reshape(d) => g.reshape(x, &d),
            BadCall::Slice(s, e, st) => g.slice(x, &s, &e, &st),
            BadCall::SliceAxis(a, s, e) => g.slice_axis(x, a, s, e),
            BadCall::Concat(others, a) => {
                let mut xs = vec![x];
                for (i, d) in others.iter().enumerate() {
                    let name = format!("c{i}");
                    let c = g.input(&name, Shape::new(d, dtype));
                    extra.push((name, Shape::new(d, dtype)));
                    xs.push(c);
                }
                g.concat(&xs, a)
            }
            BadCall::Gather(d, int, a) => {
                let s = Shape::new(&d, if int { DType::I64 } else { DType::F32 });
                let i = g.input("i", s.clone());
                extra.push(("i".to_string(), s));
                g.gather(x, i, a)
            }
            BadCall::ExpandDims(a) => g.expand_dims(x, a),
            BadCall::Squeeze(a) => g.squeeze(x, &a),
            BadCall::Cumsum(a) => g.cumsum(x, a),
            BadCall::ArgMax(a, k) => g.argmax(x, a, k),
            BadCall::TopK(k) => g.topk(x, k).0,
            BadCall::BroadcastTo(d) => g.broadcast_to(x, &d),
            BadCall::MatMul(d) => {
                let s = Shape::new(&d, dtype);
                let b = g.input("b", s.clone());
                extra.push(("b".to_string(), s));
                g.matmul(x, b)
            }
            BadCall::BadNodeId(id) => g.add(x, rlx_ir::NodeId(id)),
        };
        if g.check().is_ok() {
            g.set_outputs(vec![y]);
            prop_assert!(g.verify().is_ok(), "{:?}: {:?}", call, g.verify());
            let mut feeds = vec![("x".to_string(), fill(&Shape::new(&dims, dtype)))];
            feeds.extend(extra.iter().map(|(n, s)| (n.clone(), fill(s))));
            let feeds: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
            let _ = interp::evaluate(&g, &feeds);
        }
    }
}

/// numpy keeps promotion associative within a class and across bool, ints and complex, but not
/// for triples mixing ints with floats (there the order of the int promotion changes the float).
fn numpy_associative(t: [DType; 3]) -> bool {
    !(t.iter().any(|d| d.is_int()) && t.iter().any(|d| d.is_float()))
}

fn class_rank(c: DTypeClass) -> u8 {
    match c {
        DTypeClass::Bool => 0,
        DTypeClass::Int => 1,
        DTypeClass::Float => 2,
        DTypeClass::Complex => 3,
    }
}

proptest! {
    #![proptest_config(config(64))]

    /// Promotion is commutative, idempotent, lands in the higher class, and (where numpy's is)
    /// associative; int promotion can hold both ranges.
    #[test]
    fn promote_laws(a in dtype_strategy(), b in dtype_strategy(), c in dtype_strategy()) {
        let p = DType::promote;
        prop_assert_eq!(p(a, a), a);
        prop_assert_eq!(p(a, b), p(b, a));
        prop_assert_eq!(p(a, p(a, b)), p(a, b));
        let ab = p(a, b);
        prop_assert_eq!(class_rank(ab.class()), class_rank(a.class()).max(class_rank(b.class())));
        if let (Some((al, ah)), Some((bl, bh)), Some((l, h))) = (a.int_range(), b.int_range(), ab.int_range()) {
            prop_assert!(l <= al.min(bl) && h >= ah.max(bh), "{} {} -> {}", a, b, ab);
        }
        if numpy_associative([a, b, c]) {
            prop_assert_eq!(p(p(a, b), c), p(a, p(b, c)), "{} {} {}", a, b, c);
        }
    }

    /// `g.add` of two different dtypes yields the promoted dtype (bool + bool has no add, and
    /// shapes that do not broadcast still fail).
    #[test]
    fn add_promotes_dtype(a in dtype_strategy(), b in dtype_strategy(), (da, db) in broadcast_pair()) {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&da, a));
        let y = g.input("y", Shape::new(&db, b));
        let z = g.add(x, y);
        let want = DType::promote(a, b);
        if want == DType::Bool || numpy_broadcast(&da, &db).is_none() {
            prop_assert!(g.check().is_err());
        } else {
            prop_assert!(g.check().is_ok(), "{} + {}: {:?}", a, b, g.check());
            prop_assert_eq!(g.dtype(z), want);
        }
    }
}
