//! f16/bf16 matmul through the CPU backend (batches, broadcasting, transposes, matvec, a param
//! B packed once and reused) against the exact f64 product of the rounded inputs: every output
//! within half an ulp of its dtype (the one rounding) plus the f32 summation bound.

use rlx_ir::ops::matmul::{MatMul, matmul_dims_t};
use rlx_ir::ops::util::broadcast_index_map;
use rlx_ir::{DType, Graph, HostTensor, Shape};

/// Values in [-2, 2) from a fixed sequence.
fn data(len: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
        })
        .collect()
}

/// The exact product of a and b (dims and flags as the op takes them) and each output's sum of
/// |a * b| terms.
/// `batch` is the output's batch dims.
#[allow(clippy::too_many_arguments)]
fn reference(
    batch: &[usize],
    ad: &[usize],
    a: &[f64],
    bd: &[usize],
    b: &[f64],
    ta: bool,
    tb: bool,
) -> (Vec<f64>, Vec<f64>) {
    let (ba, bb, m, k, n) = matmul_dims_t(ad, bd, ta, tb);
    let (ia, ib) = (broadcast_index_map(batch, &ba), broadcast_index_map(batch, &bb));
    let (mut out, mut mag) = (vec![], vec![]);
    for (&pa, &pb) in ia.iter().zip(&ib) {
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut t) = (0.0, 0.0);
                for p in 0..k {
                    let x = a[pa * m * k + if ta { p * m + i } else { i * k + p }];
                    let y = b[pb * k * n + if tb { j * k + p } else { p * n + j }];
                    s += x * y;
                    t += (x * y).abs();
                }
                out.push(s);
                mag.push(t);
            }
        }
    }
    (out, mag)
}

/// Runs `a @ b` three times (B a param: the second run packs it, the third reads the packed copy)
/// and checks every run.
fn check(dt: DType, ad: &[usize], bd: &[usize], ta: bool, tb: bool) {
    let (av, bv) = (data(ad.iter().product(), 3), data(bd.iter().product(), 5));
    let (at, bt) = (HostTensor::from_f64(ad, dt, &av).unwrap(), HostTensor::from_f64(bd, dt, &bv).unwrap());
    let (ar, br) = (at.to_f64_vec().unwrap(), bt.to_f64_vec().unwrap());
    let mut g = Graph::new("half-mm");
    let a = g.input("a", Shape::new(ad, dt));
    let b = g.param("b", Shape::new(bd, dt));
    let y = g.add_node(MatMul { transpose_a: ta, transpose_b: tb }, &[a, b]);
    g.set_outputs(vec![y]);
    let cpu = rlx_cpu::CpuBackend::new();
    let (legal, _) = rlx_driver::legalize(&g, &cpu).unwrap();
    let mut exe = rlx_driver::compile_graph(&cpu, &legal).unwrap();
    exe.set_param(0, &bt.to_bytes()).unwrap();
    let out_shape = legal.shape(legal.outputs()[0]).unwrap().clone();
    let od = out_shape.fixed_dims().unwrap();
    let (want, mag) = reference(&od[..od.len() - 2], ad, &ar, bd, &br, ta, tb);
    let k = if ta { ad[ad.len() - 2] } else { ad[ad.len() - 1] };
    let rel = if dt == DType::F16 { 2f64.powi(-11) } else { 2f64.powi(-8) };
    let ins = at.to_bytes();
    for run in 0..3 {
        let mut out = vec![0u8; out_shape.size_bytes().unwrap()];
        exe.run(&[&ins], &mut [&mut out]).unwrap();
        let got = HostTensor::from_bytes(out_shape.clone(), &out).unwrap().to_f64_vec().unwrap();
        assert_eq!(got.len(), want.len());
        for (i, ((g, w), t)) in got.iter().zip(&want).zip(&mag).enumerate() {
            let tol = rel * w.abs() + 2.0 * k as f64 * t * f32::EPSILON as f64 + 1e-7;
            assert!((g - w).abs() <= tol, "{dt} {ad:?}x{bd:?} t{ta}{tb} run {run} [{i}]: {g} vs {w}");
        }
    }
}

const CASES: &[(&[usize], &[usize], bool, bool)] = &[
    (&[2, 3, 5, 7], &[7, 9], false, false),
    (&[3, 4, 6], &[3, 6, 5], false, false),
    (&[6, 4], &[5, 6], true, true),
    (&[37, 19], &[23, 37], true, true),
    (&[64, 200], &[200, 96], false, false),
    (&[64, 200], &[96, 200], false, true),
    (&[200, 64], &[200, 96], true, false),
    (&[1, 300], &[300, 50], false, false),
    (&[1, 300], &[50, 300], false, true),
    (&[300, 1], &[50, 300], true, true),
    (&[3, 129], &[129, 70], false, false),
    (&[8, 40, 64], &[8, 64, 48], false, false),
    (&[8, 40, 64], &[8, 48, 64], false, true),
    (&[130, 1200], &[1200, 35], false, false),
];

#[test]
fn f16_matmul_matches_exact_product() {
    for &(a, b, ta, tb) in CASES {
        check(DType::F16, a, b, ta, tb);
    }
}

#[test]
fn bf16_matmul_matches_exact_product() {
    for &(a, b, ta, tb) in CASES {
        check(DType::BF16, a, b, ta, tb);
    }
}
