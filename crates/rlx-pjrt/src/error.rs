//! Typed errors of the PJRT backend: every failure names the plugin, the C API function or the
//! StableHLO line, and none of them aborts the process.

use std::path::PathBuf;

/// What went wrong between RLX and a PJRT plugin.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PjrtError {
    /// No plugin at any of the paths tried.
    #[error(
        "no PJRT plugin found; tried: {}. Set RLX_PJRT_PLUGIN=/path/to/plugin.so (an XLA CPU plugin \
         comes with `pip install xla-cpu-pjrt`, the TPU one with libtpu)",
        .tried.join(", ")
    )]
    PluginNotFound {
        /// Every path or library name tried, with why it failed.
        tried: Vec<String>,
    },
    /// The library loaded but is not a PJRT plugin, or its API is unusable.
    #[error("PJRT plugin {}: {reason}", .path.display())]
    Plugin {
        /// The plugin file.
        path: PathBuf,
        /// Why it cannot be used.
        reason: String,
    },
    /// The plugin's C API is too old for a function RLX calls.
    #[error(
        "PJRT plugin {} implements C API {major}.{minor}, which lacks {function} (RLX needs a plugin \
         with C API 0.{needed_minor} or newer, major version 0)",
        .path.display()
    )]
    ApiVersion {
        /// The plugin file.
        path: PathBuf,
        /// The plugin's major version.
        major: i32,
        /// The plugin's minor version.
        minor: i32,
        /// The first missing function.
        function: &'static str,
        /// The oldest minor version RLX was written against.
        needed_minor: i32,
    },
    /// A C API call returned an error.
    #[error("{function} failed ({code}): {message}")]
    Call {
        /// The C API function.
        function: &'static str,
        /// The absl status code name.
        code: &'static str,
        /// The plugin's message.
        message: String,
    },
    /// XLA rejected the StableHLO module.
    #[error("XLA could not compile graph `{graph}`: {message}{}", .line.as_ref().map(|l| format!("\n  at StableHLO line: {l}")).unwrap_or_default())]
    Compile {
        /// The graph's name.
        graph: String,
        /// The plugin's message.
        message: String,
        /// The module line the message points at, when it names one (`loc("...":LINE:COL)`).
        line: Option<String>,
    },
}

impl From<PjrtError> for rlx_ir::Error {
    fn from(e: PjrtError) -> Self {
        match e {
            PjrtError::PluginNotFound { .. } | PjrtError::Plugin { .. } | PjrtError::ApiVersion { .. } => {
                rlx_ir::Error::DeviceUnavailable { device: "tpu".into(), reason: e.to_string() }
            }
            PjrtError::Call { function, .. } => rlx_ir::Error::eval(function, e.to_string()),
            PjrtError::Compile { .. } => rlx_ir::Error::eval("pjrt compile", e.to_string()),
        }
    }
}
