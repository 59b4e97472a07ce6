//! The compiled training step against JAX + optax (fixture made by tools/optax_adamw.py): the
//! same MLP, data and initial params give the same params after each step, within 1e-5.

use rlx_ir::{DType, Graph, HostTensor, Shape};
use rlx_nn::optim::Schedule;
use rlx_nn::{Activation, Adam, Builder, Linear, Optimizer, ParamStore, Sgd, TrainConfig, TrainStep, loss};
use serde_json::Value;

fn fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/optax_mlp.json")).unwrap()
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn model() -> Graph {
    let mut b = Builder::new("mlp");
    let x = b.input("x", Shape::new(&[8, 4], DType::F32));
    let y = b.input("y", Shape::new(&[8], DType::I32));
    let h = b.scoped("fc1", |b| Linear::new(4, 16).apply(b, x));
    let h = Activation::Tanh.apply(&mut b, h);
    let logits = b.scoped("fc2", |b| Linear::new(16, 3).apply(b, h));
    let l = loss::cross_entropy(&mut b, logits, y);
    b.finish(vec![l]).0
}

fn check_run(opt: &dyn Optimizer, cfg: TrainConfig, run: &str) {
    let f = fixture();
    let mut store = ParamStore::new();
    for (name, t) in f["init"].as_object().unwrap() {
        let dims: Vec<usize> = t["dims"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
        store.insert(name, HostTensor::from_f32(&dims, &f32s(&t["data"])).unwrap());
    }
    let x = HostTensor::from_f32(&[8, 4], &f32s(&f["x"])).unwrap();
    let yv: Vec<i64> = f["y"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let y = HostTensor::from_i64(&[8], DType::I32, &yv).unwrap();
    let mut step = TrainStep::new(&model(), &store, opt, &cfg).unwrap();
    for (i, want) in f[run].as_array().unwrap().iter().enumerate() {
        let loss = step.step(&[("x", &x), ("y", &y)]).unwrap();
        let wl = want["loss"].as_f64().unwrap();
        assert!((loss as f64 - wl).abs() <= 1e-5 * wl.abs(), "{run} step {i}: loss {loss} vs optax {wl}");
        let got = step.params().unwrap();
        for (name, w) in want["params"].as_object().unwrap() {
            let g = got.get(name).unwrap().to_f32_vec().unwrap();
            let w = f32s(w);
            for (j, (a, b)) in g.iter().zip(&w).enumerate() {
                let tol = 1e-5 * b.abs().max(1e-2);
                assert!((a - b).abs() <= tol, "{run} step {i}: {name}[{j}] = {a}, optax {b}");
            }
        }
    }
    assert_eq!(step.count().unwrap() as usize, f[run].as_array().unwrap().len());
}

#[test]
fn adamw_matches_optax_for_three_steps() {
    let opt = Adam { b2: 0.99, ..Adam::adamw(Schedule::Constant(1e-2), 0.1) };
    check_run(&opt, TrainConfig::default(), "adamw");
}

#[test]
fn clipped_nesterov_sgd_with_warmup_cosine_matches_optax() {
    let lr = Schedule::WarmupCosine { peak: 0.1, warmup: 2, total: 6, end: 0.01 };
    let opt = Sgd { lr, momentum: 0.9, nesterov: true };
    check_run(&opt, TrainConfig { clip_norm: Some(0.5), ..TrainConfig::default() }, "sgd");
}
