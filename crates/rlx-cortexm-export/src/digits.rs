//! The digits classifiers trained with QAT by rlx-nn, saved as checkpoints the exporter reads:
//! float training, min/max calibration of the activations on the training split, then a short
//! fine-tune with LSQ fake quantization of the weights (int8, symmetric, per output channel) and
//! fixed int8 fake quantization of the activations at the calibrated ranges.

use crate::GRAPH_KEY;
use rlx_driver::Device;
use rlx_ir::{DType, Graph, HostTensor, NodeId, Shape};
use rlx_nn::optim::Schedule;
use rlx_nn::quant::{fake_quant_lsq, qmax};
use rlx_nn::{Adam, Builder, Init, ParamStore, Rng, TrainConfig, TrainStep, data, loss};
use rlx_runtime::Session;
use std::path::Path;

/// Which network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// `64 -> 64 relu -> 10`.
    Mlp,
    /// `1x8x8 -> conv3x3 8 relu -> maxpool 2 -> conv3x3 16 relu -> maxpool 2 -> 10`.
    Conv,
    /// Depthwise-separable: `1x8x8 -> conv3x3 8 relu -> depthwise3x3 relu -> maxpool 2 ->
    /// conv1x1 16 relu -> maxpool 2 -> 10`.
    Separable,
}

impl Arch {
    /// The input dims for a batch of `n`.
    pub fn input_dims(self, n: usize) -> Vec<usize> {
        match self {
            Arch::Mlp => vec![n, 64],
            Arch::Conv | Arch::Separable => vec![n, 1, 8, 8],
        }
    }
}

/// Activation ranges (min, max) at the taps, in tap order: the input, then each layer's output.
pub type Ranges = Vec<(f64, f64)>;

/// Scale and signed int8 zero point of a range (widened to include 0), TFLite's asymmetric rule.
pub fn act_quant(lo: f64, hi: f64) -> (f64, f64) {
    let (lo, hi) = (lo.min(0.0), hi.max(0.0));
    let s = if hi > lo { (hi - lo) / 255.0 } else { 1.0 };
    (s, (-128.0 - lo / s).round().clamp(-128.0, 127.0))
}

/// Builds the network on `x`; with `quant`, weights go through LSQ fake quantization and the
/// activations at the taps through int8 fake quantization with the ranges; without, the taps
/// are returned so a calibration run can observe them.
fn net(b: &mut Builder, arch: Arch, x: NodeId, quant: Option<&Ranges>) -> (NodeId, Vec<NodeId>) {
    let mut taps = vec![];
    let mut k = 0;
    let mut tap = |b: &mut Builder, v: NodeId, taps: &mut Vec<NodeId>| -> NodeId {
        taps.push(v);
        let r = quant.map(|r| r[k]);
        k += 1;
        match r {
            Some((lo, hi)) => {
                let (s, z) = act_quant(lo, hi);
                let (s, z) = (b.scalar(s, DType::F32), b.scalar(z, DType::F32));
                b.fake_quant(v, s, z, 8, true, None)
            }
            None => v,
        }
    };
    let weight = |b: &mut Builder, dims: &[usize], axis: usize| {
        let mut w = b.param("w", dims, Init::KaimingUniform);
        if quant.is_some() {
            let mut sd = vec![1; dims.len()];
            sd[axis] = dims[axis];
            let s = b.param("s", &sd, Init::Constant(0.01));
            w = fake_quant_lsq(b, w, s, 8);
        }
        w
    };
    let mut h = tap(b, x, &mut taps);
    match arch {
        Arch::Mlp => {
            for (name, din, dout, relu) in [("fc1", 64, 64, true), ("fc2", 64, 10, false)] {
                h = b.scoped(name, |b| {
                    let w = weight(b, &[din, dout], 1);
                    let bias = b.param("b", &[dout], Init::Zeros);
                    let y = b.matmul(h, w);
                    let y = b.add(y, bias);
                    if relu { b.relu(y) } else { y }
                });
                h = tap(b, h, &mut taps);
            }
        }
        Arch::Conv | Arch::Separable => {
            // (name, in channels, out channels, kernel, groups, pool after)
            let layers: &[(&str, usize, usize, usize, usize, bool)] = if arch == Arch::Conv {
                &[("conv1", 1, 8, 3, 1, true), ("conv2", 8, 16, 3, 1, true)]
            } else {
                &[("conv1", 1, 8, 3, 1, false), ("dw", 8, 8, 3, 8, true), ("pw", 8, 16, 1, 1, true)]
            };
            for &(name, cin, cout, k, groups, pool) in layers {
                h = b.scoped(name, |b| {
                    let w = weight(b, &[cout, cin / groups, k, k], 0);
                    let bias = b.param("b", &[cout, 1, 1], Init::Zeros);
                    let p = k / 2;
                    let y = b.conv2d(h, w, [1, 1], [p, p], [1, 1], groups);
                    let y = b.add(y, bias);
                    b.relu(y)
                });
                h = tap(b, h, &mut taps);
                if pool {
                    h = b.max_pool2d(h, [2, 2], [2, 2], [0, 0]);
                }
            }
            let n = rlx_ir::ops::rules::dims(b, h)[0];
            h = b.reshape(h, &[n, 16 * 2 * 2]);
            h = b.scoped("fc", |b| {
                let w = weight(b, &[64, 10], 1);
                let bias = b.param("b", &[10], Init::Zeros);
                let y = b.matmul(h, w);
                b.add(y, bias)
            });
            h = tap(b, h, &mut taps);
        }
    }
    (h, taps)
}

fn input(b: &mut Builder, arch: Arch, n: usize) -> NodeId {
    b.input("x", Shape::new(&arch.input_dims(n), DType::F32))
}

/// The inference graph for a batch of `n` (logits, fake-quantized when `quant` is given).
pub fn inference_graph(arch: Arch, n: usize, quant: Option<&Ranges>) -> Graph {
    let mut b = Builder::new(match arch {
        Arch::Mlp => "digits_mlp",
        Arch::Conv => "digits_conv",
        Arch::Separable => "digits_separable",
    });
    let x = input(&mut b, arch, n);
    let (y, _) = net(&mut b, arch, x, quant);
    b.finish(vec![y]).0
}

fn train(
    arch: Arch,
    store: &ParamStore,
    quant: Option<&Ranges>,
    epochs: usize,
    lr: f64,
    xs: &[f32],
    ys: &[i64],
) -> rlx_ir::Result<ParamStore> {
    let batch = 64;
    let mut b = Builder::new("digits_train");
    let x = input(&mut b, arch, batch);
    let y = b.input("y", Shape::new(&[batch], DType::I64));
    let (logits, _) = net(&mut b, arch, x, quant);
    let l = loss::cross_entropy(&mut b, logits, y);
    let (g, _) = b.finish(vec![l]);
    let steps = epochs * (ys.len() / batch);
    let lr = Schedule::WarmupCosine { peak: lr, warmup: 10, total: steps, end: lr / 20.0 };
    let mut step = TrainStep::new(&g, store, &Adam::adamw(lr, 1e-4), &TrainConfig::default())?;
    let mut rng = Rng::new(7);
    let mut idx: Vec<usize> = (0..ys.len()).collect();
    let dims = arch.input_dims(batch);
    for _ in 0..epochs {
        for i in (1..idx.len()).rev() {
            idx.swap(i, rng.below(i + 1));
        }
        for chunk in idx.chunks_exact(batch) {
            let xb: Vec<f32> = chunk.iter().flat_map(|&i| xs[i * 64..(i + 1) * 64].iter().copied()).collect();
            let yb: Vec<i64> = chunk.iter().map(|&i| ys[i]).collect();
            let (xb, yb) = (HostTensor::from_f32(&dims, &xb)?, HostTensor::from_i64(&[batch], DType::I64, &yb)?);
            step.step(&[("x", &xb), ("y", &yb)])?;
        }
    }
    step.params()
}

/// Runs `g` (input `x` of `n` samples) with `store` on the CPU: its outputs.
fn run(g: Graph, store: &ParamStore, xs: &[f32]) -> rlx_ir::Result<Vec<HostTensor>> {
    let dims = g.inputs().first().and_then(|(id, _)| g.shape(*id).and_then(|s| s.fixed_dims())).unwrap_or_default();
    let names: Vec<String> = g.params().iter().map(|(_, n)| n.to_string()).collect();
    let mut exe = Session::new(Device::Cpu).compile(g)?;
    for n in &names {
        exe.set_param_tensor(n, store.get(n)?)?;
    }
    exe.run_tensors(&[("x", &HostTensor::from_f32(&dims, xs)?)])
}

/// Percent of `logits` rows whose argmax is the label.
pub fn accuracy(logits: &[f32], ys: &[i64]) -> f64 {
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

/// A trained, quantized model.
pub struct Trained {
    /// The network.
    pub arch: Arch,
    /// Params (weights, LSQ steps, biases).
    pub store: ParamStore,
    /// Activation ranges.
    pub ranges: Ranges,
    /// Float test accuracy before QAT, percent.
    pub float_accuracy: f64,
    /// Fake-quantized test accuracy after QAT, percent.
    pub qat_accuracy: f64,
}

/// Trains `arch` on the digits training split (float, calibration, QAT) and measures it on the
/// test split.
pub fn train_qat(arch: Arch, float_epochs: usize, qat_epochs: usize) -> rlx_ir::Result<Trained> {
    let (xtr, ytr, xte, yte) = data::digits(0, 0.2);
    let (g, specs) = {
        let mut b = Builder::new("digits_specs");
        let x = input(&mut b, arch, 1);
        let (y, _) = net(&mut b, arch, x, None);
        b.finish(vec![y])
    };
    drop(g);
    let init = ParamStore::init(&specs, 1)?;
    let trained = train(arch, &init, None, float_epochs, 1e-2, &xtr, &ytr)?;
    let float_accuracy = accuracy(&run(inference_graph(arch, yte.len(), None), &trained, &xte)?[0].to_f32_vec()?, &yte);
    // Calibration: min / max of every tap over the training split.
    let mut b = Builder::new("digits_taps");
    let x = input(&mut b, arch, ytr.len());
    let (_, taps) = net(&mut b, arch, x, None);
    let (tg, _) = b.finish(taps);
    let ranges: Ranges = run(tg, &trained, &xtr)?
        .iter()
        .map(|t| t.to_f64_vec().map(|v| v.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)))))
        .collect::<rlx_ir::Result<_>>()?;
    // LSQ steps start from min / max calibration of each weight's output channels.
    let mut qstore = trained.clone();
    for (name, t) in
        trained.iter().filter(|(n, _)| n.ends_with(".w")).map(|(n, t)| (n.to_string(), t.clone())).collect::<Vec<_>>()
    {
        let d = t.dims();
        let v = t.to_f64_vec()?;
        let (axis, ch) = if d.len() == 2 { (1, d[1]) } else { (0, d[0]) };
        let inner: usize = d[axis + 1..].iter().product();
        let mut m = vec![0f64; ch];
        for (i, &x) in v.iter().enumerate() {
            let c = (i / inner) % ch;
            m[c] = m[c].max(x.abs());
        }
        let s: Vec<f32> = m.iter().map(|&m| (m / qmax(8)).max(1e-8) as f32).collect();
        let mut sd = vec![1; d.len()];
        sd[axis] = ch;
        qstore.insert(&name.replace(".w", ".s"), HostTensor::from_f32(&sd, &s)?);
    }
    let store = train(arch, &qstore, Some(&ranges), qat_epochs, 1e-3, &xtr, &ytr)?;
    let qat_accuracy =
        accuracy(&run(inference_graph(arch, yte.len(), Some(&ranges)), &store, &xte)?[0].to_f32_vec()?, &yte);
    Ok(Trained { arch, store, ranges, float_accuracy, qat_accuracy })
}

/// Saves the batch-1 quantized inference graph and its params: the checkpoint
/// `rlx export cortexm --model` reads.
pub fn save(t: &Trained, path: &Path) -> rlx_ir::Result<()> {
    let g = inference_graph(t.arch, 1, Some(&t.ranges));
    let meta = [
        (GRAPH_KEY, g.to_text()),
        ("rlx.kind", "qat-int8-graph".to_string()),
        ("rlx.float_accuracy", format!("{:.2}", t.float_accuracy)),
        ("rlx.qat_accuracy", format!("{:.2}", t.qat_accuracy)),
    ];
    rlx_nn::checkpoint::save(path, &t.store, &meta)
}
