//! Writes an exported model as JSON (tensors, layers with their int8 data, the quantized digits
//! test inputs and the rlx INT8 reference's outputs), the input of tools/tflm_digits.py, which
//! runs the same model in TFLite Micro:
//!
//!     cargo run -p rlx-cortexm-export --example dump_qmodel -- data/cortexm/digits_mlp_qat.safetensors /tmp/mlp.json

use rlx_cortexm::params::Activation;
use rlx_cortexm_export::qmodel::QOp;
use rlx_cortexm_export::{ExportOptions, load_checkpoint, prepare, quantize_input, reference};
use serde_json::{Value, json};

fn act(a: Activation) -> &'static str {
    match a {
        Activation::None => "none",
        Activation::Relu => "relu",
        Activation::Relu6 => "relu6",
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, ckpt, out] = args.as_slice() else { return Err("usage: dump_qmodel CKPT OUT.json".into()) };
    let (g, params) = load_checkpoint(std::path::Path::new(ckpt))?;
    let (q, _, _) = prepare(&g, &params, &ExportOptions::default())?;
    let tensors: Vec<Value> = q
        .tensors
        .iter()
        .map(|t| json!({"dims": t.dims, "scale": t.scale, "zero_point": t.zero_point, "alias_of": t.alias_of}))
        .collect();
    let layers: Vec<Value> = q
        .layers
        .iter()
        .map(|l| {
            let mut v = json!({"op": l.op.name(), "input": l.input, "input2": l.input2, "output": l.output});
            match &l.op {
                QOp::FullyConnected { weights, bias, w_scales, act: a } => {
                    v["weights"] = json!(weights);
                    v["bias"] = json!(bias);
                    v["w_scales"] = json!(w_scales);
                    v["act"] = json!(act(*a));
                }
                QOp::Conv2d { weights, bias, w_scales, window, depthwise_multiplier, act: a } => {
                    v["weights"] = json!(weights);
                    v["bias"] = json!(bias);
                    v["w_scales"] = json!(w_scales);
                    v["act"] = json!(act(*a));
                    v["kernel"] = json!(window.kernel);
                    v["stride"] = json!(window.stride);
                    v["dilation"] = json!(window.dilation);
                    v["pad"] = json!(window.pad);
                    v["depthwise_multiplier"] = json!(depthwise_multiplier);
                }
                QOp::MaxPool2d { kernel, stride, pad } | QOp::AvgPool2d { kernel, stride, pad } => {
                    v["kernel"] = json!(kernel);
                    v["stride"] = json!(stride);
                    v["pad"] = json!(pad);
                }
                QOp::Add { act: a } => v["act"] = json!(act(*a)),
                QOp::Softmax { beta } => v["beta"] = json!(beta),
            }
            v
        })
        .collect();
    let (_, _, xte, _) = rlx_nn::data::digits(0, 0.2);
    let inputs: Vec<Vec<i8>> = xte.chunks(q.tensors[q.input].len()).map(|x| quantize_input(&q, x)).collect();
    let outputs = reference::run(&q, &inputs)?;
    let doc = json!({"tensors": tensors, "layers": layers, "input": q.input, "output": q.output,
                     "inputs": inputs, "reference": outputs});
    std::fs::write(out, serde_json::to_string(&doc)?)?;
    println!("wrote {out}: {} layers, {} samples", q.layers.len(), inputs.len());
    Ok(())
}
