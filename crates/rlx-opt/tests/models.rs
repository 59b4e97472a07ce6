//! The pipeline on an MLP, a BERT/MiniLM encoder layer and a Qwen3-style decoder layer: node
//! counts and arena bytes before and after, values against the reference interpreter, and the
//! CPU running the optimized graph. `--nocapture` prints the figures.

use rlx_driver::{Backend, legalize};
use rlx_ir::ops::util::rand_f64;
use rlx_ir::{DType, Graph, HostTensor, Op, interp, testkit};
use rlx_opt::{CompileOptions, PrecisionPolicy, zoo};

fn feeds(g: &Graph) -> Vec<(String, HostTensor)> {
    let mut out = vec![];
    for (i, n) in g.nodes().iter().enumerate() {
        let (name, s, scale) = match &n.op {
            Op::Input(x) => (&x.name, &x.shape, 1.0),
            Op::Param(x) => (&x.name, &x.shape, 0.2),
            _ => continue,
        };
        let d = s.fixed_dims().unwrap();
        let len = d.iter().product();
        let t = if s.dtype == DType::I64 {
            HostTensor::from_i64(&d, DType::I64, &(0..len as i64).collect::<Vec<_>>()).unwrap()
        } else {
            let mut v = rand_f64(len, -scale, scale, 1000 + i as u64);
            if name.contains("norm") || name.contains("ln") && name.ends_with("weight") {
                v.iter_mut().for_each(|x| *x += 1.0);
            }
            HostTensor::from_f64(&d, s.dtype, &v).unwrap()
        };
        out.push((name.clone(), t));
    }
    out
}

/// Runs the pipeline on `g`, checks values, returns (legalized nodes, optimized nodes, naive
/// bytes, planned bytes, fused nodes of any kind).
fn check(g: Graph) -> (usize, usize, usize, usize, usize) {
    let cpu = cpu_backend();
    let f = feeds(&g);
    let fr: Vec<(&str, HostTensor)> = f.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let want = interp::evaluate(&g, &fr).unwrap();
    let (plain, _) = legalize(&g, cpu).unwrap();
    let plain_plan = rlx_opt::plan(&plain, &|_| false).unwrap();
    let (opt, report) = rlx_opt::compile_pipeline(g.clone(), cpu, PrecisionPolicy::F32).unwrap();
    println!("{}: {report}", g.name());
    let got = interp::evaluate(&opt, &fr).unwrap();
    for (a, b) in got.iter().zip(&want) {
        testkit::compare(a, b).unwrap();
    }
    let on_cpu = rlx_driver::run_host(cpu, &opt, &fr).unwrap();
    for (a, b) in on_cpu.iter().zip(&want) {
        testkit::compare(a, b).unwrap();
    }
    // The optimized graph never needs more arena than the plain one planned the same way.
    assert!(report.memory.arena_bytes <= plain_plan.arena_bytes);
    let _ = cpu.name();
    (plain.len(), opt.len(), plain_plan.naive_bytes, report.memory.arena_bytes, report.fusion.fused.len())
}

#[test]
fn mlp_shrinks_and_stays_exact() {
    let (before, after, naive, planned, regions) = check(zoo::mlp(8, &[64, 128, 128, 10]));
    println!("mlp: nodes {before} -> {after}, arena {naive} -> {planned} bytes, {regions} regions");
    assert!(after < before, "{before} -> {after}");
    assert!(planned < naive / 2, "{planned} vs {naive}");
}

#[test]
fn bert_layer_shrinks_and_stays_exact() {
    let (before, after, naive, planned, regions) = check(zoo::bert_encoder(16, 64, 4, 128, 1));
    println!("bert layer: nodes {before} -> {after}, arena {naive} -> {planned} bytes, {regions} regions");
    assert!(after < before, "{before} -> {after}");
    assert!(regions >= 3, "{regions}");
    assert!(planned < naive / 2, "{planned} vs {naive}");
}

#[test]
fn qwen3_layer_shrinks_and_stays_exact() {
    let (before, after, naive, planned, regions) = check(zoo::qwen3_decoder(8, 64, 4, 2, 16, 128));
    println!("qwen3 layer: nodes {before} -> {after}, arena {naive} -> {planned} bytes, {regions} regions");
    assert!(after < before, "{before} -> {after}");
    // Norms and rope run as native kernels; the SwiGLU product and residuals still fuse.
    assert!(regions >= 1, "{regions}");
}

/// Relative error of `got` against `want`, scaled by the largest magnitude of `want`.
fn rel_err(got: &HostTensor, want: &HostTensor) -> f64 {
    let (a, b) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    let scale = b.iter().fold(0f64, |m, x| m.max(x.abs())).max(1e-6);
    a.iter().zip(&b).fold(0f64, |m, (x, y)| m.max((x - y).abs())) / scale
}

#[test]
fn mixed_precision_runs_every_model_close_to_f32() {
    let cpu = cpu_backend();
    let models =
        [zoo::mlp(8, &[64, 128, 10]), zoo::bert_encoder(16, 64, 4, 128, 1), zoo::qwen3_decoder(8, 64, 4, 2, 16, 128)];
    for g in models {
        let f = feeds(&g);
        let fr: Vec<(&str, HostTensor)> = f.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        let want = interp::evaluate(&g, &fr).unwrap();
        // bf16 keeps 8 bits of mantissa, f16 11: errors of a few 1e-3 and 1e-4 relative per op.
        for (policy, tol) in
            [(PrecisionPolicy::Auto, 1.5e-2), (PrecisionPolicy::BF16, 2e-2), (PrecisionPolicy::F16, 3e-3)]
        {
            let opts = CompileOptions { precision: policy, ..Default::default() };
            let (opt, report) = rlx_opt::compile_with(g.clone(), cpu, &opts).unwrap();
            let stage = report.stages.iter().find(|s| s.name == "precision").expect("a precision stage");
            assert!(stage.detail.contains("lowered:"), "{}", stage.detail);
            let half = if policy == PrecisionPolicy::F16 { DType::F16 } else { DType::BF16 };
            assert!(opt.nodes().iter().any(|n| n.ty.dtype == half), "{}: no {half} node under {policy:?}", g.name());
            let got = rlx_driver::run_host(cpu, &opt, &fr).unwrap();
            for (a, b) in got.iter().zip(&want) {
                assert_eq!(a.dtype(), b.dtype(), "outputs keep their dtype");
                let e = rel_err(a, b);
                println!("{} {policy:?}: max rel err {e:.2e}", g.name());
                assert!(e < tol, "{} under {policy:?}: rel err {e:.3e} > {tol}", g.name());
            }
        }
    }
}

/// One CPU backend for the whole test binary.
fn cpu_backend() -> &'static rlx_cpu::CpuBackend {
    static B: std::sync::OnceLock<rlx_cpu::CpuBackend> = std::sync::OnceLock::new();
    B.get_or_init(rlx_cpu::CpuBackend::new)
}
