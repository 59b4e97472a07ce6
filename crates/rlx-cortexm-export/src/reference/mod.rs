//! The INT8 reference: a [`QModel`] written as an rlx graph and run by rlx's reference
//! interpreter (`rlx_ir::interp`), independently of the Cortex-M kernels. Values are integers
//! held in f64, where every step is exact: accumulators by matmul / conv2d (|acc| < 2^31), and
//! the requantization (`SaturatingRoundingDoublingHighMul`, then `RoundingDivideByPOT`) with the
//! Q31 multiplier split into 16-bit halves so that no product exceeds 2^53, floor through the
//! `floor` op on values scaled by powers of two, and C's truncating division rebuilt from it.
//! Softmax is TFLite Micro's fixed-point form written out the same way (`softmax.rs`).

mod softmax;

use crate::error::{ExportError, Result};
use crate::qmodel::{QModel, QOp};
use rlx_cortexm::kernels::OutQuant;
use rlx_ir::{DType, Graph, HostTensor, NodeId, Shape};

const F: DType = DType::F64;

fn c(g: &mut Graph, v: f64) -> NodeId {
    g.scalar(v, F)
}

fn cvec(g: &mut Graph, v: &[f64]) -> Result<NodeId> {
    Ok(g.constant(HostTensor::from_f64(&[v.len()], F, v)?))
}

/// `where(cond, 1, 0)`.
fn ind(g: &mut Graph, cond: NodeId) -> NodeId {
    let (one, zero) = (c(g, 1.0), c(g, 0.0));
    g.where_(cond, one, zero)
}

/// `floor(x * 2^-k)`, exact for integer `x` in f64.
fn floor_pot(g: &mut Graph, x: NodeId, k: NodeId) -> NodeId {
    let s = g.mul(x, k);
    g.floor(s)
}

/// Requantizes the int32 accumulator `acc` (channels on the last axis) by per-channel Q31
/// multipliers and shifts, adds the zero point and clamps.
pub fn requantize(g: &mut Graph, acc: NodeId, mult: &[i32], shift: &[i32], out: OutQuant) -> Result<NodeId> {
    let pow = |e: i32| 2f64.powi(e);
    let left: Vec<f64> = shift.iter().map(|&s| pow(s.max(0))).collect();
    let mh: Vec<f64> = mult.iter().map(|&m| (m >> 16) as f64).collect();
    let ml: Vec<f64> = mult.iter().map(|&m| (m & 0xffff) as f64).collect();
    let right: Vec<i32> = shift.iter().map(|&s| (-s).max(0)).collect();
    let (left, mh, ml) = (cvec(g, &left)?, cvec(g, &mh)?, cvec(g, &ml)?);
    let pe: Vec<f64> = right.iter().map(|&e| pow(e)).collect();
    let inv_pe: Vec<f64> = right.iter().map(|&e| pow(-e)).collect();
    let thr: Vec<f64> = right.iter().map(|&e| ((1i64 << e) - 1) as f64 / 2.0).map(f64::floor).collect();
    let (pe, inv_pe, thr) = (cvec(g, &pe)?, cvec(g, &inv_pe)?, cvec(g, &thr)?);
    let zero = c(g, 0.0);

    // SaturatingRoundingDoublingHighMul(a, m) = trunc((a m + nudge) / 2^31).
    let a = g.mul(acc, left);
    let nonneg = g.ge(a, zero);
    let (n_pos, n_neg) = (c(g, (1u64 << 30) as f64), c(g, 1.0 - (1u64 << 30) as f64));
    let nudge = g.where_(nonneg, n_pos, n_neg);
    let hi = g.mul(a, mh); // a * (m >> 16), |.| < 2^46
    let lo = g.mul(a, ml);
    let lo = g.add(lo, nudge); // a * (m & 0xffff) + nudge, |.| < 2^48
    let k15 = c(g, pow(-15));
    let fa = floor_pot(g, hi, k15);
    let p15 = c(g, pow(15));
    let fa15 = g.mul(fa, p15);
    let ra = g.sub(hi, fa15); // hi = fa 2^15 + ra, 0 <= ra < 2^15
    let p16 = c(g, pow(16));
    let ra16 = g.mul(ra, p16);
    let cc = g.add(ra16, lo); // (a m + nudge) = fa 2^31 + cc
    let k31 = c(g, pow(-31));
    let fc = floor_pot(g, cc, k31);
    let p31 = c(g, pow(31));
    let fc31 = g.mul(fc, p31);
    let rem = g.sub(cc, fc31);
    let fl = g.add(fa, fc); // floor((a m + nudge) / 2^31)
    let neg = g.lt(fl, zero);
    let has_rem = g.gt(rem, zero);
    let (i_neg, i_rem) = (ind(g, neg), ind(g, has_rem));
    let up = g.mul(i_neg, i_rem);
    let r = g.add(fl, up); // truncation toward zero

    // RoundingDivideByPOT(r, e): floor(r / 2^e) + (remainder > threshold), threshold one more
    // for negative r.
    let q = floor_pot(g, r, inv_pe);
    let qpe = g.mul(q, pe);
    let rem2 = g.sub(r, qpe);
    let rneg = g.lt(r, zero);
    let rneg = ind(g, rneg);
    let thr = g.add(thr, rneg);
    let above = g.gt(rem2, thr);
    let above = ind(g, above);
    let y = g.add(q, above);

    let zp = c(g, out.offset as f64);
    let y = g.add(y, zp);
    let (lo, hi) = (c(g, out.act_min as f64), c(g, out.act_max as f64));
    let y = g.maximum(y, lo);
    Ok(g.minimum(y, hi))
}

/// The model as an rlx graph over a batch of `batch` inputs: input `x` (int8 values as f64, the
/// model input's dims with the batch replaced), one output.
pub fn graph(q: &QModel, batch: usize) -> Result<Graph> {
    let mut g = Graph::new("int8_reference");
    let with_batch = |d: &[usize]| -> Vec<usize> {
        let mut d = d.to_vec();
        if let Some(b) = d.first_mut() {
            *b = batch;
        }
        d
    };
    let mut vals: Vec<Option<NodeId>> = vec![None; q.tensors.len()];
    let x = g.input("x", Shape::new(&with_batch(&q.tensors[q.input].dims), F));
    vals[q.input] = Some(x);
    let derived = q.derive();
    for (l, d) in q.layers.iter().zip(&derived) {
        let ti = &q.tensors[l.input];
        let to = &q.tensors[l.output];
        let src = ti.alias_of.unwrap_or(l.input);
        let x = vals[src]
            .ok_or_else(|| ExportError::Scheme { node: l.node.clone(), reason: "input never computed".into() })?;
        let x = g.reshape(x, &with_batch(&ti.dims));
        let y = match &l.op {
            QOp::FullyConnected { weights, bias, .. } => {
                let (nout, nin) = (bias.len(), weights.len() / bias.len().max(1));
                let off = c(&mut g, -ti.zero_point as f64);
                let xo = g.add(x, off);
                let wt: Vec<f64> = (0..nin * nout).map(|k| weights[(k % nout) * nin + k / nout] as f64).collect();
                let w = g.constant(HostTensor::from_f64(&[nin, nout], F, &wt)?);
                let acc = g.matmul(xo, w);
                let b: Vec<f64> = bias.iter().map(|&b| b as f64).collect();
                let b = cvec(&mut g, &b)?;
                let acc = g.add(acc, b);
                requantize(&mut g, acc, &d.multiplier, &d.shift, d.out)?
            }
            QOp::Conv2d { weights, bias, window, depthwise_multiplier, .. } => {
                let (i, o) = (ti.nhwc(), to.nhwc());
                let [kh, kw] = window.kernel;
                let off = c(&mut g, -ti.zero_point as f64);
                let xo = g.add(x, off);
                let xn = g.transpose(xo, &[0, 3, 1, 2]);
                // OIHW weights back from OHWI / [1, kh, kw, O].
                let (cg, groups) = if *depthwise_multiplier == 0 { (i.c, 1) } else { (1, i.c) };
                let mut w = vec![0f64; o.c * cg * kh * kw];
                for oc in 0..o.c {
                    for ic in 0..cg {
                        for y in 0..kh {
                            for xx in 0..kw {
                                let from = if *depthwise_multiplier == 0 {
                                    ((oc * kh + y) * kw + xx) * cg + ic
                                } else {
                                    (y * kw + xx) * o.c + oc
                                };
                                w[((oc * cg + ic) * kh + y) * kw + xx] = weights[from] as f64;
                            }
                        }
                    }
                }
                let w = g.constant(HostTensor::from_f64(&[o.c, cg, kh, kw], F, &w)?);
                let acc = g.conv2d(xn, w, window.stride, window.pad, window.dilation, groups);
                let acc = g.transpose(acc, &[0, 2, 3, 1]);
                let b: Vec<f64> = bias.iter().map(|&b| b as f64).collect();
                let b = cvec(&mut g, &b)?;
                let acc = g.add(acc, b);
                requantize(&mut g, acc, &d.multiplier, &d.shift, d.out)?
            }
            QOp::MaxPool2d { kernel, stride, pad } => {
                let xn = g.transpose(x, &[0, 3, 1, 2]);
                let y = g.max_pool2d(xn, *kernel, *stride, *pad);
                g.transpose(y, &[0, 2, 3, 1])
            }
            QOp::AvgPool2d { kernel, stride, pad } => {
                avg_pool(&mut g, x, ti.nhwc(), to.nhwc(), *kernel, *stride, *pad)?
            }
            QOp::Add { act } => {
                let t2 = l.input2.unwrap_or(l.input);
                let (u, v) = (&q.tensors[t2], to);
                let a = rlx_cortexm::params::add_params(
                    ti.scale,
                    ti.zero_point,
                    u.scale,
                    u.zero_point,
                    v.scale,
                    v.zero_point,
                    *act,
                );
                let x2 = vals[q.tensors[t2].alias_of.unwrap_or(t2)].ok_or_else(|| ExportError::Scheme {
                    node: l.node.clone(),
                    reason: "second input never computed".into(),
                })?;
                let x2 = g.reshape(x2, &with_batch(&q.tensors[t2].dims));
                // TFLite's add: each input offset, shifted left by 20 and rescaled to twice the
                // larger input scale; the sum rescaled to the output.
                let raw = OutQuant { offset: 0, act_min: i32::MIN, act_max: i32::MAX };
                let side = |g: &mut Graph, x: NodeId, off: i32, m: i32, s: i32| -> Result<NodeId> {
                    let o = c(g, off as f64);
                    let xo = g.add(x, o);
                    let sh = c(g, (1i64 << a.left_shift) as f64);
                    let xs = g.mul(xo, sh);
                    requantize(g, xs, &[m], &[s], raw)
                };
                let s1 = side(&mut g, x, a.input1_offset, a.input1_multiplier, a.input1_shift)?;
                let s2 = side(&mut g, x2, a.input2_offset, a.input2_multiplier, a.input2_shift)?;
                let sum = g.add(s1, s2);
                requantize(&mut g, sum, &[a.output_multiplier], &[a.output_shift], a.out)?
            }
            QOp::Softmax { beta } => {
                let dims = with_batch(&ti.dims);
                let depth = *dims.last().unwrap_or(&1);
                let rows = dims.iter().product::<usize>() / depth.max(1);
                let p = rlx_cortexm::params::softmax_params(rows, depth, *beta, ti.scale);
                let x2 = g.reshape(x, &[rows, depth]);
                let y = softmax::softmax(&mut g, x2, &p);
                g.reshape(y, &dims)
            }
        };
        vals[l.output] = Some(y);
    }
    let root = q.tensors[q.output].alias_of.unwrap_or(q.output);
    let y = vals[root].ok_or_else(|| ExportError::Scheme { node: "output".into(), reason: "never computed".into() })?;
    let y = g.reshape(y, &with_batch(&q.tensors[q.output].dims));
    g.set_outputs(vec![y]);
    g.verify()?;
    Ok(g)
}

/// TFLite's average: the in-bounds sum (a depthwise conv with ones, zero padding) divided by the
/// in-bounds count with `(sum +- count / 2) / count` truncated, i.e. rounded half away from zero.
fn avg_pool(
    g: &mut Graph,
    x: NodeId,
    i: rlx_cortexm::kernels::Nhwc,
    o: rlx_cortexm::kernels::Nhwc,
    kernel: [usize; 2],
    stride: [usize; 2],
    pad: [usize; 2],
) -> Result<NodeId> {
    let xn = g.transpose(x, &[0, 3, 1, 2]);
    let ones =
        g.constant(HostTensor::from_f64(&[i.c, 1, kernel[0], kernel[1]], F, &vec![1.0; i.c * kernel[0] * kernel[1]])?);
    let sum = g.conv2d(xn, ones, stride, pad, [1, 1], i.c);
    let sum = g.transpose(sum, &[0, 2, 3, 1]);
    let span = |out: usize, k: usize, s: usize, p: usize, size: usize| {
        let start = (out * s) as isize - p as isize;
        (0..k as isize).filter(|d| (0..size as isize).contains(&(start + d))).count()
    };
    let mut counts = vec![];
    for oy in 0..o.h {
        for ox in 0..o.w {
            let cnt = span(oy, kernel[0], stride[0], pad[0], i.h) * span(ox, kernel[1], stride[1], pad[1], i.w);
            counts.push(cnt as f64);
        }
    }
    let half: Vec<f64> = counts.iter().map(|&c| (c / 2.0).floor()).collect();
    let cnt = g.constant(HostTensor::from_f64(&[o.h, o.w, 1], F, &counts)?);
    let half = g.constant(HostTensor::from_f64(&[o.h, o.w, 1], F, &half)?);
    let zero = c(g, 0.0);
    let pos = g.gt(sum, zero);
    let up = g.add(sum, half);
    let down = g.sub(sum, half);
    let t = g.where_(pos, up, down);
    let qf = g.div(t, cnt);
    // C's truncation: sign(q) floor(|q|); the quotient's rounding error is far below 1 / count.
    let a = g.abs(qf);
    let f = g.floor(a);
    let s = g.sign(qf);
    Ok(g.mul(s, f))
}

/// Runs the reference on `inputs` (one int8 vector per sample) and returns the int8 outputs.
pub fn run(q: &QModel, inputs: &[Vec<i8>]) -> Result<Vec<Vec<i8>>> {
    let g = graph(q, inputs.len())?;
    let mut dims = q.tensors[q.input].dims.clone();
    dims[0] = inputs.len();
    let flat: Vec<f64> = inputs.iter().flatten().map(|&v| v as f64).collect();
    let x = HostTensor::from_f64(&dims, F, &flat)?;
    let out = rlx_ir::interp::evaluate(&g, &[("x", x)])?;
    let v = out[0].to_f64_vec()?;
    let per = q.tensors[q.output].len() / q.tensors[q.output].dims[0].max(1);
    Ok(v.chunks(per.max(1)).map(|r| r.iter().map(|&x| x as i8).collect()).collect())
}
