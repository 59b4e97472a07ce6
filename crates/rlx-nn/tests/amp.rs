//! Mixed-precision training: dynamic loss scaling skips non-finite steps inside the compiled
//! step, grows the scale, and a half-precision step tracks the f32 one.

use rlx_ir::{DType, Graph, HostTensor, Shape};
use rlx_nn::amp::{GOOD, SCALE};
use rlx_nn::gpt::{self, GptConfig};
use rlx_nn::optim::Schedule;
use rlx_nn::{
    Activation, Adam, Builder, Linear, MixedPrecision, ParamStore, PrecisionPolicy, Rng, Sgd, TrainConfig, TrainStep,
    loss,
};

fn mlp(batch: usize) -> (Graph, ParamStore) {
    let mut b = Builder::new("mlp");
    let x = b.input("x", Shape::new(&[batch, 5], DType::F32));
    let y = b.input("y", Shape::new(&[batch], DType::I32));
    let h = b.scoped("fc1", |b| Linear::new(5, 16).apply(b, x));
    let h = Activation::Relu.apply(&mut b, h);
    let logits = b.scoped("fc2", |b| Linear::new(16, 4).apply(b, h));
    let l = loss::cross_entropy(&mut b, logits, y);
    let (g, specs) = b.finish(vec![l]);
    (g, ParamStore::init(&specs, 11).unwrap())
}

fn batch(n: usize, seed: u64, big: bool) -> (HostTensor, HostTensor) {
    let mut r = Rng::new(seed);
    let mut x: Vec<f32> = (0..n * 5).map(|_| r.normal() as f32).collect();
    if big {
        x[3] = 1e6; // beyond f16's range (65504): an overflow in the half-precision forward
    }
    let y: Vec<i64> = (0..n).map(|_| r.below(4) as i64).collect();
    (HostTensor::from_f32(&[n, 5], &x).unwrap(), HostTensor::from_i64(&[n], DType::I32, &y).unwrap())
}

fn scalar(s: &TrainStep, name: &str) -> f64 {
    s.get(name).unwrap().to_f64_vec().unwrap()[0]
}

fn max_diff(a: &ParamStore, b: &ParamStore) -> f32 {
    let mut m = 0f32;
    for (n, t) in a.iter() {
        let (u, v) = (t.to_f32_vec().unwrap(), b.get(n).unwrap().to_f32_vec().unwrap());
        m = u.iter().zip(&v).fold(m, |m, (p, q)| m.max((p - q).abs()));
    }
    m
}

#[test]
fn an_overflow_halves_the_scale_and_skips_the_step_then_good_steps_grow_it() {
    let (g, store) = mlp(8);
    let mp = MixedPrecision { growth_interval: 2, ..MixedPrecision::f16() };
    let cfg = TrainConfig { amp: Some(mp), ..TrainConfig::default() };
    let opt = Adam::adamw(Schedule::Constant(0.01), 0.01);
    let mut step = TrainStep::new(&g, &store, &opt, &cfg).unwrap();
    assert_eq!(scalar(&step, SCALE), 32768.0);
    let (x, y) = batch(8, 1, true);
    let l = step.step(&[("x", &x), ("y", &y)]).unwrap();
    assert!(!l.is_finite(), "the injected overflow reaches the loss: {l}");
    assert_eq!(scalar(&step, SCALE), 16384.0, "the scale halves");
    assert_eq!(step.count().unwrap(), 0, "the update is skipped");
    assert_eq!(max_diff(&store, &step.params().unwrap()), 0.0, "params unchanged");
    let m = step.get("opt.mu.fc1.w").unwrap().to_f32_vec().unwrap();
    assert!(m.iter().all(|&v| v == 0.0), "optimizer state unchanged");
    let (x, y) = batch(8, 2, false);
    let l = step.step(&[("x", &x), ("y", &y)]).unwrap();
    assert!(l.is_finite() && (l - 4f32.ln()).abs() < 0.5, "an ordinary loss after it: {l}");
    assert_eq!(step.count().unwrap(), 1);
    assert_eq!((scalar(&step, SCALE), scalar(&step, GOOD)), (16384.0, 1.0));
    assert!(max_diff(&store, &step.params().unwrap()) > 1e-3, "this step updated the params");
    step.step(&[("x", &x), ("y", &y)]).unwrap();
    assert_eq!((scalar(&step, SCALE), scalar(&step, GOOD)), (32768.0, 0.0), "2 good steps double the scale");
}

#[test]
fn an_f16_step_tracks_the_f32_step() {
    let (g, store) = mlp(16);
    let opt = Sgd { lr: Schedule::Constant(0.1), momentum: 0.9, nesterov: false };
    // Stated tolerances: loss relative error and max param difference after 4 SGD steps.
    for (policy, tol, ptol) in [(PrecisionPolicy::F16, 1e-3, 5e-4), (PrecisionPolicy::BF16, 5e-3, 2e-2)] {
        let mp = MixedPrecision { policy, init_scale: 1024.0, growth_interval: 1000 };
        let cfg = TrainConfig { amp: Some(mp), ..TrainConfig::default() };
        let mut half = TrainStep::new(&g, &store, &opt, &cfg).unwrap();
        let mut f = TrainStep::new(&g, &store, &opt, &TrainConfig::default()).unwrap();
        for i in 0..4 {
            let (x, y) = batch(16, 10 + i, false);
            let (a, b) = (f.step(&[("x", &x), ("y", &y)]).unwrap(), half.step(&[("x", &x), ("y", &y)]).unwrap());
            let rel = ((a - b) / a).abs();
            println!("{policy:?} step {i}: loss f32 {a:.6} half {b:.6} rel {rel:.2e}");
            assert!(rel < tol, "{policy:?} step {i}: loss {b} vs f32 {a}");
        }
        let d = max_diff(&f.params().unwrap(), &half.params().unwrap());
        println!("{policy:?}: params after 4 steps differ by at most {d:.2e}");
        assert!(d < ptol, "{policy:?}: params differ by {d}");
        assert_eq!(half.count().unwrap(), 4);
    }
}

#[test]
fn the_char_gpt_loss_falls_with_f16_matmuls() {
    let text = "the quick brown fox jumps over the lazy dog. ".repeat(40);
    let cfg =
        GptConfig { ctx: 16, layers: 1, heads: 2, dim: 32, mlp_mult: 2, ..GptConfig::small(gpt::vocab_of(&text)) };
    let tokens = cfg.encode(&text).unwrap();
    let (g, specs) = gpt::loss_graph(&cfg, 8).unwrap();
    let store = ParamStore::init(&specs, 0).unwrap();
    let opt = Adam { b2: 0.99, ..Adam::adamw(Schedule::Constant(1e-2), 0.1) };
    let tc = TrainConfig { amp: Some(MixedPrecision::f16()), ..TrainConfig::default() };
    let mut step = TrainStep::new(&g, &store, &opt, &tc).unwrap();
    let mut rng = Rng::new(3);
    let mut losses = vec![];
    for _ in 0..80 {
        let (x, y) = gpt::batch(&tokens, 8, cfg.ctx, &mut rng).unwrap();
        losses.push(step.step(&[("x", &x), ("y", &y)]).unwrap());
    }
    let last = losses[losses.len() - 5..].iter().sum::<f32>() / 5.0;
    println!("f16 char-GPT: loss {} -> {last}, scale {}", losses[0], scalar(&step, SCALE));
    assert!(last < 1.0, "loss after 80 steps is {last} (from {})", losses[0]);
}
