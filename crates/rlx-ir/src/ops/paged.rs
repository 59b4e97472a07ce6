//! A paged KV cache (as vLLM's PagedAttention): keys and values live in one pool of fixed-size
//! pages `[pages, kv_heads, page_size, head_dim]`, and each sequence owns a list of pages, its
//! row of a block table. `paged_kv_write` stores new tokens' keys or values at their slots
//! (`page * page_size + offset`); `paged_attention` runs each query token against the keys of
//! its own sequence up to its position, read through the block table, with no copy into a
//! contiguous cache. Query tokens of many sequences (decode steps and prefill chunks alike) are
//! rows of one tensor, so the projections around attention are one matmul over all of them.

use crate::ops::attention::kv_dtype_fits;
use crate::ops::rules;
use crate::ops::util::{rand_f64, require_float};
use crate::{DType, Dim, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

fn int_vector(name: &str, s: &Shape, rank: usize) -> std::result::Result<(), String> {
    if !s.dtype.is_int() || s.rank() != rank {
        return Err(format!("{name} must be a rank-{rank} integer tensor, got {s}"));
    }
    Ok(())
}

fn fixed(s: &Shape, what: &str) -> std::result::Result<Vec<usize>, String> {
    s.fixed_dims().ok_or_else(|| format!("{what} must have static dims, got {s}"))
}

/// Pool `[pages, kv_heads, page_size, dim]` with `new` `[tokens, kv_heads, dim]` written at
/// `slots` `[tokens]` (slot `s` is offset `s % page_size` of page `s / page_size`); a negative
/// slot writes nothing (padding rows of a bucketed batch), a slot past the pool is an error.
/// Slots are distinct within one write (the decomposition sums duplicates). Updating a param
/// with it runs in place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PagedKvWrite {}

impl OpDef for PagedKvWrite {
    fn name(&self) -> &'static str {
        "paged_kv_write"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::UPDATES_OPERAND
    }
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let (pool, new) = (ins[0], ins[1]);
        int_vector("slots", ins[2], 1)?;
        if pool.dtype != new.dtype {
            return Err(format!("new rows have dtype {}, the pool {}", new.dtype, pool.dtype));
        }
        let (p, n) = (fixed(pool, "the pool")?, fixed(new, "the new rows")?);
        if p.len() != 4 || n.len() != 3 {
            return Err(format!(
                "the pool must be [pages, kv_heads, page_size, dim] and new rows [tokens, kv_heads, dim], got {pool} and {new}"
            ));
        }
        if p[1] != n[1] || p[3] != n[2] {
            return Err(format!("new rows {new} do not fit the pool {pool} (kv heads and dim must agree)"));
        }
        if ins[2].dims[0] != Dim::Fixed(n[0]) {
            return Err(format!("{} slots for {} new rows", ins[2].dims[0], n[0]));
        }
        Ok(pool.clone())
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let (p, n) = (ins[0].dims(), ins[1].dims());
        let (kvh, ps, d) = (p[1], p[2], p[3]);
        let slots = ins[2].to_i64_vec()?;
        let mut dst = Vec::with_capacity(n[0] * kvh * d);
        let mut src = Vec::with_capacity(n[0] * kvh * d);
        for (t, &s) in slots.iter().enumerate() {
            if s < 0 {
                continue;
            }
            let s = s as usize;
            if s >= p[0] * ps {
                let reason = format!("slot {s} of token {t} is outside the pool of {} slots", p[0] * ps);
                return Err(Error::eval("paged_kv_write", reason));
            }
            let (page, off) = (s / ps, s % ps);
            for h in 0..kvh {
                for e in 0..d {
                    dst.push(((page * kvh + h) * ps + off) * d + e);
                    src.push((t * kvh + h) * d + e);
                }
            }
        }
        let mut data = ins[0].data.clone();
        data.scatter(&dst, &ins[1].data.gather(&src));
        HostTensor::new(out.clone(), data)
    }
    /// A one-hot product: row `r` of the pool (as `[pages * page_size, kv_heads * dim]`) takes
    /// the new row whose slot is `r`, where one is.
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        let (p, n) = (rules::dims(g, ins[0]), rules::dims(g, ins[1]));
        let dt = g.nodes()[ins[0].index()].ty.dtype;
        let sdt = g.nodes()[ins[2].index()].ty.dtype;
        let (rows, width, t) = (p[0] * p[2], p[1] * p[3], n[0]);
        let pool = g.transpose(ins[0], &[0, 2, 1, 3]);
        let pool = g.reshape(pool, &[rows, width]);
        let iota = g.arange(0.0, 1.0, rows, sdt);
        let iota = g.reshape(iota, &[rows, 1]);
        let slots = g.reshape(ins[2], &[1, t]);
        let hit = g.eq(iota, slots);
        // One term per row, so the product is the new value itself when it runs in the pool's
        // precision: f64 for f64 pools, else f32.
        let cd = if dt == DType::F64 { DType::F64 } else { DType::F32 };
        let onehot = g.cast(hit, cd);
        let any = g.sum(onehot, &[1], true);
        let zero = g.full(Shape::new(&[1, 1], cd), 0.0);
        let any = g.gt(any, zero);
        let new = g.reshape(ins[1], &[t, width]);
        let new = g.cast(new, cd);
        let placed = g.matmul(onehot, new);
        let placed = g.cast(placed, dt);
        let any = g.broadcast_to(any, &[rows, width]);
        let y = g.where_(any, placed, pool);
        let y = g.reshape(y, &[p[0], p[2], p[1], p[3]]);
        Some(g.transpose(y, &[0, 2, 1, 3]))
    }
    fn samples() -> Vec<Sample> {
        let pool = |dt, seed| HostTensor::from_f64(&[3, 2, 4, 5], dt, &rand_f64(120, -1.0, 1.0, seed)).expect("sample");
        let new = |dt, seed| HostTensor::from_f64(&[3, 2, 5], dt, &rand_f64(30, -1.0, 1.0, seed)).expect("sample");
        let slots = |v: &[i64], dt| HostTensor::from_i64(&[v.len()], dt, v).expect("sample");
        let w = PagedKvWrite {};
        vec![
            Sample::new(
                "paged_kv_write/f32",
                w.clone(),
                vec![pool(DType::F32, 1), new(DType::F32, 2), slots(&[5, 0, 11], DType::I32)],
            ),
            Sample::new(
                "paged_kv_write/f16/pad",
                w.clone(),
                vec![pool(DType::F16, 3), new(DType::F16, 4), slots(&[7, -1, 8], DType::I64)],
            ),
            Sample::new(
                "paged_kv_write/f64",
                w,
                vec![pool(DType::F64, 5), new(DType::F64, 6), slots(&[2, 3, 4], DType::I32)],
            ),
        ]
    }
}

/// Attention of query tokens `q` `[tokens, heads, dim]` over a paged cache: token `t` belongs to
/// the sequence whose block-table row is `token_seq[t]` and sits at `positions[t]`; it sees that
/// sequence's keys `0..=positions[t]`, key `j` being offset `j % page_size` of page
/// `block_tables[row, j / page_size]` of `k_pages` / `v_pages` `[pages, kv_heads, page_size,
/// dim]` (f32, or f16 / bf16 under an f32 query). Grouped-query heads as `attention`. Output
/// `[tokens, heads, dim_v]` in the query dtype.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PagedAttention {
    /// Multiplies q . k before the softmax.
    pub scale: f32,
}

impl OpDef for PagedAttention {
    fn name(&self) -> &'static str {
        "paged_attention"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE | OpTraits::CONTRACTION
    }
    fn arity(&self) -> Arity {
        Arity::Exact(6)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let (q, k, v) = (ins[0], ins[1], ins[2]);
        require_float(q.dtype)?;
        if k.dtype != v.dtype || !kv_dtype_fits(q.dtype, k.dtype) {
            return Err(format!(
                "k and v pages must share the query dtype {}, or f16/bf16 under an f32 query, got {} and {}",
                q.dtype, k.dtype, v.dtype
            ));
        }
        if !self.scale.is_finite() {
            return Err(format!("scale must be finite, got {}", self.scale));
        }
        let (qd, kd, vd) = (fixed(q, "q")?, fixed(k, "k pages")?, fixed(v, "v pages")?);
        if qd.len() != 3 || kd.len() != 4 || vd.len() != 4 {
            return Err(format!(
                "q must be [tokens, heads, dim] and the pages [pages, kv_heads, page_size, dim], got {q}, {k}, {v}"
            ));
        }
        if kd[..3] != vd[..3] || qd[2] != kd[3] {
            return Err(format!("q {q}, k pages {k} and v pages {v} disagree on pages, kv heads, page size or dim"));
        }
        if kd[1] == 0 || qd[1] % kd[1] != 0 || kd[2] == 0 {
            return Err(format!("query heads ({}) must be a multiple of kv heads ({}), pages non-empty", qd[1], kd[1]));
        }
        int_vector("block_tables", ins[3], 2)?;
        int_vector("token_seq", ins[4], 1)?;
        int_vector("positions", ins[5], 1)?;
        for (name, s) in [("token_seq", ins[4]), ("positions", ins[5])] {
            if s.dims[0] != Dim::Fixed(qd[0]) {
                return Err(format!("{name} {s} must hold one entry per query token ({})", qd[0]));
            }
        }
        Ok(Shape::new(&[qd[0], qd[1], vd[3]], q.dtype))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let err = |r: String| Error::eval("paged_attention", r);
        let (qd, kd, vd, bd) = (ins[0].dims(), ins[1].dims(), ins[2].dims(), ins[3].dims());
        let (nt, h, d) = (qd[0], qd[1], qd[2]);
        let (np, kvh, ps, dv) = (kd[0], kd[1], kd[2], vd[3]);
        let (q, k, v) = (ins[0].to_f64_vec()?, ins[1].to_f64_vec()?, ins[2].to_f64_vec()?);
        let (bt, seq, pos) = (ins[3].to_i64_vec()?, ins[4].to_i64_vec()?, ins[5].to_i64_vec()?);
        let grp = h / kvh;
        let mut y = vec![0.0; nt * h * dv];
        for t in 0..nt {
            let row = usize::try_from(seq[t]).ok().filter(|&r| r < bd[0]);
            let row = row.ok_or_else(|| err(format!("token {t}'s sequence {} has no block-table row", seq[t])))?;
            let keys = usize::try_from(pos[t] + 1).ok().filter(|&n| n >= 1 && n <= bd[1] * ps);
            let keys =
                keys.ok_or_else(|| err(format!("token {t}'s position {} does not fit its block table", pos[t])))?;
            let mut slot = Vec::with_capacity(keys);
            for j in 0..keys {
                let page = bt[row * bd[1] + j / ps];
                let page = usize::try_from(page).ok().filter(|&p| p < np);
                slot.push(page.ok_or_else(|| err(format!("token {t}'s key {j} names a page outside 0..{np}")))?);
            }
            for hi in 0..h {
                let kv = hi / grp;
                let qr = &q[(t * h + hi) * d..(t * h + hi + 1) * d];
                let at = |j: usize, w: usize| ((slot[j] * kvh + kv) * ps + j % ps) * w;
                let sc: Vec<f64> = (0..keys)
                    .map(|j| {
                        self.scale as f64 * qr.iter().zip(&k[at(j, d)..at(j, d) + d]).map(|(a, b)| a * b).sum::<f64>()
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
                let s: f64 = e.iter().sum();
                let o = &mut y[(t * h + hi) * dv..(t * h + hi + 1) * dv];
                for (j, w) in e.iter().enumerate() {
                    for (oc, vc) in o.iter_mut().zip(&v[at(j, dv)..at(j, dv) + dv]) {
                        *oc += w / s * vc;
                    }
                }
            }
        }
        HostTensor::from_f64(&out.fixed_dims().unwrap_or_default(), out.dtype, &y)
    }
    /// Each token's pages gathered into a contiguous cache `[tokens, kv_heads, blocks *
    /// page_size, dim]`, keys past its position masked, then `attention` with one query row per
    /// token: memory grows with tokens x blocks, for backends without a paged kernel.
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        let (qd, kd, vd, bd) =
            (rules::dims(g, ins[0]), rules::dims(g, ins[1]), rules::dims(g, ins[2]), rules::dims(g, ins[3]));
        let (nt, h, d) = (qd[0], qd[1], qd[2]);
        let (kvh, ps, dv, nb) = (kd[1], kd[2], vd[3], bd[1]);
        let qdt = g.nodes()[ins[0].index()].ty.dtype;
        let pdt = g.nodes()[ins[5].index()].ty.dtype;
        let tables = g.gather(ins[3], ins[4], 0);
        // Widened before the gather: backends without a paged kernel may gather only 32-bit words.
        let gather_cache = |g: &mut Graph, pages: NodeId, w: usize| {
            let pages = if g.nodes()[pages.index()].ty.dtype == qdt { pages } else { g.cast(pages, qdt) };
            let c = g.gather(pages, tables, 0);
            let c = g.transpose(c, &[0, 2, 1, 3, 4]);
            g.reshape(c, &[nt, kvh, nb * ps, w])
        };
        let k = gather_cache(g, ins[1], d);
        let v = gather_cache(g, ins[2], dv);
        let keys = g.arange(0.0, 1.0, nb * ps, pdt);
        let keys = g.reshape(keys, &[1, nb * ps]);
        let pos = g.reshape(ins[5], &[nt, 1]);
        let mask = g.le(keys, pos);
        let mask = g.reshape(mask, &[nt, 1, 1, nb * ps]);
        let q = g.reshape(ins[0], &[nt, h, 1, d]);
        let y = g.attention_with_mask(q, k, v, mask, self.scale);
        Some(g.reshape(y, &[nt, h, dv]))
    }
    fn tolerance(&self) -> Option<(f64, f64)> {
        Some((2e-5, 2e-5))
    }
    fn samples() -> Vec<Sample> {
        let rt = |dims: &[usize], dt, seed| {
            let n = dims.iter().product();
            HostTensor::from_f64(dims, dt, &rand_f64(n, -1.5, 1.5, seed)).expect("sample")
        };
        let ints = |dims: &[usize], v: &[i64], dt| HostTensor::from_i64(dims, dt, v).expect("sample");
        let op = |d: usize| PagedAttention { scale: 1.0 / (d as f32).sqrt() };
        // Two sequences over 5 pages of 4 slots: one decoding at position 6 (pages 3, 1), one
        // prefilling positions 0..=2 (page 4); a padding token on page 0.
        let tables = ints(&[3, 2], &[3, 1, 4, 2, 0, 0], DType::I32);
        let seq = ints(&[5], &[0, 1, 1, 1, 2], DType::I32);
        let pos = ints(&[5], &[6, 0, 1, 2, 0], DType::I64);
        let mut out = vec![];
        for (i, (h, kvh, d, dv, qdt, kdt)) in [
            (4, 2, 8, 8, DType::F32, DType::F32),
            (2, 2, 4, 3, DType::F64, DType::F64),
            (6, 2, 8, 8, DType::F32, DType::F16),
            (2, 1, 16, 16, DType::F32, DType::BF16),
        ]
        .into_iter()
        .enumerate()
        {
            let s = 40 + 4 * i as u64;
            out.push(Sample::new(
                format!("paged_attention/{qdt}/{kdt}/h{h}kv{kvh}d{d}"),
                op(d),
                vec![
                    rt(&[5, h, d], qdt, s),
                    rt(&[5, kvh, 4, d], kdt, s + 1),
                    rt(&[5, kvh, 4, dv], kdt, s + 2),
                    tables.clone(),
                    seq.clone(),
                    pos.clone(),
                ],
            ));
        }
        out
    }
}

impl Graph {
    /// `pool` with the rows of `new` written at `slots` (see `PagedKvWrite`).
    pub fn paged_kv_write(&mut self, pool: NodeId, new: NodeId, slots: NodeId) -> NodeId {
        self.add_node(PagedKvWrite {}, &[pool, new, slots])
    }

    /// Attention of `q` `[tokens, heads, dim]` over paged keys and values (see `PagedAttention`).
    #[allow(clippy::too_many_arguments)]
    pub fn paged_attention(
        &mut self,
        q: NodeId,
        k_pages: NodeId,
        v_pages: NodeId,
        block_tables: NodeId,
        token_seq: NodeId,
        positions: NodeId,
        scale: f32,
    ) -> NodeId {
        self.add_node(PagedAttention { scale }, &[q, k_pages, v_pages, block_tables, token_seq, positions])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Op;

    /// The paged op equals plain causal attention over the sequence's keys laid out in order.
    #[test]
    fn paged_attention_matches_contiguous_attention() {
        let (h, d, ps) = (2, 4, 2);
        let keys = rand_f64(5 * d, -1.0, 1.0, 7);
        let vals = rand_f64(5 * d, -1.0, 1.0, 8);
        // Keys 0..5 of one sequence on pages [2, 0, 1]; pool of 3 pages, 1 kv head.
        let pages = [2usize, 0, 1];
        let mut kp = vec![0.0; 3 * ps * d];
        let mut vp = vec![0.0; 3 * ps * d];
        for j in 0..5 {
            let at = (pages[j / ps] * ps + j % ps) * d;
            kp[at..at + d].copy_from_slice(&keys[j * d..(j + 1) * d]);
            vp[at..at + d].copy_from_slice(&vals[j * d..(j + 1) * d]);
        }
        let q = rand_f64(h * d, -1.0, 1.0, 9);
        let t = |dims: &[usize], v: &[f64]| HostTensor::from_f64(dims, DType::F64, v).expect("tensor");
        let i = |dims: &[usize], v: &[i64]| HostTensor::from_i64(dims, DType::I64, v).expect("tensor");
        let op = PagedAttention { scale: 0.5 };
        let ins = [
            t(&[1, h, d], &q),
            t(&[3, 1, ps, d], &kp),
            t(&[3, 1, ps, d], &vp),
            i(&[1, 3], &[2, 0, 1]),
            i(&[1], &[0]),
            i(&[1], &[4]),
        ];
        let refs: Vec<&HostTensor> = ins.iter().collect();
        let shapes: Vec<&Shape> = ins.iter().map(|x| &x.shape).collect();
        let got = op.reference(&refs, &op.infer(&shapes).expect("infer")).expect("paged");
        let att = crate::ops::Attention::new(crate::ops::MaskKind::None, 0.5);
        let ains = [t(&[1, h, 1, d], &q), t(&[1, 1, 5, d], &keys), t(&[1, 1, 5, d], &vals)];
        let arefs: Vec<&HostTensor> = ains.iter().collect();
        let ashapes: Vec<&Shape> = ains.iter().map(|x| &x.shape).collect();
        let want = att.reference(&arefs, &att.infer(&ashapes).expect("infer")).expect("attention");
        let (a, b) = (got.to_f64_vec().expect("f64"), want.to_f64_vec().expect("f64"));
        assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-12), "{a:?} vs {b:?}");
        assert_eq!(Op::from(op).kind(), crate::OpKind::PagedAttention);
    }

    #[test]
    fn paged_kv_write_skips_negative_slots_and_rejects_slots_past_the_pool() {
        let pool = HostTensor::from_f64(&[2, 1, 2, 1], DType::F32, &[0.0; 4]).expect("pool");
        let new = HostTensor::from_f64(&[2, 1, 1], DType::F32, &[5.0, 6.0]).expect("new");
        let slots = HostTensor::from_i64(&[2], DType::I32, &[-1, 2]).expect("slots");
        let w = PagedKvWrite {};
        let out = w.reference(&[&pool, &new, &slots], &pool.shape).expect("write");
        assert_eq!(out.to_f64_vec().expect("f64"), vec![0.0, 0.0, 6.0, 0.0]);
        let bad = HostTensor::from_i64(&[2], DType::I32, &[0, 4]).expect("slots");
        let e = w.reference(&[&pool, &new, &bad], &pool.shape).expect_err("slot 4 of 4");
        assert!(e.to_string().contains("slot 4"), "{e}");
    }
}
