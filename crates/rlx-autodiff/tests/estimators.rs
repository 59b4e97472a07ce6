//! Gradient estimators: fake_quant's straight-through gradient for x and LSQ gradient for the
//! scale, against the formulas written out here in plain f64; jvp agrees with vjp.

use rlx_autodiff::{grad, jvp};
use rlx_ir::ops::FakeQuant;
use rlx_ir::{DType, Graph, HostTensor, Shape, interp};

/// `loss = sum(w * fake_quant(x, s, z))` with per-channel scales on axis 1 of a [2, 3] input.
fn graph(per_channel: bool, op: &FakeQuant) -> Graph {
    let mut g = Graph::new("fq");
    let x = g.input("x", Shape::new(&[2, 3], DType::F64));
    let sd: &[usize] = if per_channel { &[3] } else { &[] };
    let s = g.input("s", Shape::new(sd, DType::F64));
    let z = g.input("z", Shape::new(sd, DType::F64));
    let op = FakeQuant { axis: per_channel.then_some(1), ..op.clone() };
    let y = g.fake_quant_with(x, s, z, op);
    let w = g.constant(HostTensor::from_f64(&[2, 3], DType::F64, &[1.0, -2.0, 0.5, 3.0, 1.5, -1.0]).unwrap());
    let p = g.mul(y, w);
    let l = g.sum_all(p);
    g.set_outputs(vec![l]);
    g
}

/// (dL/dx, dL/ds per channel) by the formulas: STE passes w where qmin <= round(x/s)+z <= qmax;
/// LSQ gives round(x/s) - x/s inside, qmin - z or qmax - z where clipped, times `gs`.
fn by_hand(x: &[f64], s: &[f64], z: &[f64], w: &[f64], (lo, hi, gs): (f64, f64, f64)) -> (Vec<f64>, Vec<f64>) {
    let mut dx = vec![0.0; 6];
    let mut ds = vec![0.0; s.len()];
    for i in 0..6 {
        let c = if s.len() == 3 { i % 3 } else { 0 };
        let v = x[i] / s[c];
        let q = v.round() + z[c];
        let (d_x, d_s) = if q < lo {
            (0.0, lo - z[c])
        } else if q > hi {
            (0.0, hi - z[c])
        } else {
            (1.0, v.round() - v)
        };
        dx[i] = w[i] * d_x;
        ds[c] += w[i] * d_s * gs;
    }
    (dx, ds)
}

fn feeds(x: &[f64], s: &[f64], z: &[f64]) -> Vec<(&'static str, HostTensor)> {
    let sd: &[usize] = if s.len() == 3 { &[3] } else { &[] };
    vec![
        ("x", HostTensor::from_f64(&[2, 3], DType::F64, x).unwrap()),
        ("s", HostTensor::from_f64(sd, DType::F64, s).unwrap()),
        ("z", HostTensor::from_f64(sd, DType::F64, z).unwrap()),
    ]
}

#[test]
fn fake_quant_gradients_follow_ste_and_lsq() {
    let x = [0.33, -2.35, 0.049, 2.9, -0.02, 0.61];
    let w = [1.0, -2.0, 0.5, 3.0, 1.5, -1.0];
    // The 4-bit grid: full range with the plain LSQ gradient, narrow range with a grad scale,
    // and a stopped scale gradient (plain STE).
    let full = FakeQuant::new(4, true, None);
    let narrow = FakeQuant { narrow: true, grad_scale: 0.5, ..full.clone() };
    let stopped = FakeQuant { grad_scale: 0.0, ..full.clone() };
    let cases = [(&full, (-8.0, 7.0, 1.0)), (&narrow, (-7.0, 7.0, 0.5)), (&stopped, (-8.0, 7.0, 0.0))];
    for ((s, z), (op, grid)) in [(vec![0.3], vec![0.0]), (vec![0.1, 0.25, 0.02], vec![0.0, 2.0, -1.0])]
        .into_iter()
        .flat_map(|sz| cases.iter().map(move |c| (sz.clone(), *c)))
    {
        let g = graph(s.len() == 3, op);
        let wrt = [rlx_autodiff::leaf(&g, "x").unwrap(), rlx_autodiff::leaf(&g, "s").unwrap()];
        let dg = grad(&g, &wrt).unwrap();
        let out = interp::evaluate(&dg, &feeds(&x, &s, &z)).unwrap();
        let (want_dx, want_ds) = by_hand(&x, &s, &z, &w, grid);
        let (got_dx, got_ds) = (out[0].to_f64_vec().unwrap(), out[1].to_f64_vec().unwrap());
        for (a, b) in got_dx.iter().zip(&want_dx).chain(got_ds.iter().zip(&want_ds)) {
            assert!((a - b).abs() < 1e-12, "dx {got_dx:?} vs {want_dx:?}; ds {got_ds:?} vs {want_ds:?}");
        }
        // Some values clip and some pass, so both branches are exercised.
        assert!(want_dx.contains(&0.0) && want_dx.iter().any(|v| *v != 0.0), "{want_dx:?}");

        // jvp along (tx, ts) equals <grad, (tx, ts)>.
        let j = jvp(&g, &["x", "s"]).unwrap();
        let tx = [0.5, -1.0, 2.0, 0.25, 1.0, -0.5];
        let ts: Vec<f64> = s.iter().map(|v| v * 0.3).collect();
        let mut f = feeds(&x, &s, &z);
        f.push(("tangent_x", HostTensor::from_f64(&[2, 3], DType::F64, &tx).unwrap()));
        let sd: &[usize] = if s.len() == 3 { &[3] } else { &[] };
        f.push(("tangent_s", HostTensor::from_f64(sd, DType::F64, &ts).unwrap()));
        let t = interp::evaluate(&j, &f).unwrap()[1].to_f64_vec().unwrap()[0];
        let dot: f64 = want_dx.iter().zip(&tx).map(|(a, b)| a * b).sum::<f64>()
            + want_ds.iter().zip(&ts).map(|(a, b)| a * b).sum::<f64>();
        assert!((t - dot).abs() < 1e-12, "jvp {t} vs {dot}");
    }
}
