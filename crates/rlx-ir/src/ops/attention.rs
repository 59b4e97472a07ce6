//! Scaled dot-product attention with grouped-query heads and built-in or custom masks: a
//! composite of matmul, masking, softmax and matmul.

use crate::ops::conv::infers;
use crate::ops::util::{broadcast_index_map, rand_f64, require_float, same_dtype};
use crate::shape::broadcast_dims;
use crate::{DType, Data, Dim, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// Which keys each query may see. With `s` queries and `t` keys, the built-in masks align the
/// ends (query i sits at position `i + t - s`), as in KV-cache decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskKind {
    /// Every query sees every key.
    None,
    /// Query i sees key j iff `j <= i + (t - s)`.
    Causal,
    /// Causal, limited to the last n positions: `i + (t - s) - n < j <= i + (t - s)`; n >= 1.
    SlidingWindow(usize),
    /// A 4th input broadcastable to `[batch, heads, s, t]`: bool (true = may attend) or of the
    /// query dtype (added to the scaled scores).
    Custom,
}

impl MaskKind {
    /// Whether query `i` may see key `j` under a built-in mask (`off = t - s`); true for `Custom`.
    pub fn visible(self, i: usize, j: usize, off: i64) -> bool {
        let (i, j) = (i as i64, j as i64);
        match self {
            MaskKind::None | MaskKind::Custom => true,
            MaskKind::Causal => j <= i + off,
            MaskKind::SlidingWindow(n) => j <= i + off && j > i + off - n as i64,
        }
    }
}

/// The axis order of per-head values: attention's q, k, v and output, rope's x and output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeadLayout {
    /// `[batch, heads, seq, dim]`.
    #[default]
    Bhsd,
    /// `[batch, seq, heads, dim]` (JAX's `BTNH`): projections reshaped to heads, no transposes.
    Bshd,
}

impl HeadLayout {
    /// Whether this is `Bhsd` (the default, left out of the text form).
    pub fn is_bhsd(&self) -> bool {
        *self == HeadLayout::Bhsd
    }

    /// `(batch, heads, seq, dim)` of dims in this layout (rank 4).
    pub fn bhsd<T: Clone>(self, d: &[T]) -> [T; 4] {
        match self {
            HeadLayout::Bhsd => [d[0].clone(), d[1].clone(), d[2].clone(), d[3].clone()],
            HeadLayout::Bshd => [d[0].clone(), d[2].clone(), d[1].clone(), d[3].clone()],
        }
    }

    /// Dims in this layout from `(batch, heads, seq, dim)`.
    pub fn dims<T>(self, [b, h, s, d]: [T; 4]) -> Vec<T> {
        match self {
            HeadLayout::Bhsd => vec![b, h, s, d],
            HeadLayout::Bshd => vec![b, s, h, d],
        }
    }

    /// Element strides of `(batch, head, seq)` in a contiguous tensor of this layout with
    /// `heads` heads, `seq` positions and head dim `dim`.
    pub fn strides(self, heads: usize, seq: usize, dim: usize) -> [usize; 3] {
        match self {
            HeadLayout::Bhsd => [heads * seq * dim, seq * dim, dim],
            HeadLayout::Bshd => [seq * heads * dim, dim, heads * dim],
        }
    }

    /// Rows of `dim` elements between consecutive positions of one head: 1 heads first, `heads`
    /// seq first (row r of a contiguous tensor is at position `r / this % seq`).
    pub fn rows_per_position(self, heads: usize) -> usize {
        match self {
            HeadLayout::Bhsd => 1,
            HeadLayout::Bshd => heads,
        }
    }

    /// The name of its axes, for messages.
    pub fn axes(self) -> &'static str {
        match self {
            HeadLayout::Bhsd => "[batch, heads, seq, dim]",
            HeadLayout::Bshd => "[batch, seq, heads, dim]",
        }
    }
}

/// `softmax(q @ k^T * scale + mask) @ v`. Inputs (layout `Bhsd`): q `[batch, heads, s, d]`, k
/// `[batch, kv_heads, t, d]`, v `[batch, kv_heads, t, dv]` (and the mask for `Custom`); output
/// `[batch, heads, s, dv]`; layout `Bshd` swaps the heads and seq axes of all four. k and v
/// share q's dtype, or are f16/bf16 under an f32 q (a half-precision KV cache, widened to f32
/// as they are read; the output is f32). `heads`
/// must be a multiple of `kv_heads`: query head h uses kv head `h / (heads / kv_heads)`. A
/// query row with no visible key gives NaN (softmax of all -inf).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attention {
    /// The mask.
    pub mask: MaskKind,
    /// Multiplies the scores, usually `1 / sqrt(d)`.
    pub scale: f64,
    /// The axis order of q, k, v and the output (the custom mask is always over
    /// `[batch, heads, s, t]`).
    #[serde(default, skip_serializing_if = "HeadLayout::is_bhsd")]
    pub layout: HeadLayout,
}

impl Attention {
    /// Attention over `[batch, heads, seq, dim]` values.
    pub fn new(mask: MaskKind, scale: f64) -> Self {
        Attention { mask, scale, layout: HeadLayout::Bhsd }
    }

    /// The same op over values in `layout`.
    pub fn with_layout(self, layout: HeadLayout) -> Self {
        Attention { layout, ..self }
    }
}

/// `x` (rank 4) with axes 1 and 2 swapped.
fn swap_middle(x: &[f64], [a, b, c, d]: [usize; 4]) -> Vec<f64> {
    let mut y = vec![0.0; x.len()];
    for i in 0..a {
        for j in 0..b {
            for k in 0..c {
                let src = ((i * b + j) * c + k) * d;
                let dst = ((i * c + k) * b + j) * d;
                y[dst..dst + d].copy_from_slice(&x[src..src + d]);
            }
        }
    }
    y
}

/// Whether k and v of dtype `kv` may serve queries of dtype `q`: the same dtype, or f16/bf16 under
/// f32 (a KV cache kept in half precision, computed in f32).
pub fn kv_dtype_fits(q: DType, kv: DType) -> bool {
    q == kv || (q == DType::F32 && matches!(kv, DType::F16 | DType::BF16))
}

/// Softmax of one row in f64 (all -inf gives NaN).
fn softmax_row(l: &[f64]) -> Vec<f64> {
    let m = l.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = l.iter().map(|x| (x - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

impl OpDef for Attention {
    fn name(&self) -> &'static str {
        "attention"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE | OpTraits::CONTRACTION
    }
    fn arity(&self) -> Arity {
        Arity::Range(3, 4)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let custom = self.mask == MaskKind::Custom;
        match (custom, ins.len()) {
            (true, 3) => return Err("a Custom mask needs the mask as a 4th input".into()),
            (false, 4) => {
                return Err(format!("a 4th (mask) input needs mask kind Custom, got {:?}", self.mask));
            }
            _ => {}
        }
        let (q, k, v) = (ins[0], ins[1], ins[2]);
        require_float(q.dtype)?;
        same_dtype(&ins[1..3]).map_err(|_| format!("k and v must share one dtype, got {} and {}", k.dtype, v.dtype))?;
        if !kv_dtype_fits(q.dtype, k.dtype) {
            return Err(format!(
                "k and v must have the query dtype {}, or f16/bf16 under an f32 query (a half-precision KV cache), got {}",
                q.dtype, k.dtype
            ));
        }
        if !self.scale.is_finite() {
            return Err(format!("scale must be finite, got {}", self.scale));
        }
        let axes = self.layout.axes();
        for (name, s) in [("q", q), ("k", k), ("v", v)] {
            if s.rank() != 4 {
                return Err(format!("{name} must have rank 4 {axes}, got {s}"));
            }
        }
        let l = self.layout;
        let (qd, kd, vd) = (&l.bhsd(&q.dims), &l.bhsd(&k.dims), &l.bhsd(&v.dims));
        if qd[0] != kd[0] || kd[0] != vd[0] {
            return Err(format!("batch dims differ: q {}, k {}, v {}", qd[0], kd[0], vd[0]));
        }
        if kd[1] != vd[1] || kd[2] != vd[2] {
            return Err(format!("k and v must agree on kv heads and key length, got {k} and {v}"));
        }
        if qd[3] != kd[3] {
            return Err(format!("q and k head dims differ: {} vs {}", qd[3], kd[3]));
        }
        match (qd[1].fixed(), kd[1].fixed()) {
            (Some(h), Some(kvh)) if kvh == 0 || h % kvh != 0 => {
                return Err(format!("query heads ({h}) must be a multiple of kv heads ({kvh})"));
            }
            (Some(_), Some(_)) => {}
            _ if qd[1] == kd[1] => {}
            _ => return Err("query heads and kv heads must be static (or equal)".into()),
        }
        if kd[2] == Dim::Fixed(0) {
            return Err("key length must be > 0".into());
        }
        if self.mask == MaskKind::SlidingWindow(0) {
            return Err("the sliding window must be at least 1".into());
        }
        if custom {
            let m = ins[3];
            if m.dtype != DType::Bool && m.dtype != q.dtype {
                return Err(format!("the mask must be bool or {} (the query dtype), got {}", q.dtype, m.dtype));
            }
            let full = vec![qd[0].clone(), qd[1].clone(), qd[2].clone(), kd[2].clone()];
            if m.rank() > 4 || broadcast_dims(&m.dims, &full).ok().as_ref() != Some(&full) {
                let f = Shape::with_dims(full, m.dtype);
                return Err(format!("the mask {m} does not broadcast to {f}"));
            }
        }
        let out = l.dims([qd[0].clone(), qd[1].clone(), qd[2].clone(), vd[3].clone()]);
        Ok(Shape::with_dims(out, q.dtype))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let l = self.layout;
        // Dims and values in [batch, heads, seq, dim] order.
        let f = |t: &HostTensor| -> Result<([usize; 4], Vec<f64>)> {
            let d: [usize; 4] = t
                .dims()
                .try_into()
                .map_err(|d: Vec<usize>| Error::eval("attention", format!("rank-4 inputs expected, got {d:?}")))?;
            let x = t.to_f64_vec()?;
            Ok((l.bhsd(&d), if l.is_bhsd() { x } else { swap_middle(&x, d) }))
        };
        let ((qd, q), (kd, k), (vd, v)) = (f(ins[0])?, f(ins[1])?, f(ins[2])?);
        let (b, h, s, d) = (qd[0], qd[1], qd[2], qd[3]);
        let (kvh, t, dv) = (kd[1], kd[2], vd[3]);
        if kvh == 0 || h % kvh != 0 {
            return Err(Error::eval("attention", "heads do not group"));
        }
        let grp = h / kvh;
        let off = t as i64 - s as i64;
        let mask = ins.get(3).map(|m| (broadcast_index_map(&[b, h, s, t], &m.dims()), &m.data));
        let mut y = vec![0.0; b * h * s * dv];
        for bi in 0..b {
            for hi in 0..h {
                let kv = bi * kvh + hi / grp;
                for i in 0..s {
                    let row = (bi * h + hi) * s + i;
                    let mut sc = vec![0.0; t];
                    for (j, x) in sc.iter_mut().enumerate() {
                        let kr = &k[(kv * t + j) * d..][..d];
                        let dot: f64 = q[row * d..][..d].iter().zip(kr).map(|(a, c)| a * c).sum();
                        *x = dot * self.scale;
                        if !self.mask.visible(i, j, off) {
                            *x = f64::NEG_INFINITY;
                        }
                        if let Some((map, data)) = &mask {
                            match data {
                                Data::B(m) if !m[map[row * t + j]] => *x = f64::NEG_INFINITY,
                                Data::F(m) => *x += m[map[row * t + j]],
                                _ => {}
                            }
                        }
                    }
                    let p = softmax_row(&sc);
                    for c in 0..dv {
                        y[row * dv + c] = p.iter().enumerate().map(|(j, pj)| pj * v[(kv * t + j) * dv + c]).sum();
                    }
                }
            }
        }
        let y = if l.is_bhsd() { y } else { swap_middle(&y, [b, h, s, dv]) };
        HostTensor::new(out.clone(), Data::F(y))
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], size: usize) -> Option<NodeId> {
        // q, k, v fold the vmap axis into their batch axis; a custom mask goes through decompose.
        if ins.len() > 3 {
            return None;
        }
        let xs: Vec<NodeId> = ins
            .iter()
            .zip(batched)
            .map(|(&x, &b)| if b { x } else { crate::ops::rules::add_batch(g, x, size) })
            .collect();
        let op = self.clone();
        crate::ops::rules::merged(g, &xs, move |g, x| g.add_node(op, x))
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        if !infers(self, g, ins) {
            return None;
        }
        if !self.layout.is_bhsd() {
            // Through the [batch, heads, seq, dim] form: swap the middle axes in and out.
            let mut xs: Vec<NodeId> = ins[..3].iter().map(|&x| g.transpose(x, &[0, 2, 1, 3])).collect();
            xs.extend(ins.get(3));
            let y = self.clone().with_layout(HeadLayout::Bhsd).decompose(g, &xs)?;
            return Some(g.transpose(y, &[0, 2, 1, 3]));
        }
        let (q, mut k, mut v) = (ins[0], ins[1], ins[2]);
        let dt = g.dtype(q);
        // A half-precision KV cache: widened to the query dtype first.
        if g.dtype(k) != dt {
            k = g.cast(k, dt);
            v = g.cast(v, dt);
        }
        let qd = g.shape(q)?.fixed_dims()?;
        let kd = g.shape(k)?.fixed_dims()?;
        let vd = g.shape(v)?.fixed_dims()?;
        let (b, h, s, d) = (qd[0], qd[1], qd[2], qd[3]);
        let (kvh, t, dv) = (kd[1], kd[2], vd[3]);
        let grp = h.checked_div(kvh)?;
        // Query heads of one kv head are adjacent: fold them into the rows.
        let qg = g.reshape(q, &[b, kvh, grp * s, d]);
        let kt = g.transpose(k, &[0, 1, 3, 2]);
        let sc = g.matmul(qg, kt);
        let sc = g.reshape(sc, &[b, h, s, t]);
        let scale = g.scalar(self.scale, dt);
        let mut sc = g.mul(sc, scale);
        let ninf = g.full(Shape::scalar(dt), f64::NEG_INFINITY);
        let off = t as f64 - s as f64;
        // Key index j as [1, t] against (i + off) as [s, 1].
        let keys = g.arange(0.0, 1.0, t, DType::I64);
        let keys = g.reshape(keys, &[1, t]);
        let band = |g: &mut Graph, start: f64| {
            let r = g.arange(start, 1.0, s, DType::I64);
            g.reshape(r, &[s, 1])
        };
        match self.mask {
            MaskKind::None => {}
            MaskKind::Causal | MaskKind::SlidingWindow(_) => {
                let hi = band(g, off);
                let c = g.le(keys, hi);
                sc = g.where_(c, sc, ninf);
                if let MaskKind::SlidingWindow(n) = self.mask {
                    let lo = band(g, off - n as f64);
                    let c = g.gt(keys, lo);
                    sc = g.where_(c, sc, ninf);
                }
            }
            MaskKind::Custom => {
                let m = *ins.get(3)?;
                sc = if g.dtype(m) == DType::Bool { g.where_(m, sc, ninf) } else { g.add(sc, m) };
            }
        }
        let p = g.softmax(sc, -1);
        let p = g.reshape(p, &[b, kvh, grp * s, t]);
        let y = g.matmul(p, v);
        Some(g.reshape(y, &[b, h, s, dv]))
    }
    fn samples() -> Vec<Sample> {
        let rt = |dims: &[usize], dt, seed| {
            let n = dims.iter().product();
            HostTensor::from_f64(dims, dt, &rand_f64(n, -1.5, 1.5, seed)).expect("sample")
        };
        let mut out = vec![];
        // (batch, heads, kv_heads, s, t, d, dv, mask, dtype)
        let cases = [
            (1, 2, 2, 3, 4, 5, 3, MaskKind::None, DType::F32),
            (2, 4, 2, 4, 4, 3, 3, MaskKind::Causal, DType::F32),
            (1, 2, 1, 2, 5, 4, 2, MaskKind::Causal, DType::F64),
            (1, 1, 1, 5, 5, 2, 3, MaskKind::SlidingWindow(2), DType::F64),
            (1, 3, 3, 2, 6, 4, 4, MaskKind::SlidingWindow(3), DType::F32),
            (1, 1, 1, 1, 1, 4, 2, MaskKind::Causal, DType::F32),
            (2, 6, 3, 3, 7, 8, 5, MaskKind::None, DType::F64),
        ];
        for (i, (b, h, kvh, s, t, d, dv, mask, dt)) in cases.into_iter().enumerate() {
            let seed = 60 + 3 * i as u64;
            out.push(Sample::new(
                format!("attention/{dt}/{mask:?}/h{h}kv{kvh}s{s}t{t}"),
                Attention::new(mask, 1.0 / (d as f64).sqrt()),
                vec![
                    rt(&[b, h, s, d], dt, seed),
                    rt(&[b, kvh, t, d], dt, seed + 1),
                    rt(&[b, kvh, t, dv], dt, seed + 2),
                ],
            ));
        }
        // [batch, seq, heads, dim] values: grouped heads, a causal cache offset, a bool mask.
        let bshd = Attention::new(MaskKind::Causal, 0.4).with_layout(HeadLayout::Bshd);
        out.push(Sample::new(
            "attention/f32/bshd/causal/h4kv2s3t5",
            bshd.clone(),
            vec![
                rt(&[2, 3, 4, 6], DType::F32, 80),
                rt(&[2, 5, 2, 6], DType::F32, 81),
                rt(&[2, 5, 2, 3], DType::F32, 82),
            ],
        ));
        out.push(Sample::new(
            "attention/f64/bshd/none/h2kv1s4t4",
            Attention { mask: MaskKind::None, ..bshd.clone() },
            vec![
                rt(&[1, 4, 2, 3], DType::F64, 83),
                rt(&[1, 4, 1, 3], DType::F64, 84),
                rt(&[1, 4, 1, 2], DType::F64, 85),
            ],
        ));
        let keep: Vec<bool> =
            rand_f64(3 * 4, 0.0, 1.0, 86).iter().enumerate().map(|(i, &u)| i % 4 == 0 || u < 0.5).collect();
        out.push(Sample::new(
            "attention/f32/bshd/custom_bool",
            Attention { mask: MaskKind::Custom, ..bshd },
            vec![
                rt(&[1, 3, 2, 4], DType::F32, 87),
                rt(&[1, 4, 2, 4], DType::F32, 88),
                rt(&[1, 4, 2, 4], DType::F32, 89),
                HostTensor::from_bool(&[1, 1, 3, 4], &keep).expect("sample"),
            ],
        ));
        // A half-precision KV cache under f32 queries: grouped heads, decode-like and prefill-like.
        for (i, (kv_dt, s, mask)) in [
            (DType::F16, 1, MaskKind::Causal),
            (DType::BF16, 3, MaskKind::SlidingWindow(3)),
            (DType::F16, 5, MaskKind::None),
        ]
        .into_iter()
        .enumerate()
        {
            let seed = 110 + 3 * i as u64;
            out.push(Sample::new(
                format!("attention/f32/kv_{kv_dt}/{mask:?}/s{s}"),
                Attention::new(mask, 0.5),
                vec![
                    rt(&[1, 4, s, 8], DType::F32, seed),
                    rt(&[1, 2, 6, 8], kv_dt, seed + 1),
                    rt(&[1, 2, 6, 4], kv_dt, seed + 2),
                ],
            ));
        }
        // Large scores: the softmax must subtract the row max.
        let big = |dims: &[usize], seed| {
            let n = dims.iter().product();
            HostTensor::from_f64(dims, DType::F32, &rand_f64(n, -4.0, 4.0, seed)).expect("sample")
        };
        out.push(Sample::new(
            "attention/f32/large_scores",
            Attention::new(MaskKind::Causal, 1.0),
            vec![big(&[1, 2, 3, 8], 90), big(&[1, 2, 3, 8], 91), big(&[1, 2, 3, 2], 92)],
        ));
        // Custom bool mask [batch, 1, s, t]; key 0 is always visible so no row is empty.
        let (b, h, s, t) = (2, 2, 3, 4);
        let bits: Vec<bool> =
            rand_f64(b * s * t, 0.0, 1.0, 93).iter().enumerate().map(|(i, &u)| i % t == 0 || u < 0.5).collect();
        let m = HostTensor::from_bool(&[b, 1, s, t], &bits).expect("sample");
        out.push(Sample::new(
            "attention/f32/custom_bool",
            Attention::new(MaskKind::Custom, 0.5),
            vec![
                rt(&[b, h, s, 4], DType::F32, 94),
                rt(&[b, 1, t, 4], DType::F32, 95),
                rt(&[b, 1, t, 3], DType::F32, 96),
                m,
            ],
        ));
        // Custom additive float mask [s, t] with one -inf.
        let mut add = rand_f64(s * t, -2.0, 0.0, 97);
        add[1] = f64::NEG_INFINITY;
        let m = HostTensor::from_f64(&[s, t], DType::F64, &add).expect("sample");
        out.push(Sample::new(
            "attention/f64/custom_float",
            Attention::new(MaskKind::Custom, 0.5),
            vec![
                rt(&[1, h, s, 4], DType::F64, 98),
                rt(&[1, h, t, 4], DType::F64, 99),
                rt(&[1, h, t, 2], DType::F64, 100),
                m,
            ],
        ));
        out
    }
}

impl Graph {
    /// Scaled dot-product attention with a built-in mask. For `MaskKind::Custom` use
    /// `attention_with_mask`; passing it here records an error.
    pub fn attention(&mut self, q: NodeId, k: NodeId, v: NodeId, mask: MaskKind, scale: f32) -> NodeId {
        if mask == MaskKind::Custom {
            let inputs = [q, k, v].iter().filter_map(|&x| self.shape(x).cloned()).collect();
            self.record(Error::Infer {
                op: "attention".into(),
                node: self.len() as u32,
                inputs,
                reason: "MaskKind::Custom needs a mask tensor: use attention_with_mask".into(),
            });
        }
        let op = Attention::new(mask, scale as f64);
        self.add_node(op, &[q, k, v])
    }

    /// Scaled dot-product attention with a mask tensor broadcastable to `[batch, heads, s, t]`:
    /// bool (true = may attend) or float (added to the scaled scores).
    pub fn attention_with_mask(&mut self, q: NodeId, k: NodeId, v: NodeId, mask: NodeId, scale: f32) -> NodeId {
        let op = Attention::new(MaskKind::Custom, scale as f64);
        self.add_node(op, &[q, k, v, mask])
    }
}
