//! Shared test helpers: f64 samples, evaluation, comparison.
#![allow(dead_code)]

pub mod session;

use rlx_ir::ops::util::rand_f64;
use rlx_ir::{DType, Data, Graph, HostTensor, Sample, interp};

/// Feeds named `in0`, `in1`, ... plus extras.
pub type Feeds = Vec<(String, HostTensor)>;

/// Evaluates with the reference interpreter.
pub fn eval(g: &Graph, feeds: &Feeds) -> Vec<HostTensor> {
    let f: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    interp::evaluate(g, &f).unwrap_or_else(|e| panic!("evaluating {}: {e}", g.name()))
}

/// The sample with every float input widened to f64.
pub fn to_f64(s: &Sample) -> Sample {
    let inputs = s.inputs.iter().map(|t| if t.dtype().is_float() { t.cast(DType::F64) } else { t.clone() }).collect();
    Sample { label: s.label.clone(), op: s.op.clone(), inputs }
}

/// Float values of a tensor.
pub fn vals(t: &HostTensor) -> Vec<f64> {
    match &t.data {
        Data::F(v) => v.clone(),
        _ => t.to_f64_vec().unwrap_or_default(),
    }
}

/// `x + h * d`, elementwise (f64 tensors).
pub fn axpy(x: &HostTensor, h: f64, d: &HostTensor) -> HostTensor {
    let v: Vec<f64> = vals(x).iter().zip(vals(d)).map(|(a, b)| a + h * b).collect();
    HostTensor::from_f64(&x.dims(), x.dtype(), &v).expect("axpy")
}

/// A deterministic random tensor like `t` (f64).
pub fn rand_like(t: &HostTensor, seed: u64) -> HostTensor {
    HostTensor::from_f64(&t.dims(), DType::F64, &rand_f64(t.numel(), -1.0, 1.0, seed)).expect("rand")
}

/// Max of |a - b| / (1 + max |b|), or an error naming the first mismatch beyond `tol`.
pub fn close(a: &[f64], b: &[f64], tol: f64) -> Result<(), String> {
    if a.len() != b.len() {
        return Err(format!("lengths differ: {} vs {}", a.len(), b.len()));
    }
    let scale = 1.0 + b.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let bad = (x - y).abs() > tol * scale || x.is_nan() != y.is_nan();
        if bad {
            return Err(format!("element {i}: {x} vs {y} (tol {tol} x {scale})"));
        }
    }
    Ok(())
}

/// Dot product.
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// One CPU backend shared by every test in the binary.
pub fn cpu() -> &'static rlx_cpu::CpuBackend {
    static CPU: std::sync::OnceLock<rlx_cpu::CpuBackend> = std::sync::OnceLock::new();
    CPU.get_or_init(rlx_cpu::CpuBackend::new)
}
