//! Prologue fusion into plain reductions: `mean(x * x)` (rms_norm by hand) and `sum(exp(x - m))`
//! become one `fused_reduce` on the CPU with the reference's values; a reduction over leading
//! axes, or of a value read elsewhere, stays unfused with the reason in the report.

use rlx_ir::ops::util::rand_f64;
use rlx_ir::{DType, Graph, HostTensor, Op, Shape, interp, testkit};
use rlx_opt::report::{FusionKind, Reason};
use rlx_opt::{CompileReport, PrecisionPolicy};

fn cpu() -> &'static rlx_cpu::CpuBackend {
    static B: std::sync::OnceLock<rlx_cpu::CpuBackend> = std::sync::OnceLock::new();
    B.get_or_init(rlx_cpu::CpuBackend::new)
}

/// Compiles for the CPU, checks values against the reference, returns the graph and report.
fn check(g: &Graph) -> (Graph, CompileReport) {
    let (opt, rep) = rlx_opt::compile_pipeline(g.clone(), cpu(), PrecisionPolicy::F32).unwrap();
    let feeds: Vec<(String, HostTensor)> = g
        .inputs()
        .into_iter()
        .enumerate()
        .map(|(i, (id, name))| {
            let d = g.shape(id).unwrap().fixed_dims().unwrap();
            let v = rand_f64(d.iter().product(), -2.0, 2.0, 70 + i as u64);
            (name.to_string(), HostTensor::from_f64(&d, DType::F32, &v).unwrap())
        })
        .collect();
    let fr: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let want = interp::evaluate(g, &fr).unwrap();
    let got = rlx_driver::run_host(cpu(), &opt, &fr).unwrap();
    for (a, b) in got.iter().zip(&want) {
        testkit::compare(a, b).unwrap();
    }
    (opt, rep)
}

fn fused_reduces(g: &Graph) -> usize {
    g.nodes().iter().filter(|n| matches!(n.op, Op::FusedReduce(_))).count()
}

#[test]
fn rms_norm_by_hand_and_exp_sum_fuse_into_their_reductions() {
    // x * rsqrt(mean(x * x) + eps) * gamma, over rows large enough to be split over the pool.
    let mut g = Graph::new("rms_by_hand");
    let x = g.input("x", Shape::new(&[256, 192], DType::F32));
    let gm = g.input("gamma", Shape::new(&[192], DType::F32));
    let sq = g.mul(x, x);
    let ms = g.mean(sq, &[-1], true);
    let eps = g.scalar(1e-6, DType::F32);
    let me = g.add(ms, eps);
    let r = g.rsqrt(me);
    let y = g.mul(x, r);
    let y = g.mul(y, gm);
    g.set_outputs(vec![y]);
    let (opt, rep) = check(&g);
    assert_eq!(fused_reduces(&opt), 1, "{}", opt.to_text());
    assert_eq!(rep.fusion.count(FusionKind::ReducePrologue), 1, "{}", rep.fusion);
    assert!(rep.fusion.to_string().contains("1 reduction prologues"), "{}", rep.fusion);

    // sum(exp(x - max(x))) with the per-row max broadcast inside the region, over two axes.
    let mut g = Graph::new("exp_sum");
    let x = g.input("x", Shape::new(&[3, 4, 5, 6], DType::F32));
    let m = g.max(x, &[2, 3], true);
    let z = g.sub(x, m);
    let e = g.exp(z);
    let s = g.sum(e, &[-2, -1], false);
    g.set_outputs(vec![s]);
    let (opt, _) = check(&g);
    assert_eq!(fused_reduces(&opt), 1, "{}", opt.to_text());
}

#[test]
fn leading_axes_and_shared_values_stay_unfused_with_a_reason() {
    // A column reduction (a bias gradient's layout): no prologue kernel for it yet.
    let mut g = Graph::new("columns");
    let a = g.input("a", Shape::new(&[8, 16], DType::F32));
    let b = g.input("b", Shape::new(&[8, 16], DType::F32));
    let p = g.mul(a, b);
    let s = g.sum(p, &[0], false);
    g.set_outputs(vec![s]);
    let (opt, rep) = check(&g);
    assert_eq!(fused_reduces(&opt), 0);
    let non_trailing = |r: &Reason| matches!(r, Reason::ConsumerIsReduction(w) if w.contains("non-trailing axes [0]"));
    assert_eq!(rep.fusion.rejected(non_trailing), 1, "{}", rep.fusion);

    // exp(x) is an output too: it is stored anyway, so the sum reads it.
    let mut g = Graph::new("shared");
    let x = g.input("x", Shape::new(&[4, 8], DType::F32));
    let e = g.exp(x);
    let s = g.sum(e, &[-1], false);
    g.set_outputs(vec![s, e]);
    let (opt, rep) = check(&g);
    assert_eq!(fused_reduces(&opt), 0);
    let shared = |r: &Reason| matches!(r, Reason::MultipleConsumers(2));
    assert!(rep.fusion.rejected(shared) >= 1, "{}", rep.fusion);
}
