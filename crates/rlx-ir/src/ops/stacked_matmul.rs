//! `stacked_matmul`: G matmuls that share their left input, as one op whose output stacks the
//! G results on a new leading axis. Q/K/V projections, SwiGLU's gate and up, and grouped-query
//! K/V become one GEMM over the G weights side by side (the optimizer forms it, `merge_matmul`).
//! In combining mode (SwiGLU: `silu(x @ wg) * (x @ wu)`) one program joins the G products into
//! a single output, so the products never reach memory.

use crate::ops::fused::Fused;
use crate::ops::matmul::MatMul;
use crate::ops::util::rand_f64;
use crate::{DType, Data, Dim, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// `out[g] = epilogue(x @ w_g, extras_g)` for g in `0..groups`. Inputs: `x [.., m, k]`, then
/// the `groups` weights (2-D, `[k, n]`, or `[n, k]` with `transpose_b`, all the same type),
/// then each group's epilogue extras in turn (`E` per group, same types in every group). The
/// output is `[groups, .., m, n]`. The epilogue (as `fused_matmul`'s: `Input(0)` is the
/// group's product, `Input(i)` its extra `i - 1`) is shared by every group.
///
/// With `combine`, the epilogue (required) joins the groups instead: its `Input(g)` is group
/// g's product for g < `groups` and `Input(groups + i)` is extra `i` (any number of extras,
/// after the weights); the output is the program's `[.., m, n]` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StackedMatMul {
    /// Number of stacked products (at least 1).
    pub groups: usize,
    /// Read each weight as `[n, k]` (its transpose).
    #[serde(default, skip_serializing_if = "crate::ops::util::is_false")]
    pub transpose_b: bool,
    /// The per-group elementwise epilogue (bias, activation), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epilogue: Option<Fused>,
    /// The epilogue combines the groups into one output (see the type's docs).
    #[serde(default, skip_serializing_if = "crate::ops::util::is_false")]
    pub combine: bool,
}

impl StackedMatMul {
    /// Epilogue extras per group, given the node's input count (an error when they do not split
    /// evenly into the groups). In combining mode: all the extras (they are not per group).
    pub fn extras_per_group(&self, inputs: usize) -> std::result::Result<usize, String> {
        let g = self.groups;
        if g == 0 {
            return Err("groups must be at least 1".into());
        }
        if inputs < 1 + g {
            return Err(format!("needs x and {g} weights, got {inputs} inputs"));
        }
        let extra = inputs - 1 - g;
        if self.combine {
            return match &self.epilogue {
                Some(_) => Ok(extra),
                None => Err("a combining stacked_matmul needs an epilogue".into()),
            };
        }
        if !extra.is_multiple_of(g) {
            return Err(format!("{extra} epilogue inputs do not split into {g} groups"));
        }
        let e = extra / g;
        if e > 0 && self.epilogue.is_none() {
            return Err(format!("{e} epilogue inputs per group but no epilogue"));
        }
        Ok(e)
    }

    /// The plain matmul of one group.
    pub fn matmul(&self) -> MatMul {
        MatMul { transpose_a: false, transpose_b: self.transpose_b }
    }

    /// Input indices of group `g`'s weight and epilogue extras, given `e` extras per group (in
    /// combining mode every group gets all the extras).
    pub fn group_inputs(&self, g: usize, e: usize) -> (usize, std::ops::Range<usize>) {
        if self.combine {
            return (1 + g, 1 + self.groups..1 + self.groups + e);
        }
        let first = 1 + self.groups + g * e;
        (1 + g, first..first + e)
    }
}

impl OpDef for StackedMatMul {
    fn name(&self) -> &'static str {
        "stacked_matmul"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::CONTRACTION | OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::AtLeast(2)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let e = self.extras_per_group(ins.len())?;
        let w0 = ins[1];
        if w0.rank() != 2 {
            return Err(format!("weights must be 2-D, weight 0 is {w0}"));
        }
        let mm = self.matmul().infer(&[ins[0], w0])?;
        for g in 0..self.groups {
            let (w, extras) = self.group_inputs(g, e);
            if ins[w] != w0 {
                return Err(format!("weight {g} is {}, weight 0 is {w0}: stacked weights need one type", ins[w]));
            }
            if self.combine {
                continue;
            }
            if let Some(ep) = &self.epilogue {
                let mut tys = vec![&mm];
                tys.extend(extras.clone().map(|i| ins[i]));
                let out = ep.infer(&tys)?;
                if out != mm {
                    return Err(format!("the epilogue would change group {g}'s type {mm} to {out}"));
                }
                let first: Vec<&Shape> = self.group_inputs(0, e).1.map(|i| ins[i]).collect();
                if extras.clone().map(|i| ins[i]).ne(first.iter().copied()) {
                    return Err(format!("group {g}'s epilogue inputs differ in type from group 0's"));
                }
            }
        }
        if let (true, Some(ep)) = (self.combine, &self.epilogue) {
            let mut tys = vec![&mm; self.groups];
            tys.extend(&ins[1 + self.groups..]);
            let out = ep.infer(&tys)?;
            if out != mm {
                return Err(format!("the combining epilogue gives {out}, not the product type {mm}"));
            }
            return Ok(mm);
        }
        let mut dims = vec![Dim::from(self.groups)];
        dims.extend(mm.dims.iter().cloned());
        Ok(Shape::with_dims(dims, mm.dtype))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let e = self.extras_per_group(ins.len()).map_err(|r| Error::eval("stacked_matmul", r))?;
        if let (true, Some(ep)) = (self.combine, &self.epilogue) {
            let ps = (0..self.groups)
                .map(|g| self.matmul().reference(&[ins[0], ins[1 + g]], out))
                .collect::<Result<Vec<_>>>()?;
            let mut eins: Vec<&HostTensor> = ps.iter().collect();
            eins.extend(&ins[1 + self.groups..]);
            return ep.reference(&eins, out);
        }
        let mm_ty = Shape::with_dims(out.dims[1..].to_vec(), out.dtype);
        let mut parts = Vec::with_capacity(self.groups);
        for g in 0..self.groups {
            let (w, extras) = self.group_inputs(g, e);
            let mut y = self.matmul().reference(&[ins[0], ins[w]], &mm_ty)?;
            if let Some(ep) = &self.epilogue {
                let mut eins = vec![&y];
                eins.extend(extras.map(|i| ins[i]));
                y = ep.reference(&eins, &mm_ty)?;
            }
            parts.push(y.data);
        }
        let refs: Vec<&Data> = parts.iter().collect();
        let data = Data::concat(&refs).ok_or_else(|| Error::eval("stacked_matmul", "mixed data classes"))?;
        HostTensor::new(out.clone(), data)
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        // G matmuls (with the epilogue), each given a leading axis, concatenated on it.
        let e = self.extras_per_group(ins.len()).ok()?;
        if let (true, Some(ep)) = (self.combine, &self.epilogue) {
            let mut eins: Vec<NodeId> =
                (0..self.groups).map(|w| g.add_node(self.matmul(), &[ins[0], ins[1 + w]])).collect();
            eins.extend_from_slice(&ins[1 + self.groups..]);
            return ep.decompose(g, &eins);
        }
        let mut parts = Vec::with_capacity(self.groups);
        for grp in 0..self.groups {
            let (w, extras) = self.group_inputs(grp, e);
            let mut y = g.add_node(self.matmul(), &[ins[0], ins[w]]);
            if let Some(ep) = &self.epilogue {
                let mut eins = vec![y];
                eins.extend(extras.map(|i| ins[i]));
                y = ep.decompose(g, &eins)?;
            }
            parts.push(g.expand_dims(y, 0));
        }
        Some(if parts.len() == 1 { parts[0] } else { g.concat(&parts, 0) })
    }
    fn samples() -> Vec<Sample> {
        use crate::ops::{BinaryKind, Instr, UnaryKind};
        let t = |d: &[usize], dt, s| {
            HostTensor::from_f64(d, dt, &rand_f64(d.iter().product(), -1.0, 1.0, s)).expect("sample")
        };
        let bias = Fused { program: vec![Instr::Input(0), Instr::Input(1), Instr::Binary(BinaryKind::Add, 0, 1)] };
        let gelu_bias = Fused {
            program: vec![
                Instr::Input(0),
                Instr::Input(1),
                Instr::Binary(BinaryKind::Add, 0, 1),
                Instr::Unary(UnaryKind::Gelu, 2),
            ],
        };
        let mut out = vec![];
        // Q/K/V with biases, n = 17 (not a multiple of any micro-tile width), batched x.
        for (i, dt) in [DType::F32, DType::F64, DType::F16].into_iter().enumerate() {
            let s = 100 + 10 * i as u64;
            let op = StackedMatMul { groups: 3, transpose_b: false, epilogue: Some(bias.clone()), combine: false };
            let mut ins = vec![t(&[2, 9, 5], dt, s)];
            ins.extend((0..3).map(|g| t(&[5, 17], dt, s + 1 + g)));
            ins.extend((0..3).map(|g| t(&[17], dt, s + 4 + g)));
            out.push(Sample::new(format!("stacked_matmul/qkv/{dt}"), op, ins));
        }
        // Gate and up without an epilogue, weights stored [n, k].
        let op = StackedMatMul { groups: 2, transpose_b: true, epilogue: None, combine: false };
        let ins = vec![t(&[7, 6], DType::F32, 140), t(&[40, 6], DType::F32, 141), t(&[40, 6], DType::F32, 142)];
        out.push(Sample::new("stacked_matmul/gate_up/t", op, ins));
        // SwiGLU combined: silu(x @ wg + bg) * (x @ wu), batched x, weights [n, k].
        let swiglu = Fused {
            program: vec![
                Instr::Input(0),
                Instr::Input(2),
                Instr::Binary(BinaryKind::Add, 0, 1),
                Instr::Unary(UnaryKind::Silu, 2),
                Instr::Input(1),
                Instr::Binary(BinaryKind::Mul, 3, 4),
            ],
        };
        for (i, dt) in [DType::F32, DType::F64].into_iter().enumerate() {
            let s = 160 + 10 * i as u64;
            let op = StackedMatMul { groups: 2, transpose_b: true, epilogue: Some(swiglu.clone()), combine: true };
            let ins = vec![t(&[2, 9, 6], dt, s), t(&[19, 6], dt, s + 1), t(&[19, 6], dt, s + 2), t(&[19], dt, s + 3)];
            out.push(Sample::new(format!("stacked_matmul/swiglu/{dt}"), op, ins));
        }
        // Decode shape (one row: the matrix-vector path), no bias.
        let silu_mul = Fused {
            program: vec![
                Instr::Input(0),
                Instr::Unary(UnaryKind::Silu, 0),
                Instr::Input(1),
                Instr::Binary(BinaryKind::Mul, 1, 2),
            ],
        };
        let op = StackedMatMul { groups: 2, transpose_b: false, epilogue: Some(silu_mul), combine: true };
        let ins = vec![t(&[1, 33], DType::F32, 180), t(&[33, 40], DType::F32, 181), t(&[33, 40], DType::F32, 182)];
        out.push(Sample::new("stacked_matmul/swiglu/decode", op, ins));
        // One group, activation epilogue, enough rows for the packed path.
        let op = StackedMatMul { groups: 1, transpose_b: false, epilogue: Some(gelu_bias), combine: false };
        let ins = vec![t(&[33, 12], DType::F64, 150), t(&[12, 20], DType::F64, 151), t(&[20], DType::F64, 152)];
        out.push(Sample::new("stacked_matmul/one/f64", op, ins));
        out
    }
}

impl Graph {
    /// `[x @ w_0, .., x @ w_G-1]` stacked on a new leading axis (weights 2-D, one type).
    pub fn stacked_matmul(&mut self, x: NodeId, weights: &[NodeId], transpose_b: bool) -> NodeId {
        let mut ins = vec![x];
        ins.extend_from_slice(weights);
        self.add_node(StackedMatMul { groups: weights.len(), transpose_b, epilogue: None, combine: false }, &ins)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{BinaryKind, Instr};
    use crate::{interp, testkit};

    #[test]
    fn stacks_hand_computed_products() {
        // x = [[1, 2]], w0 = I, w1 = 2I, biases 10 and 20: out = [[[11, 12]], [[22, 24]]].
        let x = HostTensor::from_f32(&[1, 2], &[1.0, 2.0]).unwrap();
        let w0 = HostTensor::from_f32(&[2, 2], &[1.0, 0.0, 0.0, 1.0]).unwrap();
        let w1 = HostTensor::from_f32(&[2, 2], &[2.0, 0.0, 0.0, 2.0]).unwrap();
        let b0 = HostTensor::from_f32(&[2], &[10.0, 10.0]).unwrap();
        let b1 = HostTensor::from_f32(&[2], &[20.0, 20.0]).unwrap();
        let bias = Fused { program: vec![Instr::Input(0), Instr::Input(1), Instr::Binary(BinaryKind::Add, 0, 1)] };
        let op = StackedMatMul { groups: 2, transpose_b: false, epilogue: Some(bias), combine: false };
        let (g, feeds) = testkit::sample_graph(&Sample::new("t", op, vec![x, w0, w1, b0, b1])).unwrap();
        assert_eq!(g.node(g.outputs()[0]).unwrap().ty, Shape::new(&[2, 1, 2], DType::F32));
        let feeds: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        let y = interp::evaluate(&g, &feeds).unwrap();
        assert_eq!(y[0].to_f32_vec().unwrap(), vec![11.0, 12.0, 22.0, 24.0]);
    }

    #[test]
    fn combines_hand_computed_products() {
        // x = [[1, 2]], wg = I, wu = 3I: out = (x @ wg) * (x @ wu) + b = [[3 + 1, 12 + 2]].
        let x = HostTensor::from_f32(&[1, 2], &[1.0, 2.0]).unwrap();
        let wg = HostTensor::from_f32(&[2, 2], &[1.0, 0.0, 0.0, 1.0]).unwrap();
        let wu = HostTensor::from_f32(&[2, 2], &[3.0, 0.0, 0.0, 3.0]).unwrap();
        let b = HostTensor::from_f32(&[2], &[1.0, 2.0]).unwrap();
        let program = vec![
            Instr::Input(0),
            Instr::Input(1),
            Instr::Binary(BinaryKind::Mul, 0, 1),
            Instr::Input(2),
            Instr::Binary(BinaryKind::Add, 2, 3),
        ];
        let op = StackedMatMul { groups: 2, transpose_b: false, epilogue: Some(Fused { program }), combine: true };
        let (g, feeds) = testkit::sample_graph(&Sample::new("t", op, vec![x, wg, wu, b])).unwrap();
        assert_eq!(g.node(g.outputs()[0]).unwrap().ty, Shape::new(&[1, 2], DType::F32));
        let feeds: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        let y = interp::evaluate(&g, &feeds).unwrap();
        assert_eq!(y[0].to_f32_vec().unwrap(), vec![4.0, 14.0]);
    }

    #[test]
    fn a_combine_needs_an_epilogue_of_the_product_type() {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[4, 3], DType::F32));
        let a = g.param("a", Shape::new(&[3, 5], DType::F32));
        let op = StackedMatMul { groups: 2, transpose_b: false, epilogue: None, combine: true };
        let e = g.try_add(op, &[x, a, a]).unwrap_err();
        assert!(e.to_string().contains("needs an epilogue"), "{e}");
        // A [4, 1] extra is fine (broadcast); a [2, 4, 5] one would grow the output.
        let big = g.param("big", Shape::new(&[2, 4, 5], DType::F32));
        let add = Fused {
            program: vec![
                Instr::Input(0),
                Instr::Input(1),
                Instr::Binary(BinaryKind::Add, 0, 1),
                Instr::Input(2),
                Instr::Binary(BinaryKind::Add, 2, 3),
            ],
        };
        let op = StackedMatMul { groups: 2, transpose_b: false, epilogue: Some(add), combine: true };
        let e = g.try_add(op.clone(), &[x, a, a, big]).unwrap_err();
        assert!(e.to_string().contains("not the product type"), "{e}");
        let col = g.param("col", Shape::new(&[4, 1], DType::F32));
        assert_eq!(
            g.try_add(op, &[x, a, a, col]).map(|y| g.shape(y).unwrap().clone()).unwrap(),
            Shape::new(&[4, 5], DType::F32)
        );
    }

    #[test]
    fn mismatched_inputs_are_infer_errors() {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[4, 3], DType::F32));
        let a = g.param("a", Shape::new(&[3, 5], DType::F32));
        let b = g.param("b", Shape::new(&[3, 6], DType::F32));
        let e = g
            .try_add(StackedMatMul { groups: 2, transpose_b: false, epilogue: None, combine: false }, &[x, a, b])
            .unwrap_err();
        assert!(e.to_string().contains("stacked weights need one type"), "{e}");
        let e = g
            .try_add(StackedMatMul { groups: 2, transpose_b: false, epilogue: None, combine: false }, &[x, a, a, a])
            .unwrap_err();
        assert!(e.to_string().contains("do not split"), "{e}");
        let e = g
            .try_add(StackedMatMul { groups: 0, transpose_b: false, epilogue: None, combine: false }, &[x, a])
            .unwrap_err();
        assert!(e.to_string().contains("at least 1"), "{e}");
        let bad = g.param("c", Shape::new(&[4, 5], DType::F32));
        let e = g
            .try_add(StackedMatMul { groups: 1, transpose_b: false, epilogue: None, combine: false }, &[x, bad])
            .unwrap_err();
        assert!(e.to_string().contains("inner dims differ"), "{e}");
    }
}
