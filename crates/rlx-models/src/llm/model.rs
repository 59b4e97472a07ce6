//! `LlmModel`: a Qwen3 / Llama model (GGUF file or Hugging Face folder) run on an rlx device, with compiled graphs per shape
//! (kept for reuse), prefill and one-token decode over a KV cache, batched over sequences.

use super::config::LlmConfig;
use super::graph::{GraphSpec, k_cache_name, llm_graph, names, v_cache_name};
use super::hf::{HfCheckpoint, read_config};
use super::weights::{LlmWeights, WeightOptions};
use rlx_driver::Device;
use rlx_ir::{DType, Error, Result};
use rlx_runtime::{CompiledGraph, Session};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// How `LlmModel::load_with` prepares the weights.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Quantize the float (F32 / F16 / BF16) linear weights and the token embedding to this
    /// block format on load (`Q8_0`, `Q4_K`, ...: any with a quantizer); rows must be a
    /// multiple of its block. Norms stay f32; already-quantized weights stay as they are.
    pub quantize: Option<rlx_gguf::GgmlType>,
}

/// Where the sequences of the current batch stand in the cache.
#[derive(Debug, Clone)]
struct CacheState {
    /// The next free slot (the same for every sequence: prompts are left-padded).
    next: usize,
    /// Leading pad slots of each sequence, hidden from every query.
    pads: Vec<usize>,
}

/// Host buffers of the graph inputs and logits, reused across runs (decode allocates nothing).
#[derive(Default)]
struct Io {
    tokens: Vec<i64>,
    positions: Vec<i64>,
    mask: Vec<f32>,
    /// The decode mask `[batch, cache]`, kept across steps: a step unmasks one slot.
    step_mask: Vec<f32>,
    logits: Vec<f32>,
}

/// A decoder-only language model from a GGUF file or a Hugging Face checkpoint folder.
///
/// Every compiled graph (prefill per prompt length, decode, full logits) uses the same weight
/// buffers, read in place from the memory-mapped file where the bytes need no change, and the
/// graphs of one batch size share one KV cache, written in place: no copy per graph or token.
pub struct LlmModel {
    path: String,
    cfg: LlmConfig,
    pub(super) weights: Arc<LlmWeights>,
    pub(super) session: Session,
    pub(super) graphs: HashMap<GraphSpec, CompiledGraph>,
    max_ctx: usize,
    kv_dtype: DType,
    state: Option<CacheState>,
    io: Io,
}

impl std::fmt::Debug for LlmModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmModel").field("path", &self.path).field("config", &self.cfg).finish()
    }
}

/// The half dtypes among `wanted` whose `x @ w^T` the session's backend runs natively: linear
/// weights stored in them are kept as stored (half the memory and the bytes a decode step
/// reads) instead of widened to f32, and their products come out in that dtype.
fn half_matmul_dtypes(session: &Session, wanted: &[DType]) -> Vec<DType> {
    let Ok(backend) = session.backend() else { return vec![] };
    wanted
        .iter()
        .copied()
        .filter(|&dt| {
            let (x, w) = (rlx_ir::Shape::new(&[4, 64], dt), rlx_ir::Shape::new(&[32, 64], dt));
            let op = rlx_ir::ops::MatMul { transpose_a: false, transpose_b: true };
            backend.supports_op(op.into(), rlx_ir::Shape::new(&[4, 32], dt), &[&x, &w])
        })
        .collect()
}

impl LlmModel {
    /// Loads a model for `device` with room for `max_ctx` tokens per sequence (prompt and
    /// generated): a `.gguf` file, or a Hugging Face checkpoint folder (`config.json` and
    /// safetensors shards); checks every weight's name and shape up front. The KV cache is f16
    /// where the backend's attention reads half-precision caches (`Capabilities::half_kv_cache`:
    /// the CPU; llama.cpp's default, half the memory and the bytes each decode step reads), f32
    /// elsewhere; `with_kv_dtype` picks another.
    pub fn load(path: impl AsRef<Path>, device: Device, max_ctx: usize) -> Result<Self> {
        Self::load_with(path, device, max_ctx, &LoadOptions::default())
    }

    /// The config of the model at `path` (a `.gguf` file or a checkpoint folder), without
    /// loading its weights.
    pub fn read_config(path: impl AsRef<Path>) -> Result<LlmConfig> {
        let path = path.as_ref();
        if path.is_dir() {
            return Ok(read_config(path)?.cfg);
        }
        let p = path.display().to_string();
        let file =
            rlx_gguf::GgufFile::open(path).map_err(|e| Error::ModelFile { path: p.clone(), reason: e.to_string() })?;
        LlmConfig::from_gguf(file.gguf(), &p)
    }

    /// `load` with options (on-load quantization).
    pub fn load_with(path: impl AsRef<Path>, device: Device, max_ctx: usize, opts: &LoadOptions) -> Result<Self> {
        let path = path.as_ref();
        let p = path.display().to_string();
        let session = Session::new(device);
        // Each format keeps its ecosystem's arithmetic: a Hugging Face checkpoint's f16 / bf16
        // linear layers give products in their dtype (as PyTorch's do); GGUF's f16 products are
        // f32 (as llama.cpp's are, whose logits the f16 fixtures are held to), bf16 in bf16.
        let half = |wanted: &[DType]| WeightOptions {
            quantize: opts.quantize,
            half_matmul: half_matmul_dtypes(&session, wanted),
        };
        let (cfg, weights) = if path.is_dir() {
            let hf = read_config(path)?;
            let ck = HfCheckpoint::open(path)?;
            let w = LlmWeights::from_hf(ck, &hf.cfg, hf.tied, &half(&[DType::F16, DType::BF16]))?;
            (hf.cfg, w)
        } else {
            let file = rlx_gguf::GgufFile::open(path)
                .map_err(|e| Error::ModelFile { path: p.clone(), reason: e.to_string() })?;
            let cfg = LlmConfig::from_gguf(file.gguf(), &p)?;
            let w = LlmWeights::from_gguf(file, &p, &cfg, &half(&[DType::BF16]))?;
            (cfg, w)
        };
        if max_ctx == 0 {
            return Err(Error::eval("llm", "max_ctx must be > 0"));
        }
        // The backend says whether its attention reads half-precision caches (an unavailable
        // device keeps f32; `prepare` reports why it is unavailable).
        let half_kv = session.backend().is_ok_and(|b| b.capabilities().half_kv_cache);
        Ok(LlmModel {
            path: p,
            cfg,
            weights: Arc::new(weights),
            session,
            graphs: HashMap::new(),
            max_ctx,
            kv_dtype: if half_kv { DType::F16 } else { DType::F32 },
            state: None,
            io: Io::default(),
        })
    }

    /// The same model with its KV cache kept in `dtype`: f32, or f16/bf16 (keys and values
    /// rounded as they are stored; attention computes in f32). Call it before `prepare`.
    pub fn with_kv_dtype(mut self, dtype: DType) -> Result<Self> {
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::eval("llm", format!("the KV cache dtype must be f32, f16 or bf16, got {dtype}")));
        }
        if !self.graphs.is_empty() {
            return Err(Error::eval("llm", "the KV cache dtype must be chosen before any graph is compiled"));
        }
        self.kv_dtype = dtype;
        Ok(self)
    }

    /// The dtype the KV cache is kept in.
    pub fn kv_dtype(&self) -> DType {
        self.kv_dtype
    }

    /// The model config.
    pub fn config(&self) -> &LlmConfig {
        &self.cfg
    }

    /// The weights and the file(s) they come from.
    pub fn weights(&self) -> &LlmWeights {
        &self.weights
    }

    /// Reads every page of the weights once (the file is memory-mapped: pages load on first
    /// touch), calling `progress(done, total)` in bytes; keeps page faults out of timed runs.
    /// Call it before `prepare`: the CPU backend repacks K-quant weights there and releases
    /// their file pages, which this would read back in.
    pub fn warm_weights(&self, mut progress: impl FnMut(u64, u64)) {
        let params = self.weights.params();
        let total: u64 = params.iter().map(|p| self.weights.bytes(p).len() as u64).sum();
        let (mut done, mut acc) = (0u64, 0u8);
        for p in params {
            let b = self.weights.bytes(p);
            for chunk in b.chunks(1 << 20) {
                acc ^= chunk.iter().step_by(4096).fold(0u8, |a, &x| a ^ x);
                done += chunk.len() as u64;
                progress(done, total);
            }
        }
        std::hint::black_box(acc);
    }

    /// The compiled graph for `spec`, if one was compiled.
    pub fn compiled(&self, spec: &GraphSpec) -> Option<&CompiledGraph> {
        self.graphs.get(spec)
    }

    /// Cache slots per sequence.
    pub fn max_ctx(&self) -> usize {
        self.max_ctx
    }

    /// Tokens in the cache per sequence (pads included), 0 before `prefill`.
    pub fn position(&self) -> usize {
        self.state.as_ref().map_or(0, |s| s.next)
    }

    /// Compiles (or reuses) the graph for `spec`: its weights are those of the graphs compiled
    /// before (or the file's bytes, for the first), its cache that of the same batch size.
    fn graph(&mut self, spec: GraphSpec) -> Result<&mut CompiledGraph> {
        if !self.graphs.contains_key(&spec) {
            let g = llm_graph(&self.cfg, &self.weights, spec, self.kv_dtype);
            let mut c = self.session.compile(g)?;
            let names: Vec<String> = self.weights.params().iter().map(|p| p.weight.gguf_name()).collect();
            if let Some(src) = self.graphs.values().next() {
                c.share_params_from(src, &names.iter().map(String::as_str).collect::<Vec<_>>())?;
            } else {
                self.bind_weights(&mut c)?;
            }
            if let Some(t) = spec.cache {
                let cache: Vec<String> =
                    (0..self.cfg.layers).flat_map(|l| [k_cache_name(l), v_cache_name(l)]).collect();
                let same = self.graphs.iter().find(|(s, _)| s.batch == spec.batch && s.cache == spec.cache);
                if let Some((_, src)) = same {
                    c.share_params_from(src, &cache.iter().map(String::as_str).collect::<Vec<_>>())?;
                } else {
                    let elems = spec.batch * self.cfg.kv_heads * t * self.cfg.head_dim;
                    // Zero bits are 0.0 in f32, f16 and bf16 alike.
                    let zeros = vec![0u8; elems * self.kv_dtype.size_bytes()];
                    for name in &cache {
                        c.set_param_typed(name, &zeros, self.kv_dtype)?;
                    }
                }
            }
            self.graphs.insert(spec, c);
        }
        Ok(self.graphs.get_mut(&spec).expect("inserted above"))
    }

    /// Points the first graph's weight params at their bytes: the memory-mapped file where the
    /// graph takes them unchanged, else the converted copy the weights hold (no further copy).
    pub(super) fn bind_weights(&self, c: &mut CompiledGraph) -> Result<()> {
        for (i, p) in self.weights.params().iter().enumerate() {
            let name = p.weight.gguf_name();
            let dtype = LlmWeights::dtype(p);
            match (self.weights.file_range(p), p.shard()) {
                (Some(r), Some(shard)) => {
                    let owner = Arc::new(ShardBytes { weights: self.weights.clone(), shard });
                    c.bind_param_external(&name, owner, r, dtype)?
                }
                _ => {
                    let owner = Arc::new(OwnedParam { weights: self.weights.clone(), index: i });
                    let len = self.weights.bytes(p).len();
                    c.bind_param_external(&name, owner, 0..len, dtype)?
                }
            }
        }
        Ok(())
    }

    /// Compiles the prefill graph for `batch` prompts of (padded) length `seq` and the decode
    /// graph for `batch`, so that neither compiles during timed generation.
    pub fn prepare(&mut self, batch: usize, seq: usize) -> Result<()> {
        if batch == 0 || seq == 0 || seq > self.max_ctx {
            let reason = format!("cannot prepare {batch} prompts of {seq} tokens with a context of {}", self.max_ctx);
            return Err(Error::eval("llm", reason));
        }
        let t = self.max_ctx;
        // A new cache holds no sequence yet, so a warm-up run may write into it.
        let new_cache = !self.graphs.keys().any(|s| s.batch == batch && s.cache == Some(t));
        self.graph(GraphSpec { batch, seq, cache: Some(t), all_logits: false })?;
        let decode = GraphSpec { batch, seq: 1, cache: Some(t), all_logits: false };
        self.graph(decode)?;
        if new_cache {
            self.warm_up(decode)?;
        }
        Ok(())
    }

    /// Runs a new decode graph once on token 0 at slot 0 of its new cache, so one-time work on
    /// the first run (weights repacked for the decode kernels) is paid at load, not by the first
    /// token. Slot 0 is rewritten by the prefill that every decode follows.
    fn warm_up(&mut self, spec: GraphSpec) -> Result<()> {
        let (b, t) = (spec.batch, self.max_ctx);
        let mut io = Io { tokens: vec![0; b], positions: vec![0], ..Io::default() };
        io.step_mask.resize(b * t, f32::NEG_INFINITY);
        (0..b).for_each(|bi| io.step_mask[bi * t] = 0.0);
        self.run_io(spec, &mut io, 0, true)
    }

    fn check_tokens(&self, ids: &[u32]) -> Result<()> {
        let vocab = self.cfg.vocab_size;
        match ids.iter().find(|&&t| t as usize >= vocab) {
            Some(bad) => Err(Error::eval("llm", format!("token id {bad} is outside the vocabulary 0..{vocab}"))),
            None => Ok(()),
        }
    }

    /// Logits of every position of each sequence (equal lengths), without a cache:
    /// `[batch][seq * vocab]`. Leaves the cache untouched.
    pub fn forward_all(&mut self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let (b, s) = (seqs.len(), seqs.first().map_or(0, Vec::len));
        if b == 0 || s == 0 || seqs.iter().any(|q| q.len() != s) {
            return Err(Error::eval("llm", "forward_all needs one or more non-empty sequences of equal length"));
        }
        seqs.iter().try_for_each(|q| self.check_tokens(q))?;
        let mut io = std::mem::take(&mut self.io);
        io.tokens.clear();
        io.tokens.extend(seqs.iter().flatten().map(|&t| t as i64));
        io.positions.clear();
        io.positions.extend(0..s as i64);
        io.mask.clear();
        io.mask.resize(b * s * s, f32::NEG_INFINITY);
        for bi in 0..b {
            for i in 0..s {
                io.mask[(bi * s + i) * s..(bi * s + i) * s + i + 1].fill(0.0);
            }
        }
        let spec = GraphSpec { batch: b, seq: s, cache: None, all_logits: true };
        let r = self.run_io(spec, &mut io, 0, false);
        self.io = io;
        r?;
        Ok(self.io.logits.chunks(s * self.cfg.vocab_size).map(<[f32]>::to_vec).collect())
    }

    /// Starts a batch: runs the prompts (left-padded to the longest) into a fresh cache and
    /// returns each sequence's next-token logits.
    pub fn prefill(&mut self, prompts: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let vocab = self.cfg.vocab_size;
        let logits = self.prefill_logits(prompts)?;
        Ok(logits.chunks(vocab).map(<[f32]>::to_vec).collect())
    }

    /// Like `prefill`, returning the logits `[batch * vocab]` in a buffer the model reuses.
    pub fn prefill_logits(&mut self, prompts: &[Vec<u32>]) -> Result<&[f32]> {
        let b = prompts.len();
        let s = prompts.iter().map(Vec::len).max().unwrap_or(0);
        if b == 0 || prompts.iter().any(Vec::is_empty) {
            return Err(Error::eval("llm", "prefill needs one or more non-empty prompts"));
        }
        if s > self.max_ctx {
            return Err(Error::eval("llm", format!("a prompt of {s} tokens exceeds the context of {}", self.max_ctx)));
        }
        prompts.iter().try_for_each(|q| self.check_tokens(q))?;
        let pads: Vec<usize> = prompts.iter().map(|p| s - p.len()).collect();
        let t = self.max_ctx;
        let mut io = std::mem::take(&mut self.io);
        io.tokens.clear();
        for p in prompts {
            io.tokens.extend(std::iter::repeat_n(0i64, s - p.len()));
            io.tokens.extend(p.iter().map(|&t| t as i64));
        }
        io.positions.clear();
        io.positions.extend(0..s as i64);
        io.mask.clear();
        io.mask.resize(b * s * t, f32::NEG_INFINITY);
        for (bi, &pad) in pads.iter().enumerate() {
            for i in 0..s {
                let row = &mut io.mask[(bi * s + i) * t..(bi * s + i + 1) * t];
                // A pad query sees only itself, so that its (unused) values stay finite.
                let from = if i < pad { i } else { pad };
                row[from..=i].fill(0.0);
            }
        }
        let spec = GraphSpec { batch: b, seq: s, cache: Some(t), all_logits: false };
        let r = self.run_io(spec, &mut io, 0, false);
        // Each sequence's slots pad..s are filled; decode unmasks one more per step.
        io.step_mask.clear();
        io.step_mask.resize(b * t, f32::NEG_INFINITY);
        for (bi, &pad) in pads.iter().enumerate() {
            io.step_mask[bi * t + pad..bi * t + s].fill(0.0);
        }
        self.io = io;
        // A failed run may have written part of the cache: no sequence is left to decode.
        self.state = None;
        r?;
        self.state = Some(CacheState { next: s, pads });
        Ok(&self.io.logits)
    }

    /// Appends one token per sequence of the current batch and returns the next logits.
    pub fn decode(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        let vocab = self.cfg.vocab_size;
        let logits = self.decode_logits(tokens)?;
        Ok(logits.chunks(vocab).map(<[f32]>::to_vec).collect())
    }

    /// Like `decode`, returning the logits `[batch * vocab]` in a buffer the model reuses: once
    /// warm, a step allocates nothing on the host side.
    pub fn decode_logits(&mut self, tokens: &[u32]) -> Result<&[f32]> {
        let Some(st) = self.state.as_ref() else {
            return Err(Error::eval("llm", "decode before prefill: there is no sequence in the cache"));
        };
        let (b, next) = (st.pads.len(), st.next);
        if tokens.len() != b {
            return Err(Error::eval("llm", format!("decode got {} tokens for a batch of {b} sequences", tokens.len())));
        }
        if next >= self.max_ctx {
            return Err(Error::eval("llm", format!("the context of {} tokens is full", self.max_ctx)));
        }
        self.check_tokens(tokens)?;
        let t = self.max_ctx;
        let mut io = std::mem::take(&mut self.io);
        for bi in 0..b {
            io.step_mask[bi * t + next] = 0.0;
        }
        io.tokens.clear();
        io.tokens.extend(tokens.iter().map(|&x| x as i64));
        io.positions.clear();
        io.positions.push(next as i64);
        let spec = GraphSpec { batch: b, seq: 1, cache: Some(t), all_logits: false };
        let r = self.run_io(spec, &mut io, next as i32, true);
        self.io = io;
        r?;
        if let Some(st) = self.state.as_mut() {
            st.next += 1;
        }
        Ok(&self.io.logits)
    }

    /// Runs the graph for `spec` on the inputs in `io` (the mask `io.step_mask` for a decode
    /// step, else `io.mask`), writing its logits into `io.logits`. Every graph of one batch size
    /// shares the cache, so nothing moves between graphs.
    fn run_io(&mut self, spec: GraphSpec, io: &mut Io, start: i32, step: bool) -> Result<()> {
        let c = self.graph(spec)?;
        let n = c.outputs()[0].numel().unwrap_or(0);
        if io.logits.len() != n {
            io.logits.resize(n, 0.0);
        }
        let start = start.to_le_bytes();
        let mut ins: [&[u8]; 4] = [&[]; 4];
        for (slot, (name, _)) in ins.iter_mut().zip(c.inputs()) {
            *slot = match name.as_str() {
                names::TOKENS => bytemuck::cast_slice(&io.tokens),
                names::POSITIONS => bytemuck::cast_slice(&io.positions),
                names::START => &start,
                _ if step => bytemuck::cast_slice(&io.step_mask),
                _ => bytemuck::cast_slice(&io.mask),
            };
        }
        let k = c.inputs().len().min(4);
        c.run_into(&ins[..k], &mut [bytemuck::cast_slice_mut(&mut io.logits)])
    }
}

/// One memory-mapped weight file (the GGUF file, or a safetensors shard) as the read-only
/// bytes of graph params.
struct ShardBytes {
    weights: Arc<LlmWeights>,
    shard: usize,
}

impl AsRef<[u8]> for ShardBytes {
    fn as_ref(&self) -> &[u8] {
        self.weights.shard_bytes(self.shard)
    }
}

/// A converted weight (the f32 values of an F16 norm or linear weight) held by `LlmWeights`,
/// as the read-only bytes of a graph param.
struct OwnedParam {
    weights: Arc<LlmWeights>,
    index: usize,
}

impl AsRef<[u8]> for OwnedParam {
    fn as_ref(&self) -> &[u8] {
        self.weights.bytes(&self.weights.params()[self.index])
    }
}
