//! The reference interpreter runs every sample, and its outputs have the inferred type.

use rlx_ir::{Op, interp, testkit};

#[test]
fn reference_runs_every_sample() {
    let samples = Op::all_samples();
    assert!(samples.len() > 100, "only {} samples", samples.len());
    for s in samples {
        let (g, feeds) = testkit::sample_graph(&s).unwrap_or_else(|e| panic!("{}: {e}", s.label));
        let feeds: Vec<(&str, _)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        let out = interp::evaluate(&g, &feeds).unwrap_or_else(|e| panic!("{}: {e}", s.label));
        assert_eq!(&out[0].shape, g.shape(g.outputs()[0]).unwrap(), "{}", s.label);
    }
}

#[test]
fn text_round_trips_every_sample() {
    for s in Op::all_samples() {
        let (g, _) = testkit::sample_graph(&s).unwrap();
        let text = g.to_text();
        let back = rlx_ir::Graph::from_text(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", s.label));
        assert_eq!(back, g, "{}\n{text}", s.label);
        assert_eq!(back.to_text(), text);
    }
}
