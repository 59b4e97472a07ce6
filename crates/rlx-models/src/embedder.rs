//! `SentenceEmbedder`: a sentence-transformers BERT model directory (config.json,
//! model.safetensors, tokenizer.json and the optional sentence-transformers configs) run on an
//! rlx device. One compiled graph per batch shape, kept for reuse.

use crate::bert::{
    BertConfig, BertWeight, ParamBytes, Pooling, SentenceOptions, bert_graph, check_weights, weight_bytes,
};
use crate::safetensors::SafetensorsFile;
use crate::tokenizer::{TextTokenizer, TokenBatch};
use rlx_driver::Device;
use rlx_ir::{DType, Error, Result};
use rlx_runtime::{CompiledGraph, Session};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A BERT-family sentence embedding model loaded from a directory.
pub struct SentenceEmbedder {
    dir: PathBuf,
    cfg: BertConfig,
    opts: SentenceOptions,
    /// Param name and bytes of every weight, converted once and bound to each compiled shape.
    params: Vec<(String, ParamBytes)>,
    tokenizer: TextTokenizer,
    max_len: usize,
    session: Session,
    compiled: HashMap<(usize, usize), CompiledGraph>,
}

impl std::fmt::Debug for SentenceEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentenceEmbedder").field("dir", &self.dir).field("config", &self.cfg).finish()
    }
}

fn read_json(path: &Path) -> Result<Option<serde_json::Value>> {
    if !path.exists() {
        return Ok(None);
    }
    let err = |reason: String| Error::ModelFile { path: path.display().to_string(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    serde_json::from_str(&text).map(Some).map_err(|e| err(format!("bad JSON: {e}")))
}

/// Reads sentence-transformers' modules.json and pooling config; without them: mean + normalize.
fn sentence_options(dir: &Path) -> Result<SentenceOptions> {
    let mut opts = SentenceOptions { pooling: Pooling::Mean, normalize: true };
    let Some(modules) = read_json(&dir.join("modules.json"))? else { return Ok(opts) };
    let list = modules.as_array().cloned().unwrap_or_default();
    let kind = |m: &serde_json::Value| m["type"].as_str().unwrap_or("").to_string();
    opts.normalize = list.iter().any(|m| kind(m).ends_with(".Normalize"));
    let Some(pool) = list.iter().find(|m| kind(m).ends_with(".Pooling")) else {
        let reason = "modules.json has no Pooling module; only pooled sentence models are supported".to_string();
        return Err(Error::ModelFile { path: dir.join("modules.json").display().to_string(), reason });
    };
    let pool_path = dir.join(pool["path"].as_str().unwrap_or("")).join("config.json");
    if let Some(p) = read_json(&pool_path)? {
        let on = |k: &str| p[k].as_bool().unwrap_or(false);
        let others =
            ["pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens"];
        let modes = [on("pooling_mode_mean_tokens"), on("pooling_mode_cls_token")];
        opts.pooling = match modes {
            [true, false] if !others.iter().any(|k| on(k)) => Pooling::Mean,
            [false, true] if !others.iter().any(|k| on(k)) => Pooling::Cls,
            _ => {
                let reason = format!("unsupported pooling {p}; only mean or CLS pooling alone is supported");
                return Err(Error::ModelFile { path: pool_path.display().to_string(), reason });
            }
        };
    }
    Ok(opts)
}

impl SentenceEmbedder {
    /// Loads `dir` for `device`: checks every weight's name, shape and dtype up front.
    pub fn load(dir: impl AsRef<Path>, device: Device) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let cfg = BertConfig::from_file(&dir.join("config.json"))?;
        let opts = sentence_options(&dir)?;
        let weights = SafetensorsFile::open(dir.join("model.safetensors"))?;
        // Checkpoints of BertFor* heads keep the encoder under `bert.`.
        let first = BertWeight::WordEmb.hf_name();
        let prefix = if !weights.contains(&first) && weights.contains(&format!("bert.{first}")) { "bert." } else { "" };
        check_weights(&cfg, &weights, prefix)?;
        let params = BertWeight::all(&cfg)
            .into_iter()
            .map(|w| Ok((w.hf_name(), weight_bytes(&cfg, &weights, prefix, w)?)))
            .collect::<Result<Vec<_>>>()?;
        // sentence-transformers truncates to max_seq_length; never beyond the position table.
        let st = read_json(&dir.join("sentence_bert_config.json"))?;
        let st_max = st.and_then(|v| v["max_seq_length"].as_u64()).map(|v| v as usize);
        let max_len = st_max.unwrap_or(cfg.max_position_embeddings).min(cfg.max_position_embeddings);
        let tokenizer = TextTokenizer::from_file(dir.join("tokenizer.json"), max_len)?;
        Ok(SentenceEmbedder {
            dir,
            cfg,
            opts,
            params,
            tokenizer,
            max_len,
            session: Session::new(device),
            compiled: HashMap::new(),
        })
    }

    /// The model config.
    pub fn config(&self) -> &BertConfig {
        &self.cfg
    }

    /// Pooling and normalization.
    pub fn options(&self) -> SentenceOptions {
        self.opts
    }

    /// The longest input in tokens (special tokens included); longer texts are truncated.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    /// Embeds texts as one padded batch: one vector of `hidden_size` per text.
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let batch = self.tokenizer.encode_batch(texts)?;
        self.embed_tokens(&batch)
    }

    /// Compiles (or reuses) the graph for `[batch, seq]` and loads its params.
    pub fn prepare(&mut self, batch: usize, seq: usize) -> Result<&mut CompiledGraph> {
        if !self.compiled.contains_key(&(batch, seq)) {
            let g = bert_graph(&self.cfg, self.opts, batch, seq);
            let mut c = self.session.compile(g)?;
            for (name, (owner, range)) in &self.params {
                c.bind_param_external(name, owner.clone(), range.clone(), DType::F32)?;
            }
            self.compiled.insert((batch, seq), c);
        }
        Ok(self.compiled.get_mut(&(batch, seq)).expect("inserted above"))
    }

    /// Embeds an already tokenized batch.
    pub fn embed_tokens(&mut self, t: &TokenBatch) -> Result<Vec<Vec<f32>>> {
        if t.batch == 0 {
            return Ok(vec![]);
        }
        let n = t.batch * t.seq;
        if t.ids.len() != n || t.type_ids.len() != n || t.mask.len() != n || t.seq == 0 {
            let reason = format!("a token batch [{}, {}] needs {n} ids, type ids and mask values", t.batch, t.seq);
            return Err(Error::eval("embed", reason));
        }
        if t.seq > self.cfg.max_position_embeddings {
            let reason =
                format!("{} tokens exceed max_position_embeddings {}", t.seq, self.cfg.max_position_embeddings);
            return Err(Error::eval("embed", reason));
        }
        let (vocab, types) = (self.cfg.vocab_size as i64, self.cfg.type_vocab_size as i64);
        if let Some(bad) = t.ids.iter().find(|&&i| !(0..vocab).contains(&i)) {
            return Err(Error::eval("embed", format!("token id {bad} is outside the vocabulary 0..{vocab}")));
        }
        if let Some(bad) = t.type_ids.iter().find(|&&i| !(0..types).contains(&i)) {
            return Err(Error::eval("embed", format!("token type {bad} is outside 0..{types}")));
        }
        let bytes = |v: &[i64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let (ids, types, mask) = (bytes(&t.ids), bytes(&t.type_ids), bytes(&t.mask));
        let hidden = self.cfg.hidden_size;
        let c = self.prepare(t.batch, t.seq)?;
        let out = c.run_typed(&[
            ("input_ids", &ids, DType::I64),
            ("token_type_ids", &types, DType::I64),
            ("attention_mask", &mask, DType::I64),
        ])?;
        let flat: Vec<f32> = out[0].0.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        Ok(flat.chunks(hidden).map(|r| r.to_vec()).collect())
    }
}
