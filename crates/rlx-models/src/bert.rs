//! The BERT family encoder (MiniLM, BGE, ...) as an rlx graph: embeddings, post-norm encoder
//! layers, then sentence-transformers pooling (mean or CLS) and L2 normalization.

use crate::safetensors::SafetensorsFile;
use rlx_ir::{DType, Error, Graph, NodeId, Result, Shape};
use serde::Deserialize;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

/// The fields of a Hugging Face BERT `config.json` that the encoder uses.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BertConfig {
    /// Vocabulary size (rows of the word embedding).
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Number of encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// Feed-forward activation: `gelu` (erf) or `gelu_new` / `gelu_pytorch_tanh` (tanh).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Rows of the position embedding: the longest input.
    pub max_position_embeddings: usize,
    /// Rows of the token type embedding.
    #[serde(default = "default_types")]
    pub type_vocab_size: usize,
    /// Layer norm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Only `absolute` is supported.
    #[serde(default)]
    pub position_embedding_type: Option<String>,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_types() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}

impl BertConfig {
    /// Parses `config.json` and checks that the encoder can run it.
    pub fn from_file(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path)
            .map_err(|e| Error::ModelFile { path: path.display().to_string(), reason: e.to_string() })?;
        Self::from_bytes(&bytes, path)
    }

    /// `from_file` of a `config.json` already in memory; `path` names it in errors.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self> {
        let err = |reason: String| Error::ModelFile { path: path.display().to_string(), reason };
        let cfg: BertConfig = serde_json::from_slice(bytes).map_err(|e| err(format!("bad BERT config: {e}")))?;
        cfg.validate().map_err(err)?;
        Ok(cfg)
    }

    /// Checks the sizes and options the encoder supports.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let h = self.num_attention_heads;
        if h == 0 || self.hidden_size == 0 || !self.hidden_size.is_multiple_of(h) {
            return Err(format!("hidden_size {} is not a multiple of num_attention_heads {h}", self.hidden_size));
        }
        if let Some(p) = &self.position_embedding_type
            && p != "absolute"
        {
            return Err(format!("position_embedding_type `{p}` is not supported (only `absolute`)"));
        }
        self.activation().map(|_| ())
    }

    fn activation(&self) -> std::result::Result<bool, String> {
        match self.hidden_act.as_str() {
            "gelu" => Ok(false),
            "gelu_new" | "gelu_pytorch_tanh" => Ok(true),
            a => Err(format!("hidden_act `{a}` is not supported (gelu, gelu_new, gelu_pytorch_tanh)")),
        }
    }
}

/// How token states become one sentence vector (sentence-transformers' `Pooling` module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// Mean over the real (unpadded) tokens.
    Mean,
    /// The first (`[CLS]`) token.
    Cls,
}

/// Sentence-level options: pooling and whether the result is L2-normalized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentenceOptions {
    /// The pooling.
    pub pooling: Pooling,
    /// Divide by the L2 norm (sentence-transformers' `Normalize` module).
    pub normalize: bool,
}

/// One BERT weight; `hf_name` is the only place the Hugging Face names are spelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BertWeight {
    /// Word embedding `[vocab, hidden]`.
    WordEmb,
    /// Position embedding `[max_positions, hidden]`.
    PosEmb,
    /// Token type embedding `[types, hidden]`.
    TypeEmb,
    /// Embedding layer norm scale.
    EmbNormW,
    /// Embedding layer norm shift.
    EmbNormB,
    /// A weight of encoder layer `.0`.
    Layer(usize, LayerWeight),
}

/// The weights of one encoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerWeight {
    /// Query projection `[hidden, hidden]` and bias.
    Q,
    /// Query bias.
    QB,
    /// Key projection.
    K,
    /// Key bias.
    KB,
    /// Value projection.
    V,
    /// Value bias.
    VB,
    /// Attention output projection.
    AttnOut,
    /// Attention output bias.
    AttnOutB,
    /// Post-attention layer norm scale.
    AttnNormW,
    /// Post-attention layer norm shift.
    AttnNormB,
    /// Feed-forward up projection `[intermediate, hidden]`.
    Up,
    /// Feed-forward up bias.
    UpB,
    /// Feed-forward down projection `[hidden, intermediate]`.
    Down,
    /// Feed-forward down bias.
    DownB,
    /// Post-feed-forward layer norm scale.
    OutNormW,
    /// Post-feed-forward layer norm shift.
    OutNormB,
}

const LAYER_WEIGHTS: [LayerWeight; 16] = {
    use LayerWeight::*;
    [Q, QB, K, KB, V, VB, AttnOut, AttnOutB, AttnNormW, AttnNormB, Up, UpB, Down, DownB, OutNormW, OutNormB]
};

impl BertWeight {
    /// Every weight of a model with this config.
    pub fn all(cfg: &BertConfig) -> Vec<BertWeight> {
        Self::iter(cfg).collect()
    }

    /// Every weight of a model with this config, in `all`'s order, made as it is read: a
    /// config's layer count is checked against the file weight by weight, never allocated.
    pub fn iter(cfg: &BertConfig) -> impl Iterator<Item = BertWeight> {
        use BertWeight::*;
        let layers = (0..cfg.num_hidden_layers).flat_map(|l| LAYER_WEIGHTS.iter().map(move |&w| Layer(l, w)));
        [WordEmb, PosEmb, TypeEmb, EmbNormW, EmbNormB].into_iter().chain(layers)
    }

    /// The tensor name in a Hugging Face `BertModel` checkpoint (without a `bert.` prefix).
    pub fn hf_name(self) -> String {
        use LayerWeight::*;
        match self {
            BertWeight::WordEmb => "embeddings.word_embeddings.weight".into(),
            BertWeight::PosEmb => "embeddings.position_embeddings.weight".into(),
            BertWeight::TypeEmb => "embeddings.token_type_embeddings.weight".into(),
            BertWeight::EmbNormW => "embeddings.LayerNorm.weight".into(),
            BertWeight::EmbNormB => "embeddings.LayerNorm.bias".into(),
            BertWeight::Layer(l, w) => {
                let s = match w {
                    Q => "attention.self.query.weight",
                    QB => "attention.self.query.bias",
                    K => "attention.self.key.weight",
                    KB => "attention.self.key.bias",
                    V => "attention.self.value.weight",
                    VB => "attention.self.value.bias",
                    AttnOut => "attention.output.dense.weight",
                    AttnOutB => "attention.output.dense.bias",
                    AttnNormW => "attention.output.LayerNorm.weight",
                    AttnNormB => "attention.output.LayerNorm.bias",
                    Up => "intermediate.dense.weight",
                    UpB => "intermediate.dense.bias",
                    Down => "output.dense.weight",
                    DownB => "output.dense.bias",
                    OutNormW => "output.LayerNorm.weight",
                    OutNormB => "output.LayerNorm.bias",
                };
                format!("encoder.layer.{l}.{s}")
            }
        }
    }

    /// The shape in the checkpoint, and whether it is a `[out, in]` linear weight that the
    /// graph takes transposed (`[in, out]`, so `x @ w`).
    pub fn file_shape(self, cfg: &BertConfig) -> (Vec<usize>, bool) {
        use LayerWeight::*;
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        match self {
            BertWeight::WordEmb => (vec![cfg.vocab_size, h], false),
            BertWeight::PosEmb => (vec![cfg.max_position_embeddings, h], false),
            BertWeight::TypeEmb => (vec![cfg.type_vocab_size, h], false),
            BertWeight::EmbNormW | BertWeight::EmbNormB => (vec![h], false),
            BertWeight::Layer(_, w) => match w {
                Q | K | V | AttnOut => (vec![h, h], true),
                Up => (vec![i, h], true),
                Down => (vec![h, i], true),
                UpB => (vec![i], false),
                _ => (vec![h], false),
            },
        }
    }

    /// The shape of the graph param.
    pub fn param_shape(self, cfg: &BertConfig) -> Vec<usize> {
        let (s, t) = self.file_shape(cfg);
        if t { vec![s[1], s[0]] } else { s }
    }
}

/// Builds the encoder for a `[batch, seq]` batch. Inputs: `input_ids`, `token_type_ids` and
/// `attention_mask` (i64 `[batch, seq]`); params are named by `BertWeight::hf_name`. The one
/// output is the sentence embedding `[batch, hidden]` (f32).
pub fn bert_graph(cfg: &BertConfig, opts: SentenceOptions, batch: usize, seq: usize) -> Graph {
    let (b, s, h) = (batch, seq, cfg.hidden_size);
    let (nh, hd) = (cfg.num_attention_heads, cfg.hidden_size / cfg.num_attention_heads.max(1));
    let eps = cfg.layer_norm_eps as f32;
    let tanh_gelu = cfg.activation().unwrap_or(false);
    let mut g = Graph::new(format!("bert_{b}x{s}"));
    let p = |g: &mut Graph, w: BertWeight| g.param(&w.hf_name(), Shape::new(&w.param_shape(cfg), DType::F32));
    let ids = g.input("input_ids", Shape::new(&[b, s], DType::I64));
    let types = g.input("token_type_ids", Shape::new(&[b, s], DType::I64));
    let mask = g.input("attention_mask", Shape::new(&[b, s], DType::I64));

    // Embeddings: word + position + token type, then layer norm.
    let (we, pe, te) = (p(&mut g, BertWeight::WordEmb), p(&mut g, BertWeight::PosEmb), p(&mut g, BertWeight::TypeEmb));
    let x = g.gather(we, ids, 0);
    let pos = g.slice_axis(pe, 0, 0, s);
    let x = g.add(x, pos);
    let t = g.gather(te, types, 0);
    let x = g.add(x, t);
    let (nw, nb) = (p(&mut g, BertWeight::EmbNormW), p(&mut g, BertWeight::EmbNormB));
    let x = g.layer_norm(x, nw, nb, eps);
    let mut x = g.reshape(x, &[b * s, h]);

    // Keys that are padding are hidden from every query: a bool mask [b, 1, 1, s].
    let maskf = g.cast(mask, DType::F32);
    let zero = g.scalar(0.0, DType::F32);
    let visible = g.gt(maskf, zero);
    let visible = g.reshape(visible, &[b, 1, 1, s]);
    let scale = 1.0 / (hd as f32).sqrt();

    for l in 0..cfg.num_hidden_layers {
        let w = |g: &mut Graph, lw: LayerWeight| p(g, BertWeight::Layer(l, lw));
        let linear = |g: &mut Graph, x: NodeId, wt: LayerWeight, bias: LayerWeight| {
            let (wn, bn) = (w(g, wt), w(g, bias));
            let y = g.matmul(x, wn);
            g.add(y, bn)
        };
        let heads = |g: &mut Graph, x: NodeId| {
            let x = g.reshape(x, &[b, s, nh, hd]);
            g.transpose(x, &[0, 2, 1, 3])
        };
        use LayerWeight::*;
        let q = linear(&mut g, x, Q, QB);
        let k = linear(&mut g, x, K, KB);
        let v = linear(&mut g, x, V, VB);
        let (q, k, v) = (heads(&mut g, q), heads(&mut g, k), heads(&mut g, v));
        let a = g.attention_with_mask(q, k, v, visible, scale);
        let a = g.transpose(a, &[0, 2, 1, 3]);
        let a = g.reshape(a, &[b * s, h]);
        let a = linear(&mut g, a, AttnOut, AttnOutB);
        let a = g.add(a, x);
        let (aw, ab) = (w(&mut g, AttnNormW), w(&mut g, AttnNormB));
        let a = g.layer_norm(a, aw, ab, eps);
        let f = linear(&mut g, a, Up, UpB);
        let f = if tanh_gelu { g.gelu_tanh(f) } else { g.gelu(f) };
        let f = linear(&mut g, f, Down, DownB);
        let f = g.add(f, a);
        let (ow, ob) = (w(&mut g, OutNormW), w(&mut g, OutNormB));
        x = g.layer_norm(f, ow, ob, eps);
    }

    let hs = g.reshape(x, &[b, s, h]);
    let mut e = match opts.pooling {
        Pooling::Mean => {
            // Sum of the real tokens over their count (clamped at 1e-9, as sentence-transformers).
            let m = g.reshape(maskf, &[b, s, 1]);
            let hm = g.mul(hs, m);
            let sum = g.sum(hm, &[1], false);
            let cnt = g.sum(m, &[1], false);
            let tiny = g.scalar(1e-9, DType::F32);
            let cnt = g.maximum(cnt, tiny);
            g.div(sum, cnt)
        }
        Pooling::Cls => {
            let c = g.slice_axis(hs, 1, 0, 1);
            g.reshape(c, &[b, h])
        }
    };
    if opts.normalize {
        // x / max(||x||, 1e-12), as torch.nn.functional.normalize.
        let sq = g.mul(e, e);
        let n = g.sum(sq, &[1], true);
        let n = g.sqrt(n);
        let tiny = g.scalar(1e-12, DType::F32);
        let n = g.maximum(n, tiny);
        e = g.div(e, n);
    }
    g.set_outputs(vec![e]);
    g
}

/// Checks every weight the config needs (name, shape, dtype) without reading the data.
pub fn check_weights(cfg: &BertConfig, file: &SafetensorsFile, prefix: &str) -> Result<()> {
    // Lazily: a config of 10^15 layers fails at the first layer the file lacks, where a list of
    // every weight would exhaust memory.
    for w in BertWeight::iter(cfg) {
        file.check(&format!("{prefix}{}", w.hf_name()), &w.file_shape(cfg).0)?;
    }
    Ok(())
}

/// Bytes a param can be bound to: a shared owner and the byte range inside it.
pub type ParamBytes = (Arc<dyn AsRef<[u8]> + Send + Sync>, Range<usize>);

/// f32 data owned on the heap, seen as bytes (4-byte aligned, as f32 params need).
struct OwnedF32(Vec<f32>);

impl AsRef<[u8]> for OwnedF32 {
    fn as_ref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

/// The graph param bytes of one weight: aligned F32 tensors that need no transpose stay in the
/// file's map (no copy); the rest is converted to f32, linear weights transposed to `[in, out]`.
pub fn weight_bytes(cfg: &BertConfig, file: &SafetensorsFile, prefix: &str, w: BertWeight) -> Result<ParamBytes> {
    let (shape, transposed) = w.file_shape(cfg);
    let name = format!("{prefix}{}", w.hf_name());
    if !transposed && let Some((map, range)) = file.f32_bytes(&name, &shape)? {
        return Ok((map, range));
    }
    let data = file.f32_tensor(&name, &shape)?;
    let data = if transposed { transpose(&data, shape[0], shape[1]) } else { data.into_owned() };
    let len = data.len() * 4;
    Ok((Arc::new(OwnedF32(data)), 0..len))
}

/// `[rows, cols]` to `[cols, rows]`, in 32 x 32 tiles so both sides stay in cache.
fn transpose(src: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    const TILE: usize = 32;
    let mut out = vec![0.0f32; src.len()];
    for r0 in (0..rows).step_by(TILE) {
        for c0 in (0..cols).step_by(TILE) {
            for r in r0..(r0 + TILE).min(rows) {
                for c in c0..(c0 + TILE).min(cols) {
                    out[c * rows + r] = src[r * cols + c];
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> BertConfig {
        serde_json::from_str(
            r#"{"vocab_size": 11, "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
                "intermediate_size": 16, "max_position_embeddings": 12}"#,
        )
        .unwrap()
    }

    #[test]
    fn names_are_unique_and_shapes_follow_the_config() {
        let cfg = tiny();
        let all = BertWeight::all(&cfg);
        assert_eq!(all.len(), 5 + 16 * 2);
        let mut names: Vec<String> = all.iter().map(|w| w.hf_name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
        let up = BertWeight::Layer(1, LayerWeight::Up);
        assert_eq!(up.hf_name(), "encoder.layer.1.intermediate.dense.weight");
        assert_eq!(up.file_shape(&cfg), (vec![16, 8], true));
        assert_eq!(up.param_shape(&cfg), vec![8, 16]);
    }

    #[test]
    fn the_graph_verifies_for_several_batch_shapes() {
        let cfg = tiny();
        for pooling in [Pooling::Mean, Pooling::Cls] {
            for (b, s) in [(1, 1), (3, 5)] {
                let g = bert_graph(&cfg, SentenceOptions { pooling, normalize: true }, b, s);
                g.verify().unwrap();
                assert_eq!(g.shape(g.outputs()[0]).unwrap(), &Shape::new(&[b, 8], DType::F32));
                assert_eq!(g.params().len(), 37);
            }
        }
    }

    #[test]
    fn unsupported_configs_are_rejected() {
        let mut cfg = tiny();
        cfg.hidden_act = "relu".into();
        assert!(cfg.validate().unwrap_err().contains("relu"));
        let mut cfg = tiny();
        cfg.num_attention_heads = 3;
        assert!(cfg.validate().unwrap_err().contains("multiple"));
        let mut cfg = tiny();
        cfg.position_embedding_type = Some("relative_key".into());
        assert!(cfg.validate().unwrap_err().contains("relative_key"));
    }
}
