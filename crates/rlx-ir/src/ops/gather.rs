//! Indexing by values: gather (numpy `take`) and its adjoint scatter_add.
//!
//! Indices must lie in `0..dim`; negative or too large indices are an evaluation error.

use crate::ops::rules;
use crate::ops::util::{rand_f64, rand_i64};
use crate::shape::normalize_axis;
use crate::{
    DType, DTypeClass, Data, Dim, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity,
};
use serde::{Deserialize, Serialize};

/// Output dims of taking `idx` along axis `a` of `x`: `x[:a] + idx + x[a+1:]`.
fn taken_dims(x: &[Dim], a: usize, idx: &[Dim]) -> Vec<Dim> {
    let mut d = x[..a].to_vec();
    d.extend_from_slice(idx);
    d.extend_from_slice(&x[a + 1..]);
    d
}

fn require_index(dt: DType) -> std::result::Result<(), String> {
    if dt.is_int() { Ok(()) } else { Err(format!("indices must have an integer dtype, got {dt}")) }
}

/// For each element of the `taken_dims` layout, the flat index into the indexed tensor; checks
/// that every index is in `0..dims[a]`.
fn take_map(op: &str, dims: &[usize], a: usize, idx: &HostTensor) -> Result<Vec<usize>> {
    let ix = idx.to_i64_vec()?;
    let n = dims[a];
    let inner: usize = dims[a + 1..].iter().product();
    let outer: usize = dims[..a].iter().product();
    let mut checked = Vec::with_capacity(ix.len());
    for &i in &ix {
        if i < 0 || i as u64 >= n as u64 {
            return Err(Error::eval(op, format!("index {i} is out of range 0..{n} for axis {a}")));
        }
        checked.push(i as usize);
    }
    let mut map = Vec::with_capacity(outer * checked.len() * inner);
    for o in 0..outer {
        for &i in &checked {
            let base = (o * n + i) * inner;
            map.extend(base..base + inner);
        }
    }
    Ok(map)
}

/// numpy `take(x, indices, axis)`: output dims are `x[:axis] + indices + x[axis+1:]`.
/// Embedding lookup is axis 0. Indices must be in `0..x.dims[axis]` (no negative indices).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gather {
    /// The axis of `x` to index, possibly negative.
    pub axis: i64,
}

impl OpDef for Gather {
    fn name(&self) -> &'static str {
        "gather"
    }
    fn traits(&self) -> OpTraits {
        // Linear in x; positions depend on index values, so not data movement.
        OpTraits::LINEAR
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        require_index(ins[1].dtype)?;
        let a = normalize_axis(self.axis, ins[0].rank())?;
        Ok(Shape::with_dims(taken_dims(&ins[0].dims, a, &ins[1].dims), ins[0].dtype))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let dims = ins[0].dims();
        let a = normalize_axis(self.axis, dims.len()).map_err(|e| Error::eval("gather", e))?;
        let map = take_map("gather", &dims, a, ins[1])?;
        HostTensor::new(out.clone(), ins[0].data.gather(&map))
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let z = rules::zeros_like(g, ins[0]);
        Some(vec![Some(g.scatter_add(z, ins[1], ct, self.axis)), None])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], size: usize) -> Option<NodeId> {
        let (x, idx) = (ins[0], ins[1]);
        let r = rules::dims(g, x).len() - usize::from(batched[0]);
        let a = normalize_axis(self.axis, r).ok()?;
        match (batched[0], batched[1]) {
            (true, false) => Some(g.gather(x, idx, a as i64 + 1)),
            (false, true) => {
                // The batch axis lands at position `a`: move it to the front.
                let y = g.gather(x, idx, a as i64);
                let n = rules::dims(g, y).len();
                let perm: Vec<usize> = std::iter::once(a).chain((0..n).filter(|&i| i != a)).collect();
                Some(g.transpose(y, &perm))
            }
            _ => {
                // Both batched: fold the batch into the indexed axis with offsets b * dim.
                let xd = rules::dims(g, x);
                let ni = rules::dims(g, idx).len() - 1;
                let n = xd[a + 1];
                let perm: Vec<usize> = [0, a + 1].into_iter().chain((1..=r).filter(|&i| i != a + 1)).collect();
                let xt = g.transpose(x, &perm);
                let mut fd = vec![size * n];
                fd.extend(perm[2..].iter().map(|&p| xd[p]));
                let xf = g.reshape(xt, &fd);
                let off = g.arange(0.0, n as f64, size, DType::I64);
                let mut od = vec![size];
                od.extend(std::iter::repeat_n(1, ni));
                let off = g.reshape(off, &od);
                let i64s = g.cast_to(idx, DType::I64);
                let fi = g.add(i64s, off);
                let y = g.gather(xf, fi, 0);
                // y is [B, idx.., pre.., post..]; want [B, pre.., idx.., post..].
                let tot = 1 + ni + (r - 1);
                let mut p = vec![0];
                p.extend(1 + ni..1 + ni + a);
                p.extend(1..1 + ni);
                p.extend(1 + ni + a..tot);
                Some(g.transpose(y, &p))
            }
        }
    }
    fn samples() -> Vec<Sample> {
        let table = HostTensor::from_f64(&[5, 3], DType::F32, &rand_f64(15, -1.0, 1.0, 41)).expect("sample");
        let ids = HostTensor::from_i64(&[2, 3], DType::I64, &[4, 0, 2, 2, 1, 4]).expect("sample");
        let x = HostTensor::from_f64(&[2, 4, 3], DType::F64, &rand_f64(24, -1.0, 1.0, 42)).expect("sample");
        let col = HostTensor::from_i64(&[2], DType::I32, &[3, 0]).expect("sample");
        let sc = HostTensor::from_i64(&[], DType::I32, &[1]).expect("sample");
        let lo = HostTensor::from_i64(&[2, 2], DType::I64, &[2, 0, 1, 2]).expect("sample");
        let xi = HostTensor::from_i64(&[3, 2], DType::I32, &rand_i64(6, -9, 9, 43)).expect("sample");
        let b = HostTensor::from_bool(&[4], &[true, false, false, true]).expect("sample");
        let bi = HostTensor::from_i64(&[3], DType::U8, &[3, 3, 1]).expect("sample");
        vec![
            Sample::new("gather/f32/embed", Gather { axis: 0 }, vec![table.clone(), ids]),
            Sample::new("gather/f64/mid", Gather { axis: 1 }, vec![x.clone(), col.clone()]),
            Sample::new("gather/f64/scalar_idx", Gather { axis: -2 }, vec![x, sc]),
            Sample::new("gather/f32/last", Gather { axis: -1 }, vec![table, lo.clone()]),
            Sample::new("gather/i32", Gather { axis: 0 }, vec![xi, lo]),
            Sample::new("gather/bool/u8_idx", Gather { axis: 0 }, vec![b, bi]),
        ]
    }
}

/// `out = target; out[.., indices[j], ..] += updates[.., j, ..]` along `axis`. `updates` has the
/// dims `target[:axis] + indices + target[axis+1:]`; repeated indices accumulate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScatterAdd {
    /// The axis of `target` to index, possibly negative.
    pub axis: i64,
}

impl OpDef for ScatterAdd {
    fn name(&self) -> &'static str {
        "scatter_add"
    }
    fn traits(&self) -> OpTraits {
        // Linear in (target, updates); positions depend on index values.
        OpTraits::LINEAR
    }
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let (t, idx, u) = (ins[0], ins[1], ins[2]);
        if !matches!(t.dtype.class(), DTypeClass::Float | DTypeClass::Int) {
            return Err(format!("target dtype {} is not supported", t.dtype));
        }
        if u.dtype != t.dtype {
            return Err(format!("updates dtype {} differs from target dtype {}", u.dtype, t.dtype));
        }
        require_index(idx.dtype)?;
        let a = normalize_axis(self.axis, t.rank())?;
        let want = taken_dims(&t.dims, a, &idx.dims);
        if u.dims != want {
            let w = Shape::with_dims(want, u.dtype);
            return Err(format!("updates must be {w} (target[:axis] + indices + target[axis+1:]), got {u}"));
        }
        Ok(t.clone())
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let dims = ins[0].dims();
        let a = normalize_axis(self.axis, dims.len()).map_err(|e| Error::eval("scatter_add", e))?;
        let map = take_map("scatter_add", &dims, a, ins[1])?;
        let data = match (&ins[0].data, &ins[2].data) {
            (Data::F(t), Data::F(u)) => {
                let mut o = t.clone();
                map.iter().zip(u).for_each(|(&m, &x)| o[m] += x);
                Data::F(o)
            }
            (Data::I(t), Data::I(u)) => {
                let mut o = t.clone();
                map.iter().zip(u).for_each(|(&m, &x)| o[m] = o[m].wrapping_add(x));
                Data::I(o)
            }
            _ => return Err(Error::eval("scatter_add", "unsupported dtype")),
        };
        HostTensor::new(out.clone(), data)
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        Some(vec![Some(ct), None, Some(g.gather(ct, ins[1], self.axis))])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], size: usize) -> Option<NodeId> {
        if batched[1] {
            return None;
        }
        let r = rules::dims(g, ins[0]).len() - usize::from(batched[0]);
        let t = if batched[0] { ins[0] } else { rules::add_batch(g, ins[0], size) };
        let u = if batched[2] { ins[2] } else { rules::add_batch(g, ins[2], size) };
        Some(g.scatter_add(t, ins[1], u, rules::shift_axis(self.axis, r)))
    }
    fn samples() -> Vec<Sample> {
        let f = |d: &[usize], dt, seed| {
            HostTensor::from_f64(d, dt, &rand_f64(d.iter().product(), -1.0, 1.0, seed)).expect("sample")
        };
        let ids = HostTensor::from_i64(&[2, 2], DType::I64, &[1, 3, 1, 1]).expect("sample");
        let col = HostTensor::from_i64(&[3], DType::I32, &[0, 2, 0]).expect("sample");
        let sc = HostTensor::from_i64(&[], DType::I64, &[2]).expect("sample");
        let it = HostTensor::from_i64(&[3, 2], DType::I32, &rand_i64(6, -5, 5, 51)).expect("sample");
        let iu = HostTensor::from_i64(&[3, 2], DType::I32, &rand_i64(6, -5, 5, 52)).expect("sample");
        let rows = HostTensor::from_i64(&[3], DType::U32, &[2, 2, 0]).expect("sample");
        vec![
            Sample::new(
                "scatter_add/f32/embed_grad",
                ScatterAdd { axis: 0 },
                vec![f(&[4, 3], DType::F32, 53), ids, f(&[2, 2, 3], DType::F32, 54)],
            ),
            Sample::new(
                "scatter_add/f64/last",
                ScatterAdd { axis: -1 },
                vec![f(&[2, 3], DType::F64, 55), col, f(&[2, 3], DType::F64, 56)],
            ),
            Sample::new(
                "scatter_add/f32/scalar_idx",
                ScatterAdd { axis: 1 },
                vec![f(&[2, 4], DType::F32, 57), sc, f(&[2], DType::F32, 58)],
            ),
            Sample::new("scatter_add/i32", ScatterAdd { axis: 0 }, vec![it, rows, iu]),
        ]
    }
}

impl Graph {
    /// numpy `take(x, indices, axis)` (embedding lookup at axis 0).
    pub fn gather(&mut self, x: NodeId, indices: NodeId, axis: i64) -> NodeId {
        self.add_node(Gather { axis }, &[x, indices])
    }
    /// Adds `updates` into `target` at `indices` along `axis` (duplicates accumulate).
    pub fn scatter_add(&mut self, target: NodeId, indices: NodeId, updates: NodeId, axis: i64) -> NodeId {
        self.add_node(ScatterAdd { axis }, &[target, indices, updates])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Op, interp, testkit};

    fn run(op: impl Into<Op>, ins: Vec<HostTensor>) -> Result<HostTensor> {
        let (g, feeds) = testkit::sample_graph(&Sample::new("t", op, ins))?;
        let feeds: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        Ok(interp::evaluate(&g, &feeds)?.remove(0))
    }

    fn f32s(d: &[usize], v: &[f32]) -> HostTensor {
        HostTensor::from_f32(d, v).unwrap()
    }

    fn i64s(d: &[usize], v: &[i64]) -> HostTensor {
        HostTensor::from_i64(d, DType::I64, v).unwrap()
    }

    #[test]
    fn gather_embedding_rows() {
        let table = f32s(&[3, 2], &[0., 1., 10., 11., 20., 21.]);
        let y = run(Gather { axis: 0 }, vec![table.clone(), i64s(&[2, 2], &[2, 0, 1, 2])]).unwrap();
        assert_eq!(y, f32s(&[2, 2, 2], &[20., 21., 0., 1., 10., 11., 20., 21.]));
        let y = run(Gather { axis: -1 }, vec![table, i64s(&[3], &[1, 1, 0])]).unwrap();
        assert_eq!(y, f32s(&[3, 3], &[1., 1., 0., 11., 11., 10., 21., 21., 20.]));
    }

    #[test]
    fn gather_rejects_bad_indices() {
        let table = f32s(&[3, 2], &[0.; 6]);
        let e = run(Gather { axis: 0 }, vec![table.clone(), i64s(&[1], &[3])]).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("gather") && msg.contains("index 3") && msg.contains("0..3"), "{msg}");
        let e = run(Gather { axis: 0 }, vec![table, i64s(&[1], &[-1])]).unwrap_err();
        assert!(e.to_string().contains("index -1"), "{e}");
    }

    #[test]
    fn scatter_add_accumulates_duplicates() {
        let target = f32s(&[3, 2], &[1., 1., 1., 1., 1., 1.]);
        let idx = i64s(&[3], &[2, 0, 2]);
        let upd = f32s(&[3, 2], &[1., 2., 3., 4., 5., 6.]);
        let y = run(ScatterAdd { axis: 0 }, vec![target, idx, upd]).unwrap();
        assert_eq!(y, f32s(&[3, 2], &[4., 5., 1., 1., 7., 9.]));
    }

    #[test]
    fn infer_errors() {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[4, 3], DType::F32));
        let fi = g.input("fi", Shape::new(&[2], DType::F32));
        let ii = g.input("ii", Shape::new(&[2], DType::I64));
        let u = g.input("u", Shape::new(&[2, 3], DType::F32));
        let ub = g.input("ub", Shape::new(&[3, 3], DType::F32));
        let ud = g.input("ud", Shape::new(&[2, 3], DType::F64));
        let y = g.gather(x, ii, 0);
        assert_eq!(g.shape(y).unwrap(), &Shape::new(&[2, 3], DType::F32));
        let z = g.scatter_add(x, ii, u, 0);
        assert_eq!(g.shape(z).unwrap(), &Shape::new(&[4, 3], DType::F32));
        g.check().unwrap();
        let sym = Shape::with_dims(vec![Dim::Sym("b".into()), Dim::Fixed(2)], DType::I32);
        let si = g.input("si", sym);
        let y = g.gather(x, si, -1);
        assert_eq!(g.shape(y).unwrap().to_string(), "f32[4,b,2]");
        let cases: Vec<(Op, Vec<NodeId>, &str)> = vec![
            (Gather { axis: 0 }.into(), vec![x, fi], "integer dtype"),
            (Gather { axis: 2 }.into(), vec![x, ii], "out of range"),
            (ScatterAdd { axis: 0 }.into(), vec![x, ii, ub], "updates must be f32[2,3]"),
            (ScatterAdd { axis: 0 }.into(), vec![x, ii, ud], "differs from target"),
            (ScatterAdd { axis: -3 }.into(), vec![x, ii, u], "out of range"),
        ];
        for (op, ins, want) in cases {
            let mut g2 = g.clone();
            g2.add_node(op, &ins);
            let err = g2.check().unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }
}
