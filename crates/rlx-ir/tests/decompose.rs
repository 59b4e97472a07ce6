//! Every decomposition matches its op's reference on every sample: once one level down, and
//! again after lowering every composite recursively to primitives.

use rlx_ir::{Graph, HostTensor, NodeId, Op, OpTraits, Sample, interp, testkit};
use std::collections::BTreeMap;

type Feeds = Vec<(String, HostTensor)>;

/// A graph of the sample's inputs plus the op's decomposition (None when it has none).
fn decomposed(s: &Sample) -> Option<(Graph, Feeds)> {
    let mut g = Graph::new(format!("{}/decomposed", s.label));
    let mut ids = vec![];
    let mut feeds = vec![];
    for (i, t) in s.inputs.iter().enumerate() {
        let name = format!("in{i}");
        ids.push(g.input(&name, t.shape.clone()));
        feeds.push((name, t.clone()));
    }
    let y = s.op.def().decompose(&mut g, &ids)?;
    g.set_outputs(vec![y]);
    Some((g, feeds))
}

/// Rebuilds `g` with every composite node replaced by its decomposition, until none is left.
fn lower(g: &Graph) -> Graph {
    let mut cur = g.clone();
    for _ in 0..8 {
        let mut out = Graph::new(cur.name());
        let mut map: Vec<NodeId> = vec![];
        let mut changed = false;
        for n in cur.nodes() {
            let ins: Vec<NodeId> = n.inputs.iter().map(|x| map[x.index()]).collect();
            let composite = n.op.def().traits().contains(OpTraits::COMPOSITE);
            let id = match composite.then(|| n.op.def().decompose(&mut out, &ins)) {
                Some(Some(id)) => {
                    changed = true;
                    id
                }
                _ => out.add_node(n.op.clone(), &ins),
            };
            map.push(id);
        }
        out.set_outputs(cur.outputs().iter().map(|o| map[o.index()]).collect());
        cur = out;
        if !changed {
            break;
        }
    }
    cur
}

fn run(g: &Graph, feeds: &Feeds) -> Result<HostTensor, String> {
    let feeds: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    g.check().map_err(|e| format!("building: {e}"))?;
    interp::evaluate(g, &feeds).map(|mut v| v.remove(0)).map_err(|e| format!("evaluating: {e}"))
}

#[test]
fn decompositions_match_references() {
    let mut per_op: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut failures = vec![];
    for s in Op::all_samples() {
        let Some((dg, feeds)) = decomposed(&s) else {
            continue;
        };
        let name = s.op.def().name();
        *per_op.entry(name).or_default() += 1;
        let (rg, _) = testkit::sample_graph(&s).unwrap_or_else(|e| panic!("{}: {e}", s.label));
        let want = run(&rg, &feeds).unwrap_or_else(|e| panic!("{}: reference {e}", s.label));
        if dg.nodes().iter().any(|n| n.op.def().name() == name) {
            failures.push(format!("{}: the decomposition uses the op itself", s.label));
        }
        let lowered = lower(&dg);
        if let Some(n) = lowered.nodes().iter().find(|n| n.op.def().traits().contains(OpTraits::COMPOSITE)) {
            failures.push(format!("{}: `{}` is left after lowering", s.label, n.op.def().name()));
        }
        for (what, g) in [("one level", &dg), ("lowered", &lowered)] {
            if let Err(e) = run(g, &feeds).and_then(|got| testkit::compare(&got, &want)) {
                failures.push(format!("{} ({what}): {e}", s.label));
            }
        }
    }
    eprintln!("decomposed samples per op: {per_op:?}");
    for op in
        ["softmax", "log_softmax", "layer_norm", "rms_norm", "attention", "rope", "conv2d", "max_pool2d", "avg_pool2d"]
    {
        assert!(per_op.get(op).copied().unwrap_or(0) >= 3, "{op}: too few decomposed samples");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
