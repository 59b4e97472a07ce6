//! Slices at a run-time position along one axis (like `jax.lax.dynamic_slice_in_dim` and
//! `dynamic_update_slice_in_dim`): KV caches and sequence windows.

use crate::ops::rules;
use crate::ops::util::{rand_f64, rand_i64};
use crate::shape::normalize_axis;
use crate::{DType, Dim, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// Clamps a start index so that `len` elements fit in `dim`, as JAX does.
pub fn clamp_start(start: i64, dim: usize, len: usize) -> usize {
    start.clamp(0, dim.saturating_sub(len) as i64) as usize
}

fn scalar_index(s: &Shape) -> std::result::Result<(), String> {
    if !s.dtype.is_int() {
        return Err(format!("the start index must be an integer, got {s}"));
    }
    if s.rank() != 0 {
        return Err(format!("the start index must be a scalar (shape []), got {s}"));
    }
    Ok(())
}

fn start_of(op: &str, t: &HostTensor) -> Result<i64> {
    t.to_i64_vec()?.first().copied().ok_or_else(|| Error::eval(op, "empty start index"))
}

/// For each outer index, copies `len * inner` elements from `src` at position `src_at` of its
/// axis (of length `src_dim`) to `dst` at `dst_at` (axis length `dst_dim`).
fn copy_rows(
    dst: &mut crate::Data,
    to: (usize, usize),
    src: &crate::Data,
    from: (usize, usize),
    block: (usize, usize, usize),
) {
    let ((dst_dim, dst_at), (src_dim, src_at), (outer, len, inner)) = (to, from, block);
    let mut dmap = Vec::with_capacity(outer * len * inner);
    let mut smap = Vec::with_capacity(outer * len * inner);
    for o in 0..outer {
        for k in 0..len * inner {
            dmap.push((o * dst_dim + dst_at) * inner + k);
            smap.push((o * src_dim + src_at) * inner + k);
        }
    }
    let vals = src.gather(&smap);
    dst.scatter(&dmap, &vals);
}

/// `x[..., start : start + size, ...]` along `axis`; the start is a run-time integer scalar,
/// clamped to `0..=dim - size`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DynamicSlice {
    /// The axis, possibly negative.
    pub axis: i64,
    /// Elements kept along the axis.
    pub size: usize,
}

impl OpDef for DynamicSlice {
    fn name(&self) -> &'static str {
        "dynamic_slice"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::LINEAR
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        scalar_index(ins[1])?;
        let a = normalize_axis(self.axis, ins[0].rank())?;
        match ins[0].dims[a] {
            Dim::Fixed(d) if d >= self.size => {}
            ref d => return Err(format!("size {} does not fit dim {d} of axis {a}", self.size)),
        }
        let mut dims = ins[0].dims.clone();
        dims[a] = Dim::Fixed(self.size);
        Ok(Shape::with_dims(dims, ins[0].dtype))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let d = ins[0].dims();
        let a = normalize_axis(self.axis, d.len()).map_err(|e| Error::eval("dynamic_slice", e))?;
        let start = clamp_start(start_of("dynamic_slice", ins[1])?, d[a], self.size);
        let (outer, inner) = (d[..a].iter().product(), d[a + 1..].iter().product());
        let mut data = crate::Data::zeros(out.dtype, out.numel().unwrap_or(0));
        copy_rows(&mut data, (self.size, 0), &ins[0].data, (d[a], start), (outer, self.size, inner));
        HostTensor::new(out.clone(), data)
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let z = rules::zeros_like(g, ins[0]);
        Some(vec![Some(g.dynamic_update_slice(z, ct, ins[1], self.axis)), None])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        if batched[1] {
            return None;
        }
        let r = rules::dims(g, ins[0]).len() - 1;
        Some(g.dynamic_slice(ins[0], ins[1], rules::shift_axis(self.axis, r), self.size))
    }
    fn samples() -> Vec<Sample> {
        let x = HostTensor::from_f64(&[3, 5, 2], DType::F32, &rand_f64(30, -1.0, 1.0, 91)).expect("sample");
        let xi = HostTensor::from_i64(&[6], DType::I32, &rand_i64(6, -9, 9, 92)).expect("sample");
        let at = |i: i64, dt: DType| HostTensor::from_i64(&[], dt, &[i]).expect("sample");
        let ds = |axis: i64, size: usize| DynamicSlice { axis, size };
        vec![
            Sample::new("dynamic_slice/f32/mid", ds(1, 2), vec![x.clone(), at(2, DType::I32)]),
            Sample::new("dynamic_slice/f32/clamped", ds(-2, 3), vec![x.clone(), at(9, DType::I64)]),
            Sample::new("dynamic_slice/f32/negative_start", ds(0, 2), vec![x, at(-4, DType::I32)]),
            Sample::new("dynamic_slice/i32", ds(0, 4), vec![xi, at(1, DType::I64)]),
        ]
    }
}

/// `x` with `update` written at `start` along `axis` (the other dims must match); the start is a
/// run-time integer scalar, clamped to `0..=dim - len`. Updating a param with it runs in place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DynamicUpdateSlice {
    /// The axis, possibly negative.
    pub axis: i64,
}

impl OpDef for DynamicUpdateSlice {
    fn name(&self) -> &'static str {
        "dynamic_update_slice"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::LINEAR | OpTraits::UPDATES_OPERAND
    }
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let (x, u) = (ins[0], ins[1]);
        scalar_index(ins[2])?;
        if u.dtype != x.dtype {
            return Err(format!("update dtype {} differs from operand dtype {}", u.dtype, x.dtype));
        }
        let a = normalize_axis(self.axis, x.rank())?;
        if u.rank() != x.rank() {
            return Err(format!("update has rank {}, operand has rank {}", u.rank(), x.rank()));
        }
        for i in 0..x.rank() {
            let ok = if i == a {
                matches!((&x.dims[i], &u.dims[i]), (Dim::Fixed(d), Dim::Fixed(l)) if l <= d)
            } else {
                x.dims[i] == u.dims[i]
            };
            if !ok {
                return Err(format!("update {u} does not fit operand {x} on axis {i} (axis {a} may be shorter)"));
            }
        }
        Ok(x.clone())
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let (d, ud) = (ins[0].dims(), ins[1].dims());
        let a = normalize_axis(self.axis, d.len()).map_err(|e| Error::eval("dynamic_update_slice", e))?;
        let start = clamp_start(start_of("dynamic_update_slice", ins[2])?, d[a], ud[a]);
        let (outer, inner) = (d[..a].iter().product(), d[a + 1..].iter().product());
        let mut data = ins[0].data.clone();
        copy_rows(&mut data, (d[a], start), &ins[1].data, (ud[a], 0), (outer, ud[a], inner));
        HostTensor::new(out.clone(), data)
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let z = rules::zeros_like(g, ins[1]);
        let dx = g.dynamic_update_slice(ct, z, ins[2], self.axis);
        let r = rules::dims(g, ins[1]);
        let a = normalize_axis(self.axis, r.len()).ok()?;
        let du = g.dynamic_slice(ct, ins[2], self.axis, r[a]);
        Some(vec![Some(dx), Some(du), None])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], size: usize) -> Option<NodeId> {
        if batched[2] {
            return None;
        }
        let r = rules::dims(g, ins[0]).len() - usize::from(batched[0]);
        let x = if batched[0] { ins[0] } else { rules::add_batch(g, ins[0], size) };
        let u = if batched[1] { ins[1] } else { rules::add_batch(g, ins[1], size) };
        Some(g.dynamic_update_slice(x, u, ins[2], rules::shift_axis(self.axis, r)))
    }
    fn samples() -> Vec<Sample> {
        let x = HostTensor::from_f64(&[2, 6, 3], DType::F32, &rand_f64(36, -1.0, 1.0, 93)).expect("sample");
        let u = HostTensor::from_f64(&[2, 2, 3], DType::F32, &rand_f64(12, -1.0, 1.0, 94)).expect("sample");
        let u0 = HostTensor::from_f64(&[1, 6, 3], DType::F32, &rand_f64(18, -1.0, 1.0, 95)).expect("sample");
        let xi = HostTensor::from_i64(&[5], DType::I64, &rand_i64(5, -9, 9, 96)).expect("sample");
        let ui = HostTensor::from_i64(&[1], DType::I64, &[42]).expect("sample");
        let at = |i: i64, dt: DType| HostTensor::from_i64(&[], dt, &[i]).expect("sample");
        let dus = |axis: i64| DynamicUpdateSlice { axis };
        vec![
            Sample::new("dynamic_update_slice/f32/mid", dus(1), vec![x.clone(), u.clone(), at(3, DType::I32)]),
            Sample::new("dynamic_update_slice/f32/clamped", dus(-2), vec![x.clone(), u, at(7, DType::I64)]),
            Sample::new("dynamic_update_slice/f32/outer", dus(0), vec![x, u0, at(1, DType::I32)]),
            Sample::new("dynamic_update_slice/i64", dus(0), vec![xi, ui, at(4, DType::I32)]),
        ]
    }
}

impl Graph {
    /// `x[start : start + size]` along `axis`, `start` an integer scalar node (clamped).
    pub fn dynamic_slice(&mut self, x: NodeId, start: NodeId, axis: i64, size: usize) -> NodeId {
        self.add_node(DynamicSlice { axis, size }, &[x, start])
    }

    /// `x` with `update` written at `start` along `axis` (clamped so it fits).
    pub fn dynamic_update_slice(&mut self, x: NodeId, update: NodeId, start: NodeId, axis: i64) -> NodeId {
        self.add_node(DynamicUpdateSlice { axis }, &[x, update, start])
    }
}
