//! The decoder-only LLM config (Qwen3, Llama), read from GGUF metadata as llama.cpp reads it.

use rlx_gguf::{Gguf, Value};
use rlx_ir::{Error, Result};

/// The architectures the LLM graph builds: they differ by QK-norm and the RoPE layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Qwen3: QK-norm, NEOX (half-split) RoPE.
    Qwen3,
    /// Llama (1, 2, 3) and Mistral-style models: no QK-norm, interleaved-pair RoPE in GGUF.
    Llama,
}

impl Arch {
    /// The `general.architecture` string.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Qwen3 => "qwen3",
            Arch::Llama => "llama",
        }
    }

    /// Whether q and k are RMS-normalized per head before RoPE.
    pub fn qk_norm(self) -> bool {
        self == Arch::Qwen3
    }

    /// Whether GGUF q/k rows rotate adjacent pairs (llama.cpp's `LLAMA_ROPE_TYPE_NORM`): the graph
    /// uses the interleaved `rope`. Hugging Face checkpoints of both rotate halves.
    pub fn interleaved_rope(self) -> bool {
        self == Arch::Llama
    }
}

/// A RoPE frequency scaling (Hugging Face `rope_scaling`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// `linear`: every frequency divided by `factor` (position interpolation).
    Linear {
        /// The divisor.
        factor: f64,
    },
    /// `llama3`: low frequencies divided by `factor`, high ones kept, a smooth ramp between
    /// (Llama 3.1+, HF's `_compute_llama3_parameters`).
    Llama3 {
        /// The divisor of the low frequencies.
        factor: f64,
        /// Wavelengths above `original_max_position_embeddings / low_freq_factor` are scaled.
        low_freq_factor: f64,
        /// Wavelengths below `original_max_position_embeddings / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context length the model was pretrained with.
        original_max_position_embeddings: f64,
    },
}

impl RopeScaling {
    /// Applies the scaling to the unscaled inverse frequencies `inv`.
    pub fn apply(&self, inv: &[f64]) -> Vec<f64> {
        match *self {
            RopeScaling::Linear { factor } => inv.iter().map(|f| f / factor).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor: lo,
                high_freq_factor: hi,
                original_max_position_embeddings: n,
            } => {
                let (low_wavelen, high_wavelen) = (n / lo, n / hi);
                inv.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (n / wavelen - lo) / (hi - lo);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
        }
    }

    fn validate(&self) -> std::result::Result<(), String> {
        let ok = |x: f64| x.is_finite() && x > 0.0;
        match *self {
            RopeScaling::Linear { factor } if ok(factor) => Ok(()),
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings }
                if ok(factor)
                    && ok(low_freq_factor)
                    && ok(original_max_position_embeddings)
                    && high_freq_factor.is_finite()
                    && high_freq_factor > low_freq_factor =>
            {
                Ok(())
            }
            s => Err(format!(
                "bad rope_scaling {s:?}: factors must be finite and > 0, high_freq_factor > low_freq_factor"
            )),
        }
    }
}

/// Sizes and constants of a Qwen3 / Llama model.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmConfig {
    /// The architecture.
    pub arch: Arch,
    /// Vocabulary size (rows of `token_embd`).
    pub vocab_size: usize,
    /// Model width.
    pub hidden: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention when fewer than `heads`).
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Feed-forward width.
    pub ffn: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f64,
    /// RoPE frequency base.
    pub rope_theta: f64,
    /// The context length the model was trained for.
    pub context_length: usize,
    /// Whether RoPE rotates adjacent pairs of q/k (GGUF Llama rows) rather than the two halves.
    pub rope_interleaved: bool,
    /// RoPE frequency scaling, if any.
    pub rope_scaling: Option<RopeScaling>,
}

/// The largest width, head count or feed-forward size accepted: far above any released model,
/// low enough that products of sizes cannot overflow.
pub const MAX_DIM: usize = 1 << 20;

fn meta_err(path: &str, reason: String) -> Error {
    Error::ModelFile { path: path.to_string(), reason }
}

impl LlmConfig {
    /// Reads the config from a GGUF header; `path` names the file in errors.
    pub fn from_gguf(g: &Gguf, path: &str) -> Result<Self> {
        let arch_name = g
            .get("general.architecture")
            .and_then(Value::as_str)
            .ok_or_else(|| meta_err(path, "metadata `general.architecture` is missing".into()))?;
        let arch = match arch_name {
            "qwen3" => Arch::Qwen3,
            "llama" => Arch::Llama,
            a => return Err(meta_err(path, format!("architecture `{a}` is not supported (qwen3, llama)"))),
        };
        let key = |k: &str| format!("{arch_name}.{k}");
        let int = |k: &str| -> Result<Option<usize>> {
            match g.get(&key(k)) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .map(|x| Some(x as usize))
                    .ok_or_else(|| meta_err(path, format!("metadata `{}` is not an integer: {v}", key(k)))),
            }
        };
        let need = |k: &str| -> Result<usize> {
            int(k)?.ok_or_else(|| meta_err(path, format!("metadata `{}` is missing", key(k))))
        };
        let float = |k: &str, default: f64| -> Result<f64> {
            match g.get(&key(k)) {
                None => Ok(default),
                Some(v) => {
                    v.as_f64().ok_or_else(|| meta_err(path, format!("metadata `{}` is not a number: {v}", key(k))))
                }
            }
        };
        if let Some(t) = g.get(&key("rope.scaling.type")).and_then(Value::as_str)
            && t != "none"
        {
            return Err(meta_err(path, format!("RoPE scaling `{t}` is not supported")));
        }
        if g.tensor_info("rope_freqs.weight").is_some() {
            return Err(meta_err(path, "per-frequency RoPE factors (`rope_freqs.weight`) are not supported".into()));
        }
        let hidden = need("embedding_length")?;
        let heads = need("attention.head_count")?;
        let kv_heads = int("attention.head_count_kv")?.unwrap_or(heads);
        let head_dim = match int("attention.key_length")? {
            Some(d) => d,
            None if heads > 0 => hidden / heads,
            None => 0,
        };
        if let Some(vd) = int("attention.value_length")?
            && vd != head_dim
        {
            return Err(meta_err(path, format!("value_length {vd} differs from key_length {head_dim}")));
        }
        if let Some(rd) = int("rope.dimension_count")?
            && rd != head_dim
        {
            return Err(meta_err(path, format!("partial RoPE (dimension_count {rd} of {head_dim}) is not supported")));
        }
        let vocab_size = match g.tensor_info("token_embd.weight") {
            Some(t) if t.dims.len() == 2 => t.dims[1] as usize,
            _ => return Err(meta_err(path, "tensor `token_embd.weight` is missing or not 2-D".into())),
        };
        let cfg = LlmConfig {
            arch,
            vocab_size,
            hidden,
            layers: need("block_count")?,
            heads,
            kv_heads,
            head_dim,
            ffn: need("feed_forward_length")?,
            rms_eps: float("attention.layer_norm_rms_epsilon", 1e-6)?,
            rope_theta: float("rope.freq_base", 10000.0)?,
            context_length: int("context_length")?.unwrap_or(2048),
            rope_interleaved: arch.interleaved_rope(),
            rope_scaling: None,
        };
        cfg.validate().map_err(|r| meta_err(path, r))?;
        Ok(cfg)
    }

    /// The RoPE inverse frequencies `theta^(-2i/d)` with the scaling applied, when scaled (the
    /// graph's `rope` op computes the unscaled ones itself).
    pub fn scaled_inv_freq(&self) -> Option<Vec<f64>> {
        let s = self.rope_scaling?;
        Some(s.apply(&rlx_ir::ops::rope::rope_inv_freq(self.rope_theta, self.head_dim)))
    }

    /// Checks that the sizes fit together and lie in range.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.heads == 0 || self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return Err(format!(
                "head_count {} must be a positive multiple of head_count_kv {}",
                self.heads, self.kv_heads
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return Err(format!("the head dim {} must be even and > 0", self.head_dim));
        }
        if self.hidden == 0 || self.ffn == 0 || self.layers == 0 || self.vocab_size == 0 {
            return Err(format!(
                "embedding_length {}, feed_forward_length {}, block_count {} and the vocabulary {} must be > 0",
                self.hidden, self.ffn, self.layers, self.vocab_size
            ));
        }
        let dims = [self.hidden, self.ffn, self.heads, self.head_dim, self.layers];
        // Each bounded first, so that the product cannot overflow.
        if dims.iter().any(|&d| d > MAX_DIM) || self.heads * self.head_dim > MAX_DIM || self.vocab_size > MAX_DIM * 16 {
            return Err(format!(
                "sizes out of range: hidden {}, ffn {}, heads {} x head dim {}, layers {}, vocabulary {} (at most {MAX_DIM}, the vocabulary {})",
                self.hidden,
                self.ffn,
                self.heads,
                self.head_dim,
                self.layers,
                self.vocab_size,
                MAX_DIM * 16
            ));
        }
        if let Some(s) = &self.rope_scaling {
            s.validate()?;
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0 && self.rms_eps.is_finite() && self.rms_eps >= 0.0) {
            return Err(format!("bad rope.freq_base {} or rms epsilon {}", self.rope_theta, self.rms_eps));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_gguf::{GgmlType, GgufWriter};

    /// A header with `meta` and a `[vocab 10, hidden 8]` token embedding.
    fn header(meta: &[(String, Value)]) -> Gguf {
        let mut w = GgufWriter::new();
        for (k, v) in meta {
            w.add_metadata(k.clone(), v.clone()).unwrap();
        }
        w.add_tensor("token_embd.weight", &[8, 10], GgmlType::F32, vec![0; 320]).unwrap();
        Gguf::parse(&w.to_bytes().unwrap()).unwrap()
    }

    fn llama(extra: &[(&str, Value)]) -> Vec<(String, Value)> {
        let base = [
            ("general.architecture", Value::String("llama".into())),
            ("llama.embedding_length", Value::U32(8)),
            ("llama.block_count", Value::U32(2)),
            ("llama.feed_forward_length", Value::U32(16)),
            ("llama.attention.head_count", Value::U32(2)),
            ("llama.attention.head_count_kv", Value::U32(1)),
        ];
        let mut m: Vec<(String, Value)> = base.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        for (k, v) in extra {
            m.retain(|(q, _)| q != k);
            m.push((k.to_string(), v.clone()));
        }
        m
    }

    #[test]
    fn sizes_and_defaults_come_from_the_metadata() {
        let c = LlmConfig::from_gguf(&header(&llama(&[])), "m.gguf").unwrap();
        assert_eq!((c.arch, c.vocab_size, c.hidden, c.heads, c.kv_heads, c.head_dim), (Arch::Llama, 10, 8, 2, 1, 4));
        assert_eq!((c.rope_theta, c.rms_eps, c.layers, c.ffn), (10000.0, 1e-6, 2, 16));
    }

    #[test]
    fn unsupported_or_broken_metadata_is_an_error_naming_the_key() {
        let cases: [(Vec<(String, Value)>, &str); 5] = [
            (llama(&[("general.architecture", Value::String("gpt2".into()))]), "`gpt2` is not supported"),
            (llama(&[("llama.attention.head_count_kv", Value::U32(3))]), "multiple of head_count_kv"),
            (llama(&[("llama.rope.scaling.type", Value::String("yarn".into()))]), "RoPE scaling `yarn`"),
            (llama(&[("llama.block_count", Value::String("two".into()))]), "`llama.block_count` is not an integer"),
            (llama(&[("llama.rope.dimension_count", Value::U32(2))]), "partial RoPE"),
        ];
        for (meta, want) in cases {
            let e = LlmConfig::from_gguf(&header(&meta), "m.gguf").unwrap_err().to_string();
            assert!(e.contains(want) && e.starts_with("m.gguf"), "{e}");
        }
        let mut m = llama(&[]);
        m.retain(|(k, _)| k != "llama.embedding_length");
        let e = LlmConfig::from_gguf(&header(&m), "m.gguf").unwrap_err().to_string();
        assert!(e.contains("`llama.embedding_length` is missing"), "{e}");
    }
}
