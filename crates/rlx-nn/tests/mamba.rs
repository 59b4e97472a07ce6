//! The Mamba block: output shape, its gradient against finite differences, and a few training
//! steps on the CPU backend lowering the loss.

use rlx_ir::interp::evaluate;
use rlx_ir::{DType, Graph, HostTensor, Shape};
use rlx_nn::optim::Schedule;
use rlx_nn::{Adam, Builder, Mamba, ParamStore, Rng, TrainConfig, TrainStep, loss};

const B: usize = 2;
const L: usize = 6;
const DM: usize = 8;

fn block() -> Mamba {
    Mamba { d_state: 4, ..Mamba::new(DM) }
}

fn randn(n: usize, seed: u64, scale: f64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| (scale * r.normal()) as f32).collect()
}

/// `mse(mamba(x), y)` with the params initialized.
fn loss_graph() -> (Graph, ParamStore) {
    let mut b = Builder::new("mamba");
    let x = b.input("x", Shape::new(&[B, L, DM], DType::F32));
    let y = b.input("y", Shape::new(&[B, L, DM], DType::F32));
    let p = b.scoped("mamba", |b| block().apply(b, x));
    let l = loss::mse(&mut b, p, y);
    let (g, specs) = b.finish(vec![l]);
    (g, ParamStore::init(&specs, 5).unwrap())
}

fn feeds(store: &ParamStore, x: &HostTensor, y: &HostTensor) -> Vec<(String, HostTensor)> {
    let mut f: Vec<(String, HostTensor)> = store.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
    f.push(("x".into(), x.clone()));
    f.push(("y".into(), y.clone()));
    f
}

fn eval(g: &Graph, f: &[(String, HostTensor)]) -> Vec<HostTensor> {
    let refs: Vec<(&str, HostTensor)> = f.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    evaluate(g, &refs).unwrap()
}

fn data() -> (HostTensor, HostTensor) {
    let x = HostTensor::from_f32(&[B, L, DM], &randn(B * L * DM, 1, 1.0)).unwrap();
    let y = HostTensor::from_f32(&[B, L, DM], &randn(B * L * DM, 2, 0.5)).unwrap();
    (x, y)
}

#[test]
fn output_is_batch_len_d_model_and_params_are_mambas() {
    let mut b = Builder::new("mamba");
    let x = b.input("x", Shape::new(&[B, L, DM], DType::F32));
    let y = b.scoped("m", |b| block().apply(b, x));
    assert_eq!(b.shape(y).unwrap(), &Shape::new(&[B, L, DM], DType::F32));
    let (g, specs) = b.finish(vec![y]);
    g.check().unwrap();
    let names: Vec<(&str, &[usize])> = specs.iter().map(|s| (s.name.as_str(), s.dims.as_slice())).collect();
    let m = block();
    let (di, r) = (m.d_inner(), m.dt_rank);
    for want in [
        ("m.in_proj.w", &[DM, 2 * di][..]),
        ("m.conv.w", &[di, 4][..]),
        ("m.x_proj.w", &[di, r + 8][..]),
        ("m.dt_proj.w", &[r, di][..]),
        ("m.dt_proj.b", &[di][..]),
        ("m.A_log", &[di, 4][..]),
        ("m.D", &[di][..]),
        ("m.out_proj.w", &[di, DM][..]),
    ] {
        assert!(names.contains(&want), "{want:?} not in {names:?}");
    }
    // A wrong width is a recorded graph error, not a panic.
    let mut b = Builder::new("bad");
    let x = b.input("x", Shape::new(&[B, L, DM + 1], DType::F32));
    b.scoped("m", |b| block().apply(b, x));
    let (g, _) = b.finish(vec![x]);
    assert!(g.check().unwrap_err().to_string().contains("expects 8 features"));
}

#[test]
fn gradient_matches_finite_differences() {
    // Directional derivatives of the loss along random directions of x and of every param,
    // against central differences (f32 params: a step of 1e-3 and a 2% tolerance).
    let (g, store) = loss_graph();
    let (x, y) = data();
    let names: Vec<String> = store.iter().map(|(n, _)| n.to_string()).chain(["x".to_string()]).collect();
    let ids: Vec<_> = names.iter().map(|n| rlx_autodiff::leaf(&g, n).unwrap()).collect();
    let gg = rlx_autodiff::grad(&g, &ids).unwrap();
    let base = feeds(&store, &x, &y);
    let grads = eval(&gg, &base);
    let h = 1e-3f64;
    for (k, (name, gr)) in names.iter().zip(&grads).enumerate() {
        let t = &base.iter().find(|(n, _)| n == name).unwrap().1;
        let dir = randn(t.numel(), 100 + k as u64, 1.0);
        let shift = |s: f64| -> Vec<(String, HostTensor)> {
            let v: Vec<f32> =
                t.to_f32_vec().unwrap().iter().zip(&dir).map(|(a, d)| (*a as f64 + s * h * *d as f64) as f32).collect();
            let nt = HostTensor::from_f32(&t.dims(), &v).unwrap();
            base.iter().map(|(n, o)| (n.clone(), if n == name { nt.clone() } else { o.clone() })).collect()
        };
        let lp = eval(&g, &shift(1.0))[0].to_f64_vec().unwrap()[0];
        let lm = eval(&g, &shift(-1.0))[0].to_f64_vec().unwrap()[0];
        let fd = (lp - lm) / (2.0 * h);
        let an: f64 = gr.to_f64_vec().unwrap().iter().zip(&dir).map(|(a, d)| a * *d as f64).sum();
        assert!((an - fd).abs() <= 2e-2 * (fd.abs() + an.abs()).max(1e-2), "{name}: grad {an} vs fd {fd}");
    }
}

#[test]
fn training_steps_lower_the_loss() {
    let (g, store) = loss_graph();
    let (x, y) = data();
    let opt = Adam::adamw(Schedule::Constant(1e-2), 0.0);
    let mut step = TrainStep::new(&g, &store, &opt, &TrainConfig::default()).unwrap();
    let losses: Vec<f32> = (0..30).map(|_| step.step(&[("x", &x), ("y", &y)]).unwrap()).collect();
    let (first, last) = (losses[0], losses[losses.len() - 1]);
    assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}");
    assert!(last < 0.7 * first, "loss {first} -> {last}: {losses:?}");
}
