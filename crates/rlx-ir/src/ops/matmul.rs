//! Matrix multiplication: 2-D, and batched with numpy-broadcast batch dims.

use crate::ops::rules;
use crate::ops::util::{broadcast_index_map, fixed, rand_f64, rand_i64, same_dtype};
use crate::shape::broadcast_dims;
use crate::{
    DType, DTypeClass, Data, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity,
};
use serde::{Deserialize, Serialize};

/// `a @ b` with a `[..., m, k]` and b `[..., k, n]`; batch dims broadcast. With `transpose_a`
/// (`transpose_b`) the last two axes of a (b) are swapped first: the optimizer folds transposes here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MatMul {
    /// Use a `[..., k, m]` as its transpose.
    #[serde(default, skip_serializing_if = "crate::ops::util::is_false")]
    pub transpose_a: bool,
    /// Use b `[..., n, k]` as its transpose.
    #[serde(default, skip_serializing_if = "crate::ops::util::is_false")]
    pub transpose_b: bool,
}

/// Splits static matmul input dims into (a batch dims, b batch dims, m, k, n), untransposed.
pub fn matmul_dims(a: &[usize], b: &[usize]) -> (Vec<usize>, Vec<usize>, usize, usize, usize) {
    matmul_dims_t(a, b, false, false)
}

/// As `matmul_dims`, reading a (b) as transposed in its last two axes when `ta` (`tb`).
pub fn matmul_dims_t(a: &[usize], b: &[usize], ta: bool, tb: bool) -> (Vec<usize>, Vec<usize>, usize, usize, usize) {
    let (ra, rb) = (a.len(), b.len());
    let (m, k) = if ta { (a[ra - 1], a[ra - 2]) } else { (a[ra - 2], a[ra - 1]) };
    let n = if tb { b[rb - 2] } else { b[rb - 1] };
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
        let (ra, rb) = (a.len(), b.len());
        let (m, ka) = if self.transpose_a { (&a[ra - 1], &a[ra - 2]) } else { (&a[ra - 2], &a[ra - 1]) };
        let (kb, n) = if self.transpose_b { (&b[rb - 1], &b[rb - 2]) } else { (&b[rb - 2], &b[rb - 1]) };
        if ka != kb {
            return Err(format!("inner dims differ: {ka} vs {kb}"));
        }
        let mut out = broadcast_dims(&a[..ra - 2], &b[..rb - 2])?;
        out.push(m.clone());
        out.push(n.clone());
        Ok(Shape::with_dims(out, dt))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let (ad, bd) = (ins[0].dims(), ins[1].dims());
        let (ba, bb, m, k, n) = matmul_dims_t(&ad, &bd, self.transpose_a, self.transpose_b);
        // Element strides of a[i, p] and b[p, j], honoring the transpose flags.
        let (sai, sap) = if self.transpose_a { (1, m) } else { (k, 1) };
        let (sbp, sbj) = if self.transpose_b { (1, k) } else { (n, 1) };
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
                                acc = $mac(acc, $a[pa + i * sai + p * sap], $b[pb + p * sbp + j * sbj]);
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
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], _out: NodeId) -> Option<NodeId> {
        // Bilinear: d(a @ b) = da @ b + a @ db, with the same transpose flags.
        let pa = t[0].map(|ta| g.add_node(self.clone(), &[ta, ins[1]]));
        let pb = t[1].map(|tb| g.add_node(self.clone(), &[ins[0], tb]));
        match (pa, pb) {
            (Some(a), Some(b)) => Some(g.add(a, b)),
            (a, b) => a.or(b),
        }
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        // With A = op(a), B = op(b): dA = ct @ B^T and dB = A^T @ ct, transposed back if flagged.
        let (a, b) = (ins[0], ins[1]);
        let (ad, bd) = (rules::dims(g, a), rules::dims(g, b));
        let mm = |ta, tb| MatMul { transpose_a: ta, transpose_b: tb };
        let da = g.add_node(mm(false, !self.transpose_b), &[ct, b]);
        let da = if self.transpose_a { rules::swap_last(g, da) } else { da };
        let db = g.add_node(mm(!self.transpose_a, false), &[a, ct]);
        let db = if self.transpose_b { rules::swap_last(g, db) } else { db };
        Some(vec![Some(rules::sum_to(g, da, &ad)), Some(rules::sum_to(g, db, &bd))])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        // Lift batched inputs so the batch axis leads the broadcast batch dims.
        let rank = ins.iter().zip(batched).map(|(&x, &b)| rules::dims(g, x).len() - usize::from(b)).max()?;
        let l: Vec<NodeId> =
            ins.iter().zip(batched).map(|(&x, &b)| if b { rules::lift(g, x, rank) } else { x }).collect();
        Some(g.add_node(self.clone(), &l))
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
                    MatMul::default(),
                    vec![t(a, *dt, i as u64), t(b, *dt, 9 + i as u64)],
                )
            })
            .collect();
        // Transposed operands, as the optimizer produces them.
        let flags =
            [(true, false, [4usize, 3], [4usize, 5]), (false, true, [3, 4], [5, 4]), (true, true, [4, 3], [5, 4])];
        for (ta, tb, a, b) in flags {
            let op = MatMul { transpose_a: ta, transpose_b: tb };
            let ins = vec![t(&[2, a[0], a[1]], DType::F32, 20), t(&b, DType::F32, 21)];
            out.push(Sample::new(format!("matmul/t{}{}", ta as u8, tb as u8), op.clone(), ins));
            let ins = vec![t(&a, DType::F64, 22), t(&b, DType::F64, 23)];
            out.push(Sample::new(format!("matmul/f64/t{}{}", ta as u8, tb as u8), op, ins));
        }
        let ai = HostTensor::from_i64(&[2, 3], DType::I32, &rand_i64(6, -4, 5, 1)).expect("sample");
        let bi = HostTensor::from_i64(&[3, 2], DType::I32, &rand_i64(6, -4, 5, 2)).expect("sample");
        out.push(Sample::new("matmul/i32", MatMul::default(), vec![ai, bi]));
        out
    }
}

impl Graph {
    /// Matrix product `a @ b` (batched, broadcasting batch dims).
    pub fn matmul(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.add_node(MatMul::default(), &[a, b])
    }

    /// `a @ b` with either operand read transposed in its last two axes.
    pub fn matmul_t(&mut self, a: NodeId, b: NodeId, transpose_a: bool, transpose_b: bool) -> NodeId {
        self.add_node(MatMul { transpose_a, transpose_b }, &[a, b])
    }
}
