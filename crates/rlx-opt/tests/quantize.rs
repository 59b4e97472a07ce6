//! PTQ: calibration ranges (min/max, percentile, per channel) and fake-quant insertion.

use rlx_ir::ops::util::rand_f64;
use rlx_ir::{DType, Graph, HostTensor, Shape, interp};
use rlx_opt::quantize::*;

fn mlp() -> Graph {
    let mut g = Graph::new("mlp");
    let x = g.input("x", Shape::new(&[4, 16], DType::F32));
    let w1 = g.param("w1", Shape::new(&[16, 32], DType::F32));
    let w2 = g.param("w2", Shape::new(&[32, 8], DType::F32));
    let h = g.matmul(x, w1);
    let h = g.tanh(h);
    let y = g.matmul(h, w2);
    g.set_outputs(vec![y]);
    g
}

fn feeds(seed: u64) -> Vec<(&'static str, HostTensor)> {
    let t = |d: &[usize], s: f64, k: u64| {
        HostTensor::from_f64(d, DType::F32, &rand_f64(d.iter().product(), -s, s, k)).unwrap()
    };
    vec![("x", t(&[4, 16], 2.0, seed)), ("w1", t(&[16, 32], 0.3, 1)), ("w2", t(&[32, 8], 0.3, 2))]
}

#[test]
fn minmax_records_exact_ranges_per_tensor_and_channel() {
    let g = mlp();
    let taps = contraction_taps(&g, Granularity::PerChannel(-1));
    assert_eq!(taps.len(), 4, "x, w1, tanh output, w2");
    let mut cal = Calibrator::new(&g, taps, Observer::MinMax);
    let mut xs = vec![];
    for seed in [10, 11, 12] {
        let f = feeds(seed);
        xs.extend(f[0].1.to_f64_vec().unwrap());
        cal.observe(&interp::evaluate(cal.tapped_graph(), &f).unwrap()).unwrap();
    }
    let c = cal.finish().unwrap();
    let (lo, hi) = xs.iter().fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    assert_eq!(c.ranges[0].1, vec![(lo, hi)]);
    // w1 per output channel: 32 ranges, each over its column.
    let w1 = feeds(0)[1].1.to_f64_vec().unwrap();
    assert_eq!(c.ranges[1].1.len(), 32);
    let col3: Vec<f64> = (0..16).map(|r| w1[r * 32 + 3]).collect();
    let want = col3.iter().fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    assert_eq!(c.ranges[1].1[3], want);
}

#[test]
fn percentile_ignores_an_outlier() {
    let mut g = Graph::new("id");
    let x = g.input("x", Shape::new(&[1000], DType::F32));
    let y = g.neg(x);
    g.set_outputs(vec![y]);
    let tap = Tap { node: x, granularity: Granularity::PerTensor };
    let mut v: Vec<f64> = (0..1000).map(|i| (i as f64 / 999.0) * 2.0 - 1.0).collect();
    v[500] = 1000.0;
    let t = HostTensor::from_f64(&[1000], DType::F32, &v).unwrap();
    let mut mm = Calibrator::new(&g, vec![tap], Observer::MinMax);
    let mut pc = Calibrator::new(&g, vec![tap], Observer::Percentile(99.0));
    for c in [&mut mm, &mut pc] {
        let out = interp::evaluate(c.tapped_graph(), &[("x", t.clone())]).unwrap();
        c.observe(&out).unwrap();
    }
    assert_eq!(mm.finish().unwrap().ranges[0].1[0].1, 1000.0);
    let (lo, hi) = pc.finish().unwrap().ranges[0].1[0];
    assert!(hi < 1.0 && hi > 0.9 && lo < -0.9, "({lo}, {hi})");
}

#[test]
fn int8_fake_quant_stays_close_and_int4_is_coarser() {
    let g = mlp();
    let mut cal = Calibrator::new(&g, contraction_taps(&g, Granularity::PerChannel(-1)), Observer::MinMax);
    for seed in [20, 21, 22, 23] {
        cal.observe(&interp::evaluate(cal.tapped_graph(), &feeds(seed)).unwrap()).unwrap();
    }
    let c = cal.finish().unwrap();
    let err = |cfg: QuantConfig| {
        let q = insert_fake_quant(&g, &c, cfg).unwrap();
        let f = feeds(24);
        let (a, b) = (interp::evaluate(&q, &f).unwrap(), interp::evaluate(&g, &f).unwrap());
        let (a, b) = (a[0].to_f64_vec().unwrap(), b[0].to_f64_vec().unwrap());
        let scale = b.iter().fold(0f64, |m, v| m.max(v.abs()));
        a.iter().zip(&b).fold(0f64, |m, (x, y)| m.max((x - y).abs())) / scale
    };
    let (e8, e4) = (err(QuantConfig::int8()), err(QuantConfig { bits: 4, signed: true }));
    let eu8 = err(QuantConfig { bits: 8, signed: false });
    println!("fake-quant rel err: int8 {e8:.2e}, uint8 {eu8:.2e}, int4 {e4:.2e}");
    assert!(e8 < 0.03 && eu8 < 0.03, "{e8} {eu8}");
    assert!(e4 > 2.0 * e8, "{e4} vs {e8}");
    assert!(e8 > 0.0, "quantization must change something");
}

#[test]
fn exported_int8_weights_dequantize_within_half_a_step() {
    let w = feeds(0)[1].1.clone();
    let (q, s, z) = quantize_weight(&w, Some(-1), QuantConfig::int8()).unwrap();
    assert_eq!((q.len(), s.len()), (512, 32));
    assert!(z.iter().all(|&v| v == 0.0));
    assert!(q.iter().all(|&v| (-128..=127).contains(&v)));
    for (i, &x) in w.to_f64_vec().unwrap().iter().enumerate() {
        let c = i % 32;
        assert!((q[i] as f64 * s[c] - x).abs() <= s[c] / 2.0 + 1e-12);
    }
}

#[test]
fn calibration_errors_are_clear() {
    let g = mlp();
    let cal = Calibrator::new(&g, contraction_taps(&g, Granularity::PerTensor), Observer::MinMax);
    assert!(cal.finish().unwrap_err().to_string().contains("no batch"));
    let mut cal = Calibrator::new(&g, contraction_taps(&g, Granularity::PerTensor), Observer::MinMax);
    assert!(cal.observe(&[]).unwrap_err().to_string().contains("expected 5 outputs"));
}
