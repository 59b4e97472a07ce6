//! Continuous batching over a `PagedModel`: requests join and leave between steps, every step
//! runs each running sequence's next token (and prefill chunks of new ones) in one forward pass.
//!
//! A step: admit waiting requests first come, first served while a sequence row is free and
//! the pool holds their pending tokens; give each decoding sequence a page when it crosses a
//! page boundary, preempting the most recently admitted sequences (their pages freed, their
//! tokens recomputed when they are admitted again) when the pool is out of pages; fill the
//! step's token budget with one token per decoding sequence, then prefill chunks in admission
//! order (a long prompt is split, so it never stalls the decodes for more than one step's
//! budget); run it; sample each sequence whose pending tokens all ran.

use super::paged::{PagedModel, SeqId};
use crate::sampling::{Sampler, SamplerConfig};
use rlx_ir::{Error, Result};
use std::collections::VecDeque;

/// One generation request.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRequest {
    /// Prompt tokens (non-empty).
    pub prompt: Vec<u32>,
    /// At most this many new tokens (>= 1).
    pub max_tokens: usize,
    /// How tokens are picked (each request has its own RNG from `seed`).
    pub sampler: SamplerConfig,
    /// Tokens that end generation (not returned).
    pub stop_tokens: Vec<u32>,
}

/// Why a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchFinish {
    /// A stop token.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// `cancel` was called.
    Cancelled,
}

/// What a step produced for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchEvent {
    /// A new token.
    Token(u32),
    /// The request ended; its pages are back in the pool.
    Finished {
        /// Why.
        reason: BatchFinish,
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Tokens generated (stop token excluded).
        completion_tokens: usize,
    },
}

/// A request's id in the scheduler.
pub type RequestId = u64;

/// Counters of the scheduler's state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Requests with a sequence in the model.
    pub running: usize,
    /// Requests waiting to be admitted (preempted ones included).
    pub waiting: usize,
    /// Pages held by running sequences.
    pub pages_used: usize,
    /// Pages a sequence can hold (the pool less the reserved page).
    pub pages_total: usize,
    /// Preemptions since the scheduler started.
    pub preemptions: u64,
    /// Steps run.
    pub steps: u64,
}

struct Seq {
    id: RequestId,
    req: BatchRequest,
    /// Prompt and generated tokens.
    tokens: Vec<u32>,
    /// Tokens in the cache (the rest are pending).
    cached: usize,
    slot: Option<SeqId>,
    sampler: Sampler,
}

impl Seq {
    fn generated(&self) -> usize {
        self.tokens.len() - self.req.prompt.len()
    }
}

/// The continuous-batching scheduler (see the module docs).
pub struct BatchScheduler {
    model: PagedModel,
    waiting: VecDeque<Seq>,
    /// In admission order.
    running: Vec<Seq>,
    next_id: RequestId,
    stats: BatchStats,
}

impl BatchScheduler {
    /// A scheduler over `model`.
    pub fn new(model: PagedModel) -> Self {
        let pages_total = model.usable_pages();
        BatchScheduler {
            model,
            waiting: VecDeque::new(),
            running: vec![],
            next_id: 0,
            stats: BatchStats { pages_total, ..BatchStats::default() },
        }
    }

    /// The model.
    pub fn model(&self) -> &PagedModel {
        &self.model
    }

    /// The model, to compile its graphs ahead (`PagedModel::prepare`).
    pub fn model_mut(&mut self) -> &mut PagedModel {
        &mut self.model
    }

    /// Running and waiting requests, pages, preemptions.
    pub fn stats(&self) -> BatchStats {
        BatchStats {
            running: self.running.len(),
            waiting: self.waiting.len(),
            pages_used: self.model.usable_pages() - self.model.free_pages(),
            ..self.stats
        }
    }

    /// No request is running or waiting.
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    /// Queues a request; checks that it fits the context and the pool.
    pub fn submit(&mut self, req: BatchRequest) -> Result<RequestId> {
        let err = |r: String| Err(Error::eval("batch", r));
        let ctx = self.model.paged_config().max_ctx;
        if req.prompt.is_empty() || req.max_tokens == 0 {
            return err("a request needs a non-empty prompt and max_tokens >= 1".into());
        }
        // The last token is sampled, never cached: prompt + max_tokens - 1 positions.
        if req.prompt.len() + req.max_tokens > ctx + 1 {
            return err(format!(
                "{} prompt tokens + {} new tokens exceed the context of {ctx}",
                req.prompt.len(),
                req.max_tokens
            ));
        }
        let vocab = self.model.config().vocab_size;
        if let Some(bad) = req.prompt.iter().find(|&&t| t as usize >= vocab) {
            return err(format!("token id {bad} is outside the vocabulary 0..{vocab}"));
        }
        let sampler = Sampler::new(req.sampler.clone())?;
        let id = self.next_id;
        self.next_id += 1;
        let tokens = req.prompt.clone();
        self.waiting.push_back(Seq { id, req, tokens, cached: 0, slot: None, sampler });
        Ok(id)
    }

    /// Ends a request now (its pages return to the pool); returns its `Finished` event, or None
    /// for an unknown or finished id.
    pub fn cancel(&mut self, id: RequestId) -> Option<BatchEvent> {
        let seq = if let Some(i) = self.running.iter().position(|s| s.id == id) {
            let s = self.running.remove(i);
            if let Some(slot) = s.slot {
                self.model.remove_sequence(slot);
            }
            s
        } else {
            let i = self.waiting.iter().position(|s| s.id == id)?;
            self.waiting.remove(i)?
        };
        Some(finished(&seq, BatchFinish::Cancelled))
    }

    /// Frees a running sequence's pages and puts it back at the front of the queue; its tokens
    /// (prompt and generated) are recomputed when it is admitted again.
    fn preempt(&mut self, i: usize) {
        let mut s = self.running.remove(i);
        if let Some(slot) = s.slot.take() {
            self.model.remove_sequence(slot);
        }
        s.cached = 0;
        self.stats.preemptions += 1;
        self.waiting.push_front(s);
    }

    fn admit(&mut self) -> Result<()> {
        let max = self.model.paged_config().max_seqs;
        while self.running.len() < max {
            let Some(front) = self.waiting.front() else { break };
            // Room for all its pending tokens, so an admitted prefill never waits for pages.
            if self.model.pages_for(front.tokens.len()) > self.model.free_pages() {
                break;
            }
            let mut s = self.waiting.pop_front().expect("front exists");
            let slot = self.model.add_sequence();
            if !self.model.reserve(slot, s.tokens.len())? {
                self.model.remove_sequence(slot);
                self.waiting.push_front(s);
                break;
            }
            s.slot = Some(slot);
            self.running.push(s);
        }
        Ok(())
    }

    /// Runs one step; returns what it produced per request (nothing when idle).
    pub fn step(&mut self) -> Result<Vec<(RequestId, BatchEvent)>> {
        self.admit()?;
        // Decoding sequences need room for their next token; the newest give way.
        let mut i = 0;
        while i < self.running.len() {
            let s = &self.running[i];
            let (slot, need) = (s.slot.expect("running sequences have a slot"), s.tokens.len());
            if self.model.reserve(slot, need)? {
                i += 1;
                continue;
            }
            let last = self.running.len() - 1;
            self.preempt(last);
            if last == i {
                // It was the newest itself.
                continue;
            }
        }
        let budget = self.model.paged_config().max_step_tokens;
        let mut chunks: Vec<(usize, usize)> = vec![];
        let mut used = 0;
        // Decodes first (one pending token each), then prefill chunks in admission order.
        for decode in [true, false] {
            for (i, s) in self.running.iter().enumerate() {
                let pending = s.tokens.len() - s.cached;
                if (pending == 1) != decode || used >= budget {
                    continue;
                }
                let n = pending.min(budget - used);
                chunks.push((i, n));
                used += n;
            }
        }
        if chunks.is_empty() {
            return Ok(vec![]);
        }
        chunks.sort_unstable();
        let work: Vec<(SeqId, &[u32])> = chunks
            .iter()
            .map(|&(i, n)| {
                let s = &self.running[i];
                (s.slot.expect("running"), &s.tokens[s.cached..s.cached + n])
            })
            .collect();
        let vocab = self.model.config().vocab_size;
        // `work` borrows the token lists and the logits the model: disjoint fields, so the
        // sequences below can be updated while the logits are read in place.
        let logits = self.model.step(&work)?;
        drop(work);
        self.stats.steps += 1;
        let mut out = vec![];
        let mut done = vec![];
        for (row, &(i, n)) in chunks.iter().enumerate() {
            let s = &mut self.running[i];
            s.cached += n;
            if s.cached < s.tokens.len() {
                continue;
            }
            let t = s.sampler.sample(&logits[row * vocab..(row + 1) * vocab], &s.tokens)?;
            if s.req.stop_tokens.contains(&t) {
                out.push((s.id, finished(s, BatchFinish::Stop)));
                done.push(i);
                continue;
            }
            s.tokens.push(t);
            out.push((s.id, BatchEvent::Token(t)));
            if s.generated() == s.req.max_tokens {
                out.push((s.id, finished(s, BatchFinish::Length)));
                done.push(i);
            }
        }
        for &i in done.iter().rev() {
            let s = self.running.remove(i);
            if let Some(slot) = s.slot {
                self.model.remove_sequence(slot);
            }
        }
        Ok(out)
    }
}

fn finished(s: &Seq, reason: BatchFinish) -> BatchEvent {
    BatchEvent::Finished { reason, prompt_tokens: s.req.prompt.len(), completion_tokens: s.generated() }
}

/// Generates from every prompt with continuous batching and returns each one's tokens (stop
/// token excluded) and why it ended; sequence `i` samples with seed `sampler.seed + i`, as
/// `generate_batch`.
pub fn generate_paged(
    sched: &mut BatchScheduler,
    prompts: &[Vec<u32>],
    max_tokens: usize,
    sampler: &SamplerConfig,
    stop_tokens: &[u32],
) -> Result<Vec<(Vec<u32>, BatchFinish)>> {
    let mut ids = Vec::with_capacity(prompts.len());
    for (i, p) in prompts.iter().enumerate() {
        let sampler = SamplerConfig { seed: sampler.seed.wrapping_add(i as u64), ..sampler.clone() };
        let req = BatchRequest { prompt: p.clone(), max_tokens, sampler, stop_tokens: stop_tokens.to_vec() };
        match sched.submit(req) {
            Ok(id) => ids.push(id),
            Err(e) => {
                ids.iter().for_each(|&id| _ = sched.cancel(id));
                return Err(e);
            }
        }
    }
    let mut out = vec![(vec![], BatchFinish::Length); prompts.len()];
    let mut left = prompts.len();
    while left > 0 {
        let events = match sched.step() {
            Ok(ev) => ev,
            Err(e) => {
                ids.iter().for_each(|&id| _ = sched.cancel(id));
                return Err(e);
            }
        };
        for (id, ev) in events {
            let Some(i) = ids.iter().position(|&x| x == id) else { continue };
            match ev {
                BatchEvent::Token(t) => out[i].0.push(t),
                BatchEvent::Finished { reason, .. } => {
                    out[i].1 = reason;
                    left -= 1;
                }
            }
        }
    }
    Ok(out)
}
