//! Training-step behaviour: gradient accumulation, a falling seeded loss, checkpoint resume.

use rlx_ir::{DType, Graph, HostTensor, Shape};
use rlx_nn::gpt::{self, GptConfig};
use rlx_nn::optim::Schedule;
use rlx_nn::{Activation, Adam, Builder, Linear, ParamStore, Rng, Sgd, TrainConfig, TrainStep, checkpoint, loss};

fn mlp(batch: usize) -> (Graph, ParamStore) {
    let mut b = Builder::new("mlp");
    let x = b.input("x", Shape::new(&[batch, 5], DType::F32));
    let y = b.input("y", Shape::new(&[batch], DType::I32));
    let h = b.scoped("fc1", |b| Linear::new(5, 12).apply(b, x));
    let h = Activation::Relu.apply(&mut b, h);
    let logits = b.scoped("fc2", |b| Linear::new(12, 4).apply(b, h));
    let l = loss::cross_entropy(&mut b, logits, y);
    let (g, specs) = b.finish(vec![l]);
    (g, ParamStore::init(&specs, 11).unwrap())
}

fn data(n: usize, seed: u64) -> (Vec<f32>, Vec<i64>) {
    let mut r = Rng::new(seed);
    ((0..n * 5).map(|_| r.normal() as f32).collect(), (0..n).map(|_| r.below(4) as i64).collect())
}

fn tensors(x: &[f32], y: &[i64]) -> (HostTensor, HostTensor) {
    (HostTensor::from_f32(&[y.len(), 5], x).unwrap(), HostTensor::from_i64(&[y.len()], DType::I32, y).unwrap())
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
fn accumulating_two_half_batches_equals_one_full_batch() {
    let (x, y) = data(8, 1);
    let (g8, store) = mlp(8);
    let (g4, _) = mlp(4);
    let opt = Adam::adamw(Schedule::Constant(0.05), 0.01);
    let mut full = TrainStep::new(&g8, &store, &opt, &TrainConfig::default()).unwrap();
    let cfg = TrainConfig { accum: 2, ..TrainConfig::default() };
    let mut acc = TrainStep::new(&g4, &store, &opt, &cfg).unwrap();
    for _ in 0..2 {
        let (xf, yf) = tensors(&x, &y);
        full.step(&[("x", &xf), ("y", &yf)]).unwrap();
        let (xa, ya) = tensors(&x[..20], &y[..4]);
        acc.step(&[("x", &xa), ("y", &ya)]).unwrap();
        assert_eq!(acc.count().unwrap(), full.count().unwrap() - 1, "no update after the first micro-step");
        let (xb, yb) = tensors(&x[20..], &y[4..]);
        acc.step(&[("x", &xb), ("y", &yb)]).unwrap();
        assert_eq!(acc.count().unwrap(), full.count().unwrap());
    }
    let d = max_diff(&full.params().unwrap(), &acc.params().unwrap());
    assert!(d < 1e-6, "accumulated params differ by {d}");
    assert!(max_diff(&store, &full.params().unwrap()) > 1e-3, "the params did move");
}

fn tiny_gpt() -> (GptConfig, Vec<i64>) {
    let text = "the quick brown fox jumps over the lazy dog. ".repeat(40);
    let cfg =
        GptConfig { ctx: 16, layers: 1, heads: 2, dim: 32, mlp_mult: 2, ..GptConfig::small(gpt::vocab_of(&text)) };
    let tokens = cfg.encode(&text).unwrap();
    (cfg, tokens)
}

#[test]
fn seeded_char_gpt_loss_falls_below_a_bound() {
    let (cfg, tokens) = tiny_gpt();
    let (g, specs) = gpt::loss_graph(&cfg, 8).unwrap();
    let store = ParamStore::init(&specs, 0).unwrap();
    let opt = Adam { b2: 0.99, ..Adam::adamw(Schedule::Constant(1e-2), 0.1) };
    let mut step = TrainStep::new(&g, &store, &opt, &TrainConfig::default()).unwrap();
    let mut rng = Rng::new(3);
    let mut losses = vec![];
    for _ in 0..80 {
        let (x, y) = gpt::batch(&tokens, 8, cfg.ctx, &mut rng).unwrap();
        losses.push(step.step(&[("x", &x), ("y", &y)]).unwrap());
    }
    let first = losses[0];
    let last = losses[losses.len() - 5..].iter().sum::<f32>() / 5.0;
    let v = cfg.vocab_size() as f32;
    assert!((first - v.ln()).abs() < 0.3, "starts near ln(vocab): {first} vs {}", v.ln());
    assert!(last < 1.0, "loss after 80 steps is {last} (from {first})");
}

#[test]
fn resuming_from_a_checkpoint_gives_the_same_next_step() {
    let (cfg, tokens) = tiny_gpt();
    let (g, specs) = gpt::loss_graph(&cfg, 4).unwrap();
    let store = ParamStore::init(&specs, 5).unwrap();
    let opt = Sgd {
        lr: Schedule::WarmupCosine { peak: 0.1, warmup: 2, total: 10, end: 0.0 },
        momentum: 0.9,
        nesterov: false,
    };
    let tc = TrainConfig { clip_norm: Some(1.0), ..TrainConfig::default() };
    let mut a = TrainStep::new(&g, &store, &opt, &tc).unwrap();
    let mut rng = Rng::new(9);
    let batches: Vec<_> = (0..4).map(|_| gpt::batch(&tokens, 4, cfg.ctx, &mut rng).unwrap()).collect();
    for (x, y) in &batches[..3] {
        a.step(&[("x", x), ("y", y)]).unwrap();
    }
    let dir = std::env::temp_dir().join(format!("rlx-nn-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ckpt.safetensors");
    gpt::save(&path, &cfg, &a.state().unwrap(), &[]).unwrap();
    let (cfg2, loaded, _) = gpt::load(&path).unwrap();
    assert_eq!(cfg2, cfg);
    assert!(loaded.contains("opt.trace.h0.attn.qkv.w") && loaded.contains("opt.count"));
    let mut b = TrainStep::new(&g, &loaded, &opt, &tc).unwrap();
    assert_eq!(b.count().unwrap(), 3);
    let (x, y) = &batches[3];
    let la = a.step(&[("x", x), ("y", y)]).unwrap();
    let lb = b.step(&[("x", x), ("y", y)]).unwrap();
    assert_eq!(la, lb, "same loss on the next step");
    assert_eq!(max_diff(&a.state().unwrap(), &b.state().unwrap()), 0.0, "same params and state after it");
    let (_, plain) = checkpoint::load(&path).map(|(s, m)| (m, s)).unwrap();
    assert_eq!(plain.len(), loaded.len());
    std::fs::remove_dir_all(&dir).ok();
}
