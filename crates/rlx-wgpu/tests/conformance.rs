//! Every op sample on the GPU (lavapipe in CI) against the reference interpreter. A sample is
//! left out only when legalization reports every missing node with a reason marked
//! "unsupported by design" (WGSL has no f64, no complex type, no 16-bit integers); those are
//! listed by reason. Everything else runs and must pass: a sample with a missing kernel fails.
//!
//! Without a GPU adapter this test fails; set `RLX_WGPU_SKIP=1` to skip it explicitly.

use rlx_driver::{Backend, legalize, run_host};
use rlx_ir::testkit::{run_samples, sample_graph};
use rlx_ir::{Error, Op};
use rlx_wgpu::WgpuBackend;
use rlx_wgpu::caps::BY_DESIGN;
use std::collections::BTreeMap;

mod common;
use common::require_gpu;

/// The by-design reason when every missing node has one (`; `-separated entries).
fn by_design(missing: &str) -> Option<String> {
    let reasons: Vec<&str> = missing.split("; ").map(|m| m.rsplit(": ").next().unwrap_or("")).collect();
    reasons.iter().all(|r| r.contains(BY_DESIGN)).then(|| reasons[0].to_string())
}

#[test]
fn conformance_claimed_samples_on_wgpu() {
    if require_gpu() {
        return;
    }
    let backend = WgpuBackend::new();
    let all = Op::all_samples();
    let total = all.len();
    let mut run = vec![];
    let mut left_out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in all {
        let (g, _) = sample_graph(&s).expect("sample graph");
        match legalize(&g, &backend as &dyn Backend) {
            Err(Error::Unsupported { missing, .. }) if by_design(&missing).is_some() => {
                left_out.entry(by_design(&missing).unwrap_or_default()).or_default().push(s.label);
            }
            _ => run.push(s),
        }
    }
    let n_out: usize = left_out.values().map(Vec::len).sum();
    eprintln!("wgpu conformance: {n_out} samples unsupported by design (legalization reports them):");
    for (why, labels) in &left_out {
        eprintln!("  {} samples: {why}\n    {}", labels.len(), labels.join(", "));
    }
    let n_run = run.len();
    let report = run_samples(run, |g, feeds| run_host(&backend, g, feeds));
    eprintln!(
        "wgpu conformance: {n_run} of {total} samples run, {} passed, {} failed, {n_out} unsupported by design",
        report.passed.len(),
        report.failed.len(),
    );
    assert_eq!(n_run + n_out, total);
    assert!(n_run > 0, "no sample ran on wgpu");
    report.assert_all_pass();
}

#[test]
fn only_design_reasons_are_left_out() {
    let m = "`exp` f64[4] <- (f64[4]): WGSL has no f64 (unsupported by design); \
             `add` f64[4] <- (f64[4], f64[]): WGSL has no f64 (unsupported by design)";
    assert_eq!(by_design(m).as_deref(), Some("WGSL has no f64 (unsupported by design)"));
    assert_eq!(by_design(&format!("{m}; `cumsum` bf16[3] <- (bf16[3])")), None);
    assert_eq!(by_design("`exp` f16[4] <- (f16[4]): adapter lacks shader-f16"), None);
}
