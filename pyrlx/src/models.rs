//! Models from Python: `rlx.models.Embedder(dir).embed(texts)` (BERT-family sentence
//! embeddings through `rlx::models::SentenceEmbedder`).

use crate::errors::{IntoPy, guard};
use crate::session::device_arg;
use pyo3::prelude::*;
use rlx::models::SentenceEmbedder;
use std::sync::Mutex;

/// Sentence embeddings from a sentence-transformers directory (config.json, model.safetensors,
/// tokenizer.json).
#[pyclass(name = "Embedder", module = "rlx.models")]
pub struct PyEmbedder {
    inner: Mutex<SentenceEmbedder>,
    dim: usize,
}

#[pymethods]
impl PyEmbedder {
    /// Loads the model in `path` for `device`; checks every weight up front.
    #[new]
    #[pyo3(signature = (path, device = "cpu"))]
    fn new(py: Python<'_>, path: std::path::PathBuf, device: &str) -> PyResult<Self> {
        let d = device_arg(device)?;
        let e = py.detach(|| guard("Embedder", || SentenceEmbedder::load(&path, d).py()))?;
        let dim = e.config().hidden_size;
        Ok(PyEmbedder { inner: Mutex::new(e), dim })
    }

    /// The embedding size.
    #[getter]
    fn dim(&self) -> usize {
        self.dim
    }

    /// Embeds texts as one padded batch: a float32 array of shape `[len(texts), dim]`.
    fn embed<'py>(&self, py: Python<'py>, texts: Vec<String>) -> PyResult<Bound<'py, PyAny>> {
        let rows = py.detach(|| {
            let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
            let mut e = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            guard("embed", || e.embed(&refs).py())
        })?;
        let flat: Vec<f32> = rows.iter().flatten().copied().collect();
        let t = rlx::ir::HostTensor::from_f32(&[rows.len(), self.dim], &flat).py()?;
        crate::convert::host_to_numpy(py, &t)
    }
}
