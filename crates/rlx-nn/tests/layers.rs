//! Layers, losses, clipping and schedules against direct f64 computations, run by the reference
//! interpreter (and the matmul attention against the `attention` op).

use rlx_ir::interp::evaluate;
use rlx_ir::{DType, Graph, HostTensor, Shape};
use rlx_nn::layers::{Conv2d, SwiGlu, dropout, global_avg_pool, max_pool};
use rlx_nn::optim::{Schedule, clip_by_global_norm};
use rlx_nn::{Builder, Init, ParamStore, RmsNorm, Rng, SelfAttention, loss};

fn feeds(store: &ParamStore, extra: Vec<(&'static str, HostTensor)>) -> Vec<(String, HostTensor)> {
    let mut f: Vec<(String, HostTensor)> = store.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
    f.extend(extra.into_iter().map(|(n, t)| (n.to_string(), t)));
    f
}

fn eval(g: &Graph, f: &[(String, HostTensor)]) -> Vec<Vec<f64>> {
    let refs: Vec<(&str, HostTensor)> = f.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    evaluate(g, &refs).unwrap().iter().map(|t| t.to_f64_vec().unwrap()).collect()
}

fn randn(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| r.normal() as f32).collect()
}

#[test]
fn matmul_attention_equals_the_attention_op_with_grouped_query_heads() {
    let mut outs = vec![];
    for fused in [false, true] {
        let mut b = Builder::new("attn");
        let x = b.input("x", Shape::new(&[2, 5, 8], DType::F32));
        let a = SelfAttention { kv_heads: 2, init: Init::Normal(0.5), fused_op: fused, ..SelfAttention::new(8, 4) };
        let y = b.scoped("attn", |b| a.apply(b, x));
        let (g, specs) = b.finish(vec![y]);
        let store = ParamStore::init(&specs, 1).unwrap();
        let x = HostTensor::from_f32(&[2, 5, 8], &randn(80, 2)).unwrap();
        outs.push(eval(&g, &feeds(&store, vec![("x", x)])).remove(0));
    }
    let d = outs[0].iter().zip(&outs[1]).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(d < 1e-5, "max difference {d}");
    assert!(outs[0].iter().any(|v| v.abs() > 0.1));
}

#[test]
fn cross_entropy_mse_and_bce_match_direct_formulas() {
    let mut g = Graph::new("losses");
    let z = g.input("z", Shape::new(&[3, 4], DType::F32));
    let y = g.input("y", Shape::new(&[3], DType::I64));
    let t = g.input("t", Shape::new(&[3, 4], DType::F32));
    let ce = loss::cross_entropy(&mut g, z, y);
    let ms = loss::mse(&mut g, z, t);
    let bl = loss::bce_with_logits(&mut g, z, t);
    let p = g.sigmoid(z);
    let bp = loss::bce(&mut g, p, t);
    g.set_outputs(vec![ce, ms, bl, bp]);
    let zv = randn(12, 5);
    let tv: Vec<f32> = randn(12, 6).iter().map(|v| (v > &0.0) as i32 as f32).collect();
    let yv = [0i64, 3, 1];
    let f = vec![
        ("z".to_string(), HostTensor::from_f32(&[3, 4], &zv).unwrap()),
        ("y".to_string(), HostTensor::from_i64(&[3], DType::I64, &yv).unwrap()),
        ("t".to_string(), HostTensor::from_f32(&[3, 4], &tv).unwrap()),
    ];
    let o = eval(&g, &f);
    let z: Vec<f64> = zv.iter().map(|&v| v as f64).collect();
    let t: Vec<f64> = tv.iter().map(|&v| v as f64).collect();
    let mut ce = 0.0;
    for r in 0..3 {
        let row = &z[r * 4..r * 4 + 4];
        let lse = row.iter().map(|v| v.exp()).sum::<f64>().ln();
        ce += lse - row[yv[r] as usize];
    }
    let mse = z.iter().zip(&t).map(|(a, b)| (a - b).powi(2)).sum::<f64>() / 12.0;
    let bce = z.iter().zip(&t).map(|(x, t)| (1.0 + x.exp()).ln() - x * t).sum::<f64>() / 12.0;
    for (got, want) in o.iter().zip([ce / 3.0, mse, bce, bce]) {
        assert!((got[0] - want).abs() < 1e-5, "{} vs {want}", got[0]);
    }
}

#[test]
fn clipping_bounds_the_global_norm_and_leaves_small_gradients() {
    for (scale, max) in [(10.0f32, 1.0), (0.01, 1.0)] {
        let mut g = Graph::new("clip");
        let a = g.input("a", Shape::new(&[3], DType::F32));
        let b = g.input("b", Shape::new(&[2, 2], DType::F32));
        let c = clip_by_global_norm(&mut g, &[a, b], max);
        g.set_outputs(c);
        let (av, bv): (Vec<f32>, Vec<f32>) =
            (randn(3, 1).iter().map(|v| v * scale).collect(), randn(4, 2).iter().map(|v| v * scale).collect());
        let f = vec![
            ("a".to_string(), HostTensor::from_f32(&[3], &av).unwrap()),
            ("b".to_string(), HostTensor::from_f32(&[2, 2], &bv).unwrap()),
        ];
        let o = eval(&g, &f);
        let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>();
        let before = (av.iter().chain(&bv).map(|&x| (x as f64).powi(2)).sum::<f64>()).sqrt();
        let after = (norm(&o[0]) + norm(&o[1])).sqrt();
        let want = before.min(max);
        assert!((after - want).abs() < 1e-5 * want.max(1.0), "norm {before} -> {after}, want {want}");
    }
}

#[test]
fn warmup_cosine_and_linear_schedules_follow_their_formulas() {
    let peak = 0.1;
    let s = Schedule::WarmupCosine { peak, warmup: 4, total: 12, end: 0.01 };
    let l = Schedule::Linear { from: 1.0, to: 0.5, steps: 5 };
    for count in [0.0, 2.0, 4.0, 7.0, 12.0, 20.0] {
        let mut g = Graph::new("lr");
        let c = g.input("c", Shape::scalar(DType::F32));
        let a = s.build(&mut g, c);
        let b = l.build(&mut g, c);
        g.set_outputs(vec![a, b]);
        let o = eval(&g, &[("c".to_string(), HostTensor::from_f32(&[], &[count as f32]).unwrap())]);
        let want = if count < 4.0 {
            peak * count / 4.0
        } else {
            let t = ((count - 4.0) / 8.0f64).min(1.0);
            0.01 + (peak - 0.01) * 0.5 * (1.0 + (std::f64::consts::PI * t).cos())
        };
        assert!((o[0][0] - want).abs() < 1e-6, "count {count}: {} vs {want}", o[0][0]);
        let lin = 1.0 - 0.5 * (count / 5.0f64).min(1.0);
        assert!((o[1][0] - lin).abs() < 1e-6, "count {count}: {} vs {lin}", o[1][0]);
    }
}

#[test]
fn dropout_zeroes_about_rate_and_rescales_only_in_training() {
    let mut b = Builder::new("drop");
    b.training = true;
    let x = b.input("x", Shape::new(&[4000], DType::F32));
    let y = dropout(&mut b, x, 0.25);
    let (g, _) = b.finish(vec![y]);
    let noise = rlx_nn::module::noise_tensor(&Shape::new(&[4000], DType::F32), 1, 0, "rng:0").unwrap();
    let ones = HostTensor::from_f32(&[4000], &[1.0; 4000]).unwrap();
    let o = eval(&g, &[("x".into(), ones), ("rng:0".into(), noise)]).remove(0);
    let zeros = o.iter().filter(|v| **v == 0.0).count() as f64 / 4000.0;
    assert!((zeros - 0.25).abs() < 0.03, "dropped {zeros}");
    assert!(o.iter().all(|v| *v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-6));
    let mut b = Builder::new("eval");
    let x = b.input("x", Shape::new(&[3], DType::F32));
    assert_eq!(dropout(&mut b, x, 0.5), x, "identity outside training");
}

#[test]
fn conv_pool_swiglu_and_rmsnorm_build_and_compute() {
    let mut b = Builder::new("cnn");
    let x = b.input("x", Shape::new(&[2, 1, 8, 8], DType::F32));
    let h = b.scoped("conv", |b| Conv2d::new(1, 4, 3).apply(b, x));
    let h = b.relu(h);
    let h = max_pool(&mut b, h, 2, 2);
    let p = global_avg_pool(&mut b, h); // [2, 4]
    let n = b.scoped("norm", |b| RmsNorm::new(4).apply(b, p));
    let y = b.scoped("ffn", |b| SwiGlu { dim: 4, hidden: 6 }.apply(b, n));
    let (g, specs) = b.finish(vec![h, n, y]);
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["conv.w", "conv.b", "norm.g", "ffn.gate.w", "ffn.up.w", "ffn.down.w"]);
    let store = ParamStore::init(&specs, 3).unwrap();
    let xv = randn(128, 4);
    let o = eval(&g, &feeds(&store, vec![("x", HostTensor::from_f32(&[2, 1, 8, 8], &xv).unwrap())]));
    assert_eq!(o[0].len(), 2 * 4 * 4 * 4);
    // RMS norm: each row of n has mean square 1 (gamma = 1).
    for r in 0..2 {
        let ms = o[1][r * 4..r * 4 + 4].iter().map(|v| v * v).sum::<f64>() / 4.0;
        assert!((ms - 1.0).abs() < 1e-4, "mean square {ms}");
    }
    // SwiGLU by hand from the params.
    let p = |n: &str| store.get(n).unwrap().to_f64_vec().unwrap();
    let (wg, wu, wd) = (p("ffn.gate.w"), p("ffn.up.w"), p("ffn.down.w"));
    for r in 0..2 {
        let xr = &o[1][r * 4..r * 4 + 4];
        let hid: Vec<f64> = (0..6)
            .map(|j| {
                let a: f64 = (0..4).map(|i| xr[i] * wg[i * 6 + j]).sum();
                let u: f64 = (0..4).map(|i| xr[i] * wu[i * 6 + j]).sum();
                a / (1.0 + (-a).exp()) * u
            })
            .collect();
        for k in 0..4 {
            let want: f64 = (0..6).map(|j| hid[j] * wd[j * 4 + k]).sum();
            assert!((o[2][r * 4 + k] - want).abs() < 1e-5, "swiglu [{r},{k}]");
        }
    }
}
