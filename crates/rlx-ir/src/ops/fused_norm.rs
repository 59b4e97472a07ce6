//! `fused_norm`: layer_norm or rms_norm whose input is an elementwise prologue (the residual
//! add before a norm, a bias, a scale). The optimizer builds it; backends run the prologue row
//! by row straight into the norm, and backends without it get `decompose` (region, then norm).

use crate::ops::fused::{Fused, Instr};
use crate::ops::norm::{LayerNorm, RmsNorm, rt};
use crate::ops::{BinaryKind, UnaryKind};
use crate::{DType, Graph, HostTensor, NodeId, Op, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// Which norm a `fused_norm` applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    /// `layer_norm` (inputs end with gamma, beta).
    LayerNorm,
    /// `rms_norm` (inputs end with gamma).
    RmsNorm,
}

/// A norm over the last axis of an elementwise region. Inputs: the prologue's inputs (as many
/// as its program reads), then gamma (and beta for layer_norm). The output has the region's type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FusedNorm {
    /// The elementwise region that makes the norm's input.
    pub prologue: Fused,
    /// The norm.
    pub norm: NormKind,
    /// The norm's eps.
    pub eps: f64,
}

impl FusedNorm {
    /// How many node inputs the prologue reads.
    pub fn prologue_inputs(&self) -> usize {
        self.prologue
            .program
            .iter()
            .filter_map(|i| if let Instr::Input(k) = *i { Some(k + 1) } else { None })
            .max()
            .unwrap_or(0)
    }

    /// The norm as a plain op.
    pub fn norm_op(&self) -> Op {
        match self.norm {
            NormKind::LayerNorm => LayerNorm { eps: self.eps }.into(),
            NormKind::RmsNorm => RmsNorm { eps: self.eps }.into(),
        }
    }

    /// Per-feature vectors the norm reads after the prologue's inputs.
    fn norm_params(&self) -> usize {
        match self.norm {
            NormKind::LayerNorm => 2,
            NormKind::RmsNorm => 1,
        }
    }
}

impl OpDef for FusedNorm {
    fn name(&self) -> &'static str {
        "fused_norm"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE | OpTraits::NORMALIZATION
    }
    fn arity(&self) -> Arity {
        Arity::AtLeast(2)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let k = self.prologue_inputs();
        if k == 0 || ins.len() != k + self.norm_params() {
            return Err(format!(
                "expects {k} prologue inputs then {} norm vectors, got {} inputs",
                self.norm_params(),
                ins.len()
            ));
        }
        let x = self.prologue.infer(&ins[..k])?;
        let mut norm_ins = vec![&x];
        norm_ins.extend_from_slice(&ins[k..]);
        self.norm_op().def().infer(&norm_ins)
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let k = self.prologue_inputs();
        let x = self.prologue.reference(&ins[..k], out)?;
        let mut norm_ins = vec![&x];
        norm_ins.extend_from_slice(&ins[k..]);
        self.norm_op().def().reference(&norm_ins, out)
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        let k = self.prologue_inputs();
        if k == 0 || ins.len() != k + self.norm_params() {
            return None;
        }
        let x = g.try_add(self.prologue.clone(), &ins[..k]).ok()?;
        let mut norm_ins = vec![x];
        norm_ins.extend_from_slice(&ins[k..]);
        g.try_add(self.norm_op(), &norm_ins).ok()
    }
    fn samples() -> Vec<Sample> {
        use Instr::*;
        // layer_norm(x + r + bias): the BERT residual before a norm, with a broadcast bias.
        let residual = Fused {
            program: vec![Input(0), Input(1), Binary(BinaryKind::Add, 0, 1), Input(2), Binary(BinaryKind::Add, 2, 3)],
        };
        // rms_norm(x * 0.5 + silu(r)).
        let scaled = Fused {
            program: vec![
                Input(0),
                Const(0.5),
                Binary(BinaryKind::Mul, 0, 1),
                Input(1),
                Unary(UnaryKind::Silu, 3),
                Binary(BinaryKind::Add, 2, 4),
            ],
        };
        let mut out = vec![];
        for (i, dt) in [DType::F32, DType::F64, DType::F16, DType::BF16].into_iter().enumerate() {
            let s = 90 + 8 * i as u64;
            let (x, r, b) =
                (rt(&[3, 8], dt, -2.0, 2.0, s), rt(&[3, 8], dt, -1.0, 1.0, s + 1), rt(&[8], dt, -1.0, 1.0, s + 2));
            let (gm, bt) = (rt(&[8], dt, 0.5, 1.5, s + 3), rt(&[8], dt, -0.5, 0.5, s + 4));
            let op = FusedNorm { prologue: residual.clone(), norm: NormKind::LayerNorm, eps: 1e-5 };
            out.push(Sample::new(format!("fused_norm/layer/{dt}"), op, vec![x.clone(), r.clone(), b, gm.clone(), bt]));
            let op = FusedNorm { prologue: scaled.clone(), norm: NormKind::RmsNorm, eps: 1e-6 };
            out.push(Sample::new(format!("fused_norm/rms/{dt}"), op, vec![x, r, gm]));
        }
        // A per-row scalar broadcast into a rank-3 region.
        let x = rt(&[2, 3, 5], DType::F32, -2.0, 2.0, 130);
        let row = rt(&[2, 3, 1], DType::F32, -1.0, 1.0, 131);
        let gm = rt(&[5], DType::F32, 0.5, 1.5, 132);
        let mul = Fused { program: vec![Input(0), Input(1), Binary(BinaryKind::Mul, 0, 1)] };
        let op = FusedNorm { prologue: mul, norm: NormKind::RmsNorm, eps: 1e-6 };
        out.push(Sample::new("fused_norm/rms/row_scale", op, vec![x, row, gm]));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_region_then_norm_and_checks_arity() {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[2, 4], DType::F32));
        let r = g.input("r", Shape::new(&[2, 4], DType::F32));
        let gm = g.input("g", Shape::new(&[4], DType::F32));
        let add = Fused { program: vec![Instr::Input(0), Instr::Input(1), Instr::Binary(BinaryKind::Add, 0, 1)] };
        let op = FusedNorm { prologue: add, norm: NormKind::RmsNorm, eps: 1e-6 };
        let e = g.try_add(op.clone(), &[x, r]).unwrap_err().to_string();
        assert!(e.contains("expects 2 prologue inputs then 1 norm vectors, got 2"), "{e}");
        let y = g.try_add(op, &[x, r, gm]).unwrap();
        let s = g.add(x, r);
        let want = g.rms_norm(s, gm, 1e-6);
        g.set_outputs(vec![y, want]);
        let xs = HostTensor::from_f32(&[2, 4], &[1.0, 2.0, 3.0, 4.0, -1.0, 0.0, 1.0, 2.0]).unwrap();
        let rs = HostTensor::from_f32(&[2, 4], &[0.5; 8]).unwrap();
        let gs = HostTensor::from_f32(&[4], &[1.0, 2.0, 1.0, 0.5]).unwrap();
        let out = crate::interp::evaluate(&g, &[("x", xs), ("r", rs), ("g", gs)]).unwrap();
        assert_eq!(out[0].to_f32_vec().unwrap(), out[1].to_f32_vec().unwrap());
        // Row 0 is [1.5, 2.5, 3.5, 4.5]: rms = sqrt(41/4 + 1e-6).
        let r0 = 1.5 / (41.0f32 / 4.0 + 1e-6).sqrt();
        assert!((out[0].to_f32_vec().unwrap()[0] - r0).abs() < 1e-6);
    }
}
