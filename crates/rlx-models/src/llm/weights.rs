//! Qwen3 / Llama weights: the one table of GGUF and Hugging Face names, shape checks, and the
//! param data of each weight (quantized linear weights stay packed), from a GGUF file or the
//! safetensors shards of a Hugging Face checkpoint, optionally quantized on load.

use super::config::LlmConfig;
use super::hf::HfCheckpoint;
use rlx_gguf::{GgmlType, GgufFile, TensorView};
use rlx_ir::{DType, Error, QuantScheme, Result};
use std::ops::Range;
use std::path::Path;

/// One weight of the model; `gguf_name` / `hf_name` are the only places names are spelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LlmWeight {
    /// Token embedding `[vocab, hidden]`.
    TokenEmbd,
    /// Final RMSNorm scale `[hidden]`.
    OutputNorm,
    /// LM head `[vocab, hidden]` (the token embedding when tied).
    Output,
    /// A weight of decoder layer `.0`.
    Layer(usize, LayerWeight),
}

/// The weights of one decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayerWeight {
    /// Attention RMSNorm scale `[hidden]`.
    AttnNorm,
    /// Query projection `[heads * head_dim, hidden]`.
    Q,
    /// Key projection `[kv_heads * head_dim, hidden]`.
    K,
    /// Value projection `[kv_heads * head_dim, hidden]`.
    V,
    /// Attention output projection `[hidden, heads * head_dim]`.
    O,
    /// Per-head query RMSNorm scale `[head_dim]` (Qwen3).
    QNorm,
    /// Per-head key RMSNorm scale `[head_dim]` (Qwen3).
    KNorm,
    /// Feed-forward RMSNorm scale `[hidden]`.
    FfnNorm,
    /// SwiGLU gate projection `[ffn, hidden]`.
    Gate,
    /// SwiGLU up projection `[ffn, hidden]`.
    Up,
    /// Down projection `[hidden, ffn]`.
    Down,
}

impl LlmWeight {
    /// Every weight of a model with this config (the LM head included, tied or not).
    pub fn all(cfg: &LlmConfig) -> Vec<LlmWeight> {
        use LayerWeight::*;
        let mut v = vec![LlmWeight::TokenEmbd, LlmWeight::OutputNorm, LlmWeight::Output];
        for l in 0..cfg.layers {
            let mut lw = vec![AttnNorm, Q, K, V, O, FfnNorm, Gate, Up, Down];
            if cfg.arch.qk_norm() {
                lw.extend([QNorm, KNorm]);
            }
            v.extend(lw.into_iter().map(|w| LlmWeight::Layer(l, w)));
        }
        v
    }

    /// The tensor name in a GGUF file (llama.cpp's names); also the graph param name.
    pub fn gguf_name(self) -> String {
        use LayerWeight::*;
        match self {
            LlmWeight::TokenEmbd => "token_embd.weight".into(),
            LlmWeight::OutputNorm => "output_norm.weight".into(),
            LlmWeight::Output => "output.weight".into(),
            LlmWeight::Layer(l, w) => {
                let s = match w {
                    AttnNorm => "attn_norm",
                    Q => "attn_q",
                    K => "attn_k",
                    V => "attn_v",
                    O => "attn_output",
                    QNorm => "attn_q_norm",
                    KNorm => "attn_k_norm",
                    FfnNorm => "ffn_norm",
                    Gate => "ffn_gate",
                    Up => "ffn_up",
                    Down => "ffn_down",
                };
                format!("blk.{l}.{s}.weight")
            }
        }
    }

    /// The tensor name in a Hugging Face Qwen3 / Llama checkpoint.
    pub fn hf_name(self) -> String {
        use LayerWeight::*;
        match self {
            LlmWeight::TokenEmbd => "model.embed_tokens.weight".into(),
            LlmWeight::OutputNorm => "model.norm.weight".into(),
            LlmWeight::Output => "lm_head.weight".into(),
            LlmWeight::Layer(l, w) => {
                let s = match w {
                    AttnNorm => "input_layernorm",
                    Q => "self_attn.q_proj",
                    K => "self_attn.k_proj",
                    V => "self_attn.v_proj",
                    O => "self_attn.o_proj",
                    QNorm => "self_attn.q_norm",
                    KNorm => "self_attn.k_norm",
                    FfnNorm => "post_attention_layernorm",
                    Gate => "mlp.gate_proj",
                    Up => "mlp.up_proj",
                    Down => "mlp.down_proj",
                };
                format!("model.layers.{l}.{s}.weight")
            }
        }
    }

    /// The row-major shape (`[out, in]` for linear weights).
    pub fn shape(self, c: &LlmConfig) -> Vec<usize> {
        use LayerWeight::*;
        let (q, kv) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
        match self {
            LlmWeight::TokenEmbd | LlmWeight::Output => vec![c.vocab_size, c.hidden],
            LlmWeight::OutputNorm => vec![c.hidden],
            LlmWeight::Layer(_, w) => match w {
                AttnNorm | FfnNorm => vec![c.hidden],
                QNorm | KNorm => vec![c.head_dim],
                Q => vec![q, c.hidden],
                K | V => vec![kv, c.hidden],
                O => vec![c.hidden, q],
                Gate | Up => vec![c.ffn, c.hidden],
                Down => vec![c.hidden, c.ffn],
            },
        }
    }

    /// Whether the graph multiplies by it (`x @ w^T`), so that it may stay packed.
    pub fn is_linear(self) -> bool {
        use LayerWeight::*;
        match self {
            LlmWeight::Output => true,
            LlmWeight::Layer(_, w) => matches!(w, Q | K | V | O | Gate | Up | Down),
            _ => false,
        }
    }
}

/// How a weight is stored as a graph param.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// f32 with the weight's row-major shape.
    Dense,
    /// f32 values of an F16 / BF16 weight: like ggml, the activations are rounded to that dtype
    /// before the product (accumulation stays f32).
    DenseHalf(DType),
    /// U8 `[out, row_bytes(in)]` GGUF rows of this block format, multiplied with `qmatmul`.
    Packed(QuantScheme),
    /// The file's F16 / BF16 values with the weight's shape (the token embedding: the graph
    /// gathers rows, then widens them to f32).
    Half(DType),
}

enum Bytes {
    /// Bytes `range` of shard `shard` (the GGUF file is shard 0).
    File {
        shard: usize,
        range: Range<usize>,
    },
    Owned(Vec<u8>),
}

/// One weight's param: its name, kind, shape and bytes.
pub struct ParamData {
    /// The weight.
    pub weight: LlmWeight,
    /// How the graph takes it.
    pub kind: ParamKind,
    bytes: Bytes,
}

impl ParamData {
    /// The shard whose bytes the param uses unchanged, if it does (`None`: a converted copy).
    pub fn shard(&self) -> Option<usize> {
        match self.bytes {
            Bytes::File { shard, .. } => Some(shard),
            Bytes::Owned(_) => None,
        }
    }
}

/// Where the weights come from.
enum Source {
    Gguf(GgufFile),
    Hf(HfCheckpoint),
}

/// A weight's tensor as stored: element type, bytes, where they lie, and names for errors.
struct Stored<'a> {
    ty: GgmlType,
    data: &'a [u8],
    shard: usize,
    start: usize,
    path: String,
    name: String,
}

impl Source {
    /// The tensor holding `w`, checked for the shape the model needs.
    fn stored(&self, path: &str, w: LlmWeight, cfg: &LlmConfig) -> Result<Stored<'_>> {
        match self {
            Source::Gguf(file) => {
                let view = LlmWeights::view(file, path, w, cfg)?;
                let start = view.data.as_ptr() as usize - file.bytes().as_ptr() as usize;
                let name = view.info.name.clone();
                Ok(Stored { ty: view.info.ty, data: view.data, shard: 0, start, path: path.into(), name })
            }
            Source::Hf(ck) => {
                let name = w.hf_name();
                let t = ck.tensor(&name, &w.shape(cfg))?;
                let path = t.path.display().to_string();
                Ok(Stored { ty: t.ty, data: t.data, shard: t.shard, start: t.range.start, path, name })
            }
        }
    }

    fn shard_bytes(&self, shard: usize) -> &[u8] {
        match self {
            Source::Gguf(f) => f.bytes(),
            Source::Hf(ck) => ck.shard_bytes(shard),
        }
    }
}

/// The weights of a GGUF file or a Hugging Face checkpoint, checked against the config and
/// ready to set as params.
pub struct LlmWeights {
    source: Source,
    params: Vec<ParamData>,
    /// Whether the LM head is the token embedding.
    pub tied: bool,
}

impl std::fmt::Debug for LlmWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmWeights").field("params", &self.params.len()).field("tied", &self.tied).finish()
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// How weights are prepared for a backend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WeightOptions {
    /// Quantize float linear weights and the token embedding to this block format.
    pub quantize: Option<GgmlType>,
    /// Half dtypes the backend multiplies natively: f16 / bf16 linear weights of these dtypes
    /// stay as stored (memory-mapped, no widened copy); the others are widened to f32 once.
    pub half_matmul: Vec<DType>,
}

/// The dtype of a half-precision ggml type.
fn half_dtype(ty: GgmlType) -> Option<DType> {
    match ty {
        GgmlType::F16 => Some(DType::F16),
        GgmlType::BF16 => Some(DType::BF16),
        _ => None,
    }
}

impl LlmWeights {
    /// Opens `path` (memory-mapped) and checks every weight `cfg` needs.
    pub fn open(path: &Path, cfg: &LlmConfig) -> Result<Self> {
        let p = path.display().to_string();
        let file = GgufFile::open(path).map_err(|e| Error::ModelFile { path: p.clone(), reason: e.to_string() })?;
        Self::from_file(file, &p, cfg)
    }

    /// Checks and prepares the weights of an opened file; `path` names it in errors.
    pub fn from_file(file: GgufFile, path: &str, cfg: &LlmConfig) -> Result<Self> {
        Self::from_gguf(file, path, cfg, &WeightOptions::default())
    }

    /// `from_file`, with `opts`: float linear weights and the token embedding quantized to
    /// `opts.quantize`, f16 / bf16 linear weights kept as stored for `opts.half_matmul`.
    pub fn from_gguf(file: GgufFile, path: &str, cfg: &LlmConfig, opts: &WeightOptions) -> Result<Self> {
        let tied = file.gguf().tensor_info("output.weight").is_none();
        Self::build(Source::Gguf(file), path, cfg, tied, opts)
    }

    /// The weights of a Hugging Face checkpoint (`tied`: `tie_word_embeddings`), prepared with
    /// `opts` as `from_gguf` does.
    pub fn from_hf(ck: HfCheckpoint, cfg: &LlmConfig, tied: bool, opts: &WeightOptions) -> Result<Self> {
        let path = ck.dir().display().to_string();
        Self::build(Source::Hf(ck), &path, cfg, tied, opts)
    }

    fn build(source: Source, path: &str, cfg: &LlmConfig, tied: bool, opts: &WeightOptions) -> Result<Self> {
        let quantize = opts.quantize;
        if let Some(q) = quantize
            && (q.scheme().is_none() || !q.can_quantize())
        {
            return Err(Error::ModelFile { path: path.into(), reason: format!("cannot quantize weights to {q}") });
        }
        let mut params = vec![];
        for w in LlmWeight::all(cfg) {
            let src = if w == LlmWeight::Output && tied { LlmWeight::TokenEmbd } else { w };
            let st = source.stored(path, src, cfg)?;
            params.push(Self::prepare(w, st, cfg, opts)?);
        }
        Ok(LlmWeights { source, params, tied })
    }

    /// The file's tensor, checked for the shape the model needs.
    fn view<'a>(file: &'a GgufFile, path: &str, w: LlmWeight, cfg: &LlmConfig) -> Result<TensorView<'a>> {
        let name = w.gguf_name();
        let expected = w.shape(cfg);
        let count = file.gguf().tensors().len();
        let view = file.tensor(&name).map_err(|_| Error::MissingTensor {
            path: path.into(),
            name: name.clone(),
            expected: expected.clone(),
            count,
        })?;
        let got: Vec<usize> = view.info.shape().iter().map(|&d| d as usize).collect();
        if got != expected {
            return Err(Error::TensorShape { path: path.into(), name, expected, got, dtype: view.info.ty.to_string() });
        }
        Ok(view)
    }

    fn prepare(w: LlmWeight, st: Stored<'_>, cfg: &LlmConfig, opts: &WeightOptions) -> Result<ParamData> {
        let (ty, quantize) = (st.ty, opts.quantize);
        let err = |reason: String| Error::ModelFile {
            path: st.path.clone(),
            reason: format!("tensor `{}`: {reason}", st.name),
        };
        let shape = w.shape(cfg);
        let numel: usize = shape.iter().product();
        let in_file = Bytes::File { shard: st.shard, range: st.start..st.start + st.data.len() };
        let is_float = matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
        let widen = || rlx_gguf::dequantize(ty, st.data, numel).map_err(|e| err(e.to_string()));
        if let Some(q) = quantize
            && is_float
            && (w.is_linear() || w == LlmWeight::TokenEmbd)
        {
            let scheme = q.scheme().ok_or_else(|| err(format!("cannot quantize to {q}")))?;
            scheme.row_bytes(shape[1]).map_err(|e| err(format!("cannot quantize to {q}: {e}")))?;
            let packed = rlx_gguf::quantize(q, &widen()?).map_err(|e| err(format!("cannot quantize to {q}: {e}")))?;
            return Ok(ParamData { weight: w, kind: ParamKind::Packed(scheme), bytes: Bytes::Owned(packed) });
        }
        // Kernels read params as typed slices: bytes not aligned for their type are copied.
        let aligned = st.start.is_multiple_of(if ty == GgmlType::F32 { 4 } else { 2 });
        // The token embedding stays packed too: the graph gathers packed rows and dequantizes them.
        let packed_embd = w == LlmWeight::TokenEmbd && ty.scheme().is_some();
        let packed = (w.is_linear() || packed_embd) && !is_float;
        let (kind, bytes) = if packed {
            let scheme =
                ty.scheme().ok_or_else(|| err(format!("ggml type {ty} is not a block type RLX can dequantize")))?;
            let rb = scheme.row_bytes(shape[1]).map_err(|e| err(e.to_string()))?;
            if rb * shape[0] != st.data.len() {
                return Err(err(format!("{} bytes for {} rows of {rb}", st.data.len(), shape[0])));
            }
            (ParamKind::Packed(scheme), in_file)
        } else if ty == GgmlType::F32 && aligned {
            (ParamKind::Dense, in_file)
        } else if w == LlmWeight::TokenEmbd && matches!(ty, GgmlType::F16 | GgmlType::BF16) && aligned {
            let dt = if ty == GgmlType::F16 { DType::F16 } else { DType::BF16 };
            (ParamKind::Half(dt), in_file)
        } else if let Some(dt) = half_dtype(ty).filter(|dt| w.is_linear() && opts.half_matmul.contains(dt)) {
            // Kept as stored: the backend multiplies in this dtype, so no widened copy is made
            // (a misaligned tensor is copied, still in its own dtype).
            (ParamKind::Half(dt), if aligned { in_file } else { Bytes::Owned(st.data.to_vec()) })
        } else {
            let kind = match ty {
                GgmlType::F16 if w.is_linear() => ParamKind::DenseHalf(DType::F16),
                GgmlType::BF16 if w.is_linear() => ParamKind::DenseHalf(DType::BF16),
                _ => ParamKind::Dense,
            };
            (kind, Bytes::Owned(f32_bytes(&widen()?)))
        };
        Ok(ParamData { weight: w, kind, bytes })
    }

    /// Every param, in `LlmWeight::all` order.
    pub fn params(&self) -> &[ParamData] {
        &self.params
    }

    /// How the graph takes `w`.
    pub fn kind(&self, w: LlmWeight) -> ParamKind {
        self.params.iter().find(|p| p.weight == w).map(|p| p.kind).unwrap_or(ParamKind::Dense)
    }

    /// The param bytes of `p` (little-endian f32, f16/bf16, or packed u8 rows).
    pub fn bytes<'a>(&'a self, p: &'a ParamData) -> &'a [u8] {
        match &p.bytes {
            Bytes::File { shard, range } => &self.source.shard_bytes(*shard)[range.clone()],
            Bytes::Owned(v) => v,
        }
    }

    /// Where `p`'s bytes lie in its shard (`ParamData::shard`), when the param uses them
    /// unchanged (no copy needed).
    pub fn file_range(&self, p: &ParamData) -> Option<Range<usize>> {
        match &p.bytes {
            Bytes::File { range, .. } => Some(range.clone()),
            Bytes::Owned(_) => None,
        }
    }

    /// The whole bytes of shard `i` (the GGUF file, or the `i`-th safetensors shard).
    pub fn shard_bytes(&self, i: usize) -> &[u8] {
        self.source.shard_bytes(i)
    }

    /// The graph param dtype of `p`.
    pub fn dtype(p: &ParamData) -> DType {
        match p.kind {
            ParamKind::Dense | ParamKind::DenseHalf(_) => DType::F32,
            ParamKind::Packed(_) => DType::U8,
            ParamKind::Half(dt) => dt,
        }
    }

    /// The GGUF file the weights come from (metadata, tokenizer), if they come from one.
    pub fn gguf(&self) -> Option<&GgufFile> {
        match &self.source {
            Source::Gguf(f) => Some(f),
            Source::Hf(_) => None,
        }
    }

    /// The Hugging Face checkpoint the weights come from, if they come from one.
    pub fn hf(&self) -> Option<&HfCheckpoint> {
        match &self.source {
            Source::Hf(c) => Some(c),
            Source::Gguf(_) => None,
        }
    }
}
