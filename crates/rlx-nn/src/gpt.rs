//! A character-level GPT (GPT-2 shape: learned positions, pre-norm LayerNorm, GELU-tanh MLP,
//! tied head), its vocabulary, batching, checkpoints and sampling.

use crate::checkpoint;
use crate::init::{Init, Rng};
use crate::layers::{Activation, Embedding, LayerNorm, Mlp, SelfAttention};
use crate::loss::cross_entropy;
use crate::module::{Builder, ParamSpec, ParamStore};
use rlx_driver::Device;
use rlx_ir::{DType, Error, Graph, HostTensor, NodeId, Result, Shape};
use rlx_runtime::{CompiledGraph, Session};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Metadata key of the model kind in a checkpoint (`char-gpt`).
pub const META_KIND: &str = "rlx.kind";
/// Metadata key of the JSON config in a checkpoint.
pub const META_CONFIG: &str = "rlx.config";
/// The kind value of a char-GPT checkpoint.
pub const KIND: &str = "char-gpt";

/// Model shape and vocabulary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GptConfig {
    /// The characters, in id order.
    pub vocab: String,
    /// Context length.
    pub ctx: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Model width.
    pub dim: usize,
    /// MLP hidden width as a multiple of `dim`.
    pub mlp_mult: usize,
}

impl GptConfig {
    /// The default shape of `rlx train` (that of the JAX peer): ctx 128, 4 layers, 4 heads, d 128.
    pub fn small(vocab: String) -> Self {
        GptConfig { vocab, ctx: 128, layers: 4, heads: 4, dim: 128, mlp_mult: 4 }
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.vocab.chars().count()
    }

    /// A lower bound of the model's weight count (the embeddings and the MLP matrices); `None`
    /// when it overflows.
    pub fn min_params(&self) -> Option<usize> {
        let d = self.dim;
        let emb = d.checked_mul(self.vocab_size().checked_add(self.ctx)?)?;
        let mlp = self.mlp_mult.checked_mul(d)?.checked_mul(d)?.checked_mul(2)?.checked_mul(self.layers)?;
        emb.checked_add(mlp)
    }

    fn check(&self) -> Result<()> {
        let bad = |r: String| Err(Error::eval("char-gpt", r));
        if self.vocab_size() == 0 || self.ctx == 0 || self.layers == 0 || self.heads == 0 || self.mlp_mult == 0 {
            return bad(format!("every size must be >= 1: {self:?}"));
        }
        if !self.dim.is_multiple_of(self.heads) {
            return bad(format!("dim {} is not a multiple of heads {}", self.dim, self.heads));
        }
        Ok(())
    }

    /// Token ids of `text`; a character outside the vocabulary is an error naming it.
    pub fn encode(&self, text: &str) -> Result<Vec<i64>> {
        let chars: Vec<char> = self.vocab.chars().collect();
        text.chars()
            .enumerate()
            .map(|(i, c)| {
                chars.iter().position(|&v| v == c).map(|p| p as i64).ok_or_else(|| {
                    Error::eval("char-gpt", format!("character {c:?} at position {i} is not in the vocabulary"))
                })
            })
            .collect()
    }

    /// Text of token ids.
    pub fn decode(&self, ids: &[i64]) -> String {
        let chars: Vec<char> = self.vocab.chars().collect();
        ids.iter().filter_map(|&i| chars.get(i as usize)).collect()
    }
}

/// The sorted distinct characters of `text`.
pub fn vocab_of(text: &str) -> String {
    let mut c: Vec<char> = text.chars().collect();
    c.sort_unstable();
    c.dedup();
    c.into_iter().collect()
}

/// Logits `[batch, t, vocab]` of token ids `x` `[batch, t]` (t <= ctx).
pub fn forward(b: &mut Builder, cfg: &GptConfig, x: NodeId, batch: usize, t: usize) -> NodeId {
    let (d, v) = (cfg.dim, cfg.vocab_size());
    let proj = Init::Normal(0.02 / (2.0 * cfg.layers as f64).sqrt());
    let wte = Embedding::new(v, d);
    let tok = b.scoped("wte", |b| wte.apply(b, x));
    let wpe = b.scoped("wpe", |b| b.param("w", &[cfg.ctx, d], Init::Normal(0.02)));
    let pos = b.slice_axis(wpe, 0, 0, t);
    let mut h = b.add(tok, pos);
    for l in 0..cfg.layers {
        h = b.scoped(&format!("h{l}"), |b| {
            let a = b.scoped("ln1", |b| LayerNorm::new(d).apply(b, h));
            let attn = SelfAttention { init: Init::Normal(0.02), proj_init: proj, ..SelfAttention::new(d, cfg.heads) };
            let a = b.scoped("attn", |b| attn.apply(b, a));
            let h = b.add(h, a);
            let m = b.scoped("ln2", |b| LayerNorm::new(d).apply(b, h));
            let mlp = Mlp {
                init: Init::Normal(0.02),
                proj_init: Some(proj),
                ..Mlp::new(d, cfg.mlp_mult * d, Activation::GeluTanh)
            };
            let m = b.scoped("mlp", |b| mlp.apply(b, m));
            b.add(h, m)
        });
    }
    let h = b.scoped("lnf", |b| LayerNorm::new(d).apply(b, h));
    let _ = batch;
    b.scoped("wte", |b| wte.attend(b, h))
}

/// The training graph: inputs `x`, `y` (i32 `[batch, ctx]`), output the mean cross-entropy.
pub fn loss_graph(cfg: &GptConfig, batch: usize) -> Result<(Graph, Vec<ParamSpec>)> {
    cfg.check()?;
    let mut b = Builder::new("char_gpt_train");
    b.training = true;
    let x = b.input("x", Shape::new(&[batch, cfg.ctx], DType::I32));
    let y = b.input("y", Shape::new(&[batch, cfg.ctx], DType::I32));
    let logits = forward(&mut b, cfg, x, batch, cfg.ctx);
    let l = cross_entropy(&mut b, logits, y);
    Ok(b.finish(vec![l]))
}

/// The inference graph over `t <= ctx` positions: input `x` (i32 `[batch, t]`), output logits
/// `[batch, t, vocab]`.
pub fn logits_graph(cfg: &GptConfig, batch: usize, t: usize) -> Result<(Graph, Vec<ParamSpec>)> {
    cfg.check()?;
    if t == 0 || t > cfg.ctx {
        return Err(Error::eval("char-gpt", format!("length {t} must be in 1..={}", cfg.ctx)));
    }
    let mut b = Builder::new("char_gpt");
    let x = b.input("x", Shape::new(&[batch, t], DType::I32));
    let logits = forward(&mut b, cfg, x, batch, t);
    Ok(b.finish(vec![logits]))
}

/// Random training windows of a token stream: `x` and `y` (shifted by one), i32 `[batch, ctx]`.
pub fn batch(tokens: &[i64], batch: usize, ctx: usize, rng: &mut Rng) -> Result<(HostTensor, HostTensor)> {
    if tokens.len() <= ctx {
        return Err(Error::eval(
            "char-gpt",
            format!("the text has {} tokens; it needs more than ctx = {ctx}", tokens.len()),
        ));
    }
    let (mut x, mut y) = (Vec::with_capacity(batch * ctx), Vec::with_capacity(batch * ctx));
    for _ in 0..batch {
        let o = rng.below(tokens.len() - ctx);
        x.extend_from_slice(&tokens[o..o + ctx]);
        y.extend_from_slice(&tokens[o + 1..o + ctx + 1]);
    }
    Ok((HostTensor::from_i64(&[batch, ctx], DType::I32, &x)?, HostTensor::from_i64(&[batch, ctx], DType::I32, &y)?))
}

/// Saves params (and optimizer state, if `store` has it) with the config in the metadata.
pub fn save(path: &Path, cfg: &GptConfig, store: &ParamStore, extra: &[(&str, String)]) -> Result<()> {
    checkpoint::save(path, store, &metadata(cfg, extra)?)
}

/// The bytes `save` writes (`path` names the file in errors).
pub fn to_bytes(path: &Path, cfg: &GptConfig, store: &ParamStore, extra: &[(&str, String)]) -> Result<Vec<u8>> {
    checkpoint::to_bytes(store, &metadata(cfg, extra)?, path)
}

fn metadata<'a>(cfg: &GptConfig, extra: &[(&'a str, String)]) -> Result<Vec<(&'a str, String)>> {
    let json = serde_json::to_string(cfg).map_err(|e| Error::eval("char-gpt", e.to_string()))?;
    let mut meta = vec![(META_KIND, KIND.to_string()), (META_CONFIG, json)];
    meta.extend(extra.iter().cloned());
    Ok(meta)
}

/// Loads a char-GPT checkpoint: config, every tensor, and the other metadata.
pub fn load(path: &Path) -> Result<(GptConfig, ParamStore, std::collections::HashMap<String, String>)> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::ModelFile { path: path.display().to_string(), reason: e.to_string() })?;
    from_bytes(&bytes, path)
}

/// `load` of a checkpoint already in memory; `path` names it in errors.
pub fn from_bytes(
    bytes: &[u8],
    path: &Path,
) -> Result<(GptConfig, ParamStore, std::collections::HashMap<String, String>)> {
    let (store, meta) = checkpoint::from_bytes(bytes, path)?;
    let ferr = |r: String| Error::ModelFile { path: path.display().to_string(), reason: r };
    if meta.get(META_KIND).map(String::as_str) != Some(KIND) {
        return Err(ferr(format!("not a char-GPT checkpoint (metadata `{META_KIND}` is {:?})", meta.get(META_KIND))));
    }
    let json = meta.get(META_CONFIG).ok_or_else(|| ferr(format!("metadata `{META_CONFIG}` is missing")))?;
    let cfg: GptConfig = serde_json::from_str(json).map_err(|e| ferr(format!("metadata `{META_CONFIG}`: {e}")))?;
    cfg.check()?;
    // Before any graph is built from the config: a crafted `layers` or `dim` would otherwise
    // build a graph (or size a tensor) far beyond what the file could hold the weights of.
    let held = store.numel();
    match cfg.min_params() {
        Some(need) if need <= held => {}
        need => {
            let need = need.map_or("more than 2^64".to_string(), |n| n.to_string());
            return Err(ferr(format!("the config needs at least {need} weights but the file holds {held}: {cfg:?}")));
        }
    }
    Ok((cfg, store, meta))
}

/// The largest step count a checkpoint may hold: the integers an f64 holds exactly.
const MAX_STEP: f64 = 9_007_199_254_740_992.0;

/// Reads a checkpoint to resume training from (`rlx train --resume`): the config, every tensor
/// (the model params checked against the config) and the step count (`train::COUNT`).
pub fn resume(path: &Path) -> Result<(GptConfig, ParamStore, usize)> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::ModelFile { path: path.display().to_string(), reason: e.to_string() })?;
    resume_from_bytes(&bytes, path)
}

/// `resume` of a checkpoint already in memory; `path` names it in errors.
pub fn resume_from_bytes(bytes: &[u8], path: &Path) -> Result<(GptConfig, ParamStore, usize)> {
    let (cfg, store, _) = from_bytes(bytes, path)?;
    let ferr = |r: String| Error::ModelFile { path: path.display().to_string(), reason: r };
    let count = store.get(crate::train::COUNT)?.to_f64_vec()?;
    let step = match count[..] {
        [c] if c.is_finite() && c >= 0.0 && c.fract() == 0.0 && c <= MAX_STEP => c as usize,
        _ => {
            let shown: Vec<f64> = count.iter().copied().take(4).collect();
            return Err(ferr(format!(
                "the step count `{}` must be one whole number in 0..=2^53; it has {} values: {shown:?}",
                crate::train::COUNT,
                count.len()
            )));
        }
    };
    model_params(&cfg, &store).map_err(|e| ferr(e.to_string()))?;
    Ok((cfg, store, step))
}

/// The model params of `store` (optimizer state left out), each checked to be the f32 tensor
/// of the dims `cfg` needs.
pub fn model_params(cfg: &GptConfig, store: &ParamStore) -> Result<ParamStore> {
    let (_, specs) = logits_graph(cfg, 1, 1)?;
    let mut s = ParamStore::new();
    for p in &specs {
        let t = store.get(&p.name)?;
        if t.dims() != p.dims || t.dtype() != DType::F32 {
            return Err(Error::eval(
                "char-gpt",
                format!("param `{}` is {}, the config needs {}", p.name, t.shape, Shape::new(&p.dims, DType::F32)),
            ));
        }
        s.insert(&p.name, t.clone());
    }
    Ok(s)
}

/// A char-GPT for sampling: one compiled graph per power-of-two length (made when first
/// needed), so short contexts run short graphs.
pub struct CharGpt {
    /// The config.
    pub cfg: GptConfig,
    store: ParamStore,
    device: Device,
    exes: Vec<(usize, CompiledGraph, u64)>,
    version: u64,
}

/// How to pick each next character.
#[derive(Debug, Clone, Copy)]
pub struct SampleOptions {
    /// Softmax temperature (0 = greedy).
    pub temperature: f32,
    /// Keep only the k most likely characters (0 = all).
    pub top_k: usize,
    /// Seed of the sampler.
    pub seed: u64,
}

impl Default for SampleOptions {
    fn default() -> Self {
        SampleOptions { temperature: 0.8, top_k: 0, seed: 0 }
    }
}

impl CharGpt {
    /// A model with `store`'s params (checked when a graph is first compiled).
    pub fn new(cfg: GptConfig, store: &ParamStore, device: Device) -> Result<Self> {
        cfg.check()?;
        let mut m = CharGpt { cfg, store: ParamStore::new(), device, exes: vec![], version: 0 };
        m.set_params(store)?;
        Ok(m)
    }

    /// Loads a checkpoint written by `rlx train` (`save`).
    pub fn load(path: &Path, device: Device) -> Result<Self> {
        let (cfg, store, _) = load(path)?;
        Self::new(cfg, &store, device)
    }

    /// Replaces the params (e.g. with those of a training step); the optimizer state is ignored.
    pub fn set_params(&mut self, store: &ParamStore) -> Result<()> {
        self.store = model_params(&self.cfg, store)?;
        self.version += 1;
        Ok(())
    }

    /// Logits `[vocab]` after the last of `ids` (at most ctx of them, at least one).
    pub fn next_logits(&mut self, ids: &[i64]) -> Result<Vec<f32>> {
        let n = ids.len();
        if n == 0 || n > self.cfg.ctx {
            return Err(Error::eval("char-gpt", format!("{n} tokens given; 1..={} fit the context", self.cfg.ctx)));
        }
        let t = n.next_power_of_two().min(self.cfg.ctx);
        let k = match self.exes.iter().position(|(l, _, _)| *l == t) {
            Some(k) => k,
            None => {
                let (g, _) = logits_graph(&self.cfg, 1, t)?;
                self.exes.push((t, Session::new(self.device).compile(g)?, 0));
                self.exes.len() - 1
            }
        };
        let (_, exe, ver) = &mut self.exes[k];
        if *ver != self.version {
            for (name, tensor) in self.store.iter() {
                exe.set_param_tensor(name, tensor)?;
            }
            *ver = self.version;
        }
        let mut x = ids.to_vec();
        x.resize(t, 0); // causal: padding after the last position does not change it
        let xt = HostTensor::from_i64(&[1, t], DType::I32, &x)?;
        let logits = exe.run_tensors(&[("x", &xt)])?[0].to_f32_vec()?;
        let v = self.cfg.vocab_size();
        Ok(logits[(n - 1) * v..n * v].to_vec())
    }

    /// Samples `n` characters after `prompt` (empty: starts from a newline when the vocabulary
    /// has one), calling `emit` with each; returns the generated text.
    pub fn generate(
        &mut self,
        prompt: &str,
        n: usize,
        opt: SampleOptions,
        mut emit: impl FnMut(&str),
    ) -> Result<String> {
        let ctx = self.cfg.ctx;
        let mut ids =
            if prompt.is_empty() { self.cfg.encode("\n").unwrap_or(vec![0]) } else { self.cfg.encode(prompt)? };
        let mut rng = Rng::new(opt.seed);
        let mut out = String::new();
        for _ in 0..n {
            let start = ids.len().saturating_sub(ctx);
            let row = self.next_logits(&ids[start..])?;
            let next = pick(&row, opt, &mut rng) as i64;
            ids.push(next);
            let s = self.cfg.decode(&[next]);
            emit(&s);
            out.push_str(&s);
        }
        Ok(out)
    }
}

/// Picks an index from logits with temperature and top-k.
pub fn pick(logits: &[f32], opt: SampleOptions, rng: &mut Rng) -> usize {
    let argmax = || logits.iter().enumerate().fold(0, |b, (i, &x)| if x > logits[b] { i } else { b });
    if opt.temperature <= 0.0 {
        return argmax();
    }
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    if opt.top_k > 0 {
        idx.truncate(opt.top_k);
    }
    let m = logits[idx[0]];
    let w: Vec<f64> = idx.iter().map(|&i| (((logits[i] - m) / opt.temperature) as f64).exp()).collect();
    let total: f64 = w.iter().sum();
    let mut u = rng.uniform() * total;
    for (k, &wi) in w.iter().enumerate() {
        if u < wi {
            return idx[k];
        }
        u -= wi;
    }
    idx[idx.len() - 1]
}
