//! Human-readable listing of a GGUF file: version, metadata and tensor table.

use std::fmt::Write;

use crate::error::Result;
use crate::reader::{Gguf, GgufFile};

/// Opens a GGUF file and renders it with [`inspect`] (for `rlx inspect model.gguf`).
pub fn inspect_file(path: impl AsRef<std::path::Path>) -> Result<String> {
    Ok(inspect(GgufFile::open(path)?.gguf()))
}

/// Renders the header, every metadata entry (long arrays abbreviated) and the tensor table as text.
pub fn inspect(gguf: &Gguf) -> String {
    let mut s = String::new();
    let total: u64 = gguf.tensors().iter().map(|t| t.n_bytes).sum();
    let _ = writeln!(
        s,
        "GGUF v{}: {} metadata entries, {} tensors, {} bytes of tensor data, alignment {}, data at offset {}",
        gguf.version(),
        gguf.metadata().len(),
        gguf.tensors().len(),
        total,
        gguf.alignment(),
        gguf.data_offset()
    );
    let _ = writeln!(s, "metadata:");
    for (key, value) in gguf.metadata() {
        let _ = writeln!(s, "  {key}: {} = {value}", value.type_label());
    }
    let _ = writeln!(s, "tensors:");
    let width = gguf.tensors().iter().map(|t| t.name.len()).max().unwrap_or(0);
    for t in gguf.tensors() {
        let shape: Vec<String> = t.shape().iter().map(u64::to_string).collect();
        let _ = writeln!(
            s,
            "  {:<width$}  {:<7}  [{}]  offset {}  {} bytes",
            t.name,
            t.ty.name(),
            shape.join(", "),
            t.offset,
            t.n_bytes
        );
    }
    s
}
