//! Every op sample on XLA through the PJRT plugin named by `RLX_PJRT_PLUGIN`, against the
//! reference interpreter. Without the variable the test says so and passes (CI sets it).

use rlx_driver::{Backend, legalize, run_host};
use rlx_ir::testkit::{run_samples, sample_graph};
use rlx_ir::{Error, Op};
use rlx_pjrt::PjrtBackend;
use std::collections::BTreeMap;

#[test]
fn conformance_on_pjrt() {
    if std::env::var_os("RLX_PJRT_PLUGIN").is_none() {
        eprintln!("RLX_PJRT_PLUGIN is not set; skipping the PJRT conformance suite");
        return;
    }
    let backend = PjrtBackend::new();
    let all = Op::all_samples();
    let total = all.len();
    let mut run = vec![];
    let mut missing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in all {
        let (g, _) = sample_graph(&s).expect("sample graph");
        match legalize(&g, &backend as &dyn Backend) {
            Err(Error::Unsupported { missing: m, .. }) => missing.entry(m).or_default().push(s.label),
            _ => run.push(s),
        }
    }
    let n_missing: usize = missing.values().map(Vec::len).sum();
    for (why, labels) in &missing {
        eprintln!("  missing {}: {why}\n    {}", labels.len(), labels.join(", "));
    }
    let n_run = run.len();
    let report = run_samples(run, |g, feeds| run_host(&backend, g, feeds));
    eprintln!(
        "pjrt conformance: {n_run} of {total} samples run, {} passed, {} failed, {n_missing} without emitters",
        report.passed.len(),
        report.failed.len()
    );
    report.assert_all_pass();
}
