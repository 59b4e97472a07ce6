//! Rotary position embedding in the half-split layout of HF Llama/Qwen: a composite of
//! cos/sin tables, slices and elementwise ops.

use crate::ops::HeadLayout;
use crate::ops::conv::infers;
use crate::ops::util::{rand_f64, require_float};
use crate::{DType, Data, Dim, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// Rotates pairs `(x[i], x[i + d/2])` by the angle `pos * theta^(-2i/d)`, for i < d/2:
/// `out[..., :d/2] = x1 cos - x2 sin`, `out[..., d/2:] = x2 cos + x1 sin` (GPT-NeoX / HF
/// order); `interleaved` rotates adjacent pairs `(x[2i], x[2i + 1])` instead (GPT-J, and
/// Llama's Q/K rows as GGUF stores them). Inputs: x `[batch, heads, s, d]` (float, d even;
/// `[batch, s, heads, d]` with layout `Bshd`) and positions `[s]` (integer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rope {
    /// The frequency base (10000 for Llama 2, 500000 for Llama 3); finite and > 0.
    pub theta: f64,
    /// The axis order of x and the output.
    #[serde(default, skip_serializing_if = "HeadLayout::is_bhsd")]
    pub layout: HeadLayout,
    /// Pairs are adjacent elements `(2i, 2i + 1)`, not the two halves `(i, i + d/2)`.
    #[serde(default, skip_serializing_if = "crate::ops::util::is_false")]
    pub interleaved: bool,
}

impl Rope {
    /// Rope over `[batch, heads, seq, dim]` values, rotating the two halves.
    pub fn new(theta: f64) -> Self {
        Rope { theta, layout: HeadLayout::Bhsd, interleaved: false }
    }

    /// The same op over values in `layout`.
    pub fn with_layout(self, layout: HeadLayout) -> Self {
        Rope { layout, ..self }
    }

    /// The same op rotating adjacent pairs (`true`) or the two halves (`false`).
    pub fn with_interleaved(self, interleaved: bool) -> Self {
        Rope { interleaved, ..self }
    }

    /// Where element `i < d/2` of a pair and its partner sit in a row of `d`.
    pub fn pair(&self, i: usize, d: usize) -> (usize, usize) {
        if self.interleaved { (2 * i, 2 * i + 1) } else { (i, i + d / 2) }
    }
}

/// `theta^(-2i/d)` for i < d/2, in f64.
pub fn rope_inv_freq(theta: f64, d: usize) -> Vec<f64> {
    (0..d / 2).map(|i| theta.powf(-2.0 * i as f64 / d as f64)).collect()
}

impl OpDef for Rope {
    fn name(&self) -> &'static str {
        "rope"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let (x, pos) = (ins[0], ins[1]);
        require_float(x.dtype)?;
        if !(self.theta.is_finite() && self.theta > 0.0) {
            return Err(format!("theta must be finite and > 0, got {}", self.theta));
        }
        if x.rank() != 4 {
            return Err(format!("x must have rank 4 {}, got {x}", self.layout.axes()));
        }
        let seq = &self.layout.bhsd(&x.dims)[2];
        match x.dims[3] {
            Dim::Fixed(d) if d > 0 && d % 2 == 0 => {}
            ref d => {
                return Err(format!("the head dim must be static, even and > 0, got {d}"));
            }
        }
        if !pos.dtype.is_int() {
            return Err(format!("positions must be integers, got {}", pos.dtype));
        }
        if pos.rank() != 1 || pos.dims[0] != *seq {
            return Err(format!("positions must have shape [{seq}] (the seq dim of x), got {pos}"));
        }
        Ok(x.clone())
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let Data::F(x) = &ins[0].data else {
            return Err(Error::eval("rope", "x must be float"));
        };
        let pos = ins[1].to_i64_vec()?;
        let dims = ins[0].dims();
        if dims.len() != 4 {
            return Err(Error::eval("rope", format!("x must have rank 4, got {dims:?}")));
        }
        let [_, h, s, d] = self.layout.bhsd(&dims);
        let per_pos = self.layout.rows_per_position(h);
        let inv = rope_inv_freq(self.theta, d);
        let mut y = vec![0.0; x.len()];
        for (row, (xr, yr)) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)).enumerate() {
            let p = pos[row / per_pos % s] as f64;
            for (i, &f) in inv.iter().enumerate() {
                let (c, sn) = ((p * f).cos(), (p * f).sin());
                let (i1, i2) = self.pair(i, d);
                let (x1, x2) = (xr[i1], xr[i2]);
                yr[i1] = x1 * c - x2 * sn;
                yr[i2] = x2 * c + x1 * sn;
            }
        }
        HostTensor::new(out.clone(), Data::F(y))
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        crate::ops::rules::batch_first_input(self.clone(), g, ins, batched)
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        if !infers(self, g, ins) {
            return None;
        }
        if !self.layout.is_bhsd() {
            // Through the [batch, heads, seq, dim] form.
            let xt = g.transpose(ins[0], &[0, 2, 1, 3]);
            let y = self.clone().with_layout(HeadLayout::Bhsd).decompose(g, &[xt, ins[1]])?;
            return Some(g.transpose(y, &[0, 2, 1, 3]));
        }
        let (x, pos) = (ins[0], ins[1]);
        let xd = g.shape(x)?.fixed_dims()?;
        let (b, h, s, d) = (xd[0], xd[1], xd[2], xd[3]);
        let half = d / 2;
        let dt = g.dtype(x);
        // The tables are computed in f32 (f64 for f64 inputs), as HF does, then cast to x's dtype.
        let td = if dt == DType::F64 { DType::F64 } else { DType::F32 };
        let inv = HostTensor::from_f64(&[1, half], td, &rope_inv_freq(self.theta, d)).ok()?;
        let inv = g.constant(inv);
        let p = g.cast(pos, td);
        let p = g.reshape(p, &[s, 1]);
        let ang = g.mul(p, inv);
        let c = g.cos(ang);
        let c = g.cast_to(c, dt);
        let sn = g.sin(ang);
        let sn = g.cast_to(sn, dt);
        if self.interleaved {
            // Pairs as a trailing axis of 2: [b, h, s, d/2, 2], tables [s, d/2, 1].
            let x = g.reshape(x, &[b, h, s, half, 2]);
            let (c, sn) = (g.reshape(c, &[s, half, 1]), g.reshape(sn, &[s, half, 1]));
            let x1 = g.slice(x, &[0, 0, 0, 0, 0], &[b, h, s, half, 1], &[1, 1, 1, 1, 1]);
            let x2 = g.slice(x, &[0, 0, 0, 0, 1], &[b, h, s, half, 2], &[1, 1, 1, 1, 1]);
            let (o1, o2) = rotate(g, (x1, x2), (c, sn));
            let y = g.concat(&[o1, o2], -1);
            return Some(g.reshape(y, &[b, h, s, d]));
        }
        let x1 = g.slice(x, &[0, 0, 0, 0], &[b, h, s, half], &[1, 1, 1, 1]);
        let x2 = g.slice(x, &[0, 0, 0, half], &[b, h, s, d], &[1, 1, 1, 1]);
        let (o1, o2) = rotate(g, (x1, x2), (c, sn));
        Some(g.concat(&[o1, o2], -1))
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        // (x dims, dtype, positions, position dtype, theta)
        type Case<'a> = (&'a [usize], DType, &'a [i64], DType, f64);
        let cases: [Case; 5] = [
            (&[1, 2, 4, 8], DType::F32, &[0, 1, 2, 3], DType::I64, 10000.0),
            (&[2, 1, 3, 6], DType::F64, &[5, 100, 4096], DType::I32, 10000.0),
            (&[1, 1, 3, 4], DType::F32, &[7, 3, 0], DType::I32, 500000.0),
            (&[1, 2, 1, 2], DType::F32, &[31], DType::I64, 10000.0),
            (&[1, 3, 2, 16], DType::F64, &[0, 0], DType::I64, 1000000.0),
        ];
        for (i, (dims, dt, pos, pdt, theta)) in cases.into_iter().enumerate() {
            let n = dims.iter().product();
            let x = HostTensor::from_f64(dims, dt, &rand_f64(n, -2.0, 2.0, 110 + i as u64)).expect("sample");
            let p = HostTensor::from_i64(&[pos.len()], pdt, pos).expect("sample");
            out.push(Sample::new(format!("rope/{dt}{dims:?}/pos{pos:?}"), Rope::new(theta), vec![x, p]));
        }
        // [batch, seq, heads, dim]: 3 positions, 2 heads.
        let x = HostTensor::from_f64(&[2, 3, 2, 6], DType::F32, &rand_f64(72, -2.0, 2.0, 120)).expect("sample");
        let p = HostTensor::from_i64(&[3], DType::I64, &[4, 0, 9]).expect("sample");
        out.push(Sample::new(
            "rope/f32/bshd",
            Rope::new(10000.0).with_layout(HeadLayout::Bshd),
            vec![x.clone(), p.clone()],
        ));
        // Adjacent pairs, in both layouts and in f64.
        let op = Rope::new(10000.0).with_interleaved(true);
        out.push(Sample::new("rope/f32/bshd/interleaved", op.clone().with_layout(HeadLayout::Bshd), vec![x, p]));
        let x = HostTensor::from_f64(&[1, 2, 3, 8], DType::F64, &rand_f64(48, -2.0, 2.0, 121)).expect("sample");
        let p = HostTensor::from_i64(&[3], DType::I32, &[2, 1000, 7]).expect("sample");
        out.push(Sample::new("rope/f64/interleaved", op, vec![x, p]));
        out
    }
}

/// `(x1 cos - x2 sin, x2 cos + x1 sin)`.
fn rotate(g: &mut Graph, (x1, x2): (NodeId, NodeId), (c, sn): (NodeId, NodeId)) -> (NodeId, NodeId) {
    let (a, e) = (g.mul(x1, c), g.mul(x2, sn));
    let o1 = g.sub(a, e);
    let (a, e) = (g.mul(x2, c), g.mul(x1, sn));
    (o1, g.add(a, e))
}

impl Graph {
    /// Rotary embedding of x `[batch, heads, s, d]` at integer `positions` `[s]`, rotating the
    /// two halves of each row.
    pub fn rope(&mut self, x: NodeId, positions: NodeId, theta: f32) -> NodeId {
        self.add_node(Rope::new(theta as f64), &[x, positions])
    }

    /// Rotary embedding rotating adjacent pairs `(2i, 2i + 1)` of each row (GPT-J style).
    pub fn rope_interleaved(&mut self, x: NodeId, positions: NodeId, theta: f32) -> NodeId {
        self.add_node(Rope::new(theta as f64).with_interleaved(true), &[x, positions])
    }
}
