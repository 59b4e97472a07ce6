//! Shape checks, sample inputs and small graph helpers shared by the ops.

use rlx_ir::ops::util::rand_f64;
use rlx_ir::{DType, Dim, Graph, HostTensor, NodeId, Op, Sample, Shape};

/// The common dtype, which must be f32 or f64 (the kernels' and faer's types).
pub(crate) fn check_float(ins: &[&Shape]) -> Result<DType, String> {
    let dt = rlx_ir::ops::util::same_dtype(ins)?;
    if !matches!(dt, DType::F32 | DType::F64) {
        return Err(format!("needs f32 or f64, got {dt}"));
    }
    Ok(dt)
}

/// `n` of a `[..., n, n]` input named `what`.
pub(crate) fn matrix_n(s: &Shape, what: &str) -> Result<Dim, String> {
    let d = &s.dims;
    if d.len() < 2 || d[d.len() - 1] != d[d.len() - 2] {
        return Err(format!("{what} must be [..., n, n], got {s}"));
    }
    Ok(d[d.len() - 1].clone())
}

/// A node's rank.
pub(crate) fn rank(g: &Graph, x: NodeId) -> usize {
    g.shape(x).map_or(0, Shape::rank)
}

/// What the first input of a sample must be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Matrix {
    /// Well conditioned: uniform in [-1, 1] plus `n I`.
    General,
    /// Symmetric positive definite: `M M^T / n + I`.
    Spd,
    /// Uniform in [-1, 1], any shape (full rank almost surely).
    FullRank,
    /// Symmetric, eigenvalues spread apart: `(M + M^T) / 2 + diag(0, 1, .., n - 1)`.
    Symmetric,
}

/// Sample inputs of these dims: the first a batch of square matrices of the given kind, the rest
/// uniform in [-1, 1].
pub(crate) fn inputs(dims: &[&[usize]], dt: DType, seed: u64, kind: Matrix) -> Vec<HostTensor> {
    dims.iter()
        .enumerate()
        .map(|(i, d)| {
            let numel: usize = d.iter().product();
            let mut v = rand_f64(numel, -1.0, 1.0, seed + i as u64);
            if i == 0 && kind != Matrix::FullRank {
                let n = d[d.len() - 1];
                for m in v.chunks_mut(n * n) {
                    match kind {
                        Matrix::General => (0..n).for_each(|j| m[j * n + j] += n as f64),
                        Matrix::FullRank => {}
                        Matrix::Symmetric => {
                            let src = m.to_vec();
                            for r in 0..n {
                                for c in 0..n {
                                    m[r * n + c] = 0.5 * (src[r * n + c] + src[c * n + r]);
                                }
                                m[r * n + r] += r as f64;
                            }
                        }
                        Matrix::Spd => {
                            let src = m.to_vec();
                            for r in 0..n {
                                for c in 0..n {
                                    let dot: f64 = (0..n).map(|p| src[r * n + p] * src[c * n + p]).sum();
                                    m[r * n + c] = dot / n as f64 + f64::from(u8::from(r == c));
                                }
                            }
                        }
                    }
                }
            }
            HostTensor::from_f64(d, dt, &v).expect("sample")
        })
        .collect()
}

/// One f64 and one f32 sample per case of input dims.
pub(crate) fn samples(name: &str, op: &Op, cases: &[&[&[usize]]], kind: Matrix) -> Vec<Sample> {
    let mut out = vec![];
    for (dt, s) in [(DType::F64, 0), (DType::F32, 50)] {
        for (i, dims) in cases.iter().enumerate() {
            out.push(Sample::new(
                format!("{name}/{dt}/{dims:?}"),
                op.clone(),
                inputs(dims, dt, s + 10 * i as u64, kind),
            ));
        }
    }
    out
}

/// `[n, n]` constant: the identity.
pub(crate) fn eye(g: &mut Graph, n: usize, dt: DType) -> NodeId {
    let v: Vec<f64> = (0..n * n).map(|i| f64::from(u8::from(i / n == i % n))).collect();
    g.constant(HostTensor::from_f64(&[n, n], dt, &v).expect("eye"))
}

/// The trace over the last two axes.
pub(crate) fn trace(g: &mut Graph, x: NodeId) -> NodeId {
    let d = rlx_ir::ops::rules::dims(g, x);
    let i = eye(g, d[d.len() - 1], g.dtype(x));
    let m = g.mul(x, i);
    g.sum(m, &[-2, -1], false)
}
