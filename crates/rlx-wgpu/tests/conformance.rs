//! Every op sample the wgpu backend claims, run on the GPU (lavapipe in CI) against the
//! reference interpreter. Samples are skipped only when legalization reports them missing AND
//! they involve a dtype other than f32; every all-f32 sample must run and pass. The skipped
//! ones are listed with the dispatch report's reason.
//!
//! Without a GPU adapter this test fails; set `RLX_WGPU_SKIP=1` to skip it explicitly.

use rlx_driver::{Backend, legalize, run_host};
use rlx_ir::testkit::{run_samples, sample_graph};
use rlx_ir::{DType, Error, Op, Sample};
use rlx_wgpu::WgpuBackend;

mod common;
use common::require_gpu;

/// Whether the sample involves a dtype other than f32 (in an input or the output).
fn non_f32(s: &Sample) -> Option<DType> {
    let (g, _) = sample_graph(s).ok()?;
    g.nodes().iter().map(|n| n.ty.dtype).find(|&d| d != DType::F32)
}

#[test]
fn conformance_claimed_samples_on_wgpu() {
    if require_gpu() {
        return;
    }
    let backend = WgpuBackend::new();
    let all = Op::all_samples();
    let total = all.len();
    let (mut run, mut skipped) = (vec![], vec![]);
    for s in all {
        let (g, _) = sample_graph(&s).expect("sample graph");
        match legalize(&g, &backend as &dyn Backend) {
            Err(Error::Unsupported { missing, .. }) if non_f32(&s).is_some() => {
                let dt = non_f32(&s).unwrap_or(DType::F32);
                let mut why: String = missing.chars().take(100).collect();
                if why.len() < missing.len() {
                    why += " ...";
                }
                skipped.push(format!("{} (has {dt}): {why}", s.label));
            }
            _ => run.push(s),
        }
    }
    eprintln!("wgpu conformance: skipped {} samples whose dtypes the backend does not claim:", skipped.len());
    for s in &skipped {
        eprintln!("  skip {s}");
    }
    let n_run = run.len();
    let report = run_samples(run, |g, feeds| run_host(&WgpuBackend::new(), g, feeds));
    eprintln!(
        "wgpu conformance: {} of {total} samples run, {} passed, {} failed, {} skipped",
        n_run,
        report.passed.len(),
        report.failed.len(),
        skipped.len()
    );
    assert_eq!(n_run + skipped.len(), total);
    assert!(n_run > 0, "no sample ran on wgpu");
    report.assert_all_pass();
}
