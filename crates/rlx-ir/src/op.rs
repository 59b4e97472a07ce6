//! The op interface: every op implements `OpDef` once, and every pass, transform, backend and
//! test reads its capabilities from there.

use crate::{Graph, HostTensor, NodeId, Result, Shape};
use std::fmt;

bitflags::bitflags! {
    /// Properties that passes ask of an op, instead of matching op names.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct OpTraits: u32 {
        /// Produces a value from outside the graph (input, param, constant).
        const LEAF = 1 << 0;
        /// Output element i depends only on input elements i (after broadcasting).
        const ELEMENTWISE = 1 << 1;
        /// Inputs broadcast against each other, numpy style.
        const BROADCAST = 1 << 2;
        /// Reduces over some axes.
        const REDUCTION = 1 << 3;
        /// Linear in its (differentiable) inputs.
        const LINEAR = 1 << 4;
        /// Reinterprets the input's elements without changing them (reshape-like).
        const VIEW = 1 << 5;
        /// Moves or selects elements without arithmetic.
        const DATA_MOVEMENT = 1 << 6;
        /// Has a decomposition into simpler ops (`OpDef::decompose`).
        const COMPOSITE = 1 << 7;
        /// A contraction (matmul, conv): the heavy compute.
        const CONTRACTION = 1 << 8;
        /// Commutative in its two inputs.
        const COMMUTATIVE = 1 << 9;
        /// A normalization (softmax, layer_norm, rms_norm): keep in f32 under mixed precision.
        const NORMALIZATION = 1 << 10;
        /// Output is not differentiable (comparisons, argmax, indices).
        const NON_DIFFERENTIABLE = 1 << 11;
        /// The output is input 0 with some positions rewritten from the other inputs: a kernel
        /// may write it over input 0's bytes (a param updated in place, as a KV cache).
        const UPDATES_OPERAND = 1 << 12;
    }
}

/// How many inputs an op takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    /// Exactly n.
    Exact(usize),
    /// Between min and max, inclusive.
    Range(usize, usize),
    /// At least n.
    AtLeast(usize),
}

impl Arity {
    /// Whether `n` inputs fit.
    pub fn accepts(self, n: usize) -> bool {
        match self {
            Arity::Exact(k) => n == k,
            Arity::Range(lo, hi) => (lo..=hi).contains(&n),
            Arity::AtLeast(k) => n >= k,
        }
    }
}

impl fmt::Display for Arity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arity::Exact(k) => write!(f, "{k}"),
            Arity::Range(lo, hi) => write!(f, "{lo} to {hi}"),
            Arity::AtLeast(k) => write!(f, "at least {k}"),
        }
    }
}

/// One test case of an op: the op with concrete inputs. The testkit runs every sample on every
/// backend against the reference interpreter.
#[derive(Debug, Clone)]
pub struct Sample {
    /// A short label (op name and case).
    pub label: String,
    /// The op instance.
    pub op: crate::Op,
    /// Concrete inputs.
    pub inputs: Vec<HostTensor>,
}

impl Sample {
    /// A sample from anything convertible to an op.
    pub fn new(label: impl Into<String>, op: impl Into<crate::Op>, inputs: Vec<HostTensor>) -> Self {
        Sample { label: label.into(), op: op.into(), inputs }
    }
}

/// Everything RLX knows about one op. Implemented once per op (or once per family of ops).
pub trait OpDef: fmt::Debug + Send + Sync {
    /// The op's name in reports and the text form (for families, the member's name: `exp`).
    fn name(&self) -> &'static str;

    /// Properties used by passes.
    fn traits(&self) -> OpTraits {
        OpTraits::empty()
    }

    /// Number of inputs accepted.
    fn arity(&self) -> Arity;

    /// Output type from input types. The error text is wrapped with the op, node and input types.
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String>;

    /// The exact, naive reference: the oracle of every test and of constant folding.
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor>;

    /// Builds the op from simpler ops; backends without a native kernel get this.
    fn decompose(&self, _g: &mut Graph, _ins: &[NodeId]) -> Option<NodeId> {
        None
    }

    /// Forward-mode rule: the output tangent from input tangents (None = zero; at least one is
    /// non-zero when called). None = no rule (the transform then uses `decompose`, or errors).
    /// Linear ops need none: the transforms apply the op itself to the tangents.
    fn jvp(&self, _g: &mut Graph, _ins: &[NodeId], _tangents: &[Option<NodeId>], _out: NodeId) -> Option<NodeId> {
        None
    }

    /// Reverse-mode rule: one cotangent per input (None = zero or not differentiable). For a
    /// linear op this is its transpose. None = no rule (then `decompose`, or an error).
    fn vjp(&self, _g: &mut Graph, _ins: &[NodeId], _out: NodeId, _cotangent: NodeId) -> Option<Vec<Option<NodeId>>> {
        None
    }

    /// Batching rule for `vmap`: batched inputs carry a leading batch axis of `size`, the others
    /// are unbatched; returns the output with the batch axis leading. None = no rule (then
    /// `decompose`, else the transform unrolls the batch).
    fn batch(&self, _g: &mut Graph, _ins: &[NodeId], _batched: &[bool], _size: usize) -> Option<NodeId> {
        None
    }

    /// Transform rules of an op that holds graphs (control flow): they transform its bodies
    /// with the transforms handed in (`ops::control::Transforms`). Tried before `jvp` / `vjp`.
    fn nested(&self) -> Option<&dyn crate::ops::control::NestedRules> {
        None
    }

    /// (atol, rtol) for comparing a backend's result with `reference`, when the op's kernels may
    /// legitimately differ by more than the dtype's tolerance (e.g. 8-bit activations). None = dtype's.
    fn tolerance(&self) -> Option<(f64, f64)> {
        None
    }

    /// Test cases for the conformance suite.
    fn samples() -> Vec<Sample>
    where
        Self: Sized;
}
