//! `fused`: a region of elementwise ops as one node, holding a small expression program over the
//! unary and binary families. The optimizer builds it; backends run it as one loop (or kernel),
//! and backends without it get `decompose`, which expands the program back into plain nodes.

use crate::ops::util::{broadcast_index_map, fixed, rand_f64};
use crate::ops::{BinaryKind, MatMul, UnaryKind};
use crate::shape::broadcast_dims;
use crate::tensor::{float_vec, round_float, wrap_int};
use crate::{
    DType, DTypeClass, Data, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity,
};
use serde::{Deserialize, Serialize};

/// One instruction of a fused program. Operands name earlier instructions by index.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Instr {
    /// Input `i` of the node, broadcast to the output shape.
    Input(usize),
    /// A scalar constant of the node's dtype.
    Const(#[serde(with = "float_vec::one")] f64),
    /// A unary op of an earlier value.
    Unary(UnaryKind, usize),
    /// A binary op of two earlier values.
    Binary(BinaryKind, usize, usize),
}

/// An elementwise region: every input broadcasts to the output shape; the last instruction is
/// the result. All inputs and the output share one dtype.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fused {
    /// The program, in dependency order; the result is the last instruction.
    pub program: Vec<Instr>,
}

impl Fused {
    /// Checks the program against `n` inputs: operands refer backwards, every input is used.
    pub fn validate(&self, n: usize) -> std::result::Result<(), String> {
        if self.program.is_empty() {
            return Err("empty program".into());
        }
        let mut used = vec![false; n];
        for (k, ins) in self.program.iter().enumerate() {
            let back = |r: usize| if r < k { Ok(()) } else { Err(format!("instruction {k} reads {r}, not earlier")) };
            match *ins {
                Instr::Input(i) if i < n => used[i] = true,
                Instr::Input(i) => return Err(format!("instruction {k} reads input {i} of {n}")),
                Instr::Const(_) => {}
                Instr::Unary(_, a) => back(a)?,
                Instr::Binary(_, a, b) => {
                    back(a)?;
                    back(b)?;
                }
            }
        }
        if let Some(i) = used.iter().position(|u| !u) {
            return Err(format!("input {i} is never read"));
        }
        Ok(())
    }

    /// Evaluates the program on one element in f64, rounding to `dt` after every step exactly
    /// as the unfused reference does. `load(i)` gives input i's element.
    pub fn eval_f64(&self, dt: DType, regs: &mut Vec<f64>, load: impl Fn(usize) -> f64) -> f64 {
        regs.clear();
        for ins in &self.program {
            let v = match *ins {
                Instr::Input(i) => load(i),
                Instr::Const(c) => c,
                Instr::Unary(k, a) => k.eval(regs[a]),
                Instr::Binary(k, a, b) => k.eval(regs[a], regs[b]),
            };
            regs.push(round_float(v, dt));
        }
        regs.last().copied().unwrap_or(0.0)
    }

    /// The integer form; None when some op has no integer form.
    pub fn eval_i64(&self, dt: DType, regs: &mut Vec<i64>, load: impl Fn(usize) -> i64) -> Option<i64> {
        regs.clear();
        for ins in &self.program {
            let v = match *ins {
                Instr::Input(i) => load(i),
                Instr::Const(c) => crate::tensor::float_to_int(c),
                Instr::Unary(k, a) => k.eval_int(regs[a])?,
                Instr::Binary(k, a, b) => k.eval_int(regs[a], regs[b])?,
            };
            regs.push(wrap_int(v, dt));
        }
        regs.last().copied()
    }

    /// Whether every op of the program has an integer form.
    pub fn has_int_form(&self) -> bool {
        self.program.iter().all(|i| match *i {
            Instr::Unary(k, _) => k.eval_int(1).is_some(),
            Instr::Binary(k, _, _) => k.eval_int(1, 1).is_some(),
            _ => true,
        })
    }
}

impl OpDef for Fused {
    fn name(&self) -> &'static str {
        "fused"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::ELEMENTWISE | OpTraits::BROADCAST | OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::AtLeast(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        self.validate(ins.len())?;
        let dt = crate::ops::util::same_dtype(ins)?;
        let ok = match dt.class() {
            DTypeClass::Float => true,
            DTypeClass::Int => self.has_int_form(),
            _ => false,
        };
        if !ok {
            return Err(format!("dtype {dt} is not supported by this program"));
        }
        let mut dims = ins[0].dims.clone();
        for s in &ins[1..] {
            dims = broadcast_dims(&dims, &s.dims)?;
        }
        Ok(Shape::with_dims(dims, dt))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let od = fixed(&out.dims).unwrap_or_default();
        let maps: Vec<Vec<usize>> = ins.iter().map(|t| broadcast_index_map(&od, &t.dims())).collect();
        let n = od.iter().product::<usize>();
        let dt = out.dtype;
        let data = match dt.class() {
            DTypeClass::Float => {
                let vs = ins
                    .iter()
                    .map(|t| match &t.data {
                        Data::F(v) => Ok(v.as_slice()),
                        _ => Err(Error::eval("fused", "mixed input classes")),
                    })
                    .collect::<Result<Vec<_>>>()?;
                let mut regs = Vec::with_capacity(self.program.len());
                Data::F((0..n).map(|e| self.eval_f64(dt, &mut regs, |i| vs[i][maps[i][e]])).collect())
            }
            DTypeClass::Int => {
                let vs = ins
                    .iter()
                    .map(|t| match &t.data {
                        Data::I(v) => Ok(v.as_slice()),
                        _ => Err(Error::eval("fused", "mixed input classes")),
                    })
                    .collect::<Result<Vec<_>>>()?;
                let mut regs = Vec::with_capacity(self.program.len());
                let mut out = Vec::with_capacity(n);
                for e in 0..n {
                    let v = self.eval_i64(dt, &mut regs, |i| vs[i][maps[i][e]]);
                    out.push(v.ok_or_else(|| Error::eval("fused", "an op of the program has no integer form"))?);
                }
                Data::I(out)
            }
            _ => return Err(Error::eval("fused", format!("unsupported dtype {dt}"))),
        };
        HostTensor::new(out.clone(), data)
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        let dt = g.dtype(*ins.first()?);
        let mut vals: Vec<NodeId> = Vec::with_capacity(self.program.len());
        for i in &self.program {
            let v = match *i {
                Instr::Input(k) => *ins.get(k)?,
                Instr::Const(c) => g.scalar(c, dt),
                Instr::Unary(k, a) => g.unary(k, *vals.get(a)?),
                Instr::Binary(k, a, b) => g.add_node(crate::ops::Binary { kind: k }, &[*vals.get(a)?, *vals.get(b)?]),
            };
            vals.push(v);
        }
        vals.last().copied()
    }
    fn samples() -> Vec<Sample> {
        use Instr::*;
        // tanh(x * y + 0.5) - x, with y broadcast over rows.
        let p1 = Fused {
            program: vec![
                Input(0),
                Input(1),
                Binary(BinaryKind::Mul, 0, 1),
                Const(0.5),
                Binary(BinaryKind::Add, 2, 3),
                Unary(UnaryKind::Tanh, 4),
                Binary(BinaryKind::Sub, 5, 0),
            ],
        };
        // silu(a) * b: the SwiGLU gate.
        let p2 = Fused { program: vec![Input(0), Unary(UnaryKind::Silu, 0), Input(1), Binary(BinaryKind::Mul, 1, 2)] };
        let t = |d: &[usize], dt, s| {
            HostTensor::from_f64(d, dt, &rand_f64(d.iter().product(), -2.0, 2.0, s)).expect("sample")
        };
        let mut out = vec![];
        for (i, dt) in [DType::F32, DType::F64, DType::F16, DType::BF16].into_iter().enumerate() {
            let ins = vec![t(&[3, 4], dt, 30 + i as u64), t(&[4], dt, 40 + i as u64)];
            out.push(Sample::new(format!("fused/bcast/{dt}"), p1.clone(), ins));
            let ins = vec![t(&[2, 5], dt, 50 + i as u64), t(&[2, 5], dt, 60 + i as u64)];
            out.push(Sample::new(format!("fused/swiglu/{dt}"), p2.clone(), ins));
        }
        // Integer: (a + b) * a, with a scalar b.
        let p3 =
            Fused { program: vec![Input(0), Input(1), Binary(BinaryKind::Add, 0, 1), Binary(BinaryKind::Mul, 2, 0)] };
        let a = HostTensor::from_i64(&[2, 3], DType::I32, &[1, -2, 3, 4, -5, 6]).expect("sample");
        let b = HostTensor::from_i64(&[], DType::I32, &[7]).expect("sample");
        out.push(Sample::new("fused/i32", p3, vec![a, b]));
        out
    }
}

/// A matmul with an elementwise epilogue (bias, activation, residual): inputs `a`, `b`, then
/// the epilogue's extra inputs. In the program, `Input(0)` is the matmul result and `Input(i)`
/// is node input `i + 1`; the extras broadcast into the matmul's output type, which is the
/// node's type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FusedMatMul {
    /// The matmul (with its transpose flags).
    pub matmul: MatMul,
    /// The epilogue.
    pub epilogue: Fused,
}

impl FusedMatMul {
    /// The types the epilogue sees: the matmul result, then the extras.
    fn epilogue_inputs<'a>(&self, mm: &'a Shape, ins: &[&'a Shape]) -> Vec<&'a Shape> {
        let mut v = vec![mm];
        v.extend_from_slice(&ins[2..]);
        v
    }
}

impl OpDef for FusedMatMul {
    fn name(&self) -> &'static str {
        "fused_matmul"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::CONTRACTION | OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::AtLeast(2)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let mm = self.matmul.infer(&ins[..2])?;
        let out = self.epilogue.infer(&self.epilogue_inputs(&mm, ins))?;
        if out != mm {
            return Err(format!("the epilogue would change the matmul's type {mm} to {out}"));
        }
        Ok(out)
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let mm = self.matmul.reference(&ins[..2], out)?;
        let mut e = vec![&mm];
        e.extend_from_slice(&ins[2..]);
        self.epilogue.reference(&e, out)
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        let mm = g.add_node(self.matmul.clone(), &ins[..2]);
        let mut e = vec![mm];
        e.extend_from_slice(&ins[2..]);
        self.epilogue.decompose(g, &e)
    }
    fn samples() -> Vec<Sample> {
        use Instr::*;
        // gelu(a @ b^T + bias) + residual.
        let op = FusedMatMul {
            matmul: MatMul { transpose_a: false, transpose_b: true },
            epilogue: Fused {
                program: vec![
                    Input(0),
                    Input(1),
                    Binary(BinaryKind::Add, 0, 1),
                    Unary(UnaryKind::Gelu, 2),
                    Input(2),
                    Binary(BinaryKind::Add, 3, 4),
                ],
            },
        };
        let t = |d: &[usize], dt, s| {
            HostTensor::from_f64(d, dt, &rand_f64(d.iter().product(), -1.0, 1.0, s)).expect("sample")
        };
        let mut out = vec![];
        for (i, dt) in [DType::F32, DType::F64, DType::F16].into_iter().enumerate() {
            let s = 70 + 4 * i as u64;
            let ins = vec![t(&[2, 3, 5], dt, s), t(&[4, 5], dt, s + 1), t(&[4], dt, s + 2), t(&[2, 3, 4], dt, s + 3)];
            out.push(Sample::new(format!("fused_matmul/{dt}"), op.clone(), ins));
        }
        out
    }
}

impl Graph {
    /// A fused elementwise region over `ins` (normally built by the optimizer).
    pub fn fused(&mut self, program: Vec<Instr>, ins: &[NodeId]) -> NodeId {
        self.add_node(Fused { program }, ins)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_programs_are_infer_errors() {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[2], DType::F32));
        let y = g.input("y", Shape::new(&[2], DType::F32));
        let e = g.try_add(Fused { program: vec![] }, &[x]).unwrap_err();
        assert!(e.to_string().contains("empty program"), "{e}");
        let e = g.try_add(Fused { program: vec![Instr::Input(0), Instr::Unary(UnaryKind::Exp, 1)] }, &[x]);
        assert!(e.unwrap_err().to_string().contains("not earlier"));
        let e = g.try_add(Fused { program: vec![Instr::Input(0)] }, &[x, y]).unwrap_err();
        assert!(e.to_string().contains("input 1 is never read"), "{e}");
        let i = g.input("i", Shape::new(&[2], DType::I32));
        let e = g.try_add(Fused { program: vec![Instr::Input(0), Instr::Unary(UnaryKind::Exp, 0)] }, &[i]);
        assert!(e.unwrap_err().to_string().contains("not supported"));
    }

    #[test]
    fn reference_matches_hand_values() {
        use Instr::*;
        let f = Fused {
            program: vec![Input(0), Const(2.0), Binary(BinaryKind::Mul, 0, 1), Input(1), Binary(BinaryKind::Add, 2, 3)],
        };
        let a = HostTensor::from_f32(&[2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        let b = HostTensor::from_f32(&[2], &[10.0, 20.0]).unwrap();
        let y = f.reference(&[&a, &b], &Shape::new(&[2, 2], DType::F32)).unwrap();
        assert_eq!(y.to_f32_vec().unwrap(), vec![12.0, 24.0, 16.0, 28.0]);
    }
}
