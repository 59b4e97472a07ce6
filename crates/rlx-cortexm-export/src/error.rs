//! Why an export failed: each error names the op, tensor or budget at fault.

/// An export error.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The graph has an op the Cortex-M kernels lack.
    #[error("op `{op}` (node {node}) has no Cortex-M kernel; supported: {supported}")]
    UnsupportedOp {
        /// The op's name.
        op: String,
        /// The node id.
        node: String,
        /// The ops the exporter lowers.
        supported: &'static str,
    },
    /// A float tensor reaches an op that needs int8 data: a weight without `fake_quant`, an
    /// activation without a calibrated range, or an output left as an int32 accumulator.
    #[error(
        "{what} is a float tensor left unquantized (node {node}, read by `{consumer}`): add fake_quant with a calibrated scale"
    )]
    Unquantized {
        /// What the tensor is.
        what: String,
        /// Its node id.
        node: String,
        /// The op that reads it.
        consumer: String,
    },
    /// A quantization the TFLite Micro scheme cannot express (asymmetric weights, not 8 bits).
    #[error("node {node}: {reason}")]
    Scheme {
        /// The node id.
        node: String,
        /// What is wrong.
        reason: String,
    },
    /// The model does not fit a stated budget.
    #[error("the model needs {need} bytes of {what}, over the {budget}-byte {what} budget")]
    OverBudget {
        /// "flash" or "RAM".
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// The budget.
        budget: usize,
    },
    /// The graph reads a param the checkpoint lacks.
    #[error("param `{name}` is not in the checkpoint")]
    MissingParam {
        /// The param's name.
        name: String,
    },
    /// The checkpoint is not a quantized graph this exporter reads.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint {
        /// The file.
        path: String,
        /// What is missing or wrong.
        reason: String,
    },
    /// An rlx error (graph parsing, evaluation).
    #[error(transparent)]
    Rlx(#[from] rlx_ir::Error),
    /// A kernel refused its parameters.
    #[error("kernel: {0}")]
    Kernel(rlx_cortexm::Error),
    /// Writing the output failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

impl From<rlx_cortexm::Error> for ExportError {
    fn from(e: rlx_cortexm::Error) -> Self {
        ExportError::Kernel(e)
    }
}

/// The exporter's result type.
pub type Result<T> = std::result::Result<T, ExportError>;
