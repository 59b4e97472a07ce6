//! The wgpu executable beyond single-op samples: larger shapes than one workgroup covers,
//! params kept on the device across runs, device-side index errors, the erf approximation's
//! measured accuracy, and clear errors for what the backend does not claim.

mod common;

use common::require_gpu;
use rlx_driver::{legalize, run_host};
use rlx_ir::ops::MatMul;
use rlx_ir::testkit::compare;
use rlx_ir::{DType, Error, Graph, HostTensor, Shape, interp};
use rlx_wgpu::WgpuBackend;

fn rand(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// Runs `g` on wgpu and on the reference; compares every output.
fn check(g: &Graph, feeds: &[(&str, HostTensor)]) {
    let got = run_host(&WgpuBackend::new(), g, feeds).expect("wgpu run");
    let want = interp::evaluate(g, feeds).expect("reference");
    for (a, b) in got.iter().zip(&want) {
        compare(a, b).unwrap_or_else(|e| panic!("{}: {e}", g.name()));
    }
}

#[test]
fn matmul_spans_many_tiles_with_batch_broadcast_and_transposes() {
    if require_gpu() {
        return;
    }
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let (m, k, n) = (70, 133, 65);
        let ad = if ta { [3, 1, k, m] } else { [3, 1, m, k] };
        let bd = if tb { [2, n, k] } else { [2, k, n] };
        let mut g = Graph::new(format!("matmul t{ta}{tb}"));
        let a = g.input("a", Shape::new(&ad, DType::F32));
        let b = g.input("b", Shape::new(&bd, DType::F32));
        let y = g.add_node(MatMul { transpose_a: ta, transpose_b: tb }, &[a, b]);
        g.set_outputs(vec![y]);
        let fa = HostTensor::from_f64(&ad, DType::F32, &rand(ad.iter().product(), 1)).unwrap();
        let fb = HostTensor::from_f64(&bd, DType::F32, &rand(bd.iter().product(), 2)).unwrap();
        check(&g, &[("a", fa), ("b", fb)]);
    }
}

#[test]
fn fused_matmul_runs_its_epilogue_natively() {
    if require_gpu() {
        return;
    }
    use rlx_ir::ops::{BinaryKind, Fused, FusedMatMul, Instr, UnaryKind};
    // gelu(a @ b + bias) + residual over several output tiles.
    let (m, k, n) = (70, 40, 130);
    let epilogue = Fused {
        program: vec![
            Instr::Input(0),
            Instr::Input(1),
            Instr::Binary(BinaryKind::Add, 0, 1),
            Instr::Unary(UnaryKind::Gelu, 2),
            Instr::Input(2),
            Instr::Binary(BinaryKind::Add, 3, 4),
        ],
    };
    let op = FusedMatMul { matmul: MatMul::default(), epilogue };
    let mut g = Graph::new("fused_matmul");
    let a = g.input("a", Shape::new(&[2, m, k], DType::F32));
    let b = g.input("b", Shape::new(&[k, n], DType::F32));
    let bias = g.input("bias", Shape::new(&[n], DType::F32));
    let res = g.input("res", Shape::new(&[2, m, n], DType::F32));
    let y = g.add_node(op, &[a, b, bias, res]);
    g.set_outputs(vec![y]);
    let (_, report) = legalize(&g, &WgpuBackend::new()).unwrap();
    let d = &report.ops["fused_matmul"];
    assert_eq!((d.native, d.decomposed), (1, 0), "{report}");
    let t = |dims: &[usize], seed| HostTensor::from_f64(dims, DType::F32, &rand(dims.iter().product(), seed)).unwrap();
    check(&g, &[("a", t(&[2, m, k], 8)), ("b", t(&[k, n], 9)), ("bias", t(&[n], 10)), ("res", t(&[2, m, n], 11))]);
}

#[test]
fn row_kernels_handle_rows_longer_than_a_workgroup() {
    if require_gpu() {
        return;
    }
    let mut g = Graph::new("rows");
    let x = g.input("x", Shape::new(&[3, 1000], DType::F32));
    let gm = g.input("gamma", Shape::new(&[1000], DType::F32));
    let bt = g.input("beta", Shape::new(&[1000], DType::F32));
    let s = g.softmax(x, -1);
    let ln = g.layer_norm(x, gm, bt, 1e-5);
    let rn = g.rms_norm(x, gm, 1e-6);
    let sm = g.sum(x, &[1], false);
    let mx = g.max(x, &[0, 1], true);
    g.set_outputs(vec![s, ln, rn, sm, mx]);
    let feeds = [
        ("x", HostTensor::from_f64(&[3, 1000], DType::F32, &rand(3000, 3)).unwrap()),
        ("gamma", HostTensor::from_f64(&[1000], DType::F32, &rand(1000, 4)).unwrap()),
        ("beta", HostTensor::from_f64(&[1000], DType::F32, &rand(1000, 5)).unwrap()),
    ];
    check(&g, &feeds);
}

#[test]
fn dispatches_past_the_per_dimension_workgroup_limit_use_a_second_dimension() {
    if require_gpu() {
        return;
    }
    // 70000 rows: one workgroup each, more than the 65535 one dispatch dimension allows.
    let mut g = Graph::new("many rows");
    let x = g.input("x", Shape::new(&[70000, 3], DType::F32));
    let s = g.sum(x, &[1], false);
    g.set_outputs(vec![s]);
    check(&g, &[("x", HostTensor::from_f64(&[70000, 3], DType::F32, &rand(210000, 7)).unwrap())]);
}

#[test]
fn params_stay_on_the_device_across_runs() {
    if require_gpu() {
        return;
    }
    let mut g = Graph::new("mlp");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let w = g.param("w", Shape::new(&[3, 2], DType::F32));
    let y = g.matmul(x, w);
    let y = g.gelu(y);
    g.set_outputs(vec![y]);
    let backend = WgpuBackend::new();
    let (legal, _) = legalize(&g, &backend).unwrap();
    let mut exe = rlx_driver::compile_graph(&backend, &legal).unwrap();
    let w = [0.5f32, -1.0, 2.0, 0.25, -0.75, 1.5];
    exe.set_param(0, bytemuck::cast_slice(&w)).unwrap();
    for (run, xs) in [[1.0f32, 2.0, 3.0, -1.0, 0.5, 0.0], [0.0, -2.0, 1.0, 4.0, 1.0, -3.0]].iter().enumerate() {
        let mut out = vec![0u8; 16];
        exe.run(&[bytemuck::cast_slice(xs)], &mut [&mut out]).unwrap();
        let got: &[f32] = bytemuck::cast_slice(&out);
        for i in 0..2 {
            for j in 0..2 {
                let z: f64 = (0..3).map(|k| xs[i * 3 + k] as f64 * w[k * 2 + j] as f64).sum();
                let want = 0.5 * z * (1.0 + libm::erf(z / std::f64::consts::SQRT_2));
                let e = (got[i * 2 + j] as f64 - want).abs();
                assert!(e < 1e-5 * (1.0 + want.abs()), "run {run} [{i},{j}]: {} vs {want}", got[i * 2 + j]);
            }
        }
    }
    // Wrong sizes are errors, not truncation.
    let mut out = vec![0u8; 16];
    assert!(exe.run(&[&[0u8; 8]], &mut [&mut out]).is_err());
    assert!(exe.set_param(0, &[0u8; 4]).is_err());
}

#[test]
fn out_of_range_gather_index_is_an_error_from_the_device() {
    if require_gpu() {
        return;
    }
    let mut g = Graph::new("embed");
    let t = g.input("table", Shape::new(&[4, 2], DType::F32));
    let ids = g.input("ids", Shape::new(&[3], DType::I64));
    let y = g.gather(t, ids, 0);
    g.set_outputs(vec![y]);
    let table = HostTensor::from_f64(&[4, 2], DType::F32, &rand(8, 6)).unwrap();
    let ok = HostTensor::from_i64(&[3], DType::I64, &[3, 0, 1]).unwrap();
    check(&g, &[("table", table.clone()), ("ids", ok)]);
    for bad in [4i64, -1] {
        let ids = HostTensor::from_i64(&[3], DType::I64, &[0, bad, 1]).unwrap();
        let err = run_host(&WgpuBackend::new(), &g, &[("table", table.clone()), ("ids", ids)]).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Eval { .. }) && msg.contains(&format!("index {bad}")), "{msg}");
    }
}

#[test]
fn unclaimed_dtypes_fail_at_compile_with_the_dispatch_report() {
    let mut g = Graph::new("f64");
    let x = g.input("x", Shape::new(&[3], DType::F64));
    let y = g.exp(x);
    g.set_outputs(vec![y]);
    match legalize(&g, &WgpuBackend::new()) {
        Err(Error::Unsupported { backend, missing, report }) => {
            assert_eq!(backend, "wgpu");
            assert!(missing.contains("`exp` f64[3]"), "{missing}");
            assert!(report.contains("missing: exp"), "{report}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

#[test]
fn erf_on_the_device_is_within_documented_error() {
    if require_gpu() {
        return;
    }
    let n = 12001;
    let xs: Vec<f64> = (0..n).map(|i| (i as f64 - 6000.0) * 1e-3).collect();
    let mut g = Graph::new("erf");
    let x = g.input("x", Shape::new(&[n], DType::F32));
    let y = g.erf(x);
    g.set_outputs(vec![y]);
    let t = HostTensor::from_f64(&[n], DType::F32, &xs).unwrap();
    let got = run_host(&WgpuBackend::new(), &g, &[("x", t.clone())]).unwrap();
    let got = got[0].to_f64_vec().unwrap();
    let xs32 = t.to_f64_vec().unwrap();
    let worst = got.iter().zip(&xs32).map(|(g, &x)| (g - libm::erf(x)).abs()).fold(0.0, f64::max);
    eprintln!("erf on the device: max abs error {worst:.3e} over [-6, 6]");
    assert!(worst < 1e-6, "erf max abs error {worst}");
}
