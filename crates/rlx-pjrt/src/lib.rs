//! rlx-pjrt: RLX graphs on XLA through a PJRT plugin (`Device::Tpu`).
//!
//! A legalized graph becomes one StableHLO module (MLIR text), which the plugin compiles into
//! one executable: XLA then fuses and plans memory for the whole graph. The plugin is loaded at
//! run time (`RLX_PJRT_PLUGIN=/path/to/plugin.so`, else libtpu), so building this crate needs
//! neither XLA nor protoc.
#![warn(missing_docs)]

mod backend;
pub mod cache;
pub mod error;
mod ffi;
pub mod lower;
pub mod plugin;

pub use backend::{PjrtBackend, probe};
pub use error::PjrtError;
pub use plugin::{Buffer, Client, LoadedExecutable, Plugin, default_client};

/// The StableHLO line an XLA error message points at (`loc("...":LINE:COL)` or `LINE:COL:`),
/// quoted from the module text.
pub(crate) fn error_line(message: &str, module: &str) -> Option<String> {
    let lines: Vec<&str> = module.lines().collect();
    let digits = |s: &str| s.chars().take_while(|c| c.is_ascii_digit()).collect::<String>();
    for (i, _) in message.match_indices(':') {
        let n = digits(&message[i + 1..]);
        if n.is_empty() || !message[i + 1 + n.len()..].starts_with(':') {
            continue;
        }
        if let Ok(line) = n.parse::<usize>()
            && line >= 1
            && line <= lines.len()
        {
            return Some(format!("{line}: {}", lines[line - 1].trim()));
        }
    }
    None
}
