//! Integer kernels past the op samples: casts at the edges of each range (saturation to i64,
//! wrap to i32/u8/i8, NaN, negative i64 to f32), integer reductions and matmul larger than
//! one workgroup, and dynamic slices with clamped and negative starts on big tensors.

mod common;

use common::require_gpu;
use rlx_driver::run_host;
use rlx_ir::ops::MatMul;
use rlx_ir::testkit::compare;
use rlx_ir::{DType, Graph, HostTensor, Shape, interp};
use rlx_wgpu::WgpuBackend;

/// Runs `g` on wgpu and on the reference; compares every output exactly (integer outputs).
fn check(g: &Graph, feeds: &[(&str, HostTensor)]) {
    let got = run_host(&WgpuBackend::new(), g, feeds).expect("wgpu run");
    let want = interp::evaluate(g, feeds).expect("reference");
    for (a, b) in got.iter().zip(&want) {
        compare(a, b).unwrap_or_else(|e| panic!("{}: {e}", g.name()));
    }
}

fn ints(n: usize, lo: i64, hi: i64, seed: u64) -> Vec<i64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            lo + ((s >> 33) as i64).rem_euclid(hi - lo + 1)
        })
        .collect()
}

#[test]
fn casts_at_the_edges_of_each_range_match_the_reference() {
    if require_gpu() {
        return;
    }
    let fs = [
        f64::NAN,
        -0.0,
        -0.99,
        2.5,
        -2.5,
        255.9,
        256.0,
        -129.0,
        3.0e9,
        -3.0e9,
        5.0e12,
        -5.0e12,
        1.0e20,
        -1.0e20,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    for to in [DType::I32, DType::U32, DType::I64, DType::U8, DType::I8, DType::Bool] {
        let mut g = Graph::new(format!("f32->{to}"));
        let x = g.input("x", Shape::new(&[fs.len()], DType::F32));
        let y = g.cast(x, to);
        g.set_outputs(vec![y]);
        check(&g, &[("x", HostTensor::from_f64(&[fs.len()], DType::F32, &fs).unwrap())]);
    }
    let is = [0, -1, -3, 7, 1 << 24, (1 << 24) + 1, -(1 << 40) - 5, 1 << 40, i64::MIN, i64::MAX, 300, -200];
    for to in [DType::F32, DType::I32, DType::U8, DType::I8, DType::Bool] {
        let mut g = Graph::new(format!("i64->{to}"));
        let x = g.input("x", Shape::new(&[is.len()], DType::I64));
        let y = g.cast(x, to);
        g.set_outputs(vec![y]);
        check(&g, &[("x", HostTensor::from_i64(&[is.len()], DType::I64, &is).unwrap())]);
    }
    let bytes = [0, 1, 127, 128, 200, 255, 3];
    for (from, to) in [(DType::U8, DType::I32), (DType::I8, DType::I64), (DType::I8, DType::F32)] {
        let vals: Vec<i64> = bytes.iter().map(|&b| if from == DType::I8 { b as u8 as i8 as i64 } else { b }).collect();
        let mut g = Graph::new(format!("{from}->{to}"));
        let x = g.input("x", Shape::new(&[vals.len()], from));
        let y = g.cast(x, to);
        g.set_outputs(vec![y]);
        check(&g, &[("x", HostTensor::from_i64(&[vals.len()], from, &vals).unwrap())]);
    }
}

#[test]
fn integer_reductions_and_matmul_span_many_workgroups() {
    if require_gpu() {
        return;
    }
    let (r, c) = (7, 300);
    let v = ints(r * c, -1000, 1000, 3);
    let xt = HostTensor::from_i64(&[r, c], DType::I32, &v).unwrap();
    for axes in [vec![1], vec![0], vec![0, 1]] {
        let mut g = Graph::new(format!("int sum/max {axes:?}"));
        let x = g.input("x", Shape::new(&[r, c], DType::I32));
        let s = g.sum(x, &axes, false);
        let m = g.max(x, &axes, true);
        g.set_outputs(vec![s, m]);
        check(&g, &[("x", xt.clone())]);
    }
    let (m, k, n) = (40, 70, 33);
    for tb in [false, true] {
        let bd = if tb { [n, k] } else { [k, n] };
        let mut g = Graph::new(format!("i32 matmul tb={tb}"));
        let a = g.input("a", Shape::new(&[m, k], DType::I32));
        let b = g.input("b", Shape::new(&bd, DType::I32));
        let y = g.add_node(MatMul { transpose_a: false, transpose_b: tb }, &[a, b]);
        g.set_outputs(vec![y]);
        // Products up to 2.5e9 overflow i32: the sums wrap on both sides.
        let fa = HostTensor::from_i64(&[m, k], DType::I32, &ints(m * k, -50000, 50000, 4)).unwrap();
        let fb = HostTensor::from_i64(&bd, DType::I32, &ints(k * n, -50000, 50000, 5)).unwrap();
        check(&g, &[("a", fa), ("b", fb)]);
    }
}

#[test]
fn dynamic_slices_clamp_their_start_on_the_device() {
    if require_gpu() {
        return;
    }
    let (a, b, c) = (3, 200, 5);
    let x = HostTensor::from_i64(&[a, b, c], DType::I64, &ints(a * b * c, -1 << 40, 1 << 40, 6)).unwrap();
    let u = HostTensor::from_i64(&[a, 17, c], DType::I64, &ints(a * 17 * c, -9, 9, 7)).unwrap();
    for start in [-5i64, 0, 90, 183, 184, 1 << 33] {
        let mut g = Graph::new(format!("dynamic start {start}"));
        let xi = g.input("x", Shape::new(&[a, b, c], DType::I64));
        let ui = g.input("u", Shape::new(&[a, 17, c], DType::I64));
        let si = g.input("s", Shape::new(&[], DType::I64));
        let ds = g.dynamic_slice(xi, si, 1, 17);
        let dus = g.dynamic_update_slice(xi, ui, si, -2);
        g.set_outputs(vec![ds, dus]);
        let s = HostTensor::from_i64(&[], DType::I64, &[start]).unwrap();
        check(&g, &[("x", x.clone()), ("u", u.clone()), ("s", s)]);
    }
}
