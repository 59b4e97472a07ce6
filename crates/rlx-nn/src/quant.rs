//! Quantization-aware training: symmetric fake quantization with the straight-through estimator
//! and with a learned step size (LSQ, Esser et al. 2020), post-training calibration, and INT8
//! export of weights with their scales.

use rlx_ir::ops::FakeQuant;
use rlx_ir::ops::rules::dims;
use rlx_ir::{DType, Error, Graph, HostTensor, NodeId, Result, Shape};

/// The largest quantized magnitude of a signed symmetric `bits`-bit code (127 for 8 bits).
pub fn qmax(bits: u32) -> f64 {
    ((1u64 << (bits.clamp(2, 16) - 1)) - 1) as f64
}

/// The `fake_quant` op on a narrow signed `bits`-bit grid (`-qmax ..= qmax`, as `export_int8`).
fn narrow_op(bits: u32, axis: Option<i64>, grad_scale: f64) -> FakeQuant {
    FakeQuant { narrow: true, grad_scale, ..FakeQuant::new(bits.clamp(2, 16) as u8, true, axis) }
}

/// Fake quantization with a per-tensor scale `max|w| / qmax` and the straight-through
/// estimator: the forward pass rounds, the backward pass passes the cotangent through (the
/// `fake_quant` op with its scale gradient stopped, since the scale is computed from `w`).
pub fn fake_quant_ste(g: &mut Graph, w: NodeId, bits: u32) -> NodeId {
    let a = g.abs(w);
    let axes: Vec<i64> = (0..dims(g, w).len() as i64).collect();
    let m = if axes.is_empty() { a } else { g.max(a, &axes, false) };
    let (qs, tiny) = (g.scalar(qmax(bits), DType::F32), g.scalar(1e-12, DType::F32));
    let s = g.div(m, qs);
    let s = g.maximum(s, tiny);
    let z = g.scalar(0.0, DType::F32);
    g.fake_quant_with(w, s, z, narrow_op(bits, None, 0.0))
}

/// LSQ fake quantization of `w` with a learned step `s` (broadcastable to `w`, one element or
/// one channel axis, e.g. `[1, out]` per output channel), on the `fake_quant` op. Gradients: `w`
/// gets the cotangent where `round(w / s)` is inside `-qmax ..= qmax` (STE), zero outside; `s`
/// gets `round(v) - v` inside and `±qmax` outside, scaled by `1 / sqrt(numel(w) / numel(s) * qmax)`
/// as in the paper (the op's `grad_scale`).
pub fn fake_quant_lsq(g: &mut Graph, w: NodeId, s: NodeId, bits: u32) -> NodeId {
    let (wd, sd) = (dims(g, w), dims(g, s));
    let (nw, ns) = (wd.iter().product::<usize>(), sd.iter().product::<usize>().max(1));
    let gs = 1.0 / ((nw / ns).max(1) as f64 * qmax(bits)).sqrt();
    let lead = wd.len().saturating_sub(sd.len());
    let chans: Vec<usize> = (0..sd.len()).filter(|&i| sd[i] != 1).collect();
    let axis = match chans.as_slice() {
        [] => None,
        [a] if sd.len() <= wd.len() && sd[*a] == wd[lead + a] => Some((lead + a) as i64),
        _ => {
            let reason =
                format!("fake_quant_lsq needs a step with one element or one channel axis of w {wd:?}, got {sd:?}");
            g.record(Error::InvalidGraph { graph: g.name().to_string(), reason });
            return w;
        }
    };
    let flat: Vec<usize> = axis.map(|a| vec![wd[a as usize]]).unwrap_or_default();
    let st = g.reshape(s, &flat);
    let z = g.full(Shape::new(&flat, DType::F32), 0.0);
    g.fake_quant_with(w, st, z, narrow_op(bits, axis, gs))
}

/// Per-column (last axis) scale `max|w| / qmax` (min/max calibration of a weight `[in, out]`).
pub fn calibrate_minmax(w: &HostTensor, bits: u32) -> Result<Vec<f32>> {
    col_reduce(w, |col| col.iter().fold(0f64, |m, x| m.max(x.abs())) / qmax(bits))
}

/// Per-column scale from the `p`-th percentile (0 < p <= 100) of `|w|`: clips outliers.
pub fn calibrate_percentile(w: &HostTensor, bits: u32, p: f64) -> Result<Vec<f32>> {
    if !(p > 0.0 && p <= 100.0) {
        return Err(Error::eval("calibrate_percentile", format!("percentile {p} is not in (0, 100]")));
    }
    col_reduce(w, |col| {
        let mut a: Vec<f64> = col.iter().map(|x| x.abs()).collect();
        a.sort_by(f64::total_cmp);
        let k = ((p / 100.0) * (a.len() as f64 - 1.0)).round() as usize;
        a[k.min(a.len() - 1)] / qmax(bits)
    })
}

fn col_reduce(w: &HostTensor, f: impl Fn(&[f64]) -> f64) -> Result<Vec<f32>> {
    let d = w.dims();
    let (rows, cols) = match d.as_slice() {
        [r, c] => (*r, *c),
        _ => return Err(Error::eval("calibrate", format!("expects a [in, out] weight, got dims {d:?}"))),
    };
    let v = w.to_f64_vec()?;
    Ok((0..cols)
        .map(|c| {
            let col: Vec<f64> = (0..rows).map(|r| v[r * cols + c]).collect();
            f(&col).max(1e-12) as f32
        })
        .collect())
}

/// INT8 export of a weight `[in, out]` with per-column `scales`: `clamp(round(w / s), -127, 127)`.
pub fn export_int8(w: &HostTensor, scales: &[f32]) -> Result<HostTensor> {
    let d = w.dims();
    let cols = *d.last().unwrap_or(&0);
    if d.len() != 2 || scales.len() != cols {
        return Err(Error::eval("export_int8", format!("weight dims {d:?} need {cols} scales, got {}", scales.len())));
    }
    let v = w.to_f64_vec()?;
    let q: Vec<i64> =
        v.iter().enumerate().map(|(i, x)| (x / scales[i % cols] as f64).round().clamp(-127.0, 127.0) as i64).collect();
    HostTensor::from_i64(&d, DType::I8, &q)
}

/// `x @ (w_int8 * scale)` in `g`: an int8 weight param `[in, out]` cast and scaled per column.
pub fn int8_dense(g: &mut Graph, x: NodeId, w_q: NodeId, scale: NodeId) -> NodeId {
    let wf = g.cast(w_q, DType::F32);
    let n = dims(g, w_q).last().copied().unwrap_or(0);
    let s = g.reshape(scale, &[1, n]);
    let w = g.mul(wf, s);
    g.matmul(x, w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::interp::evaluate;

    #[test]
    fn lsq_forward_and_gradients_follow_the_paper() {
        // w [2, 2], s [1, 2], 4 bits (q = 7): loss = sum(fq(w, s) * c).
        let (wv, sv, cv) = ([0.33f32, -2.0, 0.07, 0.9], [0.1f32, 0.2], [1.0f32, 2.0, -1.0, 0.5]);
        let mut g = Graph::new("lsq");
        let w = g.param("w", Shape::new(&[2, 2], DType::F32));
        let s = g.param("s", Shape::new(&[1, 2], DType::F32));
        let c = g.input("c", Shape::new(&[2, 2], DType::F32));
        let q = fake_quant_lsq(&mut g, w, s, 4);
        let y = g.mul(q, c);
        let l = g.sum_all(y);
        g.set_outputs(vec![l]);
        let gr = rlx_autodiff::grad_with_loss(&g, &[w, s]).unwrap();
        let feeds = [
            ("w", HostTensor::from_f32(&[2, 2], &wv).unwrap()),
            ("s", HostTensor::from_f32(&[1, 2], &sv).unwrap()),
            ("c", HostTensor::from_f32(&[2, 2], &cv).unwrap()),
        ];
        let o: Vec<Vec<f64>> = evaluate(&gr, &feeds).unwrap().iter().map(|t| t.to_f64_vec().unwrap()).collect();
        let (mut loss, mut dw, mut ds) = (0.0, [0.0; 4], [0.0; 2]);
        let gscale = 1.0 / (2.0f64 * 7.0).sqrt(); // numel(w) / numel(s) = 2 per step
        for i in 0..4 {
            let (wi, si, ci) = (wv[i] as f64, sv[i % 2] as f64, cv[i] as f64);
            let v = wi / si;
            loss += v.round().clamp(-7.0, 7.0) * si * ci;
            let inside = (-7.0..=7.0).contains(&v);
            dw[i] = if inside { ci } else { 0.0 };
            ds[i % 2] += ci * gscale * if inside { v.round() - v } else { v.clamp(-7.0, 7.0) };
        }
        assert!((o[0][0] - loss).abs() < 1e-6, "loss {} vs {loss}", o[0][0]);
        for i in 0..4 {
            assert!((o[1][i] - dw[i]).abs() < 1e-6, "dw[{i}] {} vs {}", o[1][i], dw[i]);
        }
        for j in 0..2 {
            assert!((o[2][j] - ds[j]).abs() < 1e-5, "ds[{j}] {} vs {}", o[2][j], ds[j]);
        }
        assert_eq!(dw[1], 0.0, "w = -2.0 with step 0.2 is outside the 4-bit range");
    }

    #[test]
    fn ste_passes_gradients_and_export_rounds_to_int8() {
        let mut g = Graph::new("ste");
        let w = g.param("w", Shape::new(&[3], DType::F32));
        let q = fake_quant_ste(&mut g, w, 8);
        let l = g.sum_all(q);
        g.set_outputs(vec![q, l]);
        let mut g2 = g.clone();
        g2.set_outputs(vec![l]);
        let gr = rlx_autodiff::grad(&g2, &[w]).unwrap();
        let wv = HostTensor::from_f32(&[3], &[1.27, -0.5, 0.004]).unwrap();
        let o = evaluate(&g, &[("w", wv.clone())]).unwrap()[0].to_f64_vec().unwrap();
        for (a, b) in o.iter().zip([1.27, -0.5, 0.0]) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        assert_eq!(evaluate(&gr, &[("w", wv)]).unwrap()[0].to_f64_vec().unwrap(), vec![1.0; 3]);
        let w = HostTensor::from_f32(&[2, 2], &[0.5, -1.0, 0.25, 2.0]).unwrap();
        let s = calibrate_minmax(&w, 8).unwrap();
        assert!((s[0] - 0.5 / 127.0).abs() < 1e-9 && (s[1] - 2.0 / 127.0).abs() < 1e-9);
        let q = export_int8(&w, &s).unwrap().to_i64_vec().unwrap();
        assert_eq!(q, vec![127, -64, 64, 127]);
        let p = calibrate_percentile(&w, 8, 50.0).unwrap();
        assert!(p[0] <= s[0] && p[1] <= s[1]);
        assert!(calibrate_percentile(&w, 8, 0.0).is_err());
    }
}
