//! Every op sample on MLX (the libmlx rlx-mlx was built against), against the reference
//! interpreter. Without libmlx it fails saying why (CI installs the mlx[cpu] wheel), unless
//! `RLX_MLX_SKIP=1` skips it explicitly.

use rlx_driver::{Backend, legalize, run_host};
use rlx_ir::testkit::{run_samples, sample_graph};
use rlx_ir::{Error, Op};
use rlx_mlx::MlxBackend;
use std::collections::BTreeMap;

/// The by-design reason when every missing node has one (`; `-separated entries).
fn design(missing: &str) -> Option<String> {
    let reasons: Vec<&str> = missing.split("; ").map(|m| m.rsplit(": ").next().unwrap_or("")).collect();
    reasons.iter().all(|r| r.contains("unsupported by design")).then(|| reasons[0].to_string())
}

#[test]
fn conformance_on_mlx() {
    if let Some(why) = rlx_mlx::probe() {
        if std::env::var("RLX_MLX_SKIP").is_ok_and(|v| v == "1") {
            eprintln!("skipping the MLX conformance suite (RLX_MLX_SKIP=1): {why}");
            return;
        }
        panic!("libmlx is unavailable: {why} (RLX_MLX_SKIP=1 skips)");
    }
    let backend = MlxBackend::new();
    let all = Op::all_samples();
    let total = all.len();
    let mut run = vec![];
    let mut missing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut by_design: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in all {
        let (g, _) = sample_graph(&s).expect("sample graph");
        match legalize(&g, &backend as &dyn Backend) {
            Err(Error::Unsupported { missing: m, .. }) if design(&m).is_some() => {
                by_design.entry(design(&m).unwrap_or_default()).or_default().push(s.label)
            }
            Err(Error::Unsupported { missing: m, .. }) => missing.entry(m).or_default().push(s.label),
            _ => run.push(s),
        }
    }
    let n_design: usize = by_design.values().map(Vec::len).sum();
    eprintln!("mlx conformance: {n_design} samples unsupported by design:");
    for (why, labels) in &by_design {
        eprintln!("  {} samples: {why}\n    {}", labels.len(), labels.join(", "));
    }
    let n_missing: usize = missing.values().map(Vec::len).sum();
    for (why, labels) in &missing {
        eprintln!("  missing {}: {why}\n    {}", labels.len(), labels.join(", "));
    }
    let n_run = run.len();
    let report = run_samples(run, |g, feeds| run_host(&backend, g, feeds));
    eprintln!(
        "mlx conformance: {n_run} of {total} samples run, {} passed, {} failed, {n_design} unsupported by design, \
         {n_missing} without a lowering yet",
        report.passed.len(),
        report.failed.len()
    );
    report.assert_all_pass();
    assert_eq!(n_missing, 0, "samples without a lowering are listed above");
}
