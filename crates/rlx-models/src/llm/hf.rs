//! Hugging Face checkpoint folders of Qwen3 / Llama: `config.json` read into an `LlmConfig`,
//! and the weights from one `model.safetensors` or the shards `model.safetensors.index.json`
//! lists, each memory-mapped.

use super::config::{Arch, LlmConfig, RopeScaling};
use crate::safetensors::{FileBytes, SafetensorsFile};
use rlx_gguf::GgmlType;
use rlx_ir::{Error, Result};
use safetensors::Dtype;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The file name of the shard index.
pub const INDEX: &str = "model.safetensors.index.json";
/// The file name of an unsharded checkpoint.
pub const SINGLE: &str = "model.safetensors";

fn file_err(path: &Path, reason: impl std::fmt::Display) -> Error {
    Error::ModelFile { path: path.display().to_string(), reason: reason.to_string() }
}

/// Reads a JSON file of the checkpoint.
pub(crate) fn read_json(path: &Path) -> Result<Value> {
    let bytes = std::fs::read(path).map_err(|e| file_err(path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| file_err(path, format!("bad JSON: {e}")))
}

/// What `config.json` says beyond the sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct HfConfig {
    /// The sizes and constants the graph needs.
    pub cfg: LlmConfig,
    /// `tie_word_embeddings`: the LM head is the token embedding.
    pub tied: bool,
}

/// Reads `config.json` of a Qwen3 / Llama checkpoint. The vocabulary size is the config's;
/// the weights are checked against it.
pub fn read_config(dir: &Path) -> Result<HfConfig> {
    let path = dir.join("config.json");
    let v = read_json(&path)?;
    let err = |reason: String| file_err(&path, reason);
    if !v.is_object() {
        return Err(err("not a JSON object".into()));
    }
    let get = |k: &str| v.get(k).filter(|x| !x.is_null());
    let model_type = get("model_type").and_then(Value::as_str);
    let first_arch = get("architectures").and_then(|a| a.get(0)).and_then(Value::as_str);
    let arch = match (model_type, first_arch) {
        (Some("qwen3"), _) | (None, Some("Qwen3ForCausalLM")) => Arch::Qwen3,
        (Some("llama"), _) | (None, Some("LlamaForCausalLM")) => Arch::Llama,
        (Some(t), _) => return Err(err(format!("architecture `{t}` (model_type) is not supported (qwen3, llama)"))),
        (None, Some(a)) => return Err(err(format!("architecture `{a}` is not supported (qwen3, llama)"))),
        (None, None) => return Err(err("`model_type` is missing".into())),
    };
    let int = |k: &str| -> Result<Option<usize>> {
        match get(k) {
            None => Ok(None),
            Some(x) => x
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| err(format!("`{k}` must be a non-negative integer, got {x}"))),
        }
    };
    let need = |k: &str| int(k)?.ok_or_else(|| err(format!("`{k}` is missing")));
    let float = |x: Option<&Value>, k: &str, default: f64| -> Result<f64> {
        match x.filter(|x| !x.is_null()) {
            None => Ok(default),
            Some(x) => x.as_f64().ok_or_else(|| err(format!("`{k}` must be a number, got {x}"))),
        }
    };
    // The graph has no biases, sliding windows or other activations: refuse them, not ignore them.
    for (k, ok) in [("attention_bias", false), ("mlp_bias", false), ("use_sliding_window", false)] {
        if let Some(x) = get(k)
            && x.as_bool() != Some(ok)
        {
            return Err(err(format!("`{k}: {x}` is not supported")));
        }
    }
    if let Some(act) = get("hidden_act")
        && act.as_str() != Some("silu")
    {
        return Err(err(format!("`hidden_act: {act}` is not supported (silu)")));
    }
    let hidden = need("hidden_size")?;
    let heads = need("num_attention_heads")?;
    let head_dim = match int("head_dim")? {
        Some(d) => d,
        None if heads > 0 => hidden / heads,
        None => 0,
    };
    // transformers 5 moves rope_theta and the scaling into `rope_parameters`.
    let rope_params = get("rope_parameters");
    let theta_v = get("rope_theta").or_else(|| rope_params.and_then(|p| p.get("rope_theta")));
    let scaling_v = get("rope_scaling").or(rope_params);
    let rope_scaling = match scaling_v {
        None => None,
        Some(s) => rope_scaling(s).map_err(&err)?,
    };
    let tied = match get("tie_word_embeddings") {
        None => false,
        Some(x) => x.as_bool().ok_or_else(|| err(format!("`tie_word_embeddings` must be a boolean, got {x}")))?,
    };
    let cfg = LlmConfig {
        arch,
        vocab_size: need("vocab_size")?,
        hidden,
        layers: need("num_hidden_layers")?,
        heads,
        kv_heads: int("num_key_value_heads")?.unwrap_or(heads),
        head_dim,
        ffn: need("intermediate_size")?,
        rms_eps: float(get("rms_norm_eps"), "rms_norm_eps", 1e-6)?,
        rope_theta: float(theta_v, "rope_theta", 10000.0)?,
        context_length: int("max_position_embeddings")?.unwrap_or(2048),
        // HF stores q/k rows for the rotate-half RoPE, Llama included (llama.cpp's converter
        // permutes Llama's rows to adjacent pairs; these are not permuted).
        rope_interleaved: false,
        rope_scaling,
    };
    cfg.validate().map_err(err)?;
    Ok(HfConfig { cfg, tied })
}

/// `rope_scaling` (or `rope_parameters`): none, `default`, `linear` or `llama3`.
fn rope_scaling(s: &Value) -> std::result::Result<Option<RopeScaling>, String> {
    let ty = s.get("rope_type").or_else(|| s.get("type")).and_then(Value::as_str).unwrap_or("default");
    let num = |k: &str| -> std::result::Result<f64, String> {
        s.get(k).and_then(Value::as_f64).ok_or_else(|| format!("rope_scaling `{ty}` needs a number `{k}`"))
    };
    match ty {
        "default" => Ok(None),
        "linear" => Ok(Some(RopeScaling::Linear { factor: num("factor")? })),
        "llama3" => Ok(Some(RopeScaling::Llama3 {
            factor: num("factor")?,
            low_freq_factor: num("low_freq_factor")?,
            high_freq_factor: num("high_freq_factor")?,
            original_max_position_embeddings: num("original_max_position_embeddings")?,
        })),
        t => Err(format!("rope_scaling type `{t}` is not supported (default, linear, llama3)")),
    }
}

/// A stored tensor of a checkpoint: its element type, shard and bytes.
#[derive(Debug)]
pub struct HfTensor<'a> {
    /// The element type (F32, F16 or BF16).
    pub ty: GgmlType,
    /// Which shard holds it (index into `HfCheckpoint::shard_bytes`).
    pub shard: usize,
    /// Its byte range in that shard.
    pub range: Range<usize>,
    /// Its bytes.
    pub data: &'a [u8],
    /// The shard's path, for errors.
    pub path: &'a Path,
}

/// The memory-mapped safetensors files of a checkpoint, and which holds each tensor.
pub struct HfCheckpoint {
    dir: PathBuf,
    shards: Vec<SafetensorsFile>,
    /// Tensor name to shard.
    index: HashMap<String, usize>,
    /// The file that maps names to shards (for errors about names it lacks).
    index_path: PathBuf,
}

impl std::fmt::Debug for HfCheckpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfCheckpoint").field("dir", &self.dir).field("shards", &self.shards.len()).finish()
    }
}

impl HfCheckpoint {
    /// Maps the shards of `dir`: those `model.safetensors.index.json` names, else
    /// `model.safetensors`. A listed shard that is missing is an error naming it.
    pub fn open(dir: &Path) -> Result<Self> {
        let index_path = dir.join(INDEX);
        if !index_path.exists() {
            let single = dir.join(SINGLE);
            if !single.exists() {
                return Err(file_err(dir, format!("no {SINGLE} or {INDEX} in the checkpoint folder")));
            }
            let f = SafetensorsFile::open(&single)?;
            let index = f.entries().into_iter().map(|e| (e.name, 0)).collect();
            return Ok(HfCheckpoint { dir: dir.into(), shards: vec![f], index, index_path: single });
        }
        let v = read_json(&index_path)?;
        let map = v
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| file_err(&index_path, "`weight_map` is missing or not an object"))?;
        let mut files = BTreeSet::new();
        for (name, f) in map {
            let f =
                f.as_str().ok_or_else(|| file_err(&index_path, format!("tensor `{name}`: shard is not a string")))?;
            // A shard is a file next to the index, never elsewhere.
            if f.contains('/') || f.contains('\\') || f == ".." {
                return Err(file_err(&index_path, format!("tensor `{name}`: shard `{f}` is not a file name")));
            }
            files.insert(f);
        }
        let files: Vec<&str> = files.into_iter().collect();
        let mut shards = Vec::with_capacity(files.len());
        for f in &files {
            let p = dir.join(f);
            if !p.exists() {
                let first = map.iter().find(|(_, s)| s.as_str() == Some(f)).map_or("", |(n, _)| n.as_str());
                return Err(file_err(
                    &p,
                    format!("shard is missing (listed in {INDEX} for tensor `{first}` and others)"),
                ));
            }
            shards.push(SafetensorsFile::open(&p)?);
        }
        let index =
            map.iter().filter_map(|(n, f)| Some((n.clone(), files.binary_search(&f.as_str()?).ok()?))).collect();
        Ok(HfCheckpoint { dir: dir.into(), shards, index, index_path })
    }

    /// The checkpoint folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Total bytes of the shards.
    pub fn size(&self) -> u64 {
        self.shards.iter().map(|s| s.file_bytes().len() as u64).sum()
    }

    /// Whether the checkpoint has a tensor of this name.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The bytes of shard `i`.
    pub fn shard_bytes(&self, i: usize) -> &[u8] {
        self.shards[i].file_bytes()
    }

    /// Shard `i`'s memory map, shared.
    pub fn shard_shared(&self, i: usize) -> FileBytes {
        self.shards[i].shared_bytes()
    }

    /// The tensor `name`, checked to have shape `expected` and a float dtype.
    pub fn tensor(&self, name: &str, expected: &[usize]) -> Result<HfTensor<'_>> {
        let Some(&shard) = self.index.get(name) else {
            return Err(Error::MissingTensor {
                path: self.index_path.display().to_string(),
                name: name.into(),
                expected: expected.to_vec(),
                count: self.index.len(),
            });
        };
        let f = &self.shards[shard];
        let (dtype, range) = f.checked_range(name, expected)?;
        let ty = match dtype {
            Dtype::F32 => GgmlType::F32,
            Dtype::F16 => GgmlType::F16,
            _ => GgmlType::BF16,
        };
        Ok(HfTensor { ty, shard, data: &f.file_bytes()[range.clone()], range, path: f.path() })
    }
}
