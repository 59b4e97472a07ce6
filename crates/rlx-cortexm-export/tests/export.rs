//! The exporter end to end: the committed digits checkpoints export with the Cortex-M kernels
//! (run on the host) bit-identical to the rlx INT8 reference; random conv / depthwise / pool
//! models agree with the reference too; bad input is a typed error naming the op or budget.

use rlx_cortexm::kernels::Window;
use rlx_cortexm::params::Activation;
use rlx_cortexm_export::qmodel::{QLayer, QModel, QOp, QTensor, run_host};
use rlx_cortexm_export::{ExportError, ExportOptions, TestSet, export, plan, prepare, reference};
use rlx_ir::{DType, Graph, HostTensor, Shape};
use std::collections::HashMap;
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn digits_checkpoints_export_bit_exact_and_accurate() {
    for (name, layers) in [("mlp", 2), ("conv", 5), ("separable", 6)] {
        let ckpt = repo().join(format!("data/cortexm/digits_{name}_qat.safetensors"));
        let out = std::env::temp_dir().join(format!("rlx-cortexm-export-test-{name}-{}", std::process::id()));
        let opts = ExportOptions { testset: Some(TestSet::Digits), ..Default::default() };
        let r = export(&ckpt, &out, &opts).unwrap();
        let c = r.host_check.clone().unwrap();
        println!(
            "{name}: {} layers, {} MACs, arena {} B, flash {} B, host {}/{} bit-identical, accuracy {:.2}%",
            r.model.layers.len(),
            r.model.macs(),
            r.plan.arena_size,
            r.flash_bytes,
            c.bit_identical,
            c.samples,
            c.accuracy
        );
        assert_eq!(r.model.layers.len(), layers);
        assert_eq!(c.bit_identical, c.samples, "{name}: kernels vs INT8 reference");
        assert!(c.accuracy >= 96.6, "{name}: INT8 accuracy {:.2}%", c.accuracy);
        // No layer's output shares bytes with its input.
        for l in &r.model.layers {
            let (a, b) = (r.plan.slots[l.input], r.plan.slots[l.output]);
            assert!(a.end() <= b.offset || b.end() <= a.offset, "{name}: {} overlaps its input", l.op.name());
        }
        let src = std::fs::read_to_string(out.join("model.rs")).unwrap();
        assert!(src.contains(&format!("pub const ARENA_SIZE: usize = {};", r.plan.arena_size)));
        assert!(std::fs::read_to_string(out.join("testset.rs")).unwrap().contains("pub const SAMPLES: usize = 359;"));
        std::fs::remove_dir_all(&out).ok();
    }
}

/// A small deterministic generator.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
    fn i8(&mut self) -> i8 {
        self.next() as u8 as i8
    }
    fn range(&mut self, lo: i32, hi: i32) -> i32 {
        lo + (self.next() % (hi - lo + 1) as u32) as i32
    }
    fn scale(&mut self, lo: f32, hi: f32) -> f32 {
        lo * (hi / lo).powf((self.next() % 10_000) as f32 / 10_000.0)
    }
}

fn t(dims: &[usize], r: &mut Lcg, scale: f32) -> QTensor {
    QTensor { dims: dims.to_vec(), scale, zero_point: r.range(-128, 127), alias_of: None }
}

fn out_size(n: usize, k: usize, s: usize, p: usize, d: usize) -> usize {
    (n + 2 * p - d * (k - 1) - 1) / s + 1
}

/// conv (stride 2, dilation 2) -> depthwise x2 -> avg pool (padded) -> add (residual) -> max pool
/// -> flatten -> FC.
fn random_model(r: &mut Lcg) -> QModel {
    let mut tensors = vec![t(&[1, 9, 9, 3], r, 0.02)];
    let mut layers = vec![];
    let mut push = |tensors: &mut Vec<QTensor>, op: QOp, dims: Vec<usize>, scale: f32, r: &mut Lcg| {
        let input = tensors.len() - 1;
        tensors.push(t(&dims, r, scale));
        layers.push(QLayer { op, input, input2: None, output: tensors.len() - 1, node: format!("L{}", layers.len()) });
    };
    let conv = |r: &mut Lcg, n: usize, chans: usize, act| {
        let w: Vec<i8> = (0..n).map(|_| r.i8().max(-127)).collect();
        let bias = (0..chans).map(|_| r.range(-3000, 3000)).collect();
        let w_scales = (0..chans).map(|_| r.scale(0.002, 0.02)).collect();
        (w, bias, w_scales, act)
    };
    // conv 3x3, 3 -> 6, stride 2, pad 2, dilation 2
    let h = out_size(9, 3, 2, 2, 2);
    let (weights, bias, w_scales, act) = conv(r, 6 * 3 * 3 * 3, 6, Activation::Relu);
    let window = Window { kernel: [3, 3], stride: [2, 2], dilation: [2, 2], pad: [2, 2] };
    push(
        &mut tensors,
        QOp::Conv2d { weights, bias, w_scales, window, depthwise_multiplier: 0, act },
        vec![1, h, h, 6],
        0.05,
        r,
    );
    // depthwise 3x3, multiplier 2, pad 1
    let (weights, bias, w_scales, act) = conv(r, 3 * 3 * 12, 12, Activation::Relu6);
    let window = Window { kernel: [3, 3], stride: [1, 1], dilation: [1, 1], pad: [1, 1] };
    push(
        &mut tensors,
        QOp::Conv2d { weights, bias, w_scales, window, depthwise_multiplier: 2, act },
        vec![1, h, h, 12],
        0.04,
        r,
    );
    // avg pool 3x3 stride 1 pad 1 (counts differ at the border), a residual add of the
    // depthwise output and the pool's (its own output scale, ReLU), then max pool 2x2.
    let s = tensors.last().unwrap().scale;
    let zp = tensors.last().unwrap().zero_point;
    tensors.push(QTensor { dims: vec![1, h, h, 12], scale: s, zero_point: zp, alias_of: None });
    layers.push(QLayer {
        op: QOp::AvgPool2d { kernel: [3, 3], stride: [1, 1], pad: [1, 1] },
        input: 2,
        input2: None,
        output: 3,
        node: "avg".into(),
    });
    tensors.push(t(&[1, h, h, 12], r, 0.06));
    layers.push(QLayer {
        op: QOp::Add { act: Activation::Relu },
        input: 2,
        input2: Some(3),
        output: 4,
        node: "add".into(),
    });
    let (s, zp) = (tensors[4].scale, tensors[4].zero_point);
    let h2 = out_size(h, 2, 2, 0, 1);
    tensors.push(QTensor { dims: vec![1, h2, h2, 12], scale: s, zero_point: zp, alias_of: None });
    layers.push(QLayer {
        op: QOp::MaxPool2d { kernel: [2, 2], stride: [2, 2], pad: [0, 0] },
        input: 4,
        input2: None,
        output: 5,
        node: "max".into(),
    });
    let f = h2 * h2 * 12;
    tensors.push(QTensor { dims: vec![1, f], scale: s, zero_point: zp, alias_of: Some(5) });
    let (weights, bias, w_scales, act) = conv(r, f * 7, 7, Activation::None);
    tensors.push(t(&[1, 7], r, 0.1));
    layers.push(QLayer {
        op: QOp::FullyConnected { weights, bias, w_scales, act },
        input: 6,
        input2: None,
        output: 7,
        node: "fc".into(),
    });
    QModel { tensors, layers, input: 0, output: 7 }
}

#[test]
fn random_conv_depthwise_pool_models_match_the_int8_reference() {
    let mut r = Lcg(41);
    let mut values = 0;
    for _ in 0..4 {
        let full = random_model(&mut r);
        let inputs: Vec<Vec<i8>> = (0..8).map(|_| (0..full.tensors[0].len()).map(|_| r.i8()).collect()).collect();
        // Every prefix of the chain, so each layer's output is compared, not only the last.
        for k in 1..=full.layers.len() {
            let mut q = full.clone();
            q.layers.truncate(k);
            q.output = q.layers[k - 1].output;
            let p = plan::plan(&q);
            let want = reference::run(&q, &inputs).unwrap();
            for (x, w) in inputs.iter().zip(&want) {
                assert_eq!(&run_host(&q, &p.slots, p.arena_size, x).unwrap(), w, "after {}", q.layers[k - 1].op.name());
                values += w.len();
            }
            assert!(want.iter().flatten().any(|&v| v != want[0][0]), "outputs vary after layer {k}");
        }
    }
    println!("{values} output values bit-identical");
}

fn scalar(v: f64) -> HostTensor {
    HostTensor::from_f64(&[], DType::F32, &[v]).unwrap()
}

/// `x [1, 4] -> fake_quant -> matmul(w) + b [-> tanh] -> fake_quant`, with switches for the
/// faults under test.
fn tiny(quant_w: bool, quant_x: bool, quant_out: bool, tanh: bool) -> (Graph, HashMap<String, HostTensor>) {
    let mut g = Graph::new("tiny");
    let x = g.input("x", Shape::new(&[1, 4], DType::F32));
    let (s, z) = (g.constant(scalar(0.01)), g.constant(scalar(0.0)));
    let xq = if quant_x { g.fake_quant(x, s, z, 8, true, None) } else { x };
    let w = g.param("fc.w", Shape::new(&[4, 3], DType::F32));
    let wq = if quant_w {
        let (ws, wz) = (g.constant(scalar(0.02)), g.constant(scalar(0.0)));
        g.fake_quant(w, ws, wz, 8, true, None)
    } else {
        w
    };
    let b = g.param("fc.b", Shape::new(&[3], DType::F32));
    let y = g.matmul(xq, wq);
    let mut y = g.add(y, b);
    if tanh {
        y = g.tanh(y);
    }
    if quant_out {
        let (os, oz) = (g.constant(scalar(0.05)), g.constant(scalar(3.0)));
        y = g.fake_quant(y, os, oz, 8, true, None);
    }
    g.set_outputs(vec![y]);
    let params = HashMap::from([
        ("fc.w".to_string(), HostTensor::from_f32(&[4, 3], &[0.1; 12]).unwrap()),
        ("fc.b".to_string(), HostTensor::from_f32(&[3], &[0.0; 3]).unwrap()),
    ]);
    (g, params)
}

fn err(g: &Graph, p: &HashMap<String, HostTensor>, opts: &ExportOptions) -> ExportError {
    prepare(g, p, opts).expect_err("export must fail")
}

#[test]
fn bad_input_is_a_typed_error_naming_the_op_or_budget() {
    let ok = ExportOptions::default();
    let (g, p) = tiny(true, true, true, false);
    let (q, plan, flash) = prepare(&g, &p, &ok).unwrap();
    assert_eq!((q.layers.len(), flash), (1, 12 + 3 * 12));

    let e = err(&tiny(true, true, false, true).0, &p, &ok);
    assert!(matches!(&e, ExportError::UnsupportedOp { op, .. } if op == "tanh"), "{e}");
    assert!(e.to_string().contains("`tanh`"), "{e}");

    let e = err(&tiny(false, true, true, false).0, &p, &ok);
    assert!(matches!(&e, ExportError::Unquantized { .. }), "{e}");
    assert!(e.to_string().contains("weight `fc.w`") && e.to_string().contains("`matmul`"), "{e}");

    let e = err(&tiny(true, false, true, false).0, &p, &ok);
    assert!(e.to_string().contains("the model input") && e.to_string().contains("unquantized"), "{e}");

    let e = err(&tiny(true, true, false, false).0, &p, &ok);
    assert!(e.to_string().contains("the model output"), "{e}");

    let e = err(&g, &p, &ExportOptions { flash_budget: Some(40), ..Default::default() });
    assert!(matches!(e, ExportError::OverBudget { what: "flash", need: 48, budget: 40 }), "{e}");
    assert_eq!(e.to_string(), "the model needs 48 bytes of flash, over the 40-byte flash budget");

    let e = err(&g, &p, &ExportOptions { ram_budget: Some(plan.arena_size - 1), ..Default::default() });
    assert!(matches!(e, ExportError::OverBudget { what: "RAM", .. }), "{e}");
    assert!(e.to_string().contains("RAM budget"), "{e}");

    let missing = HashMap::from([("fc.w".to_string(), p["fc.w"].clone())]);
    let e = err(&g, &missing, &ok);
    assert!(e.to_string().contains("param `fc.b` is not in the checkpoint"), "{e}");
}

#[test]
fn a_short_qat_run_saves_a_checkpoint_that_exports() {
    use rlx_cortexm_export::digits::{self, Arch};
    // One float epoch and one QAT epoch: the pipeline, not the accuracy.
    let t = digits::train_qat(Arch::Mlp, 1, 1).unwrap();
    assert_eq!(t.ranges.len(), 3, "input, hidden and logits ranges");
    let dir = std::env::temp_dir().join(format!("rlx-cortexm-qat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ckpt = dir.join("mlp.safetensors");
    digits::save(&t, &ckpt).unwrap();
    let r = export(&ckpt, &dir, &ExportOptions { testset: Some(TestSet::Digits), ..Default::default() }).unwrap();
    let c = r.host_check.unwrap();
    assert_eq!(c.bit_identical, c.samples);
    assert!(c.accuracy > 50.0, "{:.2}% after two epochs", c.accuracy);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_residual_add_lowers_to_the_add_kernel_and_matches_the_reference() {
    // y = fq(relu(fq(x @ w + b) + fq(x))): the add of two int8 tensors with its own output scale.
    let mut g = Graph::new("residual");
    let x = g.input("x", Shape::new(&[1, 4], DType::F32));
    let (s, z) = (g.constant(scalar(0.02)), g.constant(scalar(-5.0)));
    let xq = g.fake_quant(x, s, z, 8, true, None);
    let w = g.param("fc.w", Shape::new(&[4, 4], DType::F32));
    let (ws, wz) = (g.constant(scalar(0.01)), g.constant(scalar(0.0)));
    let wq = g.fake_quant(w, ws, wz, 8, true, None);
    let b = g.param("fc.b", Shape::new(&[4], DType::F32));
    let h = g.matmul(xq, wq);
    let h = g.add(h, b);
    let (hs, hz) = (g.constant(scalar(0.03)), g.constant(scalar(7.0)));
    let hq = g.fake_quant(h, hs, hz, 8, true, None);
    let sum = g.add(hq, xq);
    let sum = g.relu(sum);
    let (os, oz) = (g.constant(scalar(0.04)), g.constant(scalar(-128.0)));
    let y = g.fake_quant(sum, os, oz, 8, true, None);
    g.set_outputs(vec![y]);
    let wv: Vec<f32> = (0..16).map(|i| (i as f32 - 7.5) * 0.07).collect();
    let params = HashMap::from([
        ("fc.w".to_string(), HostTensor::from_f32(&[4, 4], &wv).unwrap()),
        ("fc.b".to_string(), HostTensor::from_f32(&[4], &[0.1, -0.2, 0.3, 0.0]).unwrap()),
    ]);
    let (q, plan, _) = prepare(&g, &params, &ExportOptions::default()).unwrap();
    let names: Vec<&str> = q.layers.iter().map(|l| l.op.name()).collect();
    assert_eq!(names, ["fully_connected", "add"]);
    let mut r = Lcg(5);
    let inputs: Vec<Vec<i8>> = (0..32).map(|_| (0..4).map(|_| r.i8()).collect()).collect();
    let want = reference::run(&q, &inputs).unwrap();
    for (x, w) in inputs.iter().zip(&want) {
        assert_eq!(&run_host(&q, &plan.slots, plan.arena_size, x).unwrap(), w);
    }
    assert!(want.iter().flatten().any(|&v| v > -128), "not all clamped");
    // The add reads the input slot at its layer, so the plan keeps it alive until then.
    let add = &q.layers[1];
    for t in [add.input, add.input2.unwrap()] {
        let (a, o) = (plan.slots[t], plan.slots[add.output]);
        assert!(a.end() <= o.offset || o.end() <= a.offset);
    }
}
