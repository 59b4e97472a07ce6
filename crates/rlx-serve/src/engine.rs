//! The engine: where generation requests run.
//!
//! `Engine` is the seam between the HTTP layer and scheduling. The router only submits a
//! `GenRequest` and reads `Event`s back; how requests share the model is the engine's business.
//! `SerialEngine` is the first implementation: one worker thread owns the model and runs
//! requests one at a time, first come first served, from a bounded queue. A batched scheduler
//! (paged KV cache, continuous batching) implements the same trait and replaces it.

use crate::metrics::Metrics;
use crate::stop::{StopScanner, Utf8Assembler};
use rlx_models::llm::{GenerateOptions, LlmModel, generate};
use rlx_models::{LlmTokenizer, SamplerConfig};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use tokio::sync::mpsc;

/// One generation request, validated and tokenized by the router.
#[derive(Debug, Clone)]
pub struct GenRequest {
    /// Prompt tokens (non-empty; prompt + `max_tokens` fit the context).
    pub prompt: Vec<u32>,
    /// At most this many new tokens (>= 1).
    pub max_tokens: usize,
    /// Sampling settings.
    pub sampler: SamplerConfig,
    /// Tokens that end generation (EOS, a chat format's end-of-turn); not sent.
    pub stop_tokens: Vec<u32>,
    /// Strings that end generation; neither they nor a prefix of them is sent.
    pub stop: Vec<String>,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop token or stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
}

impl FinishReason {
    /// The OpenAI name.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// What the engine sends back for one request, in order: text pieces, then `Done` or `Error`.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// New text (never part of a possible stop string).
    Text(String),
    /// Generation ended.
    Done {
        /// Why.
        finish: FinishReason,
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Generated tokens (stop tokens excluded).
        completion_tokens: usize,
    },
    /// Generation failed; the server goes on.
    Error(String),
}

/// Why a request was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The queue holds its maximum; the caller answers 429.
    #[error("the queue is full ({0} waiting)")]
    QueueFull(usize),
    /// The engine is stopping or stopped.
    #[error("the engine is shutting down")]
    ShuttingDown,
}

/// A scheduler that runs generation requests against one model.
pub trait Engine: Send + Sync + 'static {
    /// Queues a request; its events arrive on the returned receiver. Dropping the receiver
    /// cancels the request at its next token.
    fn submit(&self, req: GenRequest) -> Result<mpsc::UnboundedReceiver<Event>, SubmitError>;
    /// Stops taking requests and cancels the running and queued ones (each gets an `Error`).
    fn shutdown(&self);
}

struct Job {
    req: GenRequest,
    events: mpsc::UnboundedSender<Event>,
    submitted: Instant,
}

/// One worker thread that owns the model and runs requests one at a time (FCFS).
pub struct SerialEngine {
    queue: mpsc::Sender<Job>,
    capacity: usize,
    stopping: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
}

impl SerialEngine {
    /// Starts the worker; `queue` is how many requests may wait (at least 1).
    pub fn start(model: LlmModel, tok: Arc<dyn LlmTokenizer>, queue: usize, metrics: Arc<Metrics>) -> Self {
        let capacity = queue.max(1);
        let (tx, rx) = mpsc::channel(capacity);
        let stopping = Arc::new(AtomicBool::new(false));
        let worker = Worker { model, tok, metrics: metrics.clone(), stopping: stopping.clone() };
        std::thread::Builder::new()
            .name("rlx-serve-engine".into())
            .spawn(move || worker.run(rx))
            .expect("spawning the engine thread");
        SerialEngine { queue: tx, capacity, stopping, metrics }
    }
}

impl Engine for SerialEngine {
    fn submit(&self, req: GenRequest) -> Result<mpsc::UnboundedReceiver<Event>, SubmitError> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err(SubmitError::ShuttingDown);
        }
        let (events, rx) = mpsc::unbounded_channel();
        // Counted before sending: the worker may take the job (and decrement) at once.
        self.metrics.queued(1);
        match self.queue.try_send(Job { req, events, submitted: Instant::now() }) {
            Ok(()) => Ok(rx),
            Err(e) => {
                self.metrics.queued(-1);
                match e {
                    mpsc::error::TrySendError::Full(_) => Err(SubmitError::QueueFull(self.capacity)),
                    mpsc::error::TrySendError::Closed(_) => Err(SubmitError::ShuttingDown),
                }
            }
        }
    }

    fn shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }
}

struct Worker {
    model: LlmModel,
    tok: Arc<dyn LlmTokenizer>,
    metrics: Arc<Metrics>,
    stopping: Arc<AtomicBool>,
}

impl Worker {
    fn run(mut self, mut rx: mpsc::Receiver<Job>) {
        while let Some(job) = rx.blocking_recv() {
            self.metrics.queued(-1);
            if self.stopping.load(Ordering::SeqCst) {
                let _ = job.events.send(Event::Error("the server is shutting down".into()));
                self.metrics.cancelled();
                continue;
            }
            if job.events.is_closed() {
                // The client left while the request waited.
                self.metrics.cancelled();
                continue;
            }
            self.metrics.running(1);
            // A panic inside the model must cost this request only, not the server: the next
            // prefill starts a fresh cache, so no state carries over.
            let r = std::panic::catch_unwind(AssertUnwindSafe(|| self.run_job(&job)));
            if r.is_err() {
                let _ = job.events.send(Event::Error("the engine panicked on this request".into()));
            }
            self.metrics.running(-1);
        }
    }

    fn run_job(&mut self, job: &Job) {
        let req = &job.req;
        let opts = GenerateOptions {
            max_tokens: req.max_tokens,
            sampler: req.sampler.clone(),
            stop_tokens: req.stop_tokens.clone(),
        };
        self.metrics.prompt_tokens(req.prompt.len());
        let (mut utf8, mut stop) = (Utf8Assembler::default(), StopScanner::new(req.stop.clone()));
        let (mut hit_stop, mut cancelled, mut n) = (false, false, 0usize);
        let mut last: Option<Instant> = None;
        let (tok, metrics, stopping) = (&self.tok, &self.metrics, &self.stopping);
        let r = generate(&mut self.model, &req.prompt, &opts, |t| {
            let now = Instant::now();
            match last {
                None => metrics.time_to_first_token(now - job.submitted),
                Some(l) => metrics.inter_token(now - l),
            }
            last = Some(now);
            metrics.token();
            n += 1;
            if stopping.load(Ordering::SeqCst) || job.events.is_closed() {
                cancelled = true;
                return false;
            }
            let (out, stopped) = stop.push(&utf8.push(&tok.piece_bytes(t)));
            if !out.is_empty() && job.events.send(Event::Text(out)).is_err() {
                cancelled = true;
                return false;
            }
            hit_stop = stopped;
            !stopped
        });
        let stats = match r {
            Err(e) => {
                let _ = job.events.send(Event::Error(e.to_string()));
                return;
            }
            Ok(s) => s,
        };
        if cancelled {
            self.metrics.cancelled();
            if self.stopping.load(Ordering::SeqCst) {
                let _ = job.events.send(Event::Error("cancelled: the server is shutting down".into()));
            }
            return;
        }
        if !hit_stop {
            let tail = utf8.finish();
            let (mut out, stopped) = stop.push(&tail);
            hit_stop = stopped;
            if !stopped {
                out += &stop.finish();
            }
            if !out.is_empty() {
                let _ = job.events.send(Event::Text(out));
            }
        }
        // Fewer tokens than asked without a stop string: a stop token ended it.
        let finish =
            if hit_stop || stats.tokens.len() < req.max_tokens { FinishReason::Stop } else { FinishReason::Length };
        let _ = job.events.send(Event::Done { finish, prompt_tokens: req.prompt.len(), completion_tokens: n });
    }
}
