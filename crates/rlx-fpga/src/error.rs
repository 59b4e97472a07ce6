//! Why an FPGA export failed: each error names the op or the resource at fault.

/// An FPGA export error.
#[derive(Debug, thiserror::Error)]
pub enum FpgaError {
    /// A layer whose op has no datapath in the emitter.
    #[error("op `{op}` (rlx node {node}) has no FPGA datapath; supported: {supported}")]
    UnsupportedOp {
        /// The op's name.
        op: String,
        /// The rlx node it came from.
        node: String,
        /// The ops the emitter has datapaths for.
        supported: &'static str,
    },
    /// The design's estimated use of a resource exceeds the device.
    #[error(
        "the design does not fit the {device}: it needs about {need} {resource}, the device has {have} (raise --reuse, or choose a larger --part)"
    )]
    DoesNotFit {
        /// "LUTs", "BRAM blocks" or "DSPs".
        resource: &'static str,
        /// The device.
        device: &'static str,
        /// Estimated use.
        need: usize,
        /// What the device has.
        have: usize,
    },
    /// A reuse factor of zero.
    #[error("--reuse must be at least 1")]
    BadReuse,
    /// The INT8 lowering (shared with `rlx export cortexm`) failed.
    #[error(transparent)]
    Export(#[from] rlx_cortexm_export::ExportError),
    /// Writing the output failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

/// The FPGA exporter's result type.
pub type Result<T> = std::result::Result<T, FpgaError>;
