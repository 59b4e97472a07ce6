//! The fusion report (what fused, what could not and why) and norm prologue fusion, checked
//! against the reference interpreter and run on the CPU.

use rlx_ir::ops::util::rand_f64;
use rlx_ir::{DType, Graph, HostTensor, Op, Shape, interp, testkit};
use rlx_opt::{FusionKind, PrecisionPolicy, Reason};

/// Random feeds for every input of `g`; inputs named `g*` (norm scales) sit around 1.
fn feeds(g: &Graph) -> Vec<(String, HostTensor)> {
    let mut out = vec![];
    for (i, n) in g.nodes().iter().enumerate() {
        let Op::Input(x) = &n.op else { continue };
        let d = x.shape.fixed_dims().unwrap();
        let mut v = rand_f64(d.iter().product(), -2.0, 2.0, 300 + i as u64);
        if x.name.starts_with('g') {
            v.iter_mut().for_each(|x| *x = 1.0 + *x / 4.0);
        }
        out.push((x.name.clone(), HostTensor::from_f64(&d, x.shape.dtype, &v).unwrap()));
    }
    out
}

/// Compiles `g` for the CPU, checks the optimized graph (reference and CPU) against `g`'s
/// reference values, and returns the fusion report.
fn compile_and_check(g: &Graph) -> (Graph, rlx_opt::FusionReport) {
    let cpu = cpu_backend();
    let f = feeds(g);
    let fr: Vec<(&str, HostTensor)> = f.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let want = interp::evaluate(g, &fr).unwrap();
    let (opt, report) = rlx_opt::compile_pipeline(g.clone(), cpu, PrecisionPolicy::F32).unwrap();
    for (a, b) in interp::evaluate(&opt, &fr).unwrap().iter().zip(&want) {
        testkit::compare(a, b).unwrap();
    }
    for (a, b) in rlx_driver::run_host(cpu, &opt, &fr).unwrap().iter().zip(&want) {
        testkit::compare(a, b).unwrap();
    }
    (opt, report.fusion)
}

/// A graph that meets every kind of fusion and every reason not to fuse.
fn mixed(rows: usize, n: usize) -> Graph {
    let mut g = Graph::new("mixed");
    let t = |d: &[usize]| Shape::new(d, DType::F32);
    let x = g.input("x", t(&[rows, n]));
    let r = g.input("r", t(&[rows, n]));
    let b = g.input("b", t(&[n]));
    let gm = g.input("g", t(&[n]));
    let bt = g.input("bt", t(&[n]));
    // Residual + bias into layer_norm: one fused_norm.
    let s = g.add(x, r);
    let s = g.add(s, b);
    let y = g.layer_norm(s, gm, bt, 1e-5);
    // exp(x) is read twice: it stays a region input.
    let e = g.exp(x);
    let es = g.sum(e, &[1], false);
    let m = g.mul(e, y);
    let m = g.tanh(m);
    let m = g.neg(m);
    // A region whose consumer is a plain reduction (it becomes the reduction's prologue).
    let c = g.sin(r);
    let c = g.cos(c);
    let cs = g.sum(c, &[1], false);
    // The residual stream: the sum feeds rms_norm and is an output too.
    let h = g.sub(x, r);
    let hn = g.rms_norm(h, gm, 1e-6);
    // A cast into an f64 region.
    let xd = g.cast(x, DType::F64);
    let xd = g.exp(xd);
    let xd = g.neg(xd);
    g.set_outputs(vec![es, m, cs, hn, h, xd]);
    g
}

#[test]
fn report_says_what_fused_and_why_not() {
    let (opt, rep) = compile_and_check(&mixed(4, 8));
    let text = rep.to_string();
    println!("{text}\n{}", opt.to_text());
    let want = "\
fusion: 2 elementwise regions, 0 matmul epilogues, 1 norm prologues, 1 reduction prologues (9 elementwise ops fused)
  fused %5: norm prologue, 2 ops, 5 inputs
  fused %8: elementwise region, 3 ops, 2 inputs
  fused %9: reduction prologue, 2 ops, 1 inputs
  fused %13: elementwise region, 2 ops, 1 inputs
  not fused %12 (cast) for elementwise region: dtype change (f32 -> f64)
  not fused %6 (exp) for elementwise region: multiple consumers (2): stored for them
  not fused %6 (exp) for reduction prologue: multiple consumers (2): stored for them
  not fused %10 (sub) for norm prologue: multiple consumers (2): stored for them
";
    assert_eq!(text, want);
    // Every reported node is what the report says it is.
    for f in &rep.fused {
        let op = opt.nodes()[f.node as usize].op.def().name();
        let expect = match f.kind {
            FusionKind::Elementwise => "fused",
            FusionKind::MatMulEpilogue => "fused_matmul",
            FusionKind::NormPrologue => "fused_norm",
            FusionKind::StackedMatMul | FusionKind::CombinedMatMul => "stacked_matmul",
            FusionKind::ReducePrologue => "fused_reduce",
        };
        assert_eq!(op, expect, "%{}", f.node);
    }
    assert_eq!(rep.rejected(|r| matches!(r, Reason::MultipleConsumers(_))), 3);
}

#[test]
fn norm_prologues_run_row_by_row_on_the_cpu_at_size() {
    // 256 rows of 384: the kernel splits rows across tasks; a per-row scale takes the general path.
    let (rows, n) = (256, 384);
    let mut g = Graph::new("big");
    let x = g.input("x", Shape::new(&[rows, n], DType::F32));
    let r = g.input("r", Shape::new(&[rows, n], DType::F32));
    let s = g.input("s", Shape::new(&[rows, 1], DType::F32));
    let gm = g.input("g", Shape::new(&[n], DType::F32));
    let bt = g.input("bt", Shape::new(&[n], DType::F32));
    let a = g.add(x, r);
    let a = g.mul(a, s);
    let y = g.layer_norm(a, gm, bt, 1e-5);
    let z = g.sub(r, x);
    let z = g.rms_norm(z, gm, 1e-6);
    g.set_outputs(vec![y, z]);
    let (opt, rep) = compile_and_check(&g);
    assert_eq!(rep.count(FusionKind::NormPrologue), 2, "{rep}");
    assert_eq!(opt.nodes().iter().filter(|n| matches!(n.op, Op::FusedNorm(_))).count(), 2);
    assert!(!opt.nodes().iter().any(|n| matches!(n.op, Op::LayerNorm(_) | Op::RmsNorm(_))));
}

#[test]
fn backends_without_the_kernel_keep_the_norm_and_say_why() {
    let g = mixed(2, 4);
    let cpu = cpu_backend();
    // Legalize and fuse as a backend without fused_norm would.
    let (legal, _) = rlx_driver::legalize(&g, cpu).unwrap();
    let no_norm =
        |n: &rlx_ir::Node, i: &[&Shape]| !matches!(n.op, Op::FusedNorm(_)) && rlx_driver::Backend::supports(cpu, n, i);
    let (fused, mut rep) = rlx_opt::fuse_elementwise(&legal, &no_norm).unwrap();
    let out = rlx_opt::fuse_norm_prologues(&fused, &no_norm, &mut rep).unwrap();
    assert_eq!(rep.count(FusionKind::NormPrologue), 0);
    assert!(rep.rejected(|r| matches!(r, Reason::BackendLacksKernel(_))) == 1, "{rep}");
    assert_eq!(out, fused);
}

/// One CPU backend for the whole test binary.
fn cpu_backend() -> &'static rlx_cpu::CpuBackend {
    static B: std::sync::OnceLock<rlx_cpu::CpuBackend> = std::sync::OnceLock::new();
    B.get_or_init(rlx_cpu::CpuBackend::new)
}
