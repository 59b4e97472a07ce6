//! Matrix multiplication: 2-D, and batched with numpy-broadcast batch dims.

use crate::ops::util::{broadcast_index_map, fixed, rand_f64, rand_i64, same_dtype};
use crate::shape::broadcast_dims;
use crate::{
    DType, DTypeClass, Data, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity,
};
use serde::{Deserialize, Serialize};

/// `a @ b` with a `[..., m, k]` and b `[..., k, n]`; batch dims broadcast.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatMul {}

/// Splits static matmul input dims into (a batch dims, b batch dims, m, k, n).
pub fn matmul_dims(a: &[usize], b: &[usize]) -> (Vec<usize>, Vec<usize>, usize, usize, usize) {
    let (ra, rb) = (a.len(), b.len());
    let (m, k, n) = (a[ra - 2], a[ra - 1], b[rb - 1]);
    (a[..ra - 2].to_vec(), b[..rb - 2].to_vec(), m, k, n)
}

impl OpDef for MatMul {
    fn name(&self) -> &'static str {
        "matmul"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::CONTRACTION
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let dt = same_dtype(ins)?;
        if !matches!(dt.class(), DTypeClass::Float | DTypeClass::Int) {
            return Err(format!("dtype {dt} is not supported"));
        }
        let (a, b) = (&ins[0].dims, &ins[1].dims);
        if a.len() < 2 || b.len() < 2 {
            return Err("both inputs need rank >= 2 (use reshape for vectors)".into());
        }
        let (ka, kb) = (&a[a.len() - 1], &b[b.len() - 2]);
        if ka != kb {
            return Err(format!("inner dims differ: {ka} vs {kb}"));
        }
        let mut out = broadcast_dims(&a[..a.len() - 2], &b[..b.len() - 2])?;
        out.push(a[a.len() - 2].clone());
        out.push(b[b.len() - 1].clone());
        Ok(Shape::with_dims(out, dt))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let (ad, bd) = (ins[0].dims(), ins[1].dims());
        let (ba, bb, m, k, n) = matmul_dims(&ad, &bd);
        let od = fixed(&out.dims).unwrap_or_default();
        let batch = &od[..od.len() - 2];
        let ia = broadcast_index_map(batch, &ba);
        let ib = broadcast_index_map(batch, &bb);
        let nb = ia.len();
        macro_rules! mm {
            ($a:expr, $b:expr, $zero:expr, $mac:expr) => {{
                let mut o = vec![$zero; nb * m * n];
                for bi in 0..nb {
                    let (pa, pb) = (ia[bi] * m * k, ib[bi] * k * n);
                    for i in 0..m {
                        for j in 0..n {
                            let mut acc = $zero;
                            for p in 0..k {
                                acc = $mac(acc, $a[pa + i * k + p], $b[pb + p * n + j]);
                            }
                            o[bi * m * n + i * n + j] = acc;
                        }
                    }
                }
                o
            }};
        }
        let data = match (&ins[0].data, &ins[1].data) {
            (Data::F(a), Data::F(b)) => Data::F(mm!(a, b, 0.0, |acc: f64, x: f64, y: f64| x.mul_add(y, acc))),
            (Data::I(a), Data::I(b)) => {
                Data::I(mm!(a, b, 0i64, |acc: i64, x: i64, y: i64| acc.wrapping_add(x.wrapping_mul(y))))
            }
            _ => return Err(Error::eval("matmul", "unsupported dtype")),
        };
        HostTensor::new(out.clone(), data)
    }
    fn samples() -> Vec<Sample> {
        let t = |d: &[usize], dt, s| {
            HostTensor::from_f64(d, dt, &rand_f64(d.iter().product(), -1.0, 1.0, s)).expect("sample")
        };
        let cases: [(&[usize], &[usize], DType); 6] = [
            (&[3, 4], &[4, 5], DType::F32),
            (&[1, 7], &[7, 2], DType::F32),
            (&[2, 3, 4], &[4, 2], DType::F32),
            (&[2, 1, 3, 4], &[3, 4, 5], DType::F64),
            (&[16, 33], &[33, 17], DType::F32),
            (&[2, 3], &[3, 2], DType::F16),
        ];
        let mut out: Vec<Sample> = cases
            .iter()
            .enumerate()
            .map(|(i, (a, b, dt))| {
                Sample::new(
                    format!("matmul/{dt}{a:?}x{b:?}"),
                    MatMul {},
                    vec![t(a, *dt, i as u64), t(b, *dt, 9 + i as u64)],
                )
            })
            .collect();
        let ai = HostTensor::from_i64(&[2, 3], DType::I32, &rand_i64(6, -4, 5, 1)).expect("sample");
        let bi = HostTensor::from_i64(&[3, 2], DType::I32, &rand_i64(6, -4, 5, 2)).expect("sample");
        out.push(Sample::new("matmul/i32", MatMul {}, vec![ai, bi]));
        out
    }
}

impl Graph {
    /// Matrix product `a @ b` (batched, broadcasting batch dims).
    pub fn matmul(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.add_node(MatMul {}, &[a, b])
    }
}
