//! The digits example as a test: an MLP reaches >= 95% held-out accuracy; after LSQ
//! quantization-aware fine-tuning its INT8 export (int8 weights + per-column scales) stays within
//! one point of it.

use rlx_driver::Device;
use rlx_ir::{DType, Graph, HostTensor, NodeId, Shape};
use rlx_nn::optim::Schedule;
use rlx_nn::quant::{calibrate_minmax, export_int8, fake_quant_lsq, int8_dense};
use rlx_nn::{Adam, Builder, Init, ParamStore, Rng, TrainConfig, TrainStep, data, loss};
use rlx_runtime::Session;

const HIDDEN: usize = 64;

/// `x [n, 64] -> 64 relu -> 10`; with `qat`, weights go through LSQ fake quantization.
fn mlp(b: &mut Builder, x: NodeId, qat: bool) -> NodeId {
    let mut h = x;
    for (name, din, dout) in [("fc1", 64, HIDDEN), ("fc2", HIDDEN, 10)] {
        h = b.scoped(name, |b| {
            let mut w = b.param("w", &[din, dout], Init::KaimingUniform);
            if qat {
                let s = b.param("s", &[1, dout], Init::Constant(0.01));
                w = fake_quant_lsq(b, w, s, 8);
            }
            let bias = b.param("b", &[dout], Init::Zeros);
            let y = b.matmul(h, w);
            b.add(y, bias)
        });
        if name == "fc1" {
            h = b.relu(h);
        }
    }
    h
}

fn loss_graph(batch: usize, qat: bool) -> (Graph, Vec<rlx_nn::ParamSpec>) {
    let mut b = Builder::new("digits");
    let x = b.input("x", Shape::new(&[batch, 64], DType::F32));
    let y = b.input("y", Shape::new(&[batch], DType::I64));
    let logits = mlp(&mut b, x, qat);
    let l = loss::cross_entropy(&mut b, logits, y);
    b.finish(vec![l])
}

fn train(store: &ParamStore, qat: bool, epochs: usize, lr: f64, xs: &[f32], ys: &[i64]) -> ParamStore {
    let batch = 64;
    let (g, _) = loss_graph(batch, qat);
    let steps = epochs * (ys.len() / batch);
    let lr = Schedule::WarmupCosine { peak: lr, warmup: 10, total: steps, end: lr / 20.0 };
    let mut step = TrainStep::new(&g, store, &Adam::adamw(lr, 1e-4), &TrainConfig::default()).unwrap();
    let mut rng = Rng::new(7);
    let mut idx: Vec<usize> = (0..ys.len()).collect();
    for _ in 0..epochs {
        for i in (1..idx.len()).rev() {
            idx.swap(i, rng.below(i + 1));
        }
        for chunk in idx.chunks_exact(batch) {
            let x: Vec<f32> = chunk.iter().flat_map(|&i| xs[i * 64..(i + 1) * 64].iter().copied()).collect();
            let y: Vec<i64> = chunk.iter().map(|&i| ys[i]).collect();
            let (x, y) = (
                HostTensor::from_f32(&[batch, 64], &x).unwrap(),
                HostTensor::from_i64(&[batch], DType::I64, &y).unwrap(),
            );
            step.step(&[("x", &x), ("y", &y)]).unwrap();
        }
    }
    step.params().unwrap()
}

fn accuracy(g: Graph, params: &[(&str, HostTensor)], xs: &[f32], ys: &[i64]) -> f64 {
    let mut exe = Session::new(Device::Cpu).compile(g).unwrap();
    for (n, t) in params {
        exe.set_param_tensor(n, t).unwrap();
    }
    let x = HostTensor::from_f32(&[ys.len(), 64], xs).unwrap();
    let logits = exe.run_tensors(&[("x", &x)]).unwrap()[0].to_f32_vec().unwrap();
    let hits = ys
        .iter()
        .enumerate()
        .filter(|&(i, &y)| {
            let row = &logits[i * 10..(i + 1) * 10];
            row.iter().enumerate().fold(0, |b, (j, &v)| if v > row[b] { j } else { b }) as i64 == y
        })
        .count();
    100.0 * hits as f64 / ys.len() as f64
}

fn float_logits(n: usize, qat: bool) -> Graph {
    let mut b = Builder::new("digits_eval");
    let x = b.input("x", Shape::new(&[n, 64], DType::F32));
    let y = mlp(&mut b, x, qat);
    b.finish(vec![y]).0
}

fn int8_logits(n: usize) -> Graph {
    let mut g = Graph::new("digits_int8");
    let x = g.input("x", Shape::new(&[n, 64], DType::F32));
    let mut h = x;
    for (name, din, dout) in [("fc1", 64, HIDDEN), ("fc2", HIDDEN, 10)] {
        let w = g.param(&format!("{name}.wq"), Shape::new(&[din, dout], DType::I8));
        let s = g.param(&format!("{name}.scale"), Shape::new(&[dout], DType::F32));
        let b = g.param(&format!("{name}.b"), Shape::new(&[dout], DType::F32));
        let y = int8_dense(&mut g, h, w, s);
        h = g.add(y, b);
        if name == "fc1" {
            h = g.relu(h);
        }
    }
    g.set_outputs(vec![h]);
    g
}

#[test]
fn digits_mlp_reaches_95_percent_and_its_int8_export_stays_within_a_point() {
    let (xtr, ytr, xte, yte) = data::digits(0, 0.2);
    assert_eq!((ytr.len(), yte.len()), (1438, 359));
    let (_, specs) = loss_graph(64, false);
    let init = ParamStore::init(&specs, 1).unwrap();
    let trained = train(&init, false, 30, 1e-2, &xtr, &ytr);
    let named: Vec<(&str, HostTensor)> = trained.iter().map(|(n, t)| (n, t.clone())).collect();
    let acc = accuracy(float_logits(yte.len(), false), &named, &xte, &yte);
    assert!(acc >= 95.0, "float accuracy {acc:.2}%");

    // QAT: LSQ steps start from min/max calibration, then a short fine-tune.
    let mut qstore = trained.clone();
    for l in ["fc1", "fc2"] {
        let s = calibrate_minmax(trained.get(&format!("{l}.w")).unwrap(), 8).unwrap();
        qstore.insert(&format!("{l}.s"), HostTensor::from_f32(&[1, s.len()], &s).unwrap());
    }
    let tuned = train(&qstore, true, 5, 1e-3, &xtr, &ytr);
    let mut exported: Vec<(String, HostTensor)> = vec![];
    for l in ["fc1", "fc2"] {
        let s = tuned.get(&format!("{l}.s")).unwrap().to_f32_vec().unwrap();
        let wq = export_int8(tuned.get(&format!("{l}.w")).unwrap(), &s).unwrap();
        assert_eq!(wq.dtype(), DType::I8);
        exported.push((format!("{l}.wq"), wq));
        exported.push((format!("{l}.scale"), HostTensor::from_f32(&[s.len()], &s).unwrap()));
        exported.push((format!("{l}.b"), tuned.get(&format!("{l}.b")).unwrap().clone()));
    }
    let named: Vec<(&str, HostTensor)> = exported.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let acc8 = accuracy(int8_logits(yte.len()), &named, &xte, &yte);
    assert!(acc8 >= acc - 1.0, "int8 accuracy {acc8:.2}% vs float {acc:.2}%");
    // The fake-quant model and the int8 export compute the same function.
    let named: Vec<(&str, HostTensor)> = tuned.iter().map(|(n, t)| (n, t.clone())).collect();
    let acc_fq = accuracy(float_logits(yte.len(), true), &named, &xte, &yte);
    assert!((acc_fq - acc8).abs() <= 0.3, "fake-quant {acc_fq:.2}% vs int8 {acc8:.2}%");
    println!("digits: float {acc:.2}%, QAT fake-quant {acc_fq:.2}%, INT8 export {acc8:.2}%");
}
