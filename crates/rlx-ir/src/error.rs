//! The one error type of RLX. Every variant names what went wrong and where.

use crate::{DType, Shape};

/// Result alias used across RLX.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error RLX reports. Variants name the op, node, input, shape or name involved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Shape or dtype inference rejected the inputs of an op.
    #[error("op `{op}` (node %{node}): {reason}; input types: [{}]", fmt_shapes(.inputs))]
    Infer {
        /// Op name.
        op: String,
        /// Node id the builder was creating.
        node: u32,
        /// Input types that were given.
        inputs: Vec<Shape>,
        /// What was wrong.
        reason: String,
    },
    /// A node id that does not belong to the graph.
    #[error("op `{op}`: input {index} refers to node %{node}, which does not exist in graph `{graph}` ({len} nodes)")]
    BadNodeId {
        /// Op being built.
        op: String,
        /// Position of the bad input.
        index: usize,
        /// The offending id.
        node: u32,
        /// Graph name.
        graph: String,
        /// Number of nodes in the graph.
        len: usize,
    },
    /// The graph is structurally invalid.
    #[error("graph `{graph}` is invalid: {reason}")]
    InvalidGraph {
        /// Graph name.
        graph: String,
        /// What is wrong.
        reason: String,
    },
    /// An input or param name was not found.
    #[error("unknown {kind} `{name}`; the graph has: [{}]", .known.join(", "))]
    UnknownName {
        /// "input" or "param".
        kind: &'static str,
        /// The name asked for.
        name: String,
        /// Names the graph does have.
        known: Vec<String>,
    },
    /// Data of the wrong length was passed.
    #[error("{kind} `{name}`: expected {expected} elements ({shape}), got {got}")]
    DataLength {
        /// "input" or "param".
        kind: &'static str,
        /// Its name.
        name: String,
        /// Its declared type.
        shape: Shape,
        /// Expected element count.
        expected: usize,
        /// Given element count.
        got: usize,
    },
    /// Data of the wrong dtype was passed.
    #[error("{kind} `{name}`: expected dtype {expected}, got {got}")]
    DTypeMismatch {
        /// "input" or "param".
        kind: &'static str,
        /// Its name.
        name: String,
        /// Declared dtype.
        expected: DType,
        /// Given dtype.
        got: DType,
    },
    /// A param was never set before `run`.
    #[error("param `{name}` ({shape}) was never set: call set_param before run")]
    ParamNotSet {
        /// Param name.
        name: String,
        /// Its type.
        shape: Shape,
    },
    /// An input was not given to `run`.
    #[error("input `{name}` ({shape}) was not given to run")]
    MissingInput {
        /// Input name.
        name: String,
        /// Its type.
        shape: Shape,
    },
    /// A dynamic dimension was left unbound where a concrete size is needed.
    #[error("dimension `{symbol}` is dynamic in {context}; bind it to a size first (Graph::bind_dims)")]
    UnboundDim {
        /// Symbol name.
        symbol: String,
        /// Where it was found.
        context: String,
    },
    /// A backend cannot run some op, even after decomposition.
    #[error("backend `{backend}` cannot run {missing}\n{report}")]
    Unsupported {
        /// Backend name.
        backend: String,
        /// What is missing (op, dtypes).
        missing: String,
        /// The full dispatch report.
        report: String,
    },
    /// The reference interpreter or a kernel rejected a value at run time.
    #[error("op `{op}`: {reason}")]
    Eval {
        /// Op name.
        op: String,
        /// What went wrong.
        reason: String,
    },
    /// A text or serialized graph could not be parsed.
    #[error("parse error at line {line}: {reason}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// What went wrong.
        reason: String,
    },
    /// The requested device is not available on this machine or build.
    #[error("device {device} is not available: {reason}")]
    DeviceUnavailable {
        /// Device name.
        device: String,
        /// Why.
        reason: String,
    },
    /// A backend failed to compile a graph the pipeline had legalized for it.
    #[error("backend `{backend}` could not compile graph `{graph}`: {source}\n{report}")]
    Compile {
        /// Backend name.
        backend: String,
        /// Graph name.
        graph: String,
        /// The backend's error.
        source: Box<Error>,
        /// The dispatch report of the compile.
        report: String,
    },
    /// A transform (grad, jvp, vmap, ...) cannot handle an op or a graph.
    #[error("{transform}: op `{op}` (node %{node}): {reason}")]
    Transform {
        /// The transform: "jvp", "vjp", "vmap", ...
        transform: &'static str,
        /// Op name.
        op: String,
        /// Node id in the graph being transformed.
        node: u32,
        /// What is missing or wrong.
        reason: String,
    },
    /// A model file (weights, tokenizer, config) could not be read or is malformed.
    #[error("{path}: {reason}")]
    ModelFile {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// A tensor the model needs is absent from its weights file.
    #[error("{path}: tensor `{name}` (needed with shape {expected:?}) is missing; the file has {count} tensors")]
    MissingTensor {
        /// The weights file.
        path: String,
        /// The tensor name.
        name: String,
        /// The shape the model needs.
        expected: Vec<usize>,
        /// How many tensors the file has.
        count: usize,
    },
    /// A tensor has another shape (or an unusable dtype) than the model needs.
    #[error("{path}: tensor `{name}` has shape {got:?} ({dtype}), the model needs shape {expected:?}")]
    TensorShape {
        /// The weights file.
        path: String,
        /// The tensor name.
        name: String,
        /// The shape the model needs.
        expected: Vec<usize>,
        /// The shape in the file.
        got: Vec<usize>,
        /// The dtype in the file.
        dtype: String,
    },
}

fn fmt_shapes(s: &[Shape]) -> String {
    s.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")
}

impl Error {
    /// Shorthand for an evaluation error.
    pub fn eval(op: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Eval { op: op.into(), reason: reason.into() }
    }
}
