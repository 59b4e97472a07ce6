//! Every kernel against TFLite Micro's reference kernels: `fixtures/tflm.json` holds one-op int8
//! models run by TFLite Micro (made by tools/tflm_fixtures.py) with random shapes, inputs and
//! float scales. Parameters are derived here from the same scales (`rlx_cortexm::params`), so a
//! case checks the multiplier / shift derivation and the kernel's requantization together; each
//! output must match bit for bit.

use rlx_cortexm::kernels::{self, ConvParams, DepthwiseParams, FcParams, Nhwc, PoolParams, Window};
use rlx_cortexm::params::{self, Activation};
use rlx_cortexm::requant::Requant;
use rlx_cortexm::simd;
use serde_json::Value;

fn fixtures() -> Vec<Value> {
    serde_json::from_str(include_str!("fixtures/tflm.json")).expect("fixtures parse")
}

fn f(v: &Value, k: &str) -> f32 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k}")) as f32
}
fn i(v: &Value, k: &str) -> i32 {
    v[k].as_i64().unwrap_or_else(|| panic!("{k}")) as i32
}
fn u(v: &Value, k: &str) -> usize {
    v[k].as_u64().unwrap_or_else(|| panic!("{k}")) as usize
}
fn i8s(v: &Value, k: &str) -> Vec<i8> {
    v[k].as_array().unwrap_or_else(|| panic!("{k}")).iter().map(|x| x.as_i64().unwrap() as i8).collect()
}
fn i32s(v: &Value, k: &str) -> Vec<i32> {
    v[k].as_array().unwrap_or_else(|| panic!("{k}")).iter().map(|x| x.as_i64().unwrap() as i32).collect()
}
fn f32s(v: &Value, k: &str) -> Vec<f32> {
    v[k].as_array().unwrap_or_else(|| panic!("{k}")).iter().map(|x| x.as_f64().unwrap() as f32).collect()
}
fn usizes<const N: usize>(v: &Value, k: &str) -> [usize; N] {
    let a: Vec<usize> = v[k].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
    a.try_into().unwrap()
}
fn nhwc(v: &Value, k: &str) -> Nhwc {
    let [n, h, w, c] = usizes::<4>(v, k);
    Nhwc::new(n, h, w, c)
}
fn act(v: &Value) -> Activation {
    match v["act"].as_str().unwrap() {
        "none" => Activation::None,
        "relu" => Activation::Relu,
        "relu6" => Activation::Relu6,
        a => panic!("activation {a}"),
    }
}

/// Runs one case; returns the kernel's output.
fn run(case: &Value) -> Vec<i8> {
    let input = i8s(case, "input");
    let mut out = vec![0i8; case["output"].as_array().unwrap().len()];
    match case["op"].as_str().unwrap() {
        "fully_connected" => {
            let (s_in, s_out, s_w) = (f(case, "s_in"), f(case, "s_out"), f32s(case, "s_w"));
            // One weight scale is TFLite's per-tensor path, which forms s_in * s_w in f32.
            let (m, s): (Vec<i32>, Vec<i32>) = if s_w.len() == 1 {
                let (m, s) = params::tensor_multiplier(s_in, s_w[0], s_out);
                (vec![m], vec![s])
            } else {
                s_w.iter().map(|&w| params::channel_multiplier(s_in, w, s_out)).unzip()
            };
            let (w, b) = (i8s(case, "weights"), i32s(case, "bias"));
            let p = FcParams {
                batch: u(case, "batch"),
                inputs: u(case, "inputs"),
                outputs: u(case, "outputs"),
                weights: &w,
                bias: &b,
                input_offset: -i(case, "zp_in"),
                requant: Requant { multiplier: &m, shift: &s },
                out: params::out_quant(act(case), s_out, i(case, "zp_out")),
            };
            kernels::fully_connected(&p, &input, &mut out).unwrap();
            // The packed (DSP) dot product, emulated on the host, gives the same bits.
            let mut packed = vec![0i8; out.len()];
            for (bi, row) in input.chunks(p.inputs).enumerate() {
                for o in 0..p.outputs {
                    let acc = simd::dot_s8_packed(&w[o * p.inputs..][..p.inputs], row, p.input_offset) + b[o];
                    let (mm, ss) = p.requant.at(o);
                    let v = rlx_cortexm::requant::requantize(acc, mm, ss) + p.out.offset;
                    packed[bi * p.outputs + o] = v.clamp(p.out.act_min, p.out.act_max) as i8;
                }
            }
            assert_eq!(packed, out, "packed dot product");
        }
        op @ ("conv2d" | "depthwise_conv2d") => {
            let (s_in, s_out, s_w) = (f(case, "s_in"), f(case, "s_out"), f32s(case, "s_w"));
            let (m, s): (Vec<i32>, Vec<i32>) = s_w.iter().map(|&w| params::channel_multiplier(s_in, w, s_out)).unzip();
            let (w, b) = (i8s(case, "weights"), i32s(case, "bias"));
            let window = Window {
                kernel: usizes(case, "kernel"),
                stride: usizes(case, "stride"),
                dilation: usizes(case, "dilation"),
                pad: usizes(case, "pad"),
            };
            let requant = Requant { multiplier: &m, shift: &s };
            let outq = params::out_quant(act(case), s_out, i(case, "zp_out"));
            let (input_shape, output_shape) = (nhwc(case, "input_shape"), nhwc(case, "output_shape"));
            if op == "conv2d" {
                let p = ConvParams {
                    input: input_shape,
                    output: output_shape,
                    window,
                    weights: &w,
                    bias: &b,
                    input_offset: -i(case, "zp_in"),
                    requant,
                    out: outq,
                };
                kernels::conv2d(&p, &input, &mut out).unwrap();
            } else {
                let p = DepthwiseParams {
                    input: input_shape,
                    output: output_shape,
                    window,
                    multiplier: u(case, "multiplier"),
                    weights: &w,
                    bias: &b,
                    input_offset: -i(case, "zp_in"),
                    requant,
                    out: outq,
                };
                kernels::depthwise_conv2d(&p, &input, &mut out).unwrap();
            }
        }
        op @ ("avg_pool2d" | "max_pool2d") => {
            let (act_min, act_max) = params::activation_range(act(case), f(case, "s"), i(case, "zp"));
            let p = PoolParams {
                input: nhwc(case, "input_shape"),
                output: nhwc(case, "output_shape"),
                kernel: usizes(case, "kernel"),
                stride: usizes(case, "stride"),
                pad: usizes(case, "pad"),
                act_min,
                act_max,
            };
            if op == "avg_pool2d" {
                kernels::avg_pool2d(&p, &input, &mut out).unwrap();
            } else {
                kernels::max_pool2d(&p, &input, &mut out).unwrap();
            }
        }
        "relu" => {
            let p = params::relu_params(f(case, "s_in"), i(case, "zp_in"), f(case, "s_out"), i(case, "zp_out"));
            kernels::relu(&p, &input, &mut out).unwrap();
        }
        "relu6" => {
            let (zero, six) = params::relu6_bounds(f(case, "s_in"), i(case, "zp_in"));
            kernels::relu6(zero, six, &input, &mut out).unwrap();
        }
        "add" => {
            let p = params::add_params(
                f(case, "s1"),
                i(case, "zp1"),
                f(case, "s2"),
                i(case, "zp2"),
                f(case, "s_out"),
                i(case, "zp_out"),
                act(case),
            );
            kernels::add(&p, &input, &i8s(case, "input2"), &mut out).unwrap();
        }
        "softmax" => {
            let p = params::softmax_params(u(case, "rows"), u(case, "depth"), f(case, "beta"), f(case, "s_in"));
            kernels::softmax(&p, &input, &mut out).unwrap();
        }
        op => panic!("unknown op {op}"),
    }
    out
}

#[test]
fn every_kernel_matches_tflite_micro_bit_for_bit() {
    let cases = fixtures();
    let mut per_op: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    let mut failures = vec![];
    for (k, case) in cases.iter().enumerate() {
        let op = case["op"].as_str().unwrap().to_string();
        let want = i8s(case, "output");
        let got = run(case);
        let same = got.iter().zip(&want).filter(|(a, b)| a == b).count();
        let e = per_op.entry(op.clone()).or_default();
        e.0 += 1;
        e.1 += want.len();
        if got != want {
            failures.push(format!("case {k} ({op}): {same}/{} values equal", want.len()));
        }
    }
    // The requantization sweep's shifts, to show the range the fixtures cover.
    let shifts: Vec<i32> = cases
        .iter()
        .filter(|c| c["sweep"].as_bool() == Some(true))
        .flat_map(|c| {
            let (s_in, s_out) = (f(c, "s_in"), f(c, "s_out"));
            f32s(c, "s_w").into_iter().map(move |w| params::channel_multiplier(s_in, w, s_out).1)
        })
        .collect();
    let (lo, hi) = (shifts.iter().min().copied().unwrap_or(0), shifts.iter().max().copied().unwrap_or(0));
    println!("tflm: requantization sweep: {} multipliers, shifts {lo}..={hi}", shifts.len());
    assert!(lo <= -15 && hi >= 1, "the sweep covers shifts {lo}..={hi}");
    for (op, (n, values)) in &per_op {
        println!("tflm: {op}: {n} cases, {values} values bit-exact");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(per_op.len() >= 9, "fixtures cover {} ops", per_op.len());
}
