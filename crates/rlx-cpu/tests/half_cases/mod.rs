//! Checks of the f16/bf16 kernels that widen to f32 (elementwise, casts, where, fused regions,
//! matmul epilogues, reductions and norms), shared by the SIMD and the forced-portable test.
//! Elementwise results must equal the exact (f64) result rounded once, within one unit in the
//! last place of the half type; NaN, infinities, signed zeros and subnormals included.

use rlx_cpu::CpuBackend;
use rlx_ir::ops::util::{broadcast_index_map, rand_f64};
use rlx_ir::ops::{BinaryKind, Fused, Instr, UnaryKind};
use rlx_ir::{DType, Graph, HostTensor, Shape};

const HALVES: [DType; 2] = [DType::F16, DType::BF16];

fn run(g: &Graph, feeds: &[(&str, HostTensor)]) -> Vec<f64> {
    let out = rlx_driver::run_host(&CpuBackend::new(), g, feeds).expect("cpu run");
    out[0].to_f64_vec().expect("floats")
}

/// `v` rounded to `dt` (round to nearest even, as the kernels store).
fn round(dt: DType, v: f64) -> f64 {
    match dt {
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::BF16 => half::bf16::from_f64(v).to_f64(),
        _ => v as f32 as f64,
    }
}

/// Position of `v` (a value of `dt`) on the ordered line of the type's bit patterns.
fn ord(dt: DType, v: f64) -> i64 {
    let b = match dt {
        DType::F16 => half::f16::from_f64(v).to_bits(),
        _ => half::bf16::from_f64(v).to_bits(),
    } as i64;
    if b & 0x8000 != 0 { -(b & 0x7fff) } else { b }
}

/// `got` is `want` (the exact result, rounded once), or one step of `dt` from it, or within
/// `abs`; NaN matches NaN and infinities must match exactly.
fn assert_close(what: &str, dt: DType, got: &[f64], exact: &[f64], abs: f64) {
    assert_eq!(got.len(), exact.len(), "{what}: length");
    for (i, (&g, &e)) in got.iter().zip(exact).enumerate() {
        let w = round(dt, e);
        let ok = (g.is_nan() && w.is_nan())
            || g.to_bits() == w.to_bits()
            || (g.is_finite() && w.is_finite() && ((ord(dt, g) - ord(dt, w)).abs() <= 1 || (g - w).abs() <= abs));
        assert!(ok, "{what} {dt} element {i}: got {g:e}, want {w:e} (exact {e:e})");
    }
}

/// Hard values of `dt` (NaN, infinities, zeros, subnormals, the largest finite) then a spread.
fn values(dt: DType, n: usize, lo: f64, hi: f64, seed: u64) -> Vec<f64> {
    let (sub, max) = match dt {
        DType::F16 => (2f64.powi(-24), 65504.0),
        _ => (2f64.powi(-133), 3.389_531_389_251_535_5e38),
    };
    let mut v = vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, sub, -3.0 * sub, max, -max, 1.0];
    v.extend(rand_f64(n - v.len(), lo, hi, seed));
    v.into_iter().map(|x| round(dt, x)).collect()
}

fn unary_ops() {
    use UnaryKind::*;
    let n = 1037; // not a multiple of any vector width or of the chunk
    for dt in HALVES {
        let x = values(dt, n, -6.0, 6.0, 1);
        for u in [Exp, GeluTanh, Gelu, Silu, Tanh, Sigmoid, Relu, Neg, Abs, Sqrt, Recip, Square, Sin] {
            let mut g = Graph::new("unary");
            let xi = g.input("x", Shape::new(&[n], dt));
            let y = g.unary(u, xi);
            g.set_outputs(vec![y]);
            let got = run(&g, &[("x", HostTensor::from_f64(&[n], dt, &x).unwrap())]);
            let exact: Vec<f64> = x.iter().map(|&v| u.eval(v)).collect();
            // f32 math is exact to ~1e-7 absolute (tanh near -1, for one), below half's ulp
            // except in the subnormal range.
            assert_close(&format!("{u:?}"), dt, &got, &exact, 1e-6);
        }
    }
}

fn binary_ops() {
    use BinaryKind::*;
    // Same shapes, a scalar on either side, and a two-sided broadcast.
    let pairs: [(&[usize], &[usize]); 4] =
        [(&[1037], &[1037]), (&[1], &[1037]), (&[1037], &[1]), (&[7, 1, 37], &[1, 5, 37])];
    for dt in HALVES {
        for (s, (da, db)) in pairs.iter().enumerate() {
            let (na, nb) = (da.iter().product::<usize>(), db.iter().product::<usize>());
            let a = values(dt, na.max(10), -4.0, 4.0, 10 + s as u64)[..na].to_vec();
            let b = values(dt, nb.max(10), -4.0, 4.0, 20 + s as u64).into_iter().rev().take(nb).collect::<Vec<_>>();
            for op in [Add, Sub, Mul, Div, Maximum, Minimum, Pow] {
                let mut g = Graph::new("binary");
                let (ai, bi) = (g.input("a", Shape::new(da, dt)), g.input("b", Shape::new(db, dt)));
                let y = g.binary(op, ai, bi);
                g.set_outputs(vec![y]);
                let od = g.shape(y).unwrap().fixed_dims().unwrap();
                let feeds = [
                    ("a", HostTensor::from_f64(da, dt, &a).unwrap()),
                    ("b", HostTensor::from_f64(db, dt, &b).unwrap()),
                ];
                let got = run(&g, &feeds);
                let (ma, mb) = (broadcast_index_map(&od, da), broadcast_index_map(&od, db));
                let exact: Vec<f64> = ma.iter().zip(&mb).map(|(&i, &j)| op.eval(a[i], b[j])).collect();
                assert_close(&format!("{op:?} {da:?} {db:?}"), dt, &got, &exact, 0.0);
            }
        }
    }
}

/// f32 -> f16/bf16 rounds exactly as the `half` crate; half -> f32 and f16 <-> bf16 are exact
/// widenings followed by one rounding.
fn casts() {
    let n = 5003;
    let mut x: Vec<f32> = (0..n as u32).map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761))).collect();
    x[..8].copy_from_slice(&[f32::NAN, f32::INFINITY, -0.0, 65520.0, 65519.99, 1e-8, -1e-40, f32::MAX]);
    let x: Vec<f64> = x.into_iter().map(|v| v as f64).collect();
    let cast = |from: DType, to: DType, v: &[f64]| {
        let mut g = Graph::new("cast");
        let xi = g.input("x", Shape::new(&[v.len()], from));
        let y = g.cast(xi, to);
        g.set_outputs(vec![y]);
        run(&g, &[("x", HostTensor::from_f64(&[v.len()], from, v).unwrap())])
    };
    for dt in HALVES {
        let got = cast(DType::F32, dt, &x);
        assert_close("cast from f32", dt, &got, &x, 0.0);
        for (g, &v) in got.iter().zip(&x) {
            assert!(g.to_bits() == round(dt, v).to_bits() || v.is_nan(), "f32 {v:e} -> {dt}: {g:e}");
        }
        let h = values(dt, n, -70000.0, 70000.0, 5);
        let back = cast(dt, DType::F32, &h);
        assert!(
            back.iter().zip(&h).all(|(a, b)| a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan()),
            "{dt} -> f32"
        );
        let other = if dt == DType::F16 { DType::BF16 } else { DType::F16 };
        let got = cast(dt, other, &h);
        for (g, &v) in got.iter().zip(&h) {
            assert!(
                g.to_bits() == round(other, v).to_bits() || v.is_nan() && g.is_nan(),
                "{dt} {v:e} -> {other}: {g:e}"
            );
        }
    }
}

fn where_select() {
    for dt in [DType::F16, DType::BF16, DType::F32, DType::F64, DType::I8] {
        for (dc, dx, dy) in
            [(&[7usize, 37][..], &[7usize, 37][..], &[7usize, 37][..]), (&[7, 1][..], &[7, 37][..], &[37][..])]
        {
            let mut g = Graph::new("where");
            let c = g.input("c", Shape::new(dc, DType::Bool));
            let (x, y) = (g.input("x", Shape::new(dx, dt)), g.input("y", Shape::new(dy, dt)));
            let w = g.where_(c, x, y);
            g.set_outputs(vec![w]);
            let cv: Vec<bool> = (0..dc.iter().product::<usize>()).map(|i| i % 3 != 1).collect();
            let xv: Vec<f64> = (0..dx.iter().product::<usize>()).map(|i| i as f64).collect();
            let yv: Vec<f64> = (0..dy.iter().product::<usize>()).map(|i| -(i as f64) - 0.5).collect();
            let t = |d: &[usize], v: &[f64]| {
                if dt == DType::I8 {
                    HostTensor::from_i64(d, dt, &v.iter().map(|&x| x as i64).collect::<Vec<_>>()).unwrap()
                } else {
                    HostTensor::from_f64(d, dt, v).unwrap()
                }
            };
            let feeds = [("c", HostTensor::from_bool(dc, &cv).unwrap()), ("x", t(dx, &xv)), ("y", t(dy, &yv))];
            let got = rlx_driver::run_host(&CpuBackend::new(), &g, &feeds).unwrap();
            let want = rlx_ir::interp::evaluate(&g, &feeds).unwrap();
            assert_eq!(got[0].to_f64_vec().unwrap(), want[0].to_f64_vec().unwrap(), "where {dt} {dc:?} {dx:?} {dy:?}");
        }
    }
}

/// The program evaluated exactly (f64, no rounding between steps) over broadcast inputs.
fn exact_program(program: &[Instr], od: &[usize], ins: &[(Vec<usize>, Vec<f64>)]) -> Vec<f64> {
    let f = Fused { program: program.to_vec() };
    let maps: Vec<Vec<usize>> = ins.iter().map(|(d, _)| broadcast_index_map(od, d)).collect();
    let mut regs = vec![];
    (0..od.iter().product()).map(|e| f.eval_f64(DType::F64, &mut regs, |i| ins[i].1[maps[i][e]])).collect()
}

/// gelu(x + bias) * row_scale + grid over more than one chunk: every input layout (same, bias
/// suffix, per-row prefix, general broadcast), computed in f32 and rounded once. Values stay
/// moderate: a huge row scale would magnify f32's error in gelu's tail past half's ulp.
fn fused_regions() {
    use Instr::*;
    let program = vec![
        Input(0),
        Input(1),
        Binary(BinaryKind::Add, 0, 1),
        Unary(UnaryKind::Gelu, 2),
        Input(2),
        Binary(BinaryKind::Mul, 3, 4),
        Input(3),
        Binary(BinaryKind::Add, 5, 6),
        Const(0.044715),
        Binary(BinaryKind::Mul, 7, 8),
    ];
    for dt in HALVES {
        let dims: [Vec<usize>; 4] = [vec![3, 7, 37], vec![37], vec![1, 3, 7, 1], vec![3, 1, 37]];
        let ins: Vec<(Vec<usize>, Vec<f64>)> = dims
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let v = rand_f64(d.iter().product(), -3.0, 3.0, 40 + i as u64);
                (d.clone(), v.into_iter().map(|x| round(dt, x)).collect())
            })
            .collect();
        let mut g = Graph::new("fused");
        let ids: Vec<_> =
            ins.iter().enumerate().map(|(i, (d, _))| g.input(&format!("in{i}"), Shape::new(d, dt))).collect();
        let y = g.add_node(Fused { program: program.clone() }, &ids);
        g.set_outputs(vec![y]);
        let names: Vec<String> = (0..4).map(|i| format!("in{i}")).collect();
        let feeds: Vec<(&str, HostTensor)> =
            ins.iter().zip(&names).map(|((d, v), n)| (n.as_str(), HostTensor::from_f64(d, dt, v).unwrap())).collect();
        let od = vec![1, 3, 7, 37];
        let got = run(&g, &feeds);
        assert_close("fused", dt, &got, &exact_program(&program, &od, &ins), 1e-5);
    }
}

/// matmul + bias + gelu_tanh as one `fused_matmul`: the epilogue sees the f32 sums (the result
/// is the exact value rounded once, up to f32 summation error), for matvec, small, large and
/// batched products, with B an input and a param (packed once, on the second run).
fn fused_matmul_epilogue() {
    use rlx_ir::ops::{FusedMatMul, MatMul};
    let program = vec![
        Instr::Input(0),
        Instr::Input(1),
        Instr::Binary(BinaryKind::Add, 0, 1),
        Instr::Unary(UnaryKind::GeluTanh, 2),
    ];
    let shapes: [(&[usize], &[usize]); 5] = [
        (&[1, 33], &[33, 45]),
        (&[3, 17], &[17, 40]),
        (&[70, 33], &[33, 45]),
        (&[2, 5, 33], &[33, 45]),
        (&[4, 0], &[0, 9]),
    ];
    for dt in HALVES {
        for (s, (ad, bd)) in shapes.iter().enumerate() {
            let (k, n) = (bd[0], bd[1]);
            let m: usize = ad[..ad.len() - 1].iter().product();
            let a = rand_f64(m * k, -1.5, 1.5, 60 + s as u64).into_iter().map(|v| round(dt, v)).collect::<Vec<_>>();
            let b = rand_f64(k * n, -1.5, 1.5, 70 + s as u64).into_iter().map(|v| round(dt, v)).collect::<Vec<_>>();
            let bias = rand_f64(n, -1.0, 1.0, 80 + s as u64).into_iter().map(|v| round(dt, v)).collect::<Vec<_>>();
            for param in [false, true] {
                let mut g = Graph::new("fmm");
                let ai = g.input("a", Shape::new(ad, dt));
                let bi = if param { g.param("b", Shape::new(bd, dt)) } else { g.input("b", Shape::new(bd, dt)) };
                let ci = g.input("bias", Shape::new(&[n], dt));
                let f = FusedMatMul { matmul: MatMul::default(), epilogue: Fused { program: program.clone() } };
                let y = g.add_node(f, &[ai, bi, ci]);
                g.set_outputs(vec![y]);
                let bt = HostTensor::from_f64(bd, dt, &b).unwrap();
                let at = HostTensor::from_f64(ad, dt, &a).unwrap();
                let ct = HostTensor::from_f64(&[n], dt, &bias).unwrap();
                let got = if param {
                    run_twice(&g, &bt, &[&at, &ct])
                } else {
                    run(&g, &[("a", at), ("b", bt), ("bias", ct)])
                };
                let mut exact = vec![0.0; m * n];
                for i in 0..m {
                    for j in 0..n {
                        let s: f64 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
                        exact[i * n + j] = UnaryKind::GeluTanh.eval(s + bias[j]);
                    }
                }
                assert_close(&format!("fused_matmul {ad:?} x {bd:?} param {param}"), dt, &got, &exact, 1e-4);
            }
        }
    }
}

/// Compiles `g` (one param, then inputs), runs it twice and returns the second output.
fn run_twice(g: &Graph, param: &HostTensor, inputs: &[&HostTensor]) -> Vec<f64> {
    let cpu = CpuBackend::new();
    let (legal, _) = rlx_driver::legalize(g, &cpu).unwrap();
    let mut exe = rlx_driver::compile_graph(&cpu, &legal).unwrap();
    exe.set_param(0, &param.to_bytes()).unwrap();
    let ins: Vec<Vec<u8>> = inputs.iter().map(|t| t.to_bytes()).collect();
    let in_refs: Vec<&[u8]> = ins.iter().map(|b| b.as_slice()).collect();
    let o = legal.outputs()[0];
    let shape = legal.shape(o).unwrap();
    let mut out = vec![0u8; shape.size_bytes().unwrap()];
    for _ in 0..2 {
        exe.run(&in_refs, &mut [out.as_mut_slice()]).unwrap();
    }
    HostTensor::from_bytes(shape.clone(), &out).unwrap().to_f64_vec().unwrap()
}

/// Reductions, fused reductions, fused norms, softmax and layer_norm on half inputs against the
/// reference interpreter (its half-precision tolerance).
fn reductions_and_norms() {
    use rlx_ir::ops::{FusedNorm, FusedReduce, LayerNorm, NormKind, Reduce, ReduceKind, Softmax};
    let mut samples = vec![];
    for dt in HALVES {
        let r =
            |d: &[usize], seed| HostTensor::from_f64(d, dt, &rand_f64(d.iter().product(), -2.0, 2.0, seed)).unwrap();
        for (d, axes) in [(&[37usize, 301][..], vec![-1i64]), (&[300, 131][..], vec![0]), (&[4, 300, 7][..], vec![1])] {
            for kind in [ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max] {
                let op = Reduce { kind, axes: axes.clone(), keep_dims: false };
                samples.push(rlx_ir::Sample::new(format!("{kind:?} {dt} {d:?}"), op, vec![r(d, 90)]));
            }
        }
        let prologue = Fused { program: vec![Instr::Input(0), Instr::Input(1), Instr::Binary(BinaryKind::Mul, 0, 1)] };
        // sum(x * w) over rows: the products stay f32 (the reference rounds each to the half
        // type), so the check is against the exact sum, rounded once.
        let fr = FusedReduce { prologue, reduce: Reduce { kind: ReduceKind::Sum, axes: vec![-1], keep_dims: true } };
        let (x, w) = (r(&[37, 300], 91), r(&[300], 92));
        let mut g = Graph::new("fused_reduce");
        let (xi, wi) = (g.input("x", x.shape.clone()), g.input("w", w.shape.clone()));
        let y = g.add_node(fr, &[xi, wi]);
        g.set_outputs(vec![y]);
        let (xv, wv) = (x.to_f64_vec().unwrap(), w.to_f64_vec().unwrap());
        let exact: Vec<f64> = xv.chunks(300).map(|row| row.iter().zip(&wv).map(|(a, b)| a * b).sum()).collect();
        assert_close(&format!("fused_reduce {dt}"), dt, &run(&g, &[("x", x), ("w", w)]), &exact, 1e-4);
        let add = Fused { program: vec![Instr::Input(0), Instr::Input(1), Instr::Binary(BinaryKind::Add, 0, 1)] };
        let fnorm = FusedNorm { prologue: add, norm: NormKind::LayerNorm, eps: 1e-5 };
        let ins = vec![r(&[130, 257], 93), r(&[130, 257], 94), r(&[257], 95), r(&[257], 96)];
        samples.push(rlx_ir::Sample::new(format!("fused_norm {dt}"), fnorm, ins));
        samples.push(rlx_ir::Sample::new(format!("softmax {dt}"), Softmax { axis: -1 }, vec![r(&[33, 130], 97)]));
        let ln = LayerNorm { eps: 1e-5 };
        samples.push(rlx_ir::Sample::new(
            format!("layer_norm {dt}"),
            ln,
            vec![r(&[33, 130], 98), r(&[130], 99), r(&[130], 100)],
        ));
    }
    let cpu = CpuBackend::new();
    rlx_ir::testkit::run_samples(samples, |g, feeds| rlx_driver::run_host(&cpu, g, feeds)).assert_all_pass();
}

/// Every case.
pub fn all() {
    unary_ops();
    binary_ops();
    casts();
    where_select();
    fused_regions();
    fused_matmul_epilogue();
    reductions_and_norms();
}
