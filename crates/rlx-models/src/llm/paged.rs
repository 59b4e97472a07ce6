//! `PagedModel`: an `LlmModel` over a paged KV cache, so many sequences of different lengths
//! share one pool of fixed-size pages and run together in one forward step.
//!
//! Each step takes, per sequence, the tokens to append (one for a decode, a chunk for a
//! prefill); all of them are rows of one graph (one matmul per weight over every row), keys and
//! values are written into the sequences' pages in place, and attention reads them through the
//! block tables. Graphs are compiled per token bucket (powers of two up to `max_step_tokens`);
//! padding rows write nothing and their outputs are ignored. Page 0 is never handed out: the
//! block tables point unused entries at it.

use super::config::LlmConfig;
use super::graph::{attn_out, embed, ffn_block, lm_head, qkv, rope};
use super::model::LlmModel;
use super::weights::LlmWeights;
use rlx_ir::{DType, Error, Graph, Result, Shape};
use rlx_runtime::CompiledGraph;
use std::collections::HashMap;

/// Input names of the paged graphs.
pub mod names {
    /// Token ids, i64 `[tokens]`.
    pub const TOKENS: &str = "tokens";
    /// Each token's position in its sequence, i64 `[tokens]`.
    pub const POSITIONS: &str = "positions";
    /// Each token's block-table row, i32 `[tokens]`.
    pub const TOKEN_SEQ: &str = "token_seq";
    /// Each token's cache slot (`page * page_size + offset`; -1 writes nothing), i64 `[tokens]`.
    pub const SLOTS: &str = "slots";
    /// Pages of each sequence of the step, i32 `[max_seqs, max_blocks]`.
    pub const BLOCK_TABLES: &str = "block_tables";
    /// The row whose logits each sequence of the step gets, i64 `[max_seqs]`.
    pub const LOGIT_ROWS: &str = "logit_rows";
}

/// The param name of layer `l`'s key pages.
pub fn k_pages_name(l: usize) -> String {
    format!("k_pages.{l}")
}

/// The param name of layer `l`'s value pages.
pub fn v_pages_name(l: usize) -> String {
    format!("v_pages.{l}")
}

/// The shape of the paged cache and of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagedConfig {
    /// Tokens per page.
    pub page_size: usize,
    /// Pages in the pool (one of them, page 0, is reserved).
    pub pages: usize,
    /// Sequences one step may run (rows of the block table).
    pub max_seqs: usize,
    /// Tokens one step may run, all sequences together (decode tokens and prefill chunks).
    pub max_step_tokens: usize,
    /// Positions per sequence (prompt and generated).
    pub max_ctx: usize,
}

impl PagedConfig {
    /// Room for `max_seqs` sequences of `max_ctx` tokens each, 16-token pages, steps of up to
    /// 256 tokens.
    pub fn full(max_seqs: usize, max_ctx: usize) -> Self {
        let page_size = 16;
        PagedConfig {
            page_size,
            pages: max_seqs * max_ctx.div_ceil(page_size) + 1,
            max_seqs,
            max_step_tokens: 256,
            max_ctx,
        }
    }

    /// Pages that fit `bytes` of KV cache for `cfg` in `kv_dtype` (keys and values, every layer).
    pub fn pages_for_bytes(cfg: &LlmConfig, kv_dtype: DType, page_size: usize, bytes: u64) -> usize {
        let per_page = 2 * cfg.layers * cfg.kv_heads * page_size * cfg.head_dim * kv_dtype.size_bytes();
        (bytes / per_page.max(1) as u64) as usize
    }

    /// Pages one sequence of `max_ctx` tokens may hold (the block table's width).
    pub fn max_blocks(&self) -> usize {
        self.max_ctx.div_ceil(self.page_size)
    }

    fn check(&self) -> Result<()> {
        let bad = |r: String| Err(Error::eval("paged cache", r));
        if self.page_size == 0 || self.max_seqs == 0 || self.max_step_tokens == 0 || self.max_ctx == 0 {
            return bad(format!("page size, sequences, step tokens and context must be > 0, got {self:?}"));
        }
        if self.pages < self.max_blocks() + 1 {
            let need = self.max_blocks() + 1;
            return bad(format!(
                "{} pages cannot hold one sequence of {} tokens (needs {need})",
                self.pages, self.max_ctx
            ));
        }
        if self.pages * self.page_size > i32::MAX as usize {
            return bad(format!("{} pages of {} tokens exceed the i32 slot range", self.pages, self.page_size));
        }
        Ok(())
    }
}

/// A sequence's pages and how many tokens its cache holds.
#[derive(Debug, Clone, Default)]
struct SeqPages {
    pages: Vec<u32>,
    len: usize,
}

/// A handle to a sequence in a `PagedModel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SeqId(usize);

/// Host buffers of one step's inputs and logits, reused (a warm step allocates nothing).
#[derive(Default)]
struct StepIo {
    tokens: Vec<i64>,
    positions: Vec<i64>,
    token_seq: Vec<i32>,
    slots: Vec<i64>,
    tables: Vec<i32>,
    logit_rows: Vec<i64>,
    logits: Vec<f32>,
}

/// An `LlmModel` over a paged KV cache (see the module docs).
pub struct PagedModel {
    model: LlmModel,
    cfg: PagedConfig,
    graphs: HashMap<usize, CompiledGraph>,
    free: Vec<u32>,
    seqs: Vec<Option<SeqPages>>,
    io: StepIo,
}

impl std::fmt::Debug for PagedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PagedModel").field("model", &self.model).field("paged", &self.cfg).finish()
    }
}

impl PagedModel {
    /// The model over a pool of `cfg.pages` pages (allocated when the first step compiles).
    pub fn new(model: LlmModel, cfg: PagedConfig) -> Result<Self> {
        cfg.check()?;
        Ok(PagedModel {
            model,
            cfg,
            graphs: HashMap::new(),
            // Popped from the back: low pages first.
            free: (1..cfg.pages as u32).rev().collect(),
            seqs: vec![],
            io: StepIo::default(),
        })
    }

    /// The paged cache's shape.
    pub fn paged_config(&self) -> &PagedConfig {
        &self.cfg
    }

    /// The model config.
    pub fn config(&self) -> &LlmConfig {
        self.model.config()
    }

    /// Pages a sequence may still get (page 0 excluded).
    pub fn free_pages(&self) -> usize {
        self.free.len()
    }

    /// Pages that can be handed out (the pool less page 0).
    pub fn usable_pages(&self) -> usize {
        self.cfg.pages - 1
    }

    /// Pages holding `tokens` tokens.
    pub fn pages_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.cfg.page_size)
    }

    /// Bytes of the page pool (keys and values of every layer).
    pub fn pool_bytes(&self) -> u64 {
        let c = self.model.config();
        let per_page = 2 * c.layers * c.kv_heads * self.cfg.page_size * c.head_dim * self.model.kv_dtype().size_bytes();
        (per_page * self.cfg.pages) as u64
    }

    /// A new empty sequence.
    pub fn add_sequence(&mut self) -> SeqId {
        match self.seqs.iter().position(Option::is_none) {
            Some(i) => {
                self.seqs[i] = Some(SeqPages::default());
                SeqId(i)
            }
            None => {
                self.seqs.push(Some(SeqPages::default()));
                SeqId(self.seqs.len() - 1)
            }
        }
    }

    /// Ends a sequence; its pages return to the pool.
    pub fn remove_sequence(&mut self, id: SeqId) {
        if let Some(s) = self.seqs.get_mut(id.0).and_then(Option::take) {
            self.free.extend(s.pages.iter().rev());
        }
    }

    /// Tokens in the cache of sequence `id`.
    pub fn seq_len(&self, id: SeqId) -> usize {
        self.seqs.get(id.0).and_then(Option::as_ref).map_or(0, |s| s.len)
    }

    /// Makes sure sequence `id` has pages for `tokens` tokens; false (and nothing taken) when
    /// the pool has too few free pages.
    pub fn reserve(&mut self, id: SeqId, tokens: usize) -> Result<bool> {
        if tokens > self.cfg.max_ctx {
            let reason = format!("{tokens} tokens exceed the context of {}", self.cfg.max_ctx);
            return Err(Error::eval("paged cache", reason));
        }
        let need = self.pages_for(tokens);
        let s = self.seq_mut(id)?;
        let more = need.saturating_sub(s.pages.len());
        if more > self.free.len() {
            return Ok(false);
        }
        let at = self.free.len() - more;
        let taken: Vec<u32> = self.free.drain(at..).rev().collect();
        self.seq_mut(id)?.pages.extend(taken);
        Ok(true)
    }

    fn seq_mut(&mut self, id: SeqId) -> Result<&mut SeqPages> {
        self.seqs
            .get_mut(id.0)
            .and_then(Option::as_mut)
            .ok_or_else(|| Error::eval("paged cache", format!("sequence {} does not exist", id.0)))
    }

    /// The token bucket a step of `n` tokens runs in.
    fn bucket(&self, n: usize) -> usize {
        n.next_power_of_two().min(self.cfg.max_step_tokens.next_power_of_two())
    }

    /// Compiles the graphs of every bucket up to `tokens`, so that none compiles while serving.
    pub fn prepare(&mut self, tokens: usize) -> Result<()> {
        let mut n = 1;
        while n <= self.bucket(tokens.clamp(1, self.cfg.max_step_tokens)) {
            self.graph(n)?;
            n *= 2;
        }
        Ok(())
    }

    fn graph(&mut self, bucket: usize) -> Result<&mut CompiledGraph> {
        if !self.graphs.contains_key(&bucket) {
            let (m, cfg) = (&self.model, &self.cfg);
            let g = paged_graph(m.config(), &m.weights, cfg, bucket, m.kv_dtype());
            let mut c = m.session.compile(g)?;
            let weights: Vec<String> = m.weights.params().iter().map(|p| p.weight.gguf_name()).collect();
            let weights: Vec<&str> = weights.iter().map(String::as_str).collect();
            match self.graphs.values().next().or_else(|| m.graphs.values().next()) {
                Some(src) => c.share_params_from(src, &weights)?,
                None => m.bind_weights(&mut c)?,
            }
            let layers = m.config().layers;
            let pools: Vec<String> = (0..layers).flat_map(|l| [k_pages_name(l), v_pages_name(l)]).collect();
            match self.graphs.values().next() {
                Some(src) => c.share_params_from(src, &pools.iter().map(String::as_str).collect::<Vec<_>>())?,
                None => {
                    let c0 = m.config();
                    let elems = cfg.pages * c0.kv_heads * cfg.page_size * c0.head_dim;
                    // Zero bits are 0.0 in f32, f16 and bf16 alike.
                    let zeros = vec![0u8; elems * m.kv_dtype().size_bytes()];
                    for name in &pools {
                        c.set_param_typed(name, &zeros, m.kv_dtype())?;
                    }
                }
            }
            self.graphs.insert(bucket, c);
        }
        Ok(self.graphs.get_mut(&bucket).expect("inserted above"))
    }

    /// Appends `work[i].1` to sequence `work[i].0` for every `i` in one forward step and returns
    /// the logits after each one's last new token, `[work.len() * vocab]` (a buffer the model
    /// reuses). Each sequence must have pages reserved for its new length.
    pub fn step(&mut self, work: &[(SeqId, &[u32])]) -> Result<&[f32]> {
        let err = |r: String| Err(Error::eval("paged step", r));
        let total: usize = work.iter().map(|(_, t)| t.len()).sum();
        if work.is_empty() || work.len() > self.cfg.max_seqs || total > self.cfg.max_step_tokens {
            return err(format!(
                "a step runs 1..={} sequences of 1..={} tokens in all, got {} sequences of {total}",
                self.cfg.max_seqs,
                self.cfg.max_step_tokens,
                work.len()
            ));
        }
        let vocab = self.model.config().vocab_size;
        let (ps, nb, s_max) = (self.cfg.page_size, self.cfg.max_blocks(), self.cfg.max_seqs);
        let bucket = self.bucket(total);
        let mut io = std::mem::take(&mut self.io);
        io.tokens.clear();
        io.positions.clear();
        io.token_seq.clear();
        io.slots.clear();
        io.logit_rows.clear();
        io.tables.clear();
        io.tables.resize(s_max * nb, 0);
        for (row, (id, toks)) in work.iter().enumerate() {
            let Some(s) = self.seqs.get(id.0).and_then(Option::as_ref) else {
                self.io = io;
                return err(format!("sequence {} does not exist", id.0));
            };
            if let Some(&bad) = toks.iter().find(|&&t| t as usize >= vocab) {
                self.io = io;
                return err(format!("token id {bad} is outside the vocabulary 0..{vocab}"));
            }
            let end = s.len + toks.len();
            if toks.is_empty() || end > s.pages.len() * ps {
                self.io = io;
                return err(format!(
                    "sequence {} has pages for {} tokens, not {end} (reserve first; empty token lists are refused)",
                    id.0,
                    s.pages.len() * ps
                ));
            }
            io.tables[row * nb..row * nb + s.pages.len()].iter_mut().zip(&s.pages).for_each(|(t, &p)| *t = p as i32);
            for (i, &t) in toks.iter().enumerate() {
                let pos = s.len + i;
                io.tokens.push(t as i64);
                io.positions.push(pos as i64);
                io.token_seq.push(row as i32);
                io.slots.push((s.pages[pos / ps] as usize * ps + pos % ps) as i64);
            }
            io.logit_rows.push(io.tokens.len() as i64 - 1);
        }
        // Padding rows: token 0 at position 0 of row 0, writing nothing.
        io.tokens.resize(bucket, 0);
        io.positions.resize(bucket, 0);
        io.token_seq.resize(bucket, 0);
        io.slots.resize(bucket, -1);
        io.logit_rows.resize(s_max, 0);
        io.logits.resize(s_max * vocab, 0.0);
        let r = self.run(bucket, &mut io);
        self.io = io;
        r?;
        for (id, toks) in work {
            if let Some(s) = self.seqs[id.0].as_mut() {
                s.len += toks.len();
            }
        }
        Ok(&self.io.logits[..work.len() * vocab])
    }

    fn run(&mut self, bucket: usize, io: &mut StepIo) -> Result<()> {
        let c = self.graph(bucket)?;
        let mut ins: [&[u8]; 6] = [&[]; 6];
        for (slot, (name, _)) in ins.iter_mut().zip(c.inputs()) {
            *slot = match name.as_str() {
                names::TOKENS => bytemuck::cast_slice(&io.tokens),
                names::POSITIONS => bytemuck::cast_slice(&io.positions),
                names::TOKEN_SEQ => bytemuck::cast_slice(&io.token_seq),
                names::SLOTS => bytemuck::cast_slice(&io.slots),
                names::BLOCK_TABLES => bytemuck::cast_slice(&io.tables),
                _ => bytemuck::cast_slice(&io.logit_rows),
            };
        }
        let k = c.inputs().len().min(6);
        c.run_into(&ins[..k], &mut [bytemuck::cast_slice_mut(&mut io.logits)])
    }
}

/// The decoder over a paged cache for a step of `tokens` rows (see the module docs): logits
/// `[max_seqs, vocab]` of the rows `logit_rows` names.
pub fn paged_graph(cfg: &LlmConfig, weights: &LlmWeights, pc: &PagedConfig, tokens: usize, kv_dtype: DType) -> Graph {
    let (t, s_max, nb) = (tokens, pc.max_seqs, pc.max_blocks());
    let (nh, kvh, hd) = (cfg.heads, cfg.kv_heads, cfg.head_dim);
    let mut g = Graph::new(format!("{}_paged{t}", cfg.arch.name()));
    let tok = g.input(names::TOKENS, Shape::new(&[t], DType::I64));
    let positions = g.input(names::POSITIONS, Shape::new(&[t], DType::I64));
    let token_seq = g.input(names::TOKEN_SEQ, Shape::new(&[t], DType::I32));
    let slots = g.input(names::SLOTS, Shape::new(&[t], DType::I64));
    let tables = g.input(names::BLOCK_TABLES, Shape::new(&[s_max, nb], DType::I32));
    let logit_rows = g.input(names::LOGIT_ROWS, Shape::new(&[s_max], DType::I64));
    let pool = Shape::new(&[pc.pages, kvh, pc.page_size, hd], kv_dtype);
    let scale = 1.0 / (hd as f32).sqrt();
    let mut x = embed(&mut g, cfg, weights, tok, t);
    for l in 0..cfg.layers {
        // The step's tokens as one sequence of t rows, each with its own position.
        let (q, k, v) = qkv(&mut g, cfg, weights, l, x, [1, t]);
        let q = g.transpose(q, &[0, 2, 1, 3]);
        let k = g.transpose(k, &[0, 2, 1, 3]);
        let q = rope(&mut g, cfg, q, positions, [1, nh, t]);
        let k = rope(&mut g, cfg, k, positions, [1, kvh, t]);
        let q = g.transpose(q, &[0, 2, 1, 3]);
        let k = g.transpose(k, &[0, 2, 1, 3]);
        let q = g.reshape(q, &[t, nh, hd]);
        let k = g.reshape(k, &[t, kvh, hd]);
        let v = g.reshape(v, &[t, kvh, hd]);
        let (k, v) = if kv_dtype == DType::F32 { (k, v) } else { (g.cast(k, kv_dtype), g.cast(v, kv_dtype)) };
        let kp = g.param(&k_pages_name(l), pool.clone());
        let vp = g.param(&v_pages_name(l), pool.clone());
        let kp2 = g.paged_kv_write(kp, k, slots);
        let vp2 = g.paged_kv_write(vp, v, slots);
        g.update_param(kp, kp2);
        g.update_param(vp, vp2);
        let a = g.paged_attention(q, kp2, vp2, tables, token_seq, positions, scale);
        let a = g.reshape(a, &[t, nh * hd]);
        x = attn_out(&mut g, cfg, weights, l, a, x);
        x = ffn_block(&mut g, cfg, weights, l, x);
    }
    let last = g.gather(x, logit_rows, 0);
    let logits = lm_head(&mut g, cfg, weights, last);
    g.set_outputs(vec![logits]);
    g
}
