//! Weights packed ahead of time by the matmul kernels follow the param: a new value set with
//! `set_param` between runs is seen by the next run (plain matmul and matmul with an epilogue).

use rlx_ir::{DType, Graph, HostTensor, Shape};

fn naive(x: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut y = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            y[i * n + j] = (0..k).map(|p| x[i * k + p] as f64 * w[p * n + j] as f64).sum();
        }
    }
    y
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn set_param_between_runs_reaches_packed_weights() {
    let (m, k, n) = (40, 96, 72);
    let mut g = Graph::new("packed");
    let x = g.input("x", Shape::new(&[m, k], DType::F32));
    let w = g.param("w", Shape::new(&[k, n], DType::F32));
    let bias = g.param("b", Shape::new(&[n], DType::F32));
    let y = g.matmul(x, w);
    let z = g.add(y, bias);
    let z = g.unary(rlx_ir::ops::UnaryKind::Relu, z);
    g.set_outputs(vec![y, z]);
    let cpu = rlx_cpu::CpuBackend::new();
    // The pipeline fuses the bias and relu into the matmul's epilogue.
    let (opt, _) = rlx_opt::compile_pipeline(g, &cpu, rlx_opt::PrecisionPolicy::F32).unwrap();
    let mut exe = rlx_driver::compile_graph(&cpu, &opt).unwrap();
    let xv: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 7.0).collect();
    let bv: Vec<f32> = (0..n).map(|j| (j as f32 - 30.0) / 10.0).collect();
    exe.set_param(1, &bytes(&bv)).unwrap();
    for round in 0..3 {
        let wv: Vec<f32> = (0..k * n).map(|i| ((i * (5 + round) % 11) as f32 - 5.0) / 9.0).collect();
        exe.set_param(0, &bytes(&wv)).unwrap();
        let want = naive(&xv, &wv, m, k, n);
        // Several runs per value: the first sees the new version, later ones use the packed copy.
        for _ in 0..3 {
            let mut outs = [vec![0u8; m * n * 4], vec![0u8; m * n * 4]];
            let [o0, o1] = &mut outs;
            exe.run(&[&bytes(&xv)], &mut [o0.as_mut_slice(), o1.as_mut_slice()]).unwrap();
            let shape = Shape::new(&[m, n], DType::F32);
            let y = HostTensor::from_bytes(shape.clone(), o0).unwrap().to_f64_vec().unwrap();
            let z = HostTensor::from_bytes(shape, o1).unwrap().to_f64_vec().unwrap();
            for (i, &wy) in want.iter().enumerate() {
                let wz = (wy + bv[i % n] as f64).max(0.0);
                assert!((y[i] - wy).abs() < 1e-4, "round {round}: y[{i}] = {} vs {wy}", y[i]);
                assert!((z[i] - wz).abs() < 1e-4, "round {round}: z[{i}] = {} vs {wz}", z[i]);
            }
        }
    }
}
