//! `stacked_matmul` on the CPU with param weights: Q/K/V with biases merged by the pipeline, run
//! several times per weight value (so packed weights are made and reused) with new values set
//! between runs, at shapes that take every path: decode rows, ragged n, row blocks. SwiGLU's
//! gate and up (with and without biases) merged into one combining stacked matmul, likewise.

use rlx_ir::ops::util::rand_f64;
use rlx_ir::{DType, Graph, HostTensor, Op, Shape, interp, testkit};

fn bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect()
}

/// Three biased projections of x, each an output (as attention heads read them).
fn qkv(rows: usize, k: usize, n: usize) -> Graph {
    let mut g = Graph::new("qkv");
    let x = g.input("x", Shape::new(&[rows, k], DType::F32));
    let mut ys = vec![];
    for name in ["q", "k", "v"] {
        let w = g.param(&format!("w{name}"), Shape::new(&[k, n], DType::F32));
        let b = g.param(&format!("b{name}"), Shape::new(&[n], DType::F32));
        let y = g.matmul(x, w);
        ys.push(g.add(y, b));
    }
    g.set_outputs(ys);
    g
}

/// `silu(x @ wg^T [+ bg]) * (x @ wu^T [+ bu])`, weights `[n, k]` as in checkpoints.
fn swiglu(rows: usize, k: usize, n: usize, bias: bool) -> Graph {
    let mut g = Graph::new("swiglu");
    let x = g.input("x", Shape::new(&[rows, k], DType::F32));
    let mut ys = vec![];
    for name in ["g", "u"] {
        let w = g.param(&format!("w{name}"), Shape::new(&[n, k], DType::F32));
        let mut y = g.matmul_t(x, w, false, true);
        if bias {
            let b = g.param(&format!("b{name}"), Shape::new(&[n], DType::F32));
            y = g.add(y, b);
        }
        ys.push(y);
    }
    let act = g.silu(ys[0]);
    let y = g.mul(act, ys[1]);
    g.set_outputs(vec![y]);
    g
}

#[test]
fn merged_projections_follow_their_params() {
    let cases = [(2, 16, 24), (37, 20, 17), (128, 64, 96), (700, 200, 40)];
    for &(rows, k, n) in &cases {
        check_params(qkv(rows, k, n), rows, k, n, false);
    }
}

#[test]
fn combined_swiglu_follows_its_params() {
    for &(rows, k, n) in &[(1, 96, 200), (3, 16, 24), (37, 20, 17), (128, 64, 96), (300, 200, 40)] {
        for bias in [false, true] {
            check_params(swiglu(rows, k, n, bias), rows, k, n, true);
        }
    }
}

/// Compiles `g` (outputs `[rows, n]`), expects one stacked matmul (combining or not), and runs
/// it three times on each of three param values against the reference.
fn check_params(g: Graph, rows: usize, k: usize, n: usize, combine: bool) {
    let cpu = rlx_cpu::CpuBackend::new();
    let (opt, rep) = rlx_opt::compile_pipeline(g.clone(), &cpu, rlx_opt::PrecisionPolicy::F32).unwrap();
    let stacked = opt.nodes().iter().filter(|n| matches!(&n.op, Op::StackedMatMul(s) if s.combine == combine)).count();
    assert_eq!(stacked, 1, "{rows}x{k}x{n}: {}", rep.fusion);
    let mut exe = rlx_driver::compile_graph(&cpu, &opt).unwrap();
    let params: Vec<(usize, Vec<usize>)> = opt
        .params()
        .iter()
        .enumerate()
        .map(|(i, &(id, _))| (i, opt.node(id).unwrap().ty.fixed_dims().unwrap()))
        .collect();
    let xv = rand_f64(rows * k, -1.0, 1.0, 7);
    for round in 0..3u64 {
        let mut feeds = vec![("x".to_string(), HostTensor::from_f64(&[rows, k], DType::F32, &xv).unwrap())];
        for (i, d) in &params {
            let v = rand_f64(d.iter().product(), -1.0, 1.0, 100 * round + *i as u64);
            exe.set_param(*i, &bytes(&v)).unwrap();
            let name = opt.params()[*i].1.to_string();
            feeds.push((name, HostTensor::from_f64(d, DType::F32, &v).unwrap()));
        }
        let fr: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        let want = interp::evaluate(&g, &fr).unwrap();
        for run in 0..3 {
            let mut outs: Vec<Vec<u8>> = want.iter().map(|_| vec![0u8; rows * n * 4]).collect();
            let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
            exe.run(&[&bytes(&xv)], &mut refs).unwrap();
            for (o, w) in outs.iter().zip(&want) {
                let got = HostTensor::from_bytes(w.shape.clone(), o).unwrap();
                testkit::compare(&got, w).unwrap_or_else(|e| panic!("{rows}x{k}x{n} round {round} run {run}: {e}"));
            }
        }
    }
}
