//! `associative_scan` in rlx-ir: the text and JSON forms round trip its combine body, and a bad
//! combine (wrong arity, wrong output types, not elementwise along the axis) or bad leaves are
//! typed errors naming the op.

use rlx_ir::ops::control::{combine_lengths, linear_recurrence_body};
use rlx_ir::{DType, Error, Graph, HostTensor, Shape, interp};

fn linear(n: usize, reverse: bool) -> Graph {
    let s = Shape::new(&[n, 2], DType::F64);
    let mut g = Graph::new("linrec");
    let (a, b) = (g.input("a", s.clone()), g.input("b", s.clone()));
    let rs = g.associative_scan(linear_recurrence_body(&s, &s), &[a, b], &[], 0, reverse);
    g.set_outputs(rs);
    g
}

/// The first error `g` recorded, which must be an inference error of `associative_scan`.
fn infer_error(g: &Graph) -> String {
    match g.check() {
        Err(Error::Infer { op, reason, .. }) => {
            assert_eq!(op, "associative_scan", "{reason}");
            reason
        }
        other => panic!("expected an associative_scan inference error, got {other:?}"),
    }
}

#[test]
fn text_and_json_round_trip() {
    let g = linear(5, true);
    let text = g.to_text();
    assert!(text.contains("associative_scan("), "{text}");
    let back = Graph::from_text(&text).unwrap();
    assert_eq!(back.to_text(), text);
    let json = serde_json::to_string(&g).unwrap();
    let back: Graph = serde_json::from_str(&json).unwrap();
    assert_eq!(back.to_text(), text);
}

#[test]
fn reference_is_the_sequential_fold() {
    // (2, 1) (3, 10) (5, 100) (7, 1000): forward and reversed, as jax.lax.associative_scan gives.
    let a = HostTensor::from_f64(&[4, 1], DType::F64, &[2.0, 3.0, 5.0, 7.0]).unwrap();
    let b = HostTensor::from_f64(&[4, 1], DType::F64, &[1.0, 10.0, 100.0, 1000.0]).unwrap();
    let s = Shape::new(&[4, 1], DType::F64);
    for (reverse, wa, wb) in [
        (false, [2.0, 6.0, 30.0, 210.0], [1.0, 13.0, 165.0, 2155.0]),
        (true, [210.0, 105.0, 35.0, 7.0], [30621.0, 15310.0, 5100.0, 1000.0]),
    ] {
        let mut g = Graph::new("g");
        let (x, y) = (g.input("a", s.clone()), g.input("b", s.clone()));
        let rs = g.associative_scan(linear_recurrence_body(&s, &s), &[x, y], &[], -2, reverse);
        g.set_outputs(rs);
        let out = interp::evaluate(&g, &[("a", a.clone()), ("b", b.clone())]).unwrap();
        assert_eq!(out[0].to_f64_vec().unwrap(), wa);
        assert_eq!(out[1].to_f64_vec().unwrap(), wb);
    }
}

#[test]
fn combine_lengths_are_the_halvings() {
    assert_eq!(combine_lengths(1), Vec::<usize>::new());
    assert_eq!(combine_lengths(2), vec![1]);
    assert_eq!(combine_lengths(7), vec![1, 3]);
    assert_eq!(combine_lengths(8), vec![1, 2, 3, 4]);
}

#[test]
fn bad_combines_are_typed_errors() {
    let s = Shape::new(&[6, 2], DType::F32);
    // Wrong arity: one leaf, but the body takes two pairs.
    let mut g = Graph::new("arity");
    let x = g.input("x", s.clone());
    g.associative_scan(linear_recurrence_body(&s, &s), &[x], &[], 0, false);
    let r = infer_error(&g);
    assert!(r.contains("combine body takes"), "{r}");
    // Wrong output type: the body gives a sum over the leaf.
    let mut body = Graph::new("sum");
    let (a, b) = (body.input("a", s.clone()), body.input("b", s.clone()));
    let c = body.add(a, b);
    let c = body.sum(c, &[1], false);
    body.set_outputs(vec![c]);
    let mut g = Graph::new("types");
    let x = g.input("x", s.clone());
    g.associative_scan(body, &[x], &[], 0, false);
    let r = infer_error(&g);
    assert!(r.contains("output 0"), "{r}");
    // Not elementwise along the axis: a reshape fixed to the leaf's own length.
    let mut body = Graph::new("fixed");
    let (a, b) = (body.input("a", s.clone()), body.input("b", s.clone()));
    let c = body.add(a, b);
    let c = body.reshape(c, &[12]);
    let c = body.reshape(c, &[6, 2]);
    body.set_outputs(vec![c]);
    let mut g = Graph::new("fixed");
    let x = g.input("x", s.clone());
    g.associative_scan(body, &[x], &[], 0, false);
    let r = infer_error(&g);
    assert!(r.contains("slices of length"), "{r}");
    // Leaves of different lengths, and an axis out of range.
    let mut g = Graph::new("lengths");
    let (x, y) = (g.input("x", s.clone()), g.input("y", Shape::new(&[5, 2], DType::F32)));
    g.associative_scan(linear_recurrence_body(&s, &s), &[x, y], &[], 0, false);
    let r = infer_error(&g);
    assert!(r.contains("leaf 1"), "{r}");
    let mut g = Graph::new("axis");
    let x = g.input("x", s.clone());
    g.associative_scan(linear_recurrence_body(&s, &s), &[x, x], &[], 2, false);
    let r = infer_error(&g);
    assert!(r.contains("axis"), "{r}");
    // No leaves at all.
    let mut g = Graph::new("none");
    assert!(g.associative_scan(linear_recurrence_body(&s, &s), &[], &[], 0, false).is_empty());
    infer_error(&g);
}
