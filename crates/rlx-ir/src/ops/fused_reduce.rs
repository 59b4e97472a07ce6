//! `fused_reduce`: a reduction (sum, mean, max, min, prod) of an elementwise region, such as
//! `mean(x * x)` in an rms_norm written by hand or `sum(exp(x - m))`. The optimizer builds it;
//! backends evaluate the region inline while reducing, so its result is never stored, and
//! backends without it get `decompose` (the region, then the reduction).

use crate::ops::fused::{Fused, Instr};
use crate::ops::norm::rt;
use crate::ops::{BinaryKind, Reduce, ReduceKind, UnaryKind};
use crate::{DType, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// A reduction of an elementwise region. Inputs: the region's inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FusedReduce {
    /// The elementwise region that makes the reduction's input.
    pub prologue: Fused,
    /// The reduction.
    pub reduce: Reduce,
}

impl FusedReduce {
    /// The region's type on these input types.
    fn region(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        self.prologue.infer(ins)
    }
}

impl OpDef for FusedReduce {
    fn name(&self) -> &'static str {
        "fused_reduce"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE | OpTraits::REDUCTION
    }
    fn arity(&self) -> Arity {
        Arity::AtLeast(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let x = self.region(ins)?;
        if !x.dtype.is_float() {
            return Err(format!("the region must be float, got {}", x.dtype));
        }
        self.reduce.infer(&[&x])
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let shapes: Vec<&Shape> = ins.iter().map(|t| &t.shape).collect();
        let xs = self.region(&shapes).map_err(|e| crate::Error::eval("fused_reduce", e))?;
        let x = self.prologue.reference(ins, &xs)?;
        self.reduce.reference(&[&x], out)
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        let x = g.try_add(self.prologue.clone(), ins).ok()?;
        g.try_add(self.reduce.clone(), &[x]).ok()
    }
    fn samples() -> Vec<Sample> {
        use Instr::*;
        // mean(x * x) over the last axis (rms_norm by hand).
        let square = Fused { program: vec![Input(0), Input(0), Binary(BinaryKind::Mul, 0, 1)] };
        // sum(exp(x - m)) with a per-row m [.., 1].
        let exp_shift =
            Fused { program: vec![Input(0), Input(1), Binary(BinaryKind::Sub, 0, 1), Unary(UnaryKind::Exp, 2)] };
        // max(|x| * 0.5 + bias) with a [n] bias.
        let abs_bias = Fused {
            program: vec![
                Input(0),
                Unary(UnaryKind::Abs, 0),
                Const(0.5),
                Binary(BinaryKind::Mul, 1, 2),
                Input(1),
                Binary(BinaryKind::Add, 3, 4),
            ],
        };
        let red = |kind, axes: &[i64], keep_dims| Reduce { kind, axes: axes.to_vec(), keep_dims };
        let mut out = vec![];
        for (i, dt) in [DType::F32, DType::F64, DType::F16, DType::BF16].into_iter().enumerate() {
            let s = 300 + 10 * i as u64;
            let x = rt(&[3, 8], dt, -2.0, 2.0, s);
            let op = FusedReduce { prologue: square.clone(), reduce: red(ReduceKind::Mean, &[-1], true) };
            out.push(Sample::new(format!("fused_reduce/mean_square/{dt}"), op, vec![x.clone()]));
            let m = rt(&[3, 1], dt, 0.0, 2.0, s + 1);
            let op = FusedReduce { prologue: exp_shift.clone(), reduce: red(ReduceKind::Sum, &[1], false) };
            out.push(Sample::new(format!("fused_reduce/sum_exp/{dt}"), op, vec![x.clone(), m]));
        }
        let x = rt(&[2, 3, 5], DType::F32, -2.0, 2.0, 340);
        let b = rt(&[5], DType::F32, -1.0, 1.0, 341);
        for (kind, axes) in [(ReduceKind::Max, vec![-1]), (ReduceKind::Min, vec![1, 2]), (ReduceKind::Sum, vec![0])] {
            let op = FusedReduce { prologue: abs_bias.clone(), reduce: red(kind, &axes, false) };
            out.push(Sample::new(format!("fused_reduce/{}{axes:?}", kind.name()), op, vec![x.clone(), b.clone()]));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_region_then_reduction_and_checks_types() {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[2, 3], DType::F32));
        let sq = Fused { program: vec![Instr::Input(0), Instr::Input(0), Instr::Binary(BinaryKind::Mul, 0, 1)] };
        let op =
            FusedReduce { prologue: sq, reduce: Reduce { kind: ReduceKind::Mean, axes: vec![-1], keep_dims: false } };
        let y = g.try_add(op.clone(), &[x]).unwrap();
        let m = g.mul(x, x);
        let want = g.mean(m, &[-1], false);
        g.set_outputs(vec![y, want]);
        let xs = HostTensor::from_f32(&[2, 3], &[1.0, 2.0, 3.0, -1.0, 0.0, 2.0]).unwrap();
        let out = crate::interp::evaluate(&g, &[("x", xs)]).unwrap();
        assert_eq!(out[0].to_f32_vec().unwrap(), vec![14.0 / 3.0, 5.0 / 3.0]);
        assert_eq!(out[0].to_f32_vec().unwrap(), out[1].to_f32_vec().unwrap());
        let bad = FusedReduce { reduce: Reduce { kind: ReduceKind::Sum, axes: vec![2], keep_dims: false }, ..op };
        let e = g.try_add(bad, &[x]).unwrap_err().to_string();
        assert!(e.contains("fused_reduce"), "{e}");
    }
}
