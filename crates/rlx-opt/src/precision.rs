//! Mixed precision: rewrites an f32 graph so that chosen ops compute in f16 or bf16, inserting
//! casts at the boundaries (the simplify stage folds the redundant ones).
//!
//! - `F16` / `BF16`: contractions (matmul, attention, conv) and elementwise math in the half
//!   type; reductions, norms and softmax stay in f32.
//! - `Auto`: only contractions in bf16 (f16 where the input range is known small is left to the
//!   user), keeping every accumulation-sensitive op in f32.
//!
//! Data-movement ops follow their input's dtype, so a reshape between two half ops adds no casts.
//! Graph outputs keep their original dtypes.

use rlx_driver::PrecisionPolicy;
use rlx_ir::{DType, Graph, NodeId, Op, OpKind, OpTraits, Result};
use std::collections::HashMap;

/// What a node does with its float inputs under a policy.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    /// Compute in the half type.
    Lower,
    /// Keep whatever dtype the inputs have now (movement, views).
    Follow,
    /// Compute in the original dtype.
    Keep,
}

fn half_of(policy: PrecisionPolicy) -> Option<DType> {
    match policy {
        PrecisionPolicy::F32 => None,
        PrecisionPolicy::F16 => Some(DType::F16),
        PrecisionPolicy::BF16 | PrecisionPolicy::Auto => Some(DType::BF16),
    }
}

fn role(op: &Op, policy: PrecisionPolicy) -> Role {
    let t = op.def().traits();
    if matches!(op.kind(), OpKind::QMatMul | OpKind::Dequantize | OpKind::Cast) || t.contains(OpTraits::LEAF) {
        return Role::Keep;
    }
    if t.contains(OpTraits::CONTRACTION) {
        return Role::Lower;
    }
    if t.intersects(OpTraits::DATA_MOVEMENT | OpTraits::VIEW) {
        return Role::Follow;
    }
    let elementwise = t.contains(OpTraits::ELEMENTWISE) || matches!(op, Op::Fused(_));
    if elementwise && policy != PrecisionPolicy::Auto { Role::Lower } else { Role::Keep }
}

/// Counts of what the pass did, for the compile report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrecisionStats {
    /// Ops now computing in the half type.
    pub lowered: usize,
    /// Casts inserted (before folding).
    pub casts: usize,
}

/// Rewrites `g` under `policy` (a no-op for `F32`). Only f32 values are narrowed.
pub fn apply_precision(g: &Graph, policy: PrecisionPolicy) -> Result<(Graph, PrecisionStats)> {
    let Some(half) = half_of(policy) else { return Ok((g.clone(), PrecisionStats::default())) };
    let mut out = Graph::new(g.name());
    let mut stats = PrecisionStats::default();
    let mut map: Vec<NodeId> = Vec::with_capacity(g.len());
    let mut casts: HashMap<(NodeId, DType), NodeId> = HashMap::new();
    // The new node for old `x`, as dtype `want` (memoized casts).
    let mut as_dtype = |out: &mut Graph, x: NodeId, want: DType, stats: &mut PrecisionStats| -> NodeId {
        if out.dtype(x) == want {
            return x;
        }
        *casts.entry((x, want)).or_insert_with(|| {
            stats.casts += 1;
            out.cast_to(x, want)
        })
    };
    for n in g.nodes() {
        let r = role(&n.op, policy);
        let f32_inputs = n.inputs.iter().any(|x| g.dtype(*x) == DType::F32);
        let mut ins = Vec::with_capacity(n.inputs.len());
        for &x in &n.inputs {
            let (new, orig) = (map[x.index()], g.dtype(x));
            let want = match r {
                Role::Lower if orig == DType::F32 => half,
                Role::Follow => out.dtype(new),
                _ => orig,
            };
            ins.push(if orig.is_float() { as_dtype(&mut out, new, want, &mut stats) } else { new });
        }
        if r == Role::Follow {
            // Movement ops need one float dtype across their float inputs.
            let floats: Vec<usize> = (0..ins.len()).filter(|&i| g.dtype(n.inputs[i]).is_float()).collect();
            if floats.iter().any(|&i| out.dtype(ins[i]) != out.dtype(ins[floats[0]])) {
                for &i in &floats {
                    ins[i] = as_dtype(&mut out, ins[i], g.dtype(n.inputs[i]), &mut stats);
                }
            }
        }
        if r == Role::Lower && f32_inputs {
            stats.lowered += 1;
        }
        map.push(out.try_add(n.op.clone(), &ins)?);
    }
    let outs: Vec<NodeId> =
        g.outputs().iter().map(|&o| as_dtype(&mut out, map[o.index()], g.dtype(o), &mut stats)).collect();
    out.set_outputs(outs);
    out.verify()?;
    Ok((out, stats))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::Shape;

    fn mlp() -> Graph {
        let mut g = Graph::new("mlp");
        let x = g.input("x", Shape::new(&[2, 8], DType::F32));
        let w = g.param("w", Shape::new(&[8, 4], DType::F32));
        let h = g.matmul(x, w);
        let t = g.tanh(h);
        let r = g.reshape(t, &[8]);
        let s = g.sum(r, &[0], false);
        g.set_outputs(vec![s, t]);
        g
    }

    #[test]
    fn auto_lowers_only_the_matmul() {
        let (g, st) = apply_precision(&mlp(), PrecisionPolicy::Auto).unwrap();
        assert_eq!(st.lowered, 1);
        let text = g.to_text();
        assert!(text.contains("matmul(") && text.contains(": bf16[2,4]"), "{text}");
        assert!(text.contains("tanh(") && text.contains("sum("));
        let tanh = g.nodes().iter().find(|n| n.op.def().name() == "tanh").unwrap();
        assert_eq!(tanh.ty.dtype, DType::F32);
        assert_eq!(g.outputs().iter().map(|&o| g.dtype(o)).collect::<Vec<_>>(), [DType::F32, DType::F32]);
    }

    #[test]
    fn f16_keeps_the_chain_in_half_until_the_reduction() {
        let (g, st) = apply_precision(&mlp(), PrecisionPolicy::F16).unwrap();
        assert_eq!(st.lowered, 2);
        let by = |name: &str| g.nodes().iter().find(|n| n.op.def().name() == name).unwrap().ty.dtype;
        assert_eq!(
            (by("matmul"), by("tanh"), by("reshape"), by("sum")),
            (DType::F16, DType::F16, DType::F16, DType::F32)
        );
    }

    #[test]
    fn f32_is_unchanged() {
        let (g, st) = apply_precision(&mlp(), PrecisionPolicy::F32).unwrap();
        assert_eq!(g, mlp());
        assert_eq!(st, PrecisionStats::default());
    }
}
