//! `LlmModel`: a Qwen3 / Llama GGUF file run on an rlx device, with compiled graphs per shape
//! (kept for reuse), prefill and one-token decode over a KV cache, batched over sequences.

use super::config::LlmConfig;
use super::graph::{GraphSpec, k_cache_name, llm_graph, names, v_cache_name};
use super::weights::LlmWeights;
use rlx_driver::Device;
use rlx_ir::{DType, Error, Result};
use rlx_runtime::{CompiledGraph, Session};
use std::collections::HashMap;
use std::path::Path;

/// Where the sequences of the current batch stand in the cache.
#[derive(Debug, Clone)]
struct CacheState {
    /// The graph whose cache params hold the latest keys and values.
    owner: GraphSpec,
    /// The next free slot (the same for every sequence: prompts are left-padded).
    next: usize,
    /// Leading pad slots of each sequence, hidden from every query.
    pads: Vec<usize>,
}

/// A decoder-only language model from a GGUF file.
pub struct LlmModel {
    path: String,
    cfg: LlmConfig,
    weights: LlmWeights,
    session: Session,
    graphs: HashMap<GraphSpec, CompiledGraph>,
    max_ctx: usize,
    state: Option<CacheState>,
}

impl std::fmt::Debug for LlmModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmModel").field("path", &self.path).field("config", &self.cfg).finish()
    }
}

fn bytes_i64(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

impl LlmModel {
    /// Loads a GGUF model for `device` with room for `max_ctx` tokens per sequence (prompt and
    /// generated); checks every weight's name and shape up front.
    pub fn load(path: impl AsRef<Path>, device: Device, max_ctx: usize) -> Result<Self> {
        let path = path.as_ref();
        let p = path.display().to_string();
        let file =
            rlx_gguf::GgufFile::open(path).map_err(|e| Error::ModelFile { path: p.clone(), reason: e.to_string() })?;
        let cfg = LlmConfig::from_gguf(file.gguf(), &p)?;
        let weights = LlmWeights::from_file(file, &p, &cfg)?;
        if max_ctx == 0 {
            return Err(Error::eval("llm", "max_ctx must be > 0"));
        }
        Ok(LlmModel {
            path: p,
            cfg,
            weights,
            session: Session::new(device),
            graphs: HashMap::new(),
            max_ctx,
            state: None,
        })
    }

    /// The model config.
    pub fn config(&self) -> &LlmConfig {
        &self.cfg
    }

    /// The weights and the GGUF file they come from.
    pub fn weights(&self) -> &LlmWeights {
        &self.weights
    }

    /// Cache slots per sequence.
    pub fn max_ctx(&self) -> usize {
        self.max_ctx
    }

    /// Tokens in the cache per sequence (pads included), 0 before `prefill`.
    pub fn position(&self) -> usize {
        self.state.as_ref().map_or(0, |s| s.next)
    }

    /// Compiles (or reuses) the graph for `spec` and sets its weights (copied into the graph's
    /// storage) and zeroed caches.
    fn graph(&mut self, spec: GraphSpec) -> Result<&mut CompiledGraph> {
        if !self.graphs.contains_key(&spec) {
            let g = llm_graph(&self.cfg, &self.weights, spec);
            let mut c = self.session.compile(g)?;
            for p in self.weights.params() {
                c.set_param_typed(&p.weight.gguf_name(), self.weights.bytes(p), LlmWeights::dtype(p))?;
            }
            if let Some(t) = spec.cache {
                let zeros = vec![0u8; spec.batch * self.cfg.kv_heads * t * self.cfg.head_dim * 4];
                for l in 0..self.cfg.layers {
                    c.set_param_typed(&k_cache_name(l), &zeros, DType::F32)?;
                    c.set_param_typed(&v_cache_name(l), &zeros, DType::F32)?;
                }
            }
            self.graphs.insert(spec, c);
        }
        Ok(self.graphs.get_mut(&spec).expect("inserted above"))
    }

    /// Compiles the prefill graph for `batch` prompts of (padded) length `seq` and the decode
    /// graph for `batch`, so that neither compiles during timed generation.
    pub fn prepare(&mut self, batch: usize, seq: usize) -> Result<()> {
        if batch == 0 || seq == 0 || seq > self.max_ctx {
            let reason = format!("cannot prepare {batch} prompts of {seq} tokens with a context of {}", self.max_ctx);
            return Err(Error::eval("llm", reason));
        }
        let t = self.max_ctx;
        self.graph(GraphSpec { batch, seq, cache: Some(t), all_logits: false })?;
        self.graph(GraphSpec { batch, seq: 1, cache: Some(t), all_logits: false })?;
        Ok(())
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
        let tokens: Vec<i64> = seqs.iter().flatten().map(|&t| t as i64).collect();
        let positions: Vec<i64> = (0..s as i64).collect();
        let mut mask = vec![f32::NEG_INFINITY; b * s * s];
        for bi in 0..b {
            for i in 0..s {
                mask[(bi * s + i) * s..(bi * s + i) * s + i + 1].fill(0.0);
            }
        }
        let spec = GraphSpec { batch: b, seq: s, cache: None, all_logits: true };
        let c = self.graph(spec)?;
        let out = c.run_typed(&[
            (names::TOKENS, &bytes_i64(&tokens), DType::I64),
            (names::POSITIONS, &bytes_i64(&positions), DType::I64),
            (names::MASK, &bytes_f32(&mask), DType::F32),
        ])?;
        let all = f32s(&out[0].0);
        Ok(all.chunks(s * self.cfg.vocab_size).map(<[f32]>::to_vec).collect())
    }

    /// Starts a batch: runs the prompts (left-padded to the longest) into a fresh cache and
    /// returns each sequence's next-token logits.
    pub fn prefill(&mut self, prompts: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
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
        let mut tokens = Vec::with_capacity(b * s);
        for p in prompts {
            tokens.extend(std::iter::repeat_n(0i64, s - p.len()));
            tokens.extend(p.iter().map(|&t| t as i64));
        }
        let positions: Vec<i64> = (0..s as i64).collect();
        let t = self.max_ctx;
        let mut mask = vec![f32::NEG_INFINITY; b * s * t];
        for (bi, &pad) in pads.iter().enumerate() {
            for i in 0..s {
                let row = &mut mask[(bi * s + i) * t..(bi * s + i + 1) * t];
                // A pad query sees only itself, so that its (unused) values stay finite.
                let from = if i < pad { i } else { pad };
                row[from..=i].fill(0.0);
            }
        }
        let spec = GraphSpec { batch: b, seq: s, cache: Some(t), all_logits: false };
        let out = self.run_cached(spec, &tokens, &positions, 0, &mask)?;
        self.state = Some(CacheState { owner: spec, next: s, pads });
        Ok(out)
    }

    /// Appends one token per sequence of the current batch and returns the next logits.
    pub fn decode(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        let Some(st) = self.state.clone() else {
            return Err(Error::eval("llm", "decode before prefill: there is no sequence in the cache"));
        };
        let b = st.pads.len();
        if tokens.len() != b {
            return Err(Error::eval("llm", format!("decode got {} tokens for a batch of {b} sequences", tokens.len())));
        }
        if st.next >= self.max_ctx {
            return Err(Error::eval("llm", format!("the context of {} tokens is full", self.max_ctx)));
        }
        self.check_tokens(tokens)?;
        let t = self.max_ctx;
        let mut mask = vec![f32::NEG_INFINITY; b * t];
        for (bi, &pad) in st.pads.iter().enumerate() {
            mask[bi * t + pad..=bi * t + st.next].fill(0.0);
        }
        let ids: Vec<i64> = tokens.iter().map(|&x| x as i64).collect();
        let spec = GraphSpec { batch: b, seq: 1, cache: Some(t), all_logits: false };
        let out = self.run_cached(spec, &ids, &[st.next as i64], st.next as i32, &mask)?;
        self.state = Some(CacheState { owner: spec, next: st.next + 1, pads: st.pads });
        Ok(out)
    }

    /// Runs a cache graph, first moving the cache into it when another graph wrote it last.
    fn run_cached(
        &mut self,
        spec: GraphSpec,
        tokens: &[i64],
        positions: &[i64],
        start: i32,
        mask: &[f32],
    ) -> Result<Vec<Vec<f32>>> {
        self.graph(spec)?;
        let owner = self.state.as_ref().map(|s| s.owner).filter(|o| *o != spec && o.batch == spec.batch);
        if let Some(owner) = owner
            && start > 0
        {
            // One copy per prefill -> decode switch, never per token.
            let mut moved = vec![];
            let src = &self.graphs[&owner];
            for l in 0..self.cfg.layers {
                for name in [k_cache_name(l), v_cache_name(l)] {
                    let t = src.get_param(&name)?;
                    moved.push((name, t));
                }
            }
            let dst = self.graphs.get_mut(&spec).expect("compiled above");
            for (name, t) in moved {
                dst.set_param_tensor(&name, &t)?;
            }
        }
        let c = self.graphs.get_mut(&spec).expect("compiled above");
        let out = c.run_typed(&[
            (names::TOKENS, &bytes_i64(tokens), DType::I64),
            (names::POSITIONS, &bytes_i64(positions), DType::I64),
            (names::START, &start.to_le_bytes(), DType::I32),
            (names::MASK, &bytes_f32(mask), DType::F32),
        ])?;
        let all = f32s(&out[0].0);
        Ok(all.chunks(self.cfg.vocab_size).map(<[f32]>::to_vec).collect())
    }
}
