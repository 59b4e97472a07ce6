//! `associative_scan`: `jax.lax.associative_scan(fn, elems, reverse, axis)`, an inclusive scan
//! of several leaves along one axis under an associative combine function.
//!
//! The reference is the sequential fold; the decomposition is the log-depth odd/even recursion
//! (combine adjacent pairs, scan the pairs, combine the scanned pairs with the elements between
//! them, interleave), so a length-`n` scan becomes `O(log n)` copies of the combine body.

use super::{body_inputs, run_body};
use crate::ops::rules::dims;
use crate::ops::util::rand_f64;
use crate::{DType, Data, Error, Graph, HostTensor, NodeId, Op, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

use super::serde_defaults::{is_false, is_one, is_zero, one};

/// `jax.lax.associative_scan`: operands `[leaves..., consts...]`, every leaf with the same length
/// along `axis`; `body(a_leaves..., b_leaves..., consts...) -> leaves...` is the associative
/// combine. The body is declared on the leaves' own types but, as in JAX, is applied to slices
/// of other lengths along `axis` (stacked elements), so it must act elementwise along that axis.
/// Result `i` is `x[0] . x[1] . ... . x[i]` (`a . b = body(a, b)`), or with `reverse`
/// `x[n-1] . ... . x[i]`. Each node gives leaf `index` of the result (one output per node).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssociativeScan {
    /// The combine function: `(a_leaves..., b_leaves..., consts...) -> leaves...`.
    pub body: Box<Graph>,
    /// Which leaf of the result this node gives.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub index: usize,
    /// Number of leaves (the first operands); the rest are consts the body closes over.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub num_leaves: usize,
    /// The scanned axis (non-negative).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub axis: usize,
    /// Scan from the last element to the first (results keep element order).
    #[serde(default, skip_serializing_if = "is_false")]
    pub reverse: bool,
}

/// `shape` with `axis` of length `k`.
fn at_len(shape: &Shape, axis: usize, k: usize) -> std::result::Result<Shape, String> {
    let mut d = shape.dims_fixed()?;
    d[axis] = k;
    Ok(Shape::new(&d, shape.dtype))
}

/// The lengths along the axis at which the decomposition applies the combine body to a scan of
/// length `n` (the reference applies it at length 1).
pub fn combine_lengths(n: usize) -> Vec<usize> {
    let mut out = vec![];
    let mut m = n;
    while m >= 2 {
        let h = m / 2;
        out.push(h);
        // The scanned pairs are combined with the elements between them: h - 1 or h of them.
        let between = if m.is_multiple_of(2) { h - 1 } else { h };
        if between > 0 {
            out.push(between);
        }
        m = h;
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Copies `body` into `g` on `args`, re-inferring every type (the arguments may be shorter along
/// the scanned axis than the body's declared inputs); returns its outputs.
fn apply(g: &mut Graph, body: &Graph, args: &[NodeId]) -> std::result::Result<Vec<NodeId>, String> {
    let mut map = Vec::with_capacity(body.len());
    let mut next = 0;
    for n in body.nodes() {
        let id = match &n.op {
            Op::Input(_) => {
                next += 1;
                *args.get(next - 1).ok_or("the body takes more inputs than the op gives")?
            }
            Op::Param(_) => return Err("the body has params; pass them as consts instead".into()),
            op => {
                let ins: Vec<NodeId> = n.inputs.iter().map(|x| map[x.index()]).collect();
                g.try_add(op.clone(), &ins).map_err(|e| e.to_string())?
            }
        };
        map.push(id);
    }
    Ok(body.outputs().iter().map(|o| map[o.index()]).collect())
}

impl AssociativeScan {
    /// A scan of `num_leaves` leaves with `body` as the combine, giving leaf 0.
    pub fn new(body: Graph, num_leaves: usize, axis: usize, reverse: bool) -> AssociativeScan {
        AssociativeScan { body: Box::new(body), index: 0, num_leaves, axis, reverse }
    }

    /// The same scan giving leaf `index`.
    pub fn with_index(&self, index: usize) -> AssociativeScan {
        AssociativeScan { index, ..self.clone() }
    }

    /// The scan's length, checking the operands: at least one leaf, each with `axis`, all of
    /// one length along it.
    pub fn length(&self, ins: &[&Shape]) -> std::result::Result<usize, String> {
        let nl = self.num_leaves;
        if nl == 0 {
            return Err("needs at least one leaf to scan".into());
        }
        if ins.len() < nl {
            return Err(format!("needs {nl} leaves, got {} operands", ins.len()));
        }
        let mut len = None;
        for (i, s) in ins[..nl].iter().enumerate() {
            let d = s.dims_fixed()?;
            let Some(&n) = d.get(self.axis) else {
                return Err(format!("leaf {i} ({s}) has no axis {}", self.axis));
            };
            match len {
                Some(l) if l != n => {
                    return Err(format!("leaf {i} ({s}) has length {n} along axis {}, leaf 0 has {l}", self.axis));
                }
                _ => len = Some(n),
            }
        }
        Ok(len.unwrap_or(0))
    }

    /// The combine of leaves `a` and `b` (any length along the axis) in `g`, checking that it
    /// gives one output per leaf of the leaves' types.
    fn combine(
        &self,
        g: &mut Graph,
        a: &[NodeId],
        b: &[NodeId],
        consts: &[NodeId],
    ) -> std::result::Result<Vec<NodeId>, String> {
        let args: Vec<NodeId> = a.iter().chain(b).chain(consts).copied().collect();
        let outs = apply(g, &self.body, &args)?;
        if outs.len() != a.len() {
            return Err(format!("the combine body gives {} outputs for {} leaves", outs.len(), a.len()));
        }
        for (i, (&o, &x)) in outs.iter().zip(a).enumerate() {
            if g.shape(o) != g.shape(x) {
                let show = |id| g.shape(id).map_or("?".into(), |s: &Shape| s.to_string());
                return Err(format!("the combine body's output {i} is {}, the leaf is {}", show(o), show(x)));
            }
        }
        Ok(outs)
    }

    /// The combine body alone, on leaves of length `k` along the axis.
    fn instance(&self, ins: &[&Shape], k: usize) -> std::result::Result<Graph, String> {
        let nl = self.num_leaves;
        let names: Vec<String> = self.body.inputs().iter().map(|(_, n)| n.to_string()).collect();
        let mut g = Graph::new(format!("{}@{k}", self.body.name()));
        let mut args = vec![];
        for (j, name) in names.iter().enumerate() {
            let s = match ins.get(if j < 2 * nl { j % nl } else { j - nl }) {
                Some(s) if j < 2 * nl => at_len(s, self.axis, k)?,
                Some(s) => (*s).clone(),
                None => return Err(format!("the body takes {} inputs, the op gives {}", names.len(), ins.len() + nl)),
            };
            args.push(g.input(name, s));
        }
        let outs = self
            .combine(&mut g, &args[..nl], &args[nl..2 * nl], &args[2 * nl..])
            .map_err(|e| format!("applied to slices of length {k} along axis {}: {e}", self.axis))?;
        g.set_outputs(outs);
        Ok(g)
    }

    /// The log-depth scan of `elems` (every leaf) in `g`.
    fn scan_tree(
        &self,
        g: &mut Graph,
        elems: &[NodeId],
        consts: &[NodeId],
    ) -> std::result::Result<Vec<NodeId>, String> {
        let ax = self.axis;
        let m = dims(g, elems[0]).get(ax).copied().unwrap_or(0);
        if m < 2 {
            return Ok(elems.to_vec());
        }
        let h = m / 2;
        let part = |g: &mut Graph, xs: &[NodeId], s: usize, e: usize, step: usize| -> Vec<NodeId> {
            xs.iter().map(|&x| strided(g, x, ax, s, e, step)).collect()
        };
        let cat = |g: &mut Graph, a: &[NodeId], b: &[NodeId]| -> Vec<NodeId> {
            a.iter().zip(b).map(|(&x, &y)| g.concat(&[x, y], ax as i64)).collect()
        };
        if !self.reverse {
            // Pairs (0, 1), (2, 3), ...: their scan is the result at the odd positions.
            let (a, b) = (part(g, elems, 0, m - 1, 2), part(g, elems, 1, m, 2));
            let reduced = self.combine(g, &a, &b, consts)?;
            let odd = self.scan_tree(g, &reduced, consts)?;
            // The even positions: the first element, then each odd result combined with the
            // element after it.
            let first = part(g, elems, 0, 1, 1);
            let c = m.div_ceil(2) - 1;
            let even = if c == 0 {
                first
            } else {
                let (o, x) = (part(g, &odd, 0, c, 1), part(g, elems, 2, m, 2));
                let rest = self.combine(g, &o, &x, consts)?;
                cat(g, &first, &rest)
            };
            Ok(interleave(g, &even, &odd, ax))
        } else {
            // Pairs counted from the end; the later element is the combine's first argument.
            let s = m % 2;
            let (lo, hi) = (part(g, elems, s, m, 2), part(g, elems, s + 1, m, 2));
            let reduced = self.combine(g, &hi, &lo, consts)?;
            let sub = self.scan_tree(g, &reduced, consts)?;
            // `sub` holds the results at positions s, s + 2, ...; the others are the element
            // combined with the result after it, and the last element as it is.
            let last = part(g, elems, m - 1, m, 1);
            if s == 0 {
                let other = if h == 1 {
                    last
                } else {
                    let (r, x) = (part(g, &sub, 1, h, 1), part(g, elems, 1, m - 1, 2));
                    let rest = self.combine(g, &r, &x, consts)?;
                    cat(g, &rest, &last)
                };
                Ok(interleave(g, &sub, &other, ax))
            } else {
                let x = part(g, elems, 0, m - 1, 2);
                let rest = self.combine(g, &sub, &x, consts)?;
                let other = cat(g, &rest, &last);
                Ok(interleave(g, &other, &sub, ax))
            }
        }
    }
}

/// `x[s..e:step]` along `axis`.
fn strided(g: &mut Graph, x: NodeId, axis: usize, s: usize, e: usize, step: usize) -> NodeId {
    let d = dims(g, x);
    let mut starts = vec![0; d.len()];
    let mut ends = d.clone();
    let mut steps = vec![1; d.len()];
    starts[axis] = s;
    ends[axis] = e;
    steps[axis] = step;
    g.slice(x, &starts, &ends, &steps)
}

/// `first[0], second[0], first[1], ...` along `axis` per leaf; `first` is as long as `second`
/// or one longer.
fn interleave(g: &mut Graph, first: &[NodeId], second: &[NodeId], axis: usize) -> Vec<NodeId> {
    first
        .iter()
        .zip(second)
        .map(|(&a, &b)| {
            let (p, q) = (dims(g, a)[axis], dims(g, b)[axis]);
            // One element longer: pad `b` with a copy of `a`'s last, sliced off after the merge.
            let b = if p > q {
                let t = strided(g, a, axis, p - 1, p, 1);
                g.concat(&[b, t], axis as i64)
            } else {
                b
            };
            let (ea, eb) = (g.expand_dims(a, axis as i64 + 1), g.expand_dims(b, axis as i64 + 1));
            let both = g.concat(&[ea, eb], axis as i64 + 1);
            let mut d = dims(g, a);
            d[axis] = 2 * p;
            let merged = g.reshape(both, &d);
            if p > q { strided(g, merged, axis, 0, p + q, 1) } else { merged }
        })
        .collect()
}

/// Element `i` of `t` along `axis` (kept, of length 1), as indices into `t`'s data.
fn element_indices(d: &[usize], axis: usize, i: usize) -> Vec<usize> {
    let outer: usize = d[..axis].iter().product();
    let inner: usize = d[axis + 1..].iter().product();
    let n = d[axis];
    (0..outer).flat_map(|o| (0..inner).map(move |k| (o * n + i) * inner + k)).collect()
}

impl OpDef for AssociativeScan {
    fn name(&self) -> &'static str {
        "associative_scan"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::AtLeast(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let nl = self.num_leaves;
        let n = self.length(ins)?;
        self.body.verify().map_err(|e| format!("the combine body is invalid: {e}"))?;
        let got = body_inputs(&self.body, "combine")?;
        let want: Vec<&Shape> = ins[..nl].iter().chain(&ins[..nl]).chain(&ins[nl..]).copied().collect();
        if got.len() != want.len() || got.iter().zip(&want).any(|(a, b)| a != *b) {
            let g: Vec<String> = got.iter().map(|s| s.to_string()).collect();
            let w: Vec<String> = want.iter().map(|s| s.to_string()).collect();
            return Err(format!(
                "the combine body takes [{}], the op gives [{}] (a leaves, b leaves, consts)",
                g.join(", "),
                w.join(", ")
            ));
        }
        if self.index >= nl {
            return Err(format!("no leaf {} (the scan has {nl})", self.index));
        }
        // The body must apply at every length the reference and the decomposition use.
        let mut lens = combine_lengths(n);
        if n > 0 && !lens.contains(&1) {
            lens.push(1);
        }
        for k in lens {
            self.instance(ins, k)?;
        }
        Ok(ins[self.index].clone())
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        // The sequential fold: acc = x[first]; acc = body(acc, x[t]) for each next element.
        let err = |e: String| Error::eval("associative_scan", e);
        let nl = self.num_leaves;
        let shapes: Vec<&Shape> = ins.iter().map(|t| &t.shape).collect();
        let n = self.length(&shapes).map_err(err)?;
        if n == 0 {
            return Ok(ins[self.index].clone());
        }
        let step = self.instance(&shapes, 1).map_err(err)?;
        let elem = |t: &HostTensor, i: usize| -> Result<HostTensor> {
            let d = t.dims();
            let s = at_len(&t.shape, self.axis, 1).map_err(err)?;
            HostTensor::new(s, t.data.gather(&element_indices(&d, self.axis, i)))
        };
        let order: Vec<usize> = if self.reverse { (0..n).rev().collect() } else { (0..n).collect() };
        let mut acc: Vec<HostTensor> = ins[..nl].iter().map(|t| elem(t, order[0])).collect::<Result<_>>()?;
        let mut parts = vec![acc[self.index].data.clone()];
        for &t in &order[1..] {
            let xs: Vec<HostTensor> = ins[..nl].iter().map(|x| elem(x, t)).collect::<Result<_>>()?;
            let args: Vec<&HostTensor> = acc.iter().chain(&xs).chain(ins[nl..].iter().copied()).collect();
            acc = run_body("associative_scan", &step, &args)?;
            parts.push(acc[self.index].data.clone());
        }
        if self.reverse {
            parts.reverse();
        }
        // The parts stacked element by element, then put where each belongs along the axis.
        let refs: Vec<&Data> = parts.iter().collect();
        let stacked = Data::concat(&refs).ok_or_else(|| err("mixed result classes".into()))?;
        let d = out.dims_fixed().map_err(err)?;
        let per: usize = d.iter().product::<usize>() / n;
        let mut map = vec![0; n * per];
        for i in 0..n {
            for (j, f) in element_indices(&d, self.axis, i).into_iter().enumerate() {
                map[f] = i * per + j;
            }
        }
        HostTensor::new(out.clone(), stacked.gather(&map))
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        let nl = self.num_leaves;
        let leaves = ins.get(..nl)?;
        let outs = self.scan_tree(g, leaves, &ins[nl..]).ok()?;
        outs.get(self.index).copied()
    }
    fn samples() -> Vec<Sample> {
        samples()
    }
}

/// `(a1, b1) . (a2, b2) = (a1 a2, a2 b1 + b2)`: the linear recurrence `h = a h + b` (S5, Mamba).
pub fn linear_recurrence_body(a: &Shape, b: &Shape) -> Graph {
    let mut g = Graph::new("linrec");
    let (a1, b1) = (g.input("a1", a.clone()), g.input("b1", b.clone()));
    let (a2, b2) = (g.input("a2", a.clone()), g.input("b2", b.clone()));
    let a = g.mul(a1, a2);
    let t = g.mul(a2, b1);
    let b = g.add(t, b2);
    g.set_outputs(vec![a, b]);
    g
}

fn samples() -> Vec<Sample> {
    let t = |d: &[usize], dt, lo, hi, seed| {
        let n = d.iter().product();
        HostTensor::from_f64(d, dt, &rand_f64(n, lo, hi, seed)).expect("sample")
    };
    let mut out = vec![];
    // A cumulative sum of odd length.
    let s = Shape::new(&[7, 3], DType::F64);
    let mut add = Graph::new("add");
    let (a, b) = (add.input("a", s.clone()), add.input("b", s.clone()));
    let c = add.add(a, b);
    add.set_outputs(vec![c]);
    out.push(Sample::new(
        "associative_scan/add",
        AssociativeScan::new(add, 1, 0, false),
        vec![t(&[7, 3], DType::F64, -1.0, 1.0, 91)],
    ));
    // The linear recurrence: even length forward; odd length reversed along axis 1; f32.
    for (label, d, axis, reverse, dt) in [
        ("linear", vec![6, 2], 0, false, DType::F64),
        ("linear/reverse_axis1", vec![2, 9], 1, true, DType::F64),
        ("linear/f32", vec![11, 2], 0, false, DType::F32),
    ] {
        let s = Shape::new(&d, dt);
        let op = AssociativeScan::new(linear_recurrence_body(&s, &s), 2, axis, reverse);
        let ins = vec![t(&d, dt, 0.5, 1.2, 92), t(&d, dt, -1.0, 1.0, 93)];
        for i in 0..2 {
            out.push(Sample::new(format!("associative_scan/{label}/{i}"), op.with_index(i), ins.clone()));
        }
    }
    // A const: the soft maximum `c log(exp(a / c) + exp(b / c))`, reversed, even length.
    let (s, k) = (Shape::new(&[3, 8], DType::F64), Shape::scalar(DType::F64));
    let mut lse = Graph::new("softmax_combine");
    let (a, b, c) = (lse.input("a", s.clone()), lse.input("b", s.clone()), lse.input("c", k));
    let (ea, eb) = (lse.div(a, c), lse.div(b, c));
    let (ea, eb) = (lse.exp(ea), lse.exp(eb));
    let sum = lse.add(ea, eb);
    let l = lse.log(sum);
    let r = lse.mul(c, l);
    lse.set_outputs(vec![r]);
    let c = HostTensor::from_f64(&[], DType::F64, &[0.7]).expect("sample");
    out.push(Sample::new(
        "associative_scan/const_reverse",
        AssociativeScan::new(lse, 1, 1, true),
        vec![t(&[3, 8], DType::F64, -1.0, 1.0, 94), c],
    ));
    out
}

impl Graph {
    /// `jax.lax.associative_scan(combine, elems, reverse, axis)`: `combine(a_leaves...,
    /// b_leaves..., consts...) -> leaves...` is declared on the leaves' types and must act
    /// elementwise along `axis` (it is applied to slices of other lengths); returns one node per
    /// leaf of the inclusive scan.
    pub fn associative_scan(
        &mut self,
        combine: Graph,
        elems: &[NodeId],
        consts: &[NodeId],
        axis: i64,
        reverse: bool,
    ) -> Vec<NodeId> {
        if elems.is_empty() {
            let node = self.len() as u32;
            let reason = "needs at least one leaf to scan".into();
            self.record(Error::Infer { op: "associative_scan".into(), node, inputs: vec![], reason });
            return vec![];
        }
        let rank = self.shape(elems[0]).map_or(0, |s| s.dims.len());
        let axis = match crate::shape::normalize_axis(axis, rank) {
            Ok(a) => a,
            Err(reason) => {
                let inputs = elems.iter().filter_map(|&x| self.shape(x).cloned()).collect();
                let node = self.len() as u32;
                let reason = format!("the scanned axis: {reason}");
                self.record(Error::Infer { op: "associative_scan".into(), node, inputs, reason });
                rank
            }
        };
        let base = AssociativeScan::new(combine, elems.len(), axis, reverse);
        let mut ins = elems.to_vec();
        ins.extend_from_slice(consts);
        (0..elems.len()).map(|i| self.add_node(base.with_index(i), &ins)).collect()
    }
}
