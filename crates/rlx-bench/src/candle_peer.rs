//! candle peers: `candle_core` matmul and candle-transformers' BertModel on the same weights.

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use rlx_models::TokenBatch;
use std::path::Path;

/// MiniLM in candle, with mean pooling and L2 normalization as sentence-transformers.
pub struct CandleBert {
    model: BertModel,
    ids: Tensor,
    types: Tensor,
    mask: Tensor,
}

fn err(e: impl std::fmt::Display) -> String {
    format!("candle: {e}")
}

impl CandleBert {
    /// Loads `model.safetensors` and `config.json` from `dir`, with the token batch as tensors.
    pub fn new(dir: &Path, t: &TokenBatch) -> Result<Self, String> {
        let cfg: Config =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).map_err(err)?).map_err(err)?;
        // SAFETY: the weights file is not modified while mapped.
        let vb =
            unsafe { VarBuilder::from_mmaped_safetensors(&[dir.join("model.safetensors")], DType::F32, &Device::Cpu) }
                .map_err(err)?;
        let model = BertModel::load(vb, &cfg).map_err(err)?;
        let shape = (t.batch, t.seq);
        let ids = Tensor::from_slice(&t.ids, shape, &Device::Cpu).map_err(err)?;
        let types = Tensor::from_slice(&t.type_ids, shape, &Device::Cpu).map_err(err)?;
        let mask = Tensor::from_slice(&t.mask, shape, &Device::Cpu).map_err(err)?;
        Ok(CandleBert { model, ids, types, mask })
    }

    /// One forward pass: pooled, normalized sentence embeddings.
    pub fn run(&self) -> Result<Vec<Vec<f32>>, String> {
        let h = self.model.forward(&self.ids, &self.types, Some(&self.mask)).map_err(err)?;
        let m = self.mask.to_dtype(DType::F32).map_err(err)?.unsqueeze(2).map_err(err)?;
        let sum = h.broadcast_mul(&m).map_err(err)?.sum(1).map_err(err)?;
        let cnt = m.sum(1).map_err(err)?;
        let e = sum.broadcast_div(&cnt).map_err(err)?;
        let n = e.sqr().map_err(err)?.sum_keepdim(1).map_err(err)?.sqrt().map_err(err)?;
        e.broadcast_div(&n).map_err(err)?.to_vec2::<f32>().map_err(err)
    }
}

/// A square f32 matmul in candle, inputs made once.
pub struct CandleMatmul {
    a: Tensor,
    b: Tensor,
}

impl CandleMatmul {
    /// `n x n` f32 inputs.
    pub fn new(n: usize) -> Result<Self, String> {
        Self::of(n, DType::F32)
    }

    /// `n x n` inputs of `dtype`.
    pub fn of(n: usize, dtype: DType) -> Result<Self, String> {
        let r = || Tensor::rand(-1f32, 1f32, (n, n), &Device::Cpu).and_then(|t| t.to_dtype(dtype)).map_err(err);
        Ok(CandleMatmul { a: r()?, b: r()? })
    }

    /// One product (the result is dropped).
    pub fn run(&self) -> Result<(), String> {
        self.a.matmul(&self.b).map(|_| ()).map_err(err)
    }
}
