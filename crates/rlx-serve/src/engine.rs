//! The engine: where generation requests run.
//!
//! `Engine` is the seam between the HTTP layer and scheduling. The router only submits a
//! `GenRequest` and reads `Event`s back; how requests share the model is the engine's business.
//! `BatchEngine`: one worker thread owns a `BatchScheduler` (paged KV cache, continuous
//! batching) and turns its tokens into text events; requests wait in a bounded queue, and are
//! taken from it only while a sequence row is free, so a full queue answers 429.

use crate::metrics::Metrics;
use crate::stop::{StopScanner, Utf8Assembler};
use rlx_models::llm::{BatchEvent, BatchFinish, BatchRequest, BatchScheduler, RequestId};
use rlx_models::{LlmTokenizer, SamplerConfig};
use std::collections::HashMap;
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

/// One worker thread that owns the scheduler and runs every admitted request together.
pub struct BatchEngine {
    queue: mpsc::Sender<Job>,
    capacity: usize,
    stopping: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
}

impl BatchEngine {
    /// Starts the worker; `queue` is how many requests may wait (at least 1).
    pub fn start(sched: BatchScheduler, tok: Arc<dyn LlmTokenizer>, queue: usize, metrics: Arc<Metrics>) -> Self {
        let capacity = queue.max(1);
        let (tx, rx) = mpsc::channel(capacity);
        let stopping = Arc::new(AtomicBool::new(false));
        let st = sched.stats();
        metrics.kv_pages(st.pages_used, st.pages_total);
        let worker = Worker {
            sched,
            tok,
            metrics: metrics.clone(),
            stopping: stopping.clone(),
            active: HashMap::new(),
            waiting_counted: 0,
        };
        std::thread::Builder::new()
            .name("rlx-serve-engine".into())
            .spawn(move || worker.run(rx))
            .expect("spawning the engine thread");
        BatchEngine { queue: tx, capacity, stopping, metrics }
    }
}

impl Engine for BatchEngine {
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

/// A request in the scheduler: where its text stands.
struct Active {
    job: Job,
    utf8: Utf8Assembler,
    stop: StopScanner,
    tokens: usize,
    last: Option<Instant>,
}

struct Worker {
    sched: BatchScheduler,
    tok: Arc<dyn LlmTokenizer>,
    metrics: Arc<Metrics>,
    stopping: Arc<AtomicBool>,
    active: HashMap<RequestId, Active>,
    /// Requests waiting inside the scheduler, as counted in the queue-depth gauge.
    waiting_counted: usize,
}

impl Worker {
    fn run(mut self, mut rx: mpsc::Receiver<Job>) {
        loop {
            if self.sched.is_idle() {
                // Nothing to run: sleep until a request comes (or every sender is gone).
                match rx.blocking_recv() {
                    Some(job) => self.take(job),
                    None => return,
                }
            }
            // Take more only while a sequence row is free; the rest wait in the bounded queue.
            while self.has_room() {
                match rx.try_recv() {
                    Ok(job) => self.take(job),
                    Err(_) => break,
                }
            }
            self.cancel_gone();
            self.step();
            let st = self.sched.stats();
            self.metrics.queued(st.waiting as i64 - self.waiting_counted as i64);
            self.waiting_counted = st.waiting;
            self.metrics.set_running(st.running);
            self.metrics.kv_pages(st.pages_used, st.pages_total);
            self.metrics.set_engine_counts(st.preemptions, st.steps);
        }
    }

    fn has_room(&self) -> bool {
        let st = self.sched.stats();
        st.running + st.waiting < self.sched.model().paged_config().max_seqs
    }

    /// Moves a job from the queue into the scheduler (it stays counted as queued until admitted).
    fn take(&mut self, job: Job) {
        self.metrics.queued(-1);
        if self.stopping.load(Ordering::SeqCst) {
            let _ = job.events.send(Event::Error("the server is shutting down".into()));
            self.metrics.cancelled();
            return;
        }
        if job.events.is_closed() {
            // The client left while the request waited.
            self.metrics.cancelled();
            return;
        }
        let r = &job.req;
        let req = BatchRequest {
            prompt: r.prompt.clone(),
            max_tokens: r.max_tokens,
            sampler: r.sampler.clone(),
            stop_tokens: r.stop_tokens.clone(),
        };
        match self.sched.submit(req) {
            Err(e) => {
                let _ = job.events.send(Event::Error(e.to_string()));
            }
            Ok(id) => {
                self.metrics.prompt_tokens(job.req.prompt.len());
                self.metrics.queued(1);
                self.waiting_counted += 1;
                let stop = StopScanner::new(job.req.stop.clone());
                self.active.insert(id, Active { job, utf8: Utf8Assembler::default(), stop, tokens: 0, last: None });
            }
        }
    }

    /// Cancels the requests whose client went away (their pages return at once), and all of
    /// them when the server stops.
    fn cancel_gone(&mut self) {
        let stopping = self.stopping.load(Ordering::SeqCst);
        let gone: Vec<RequestId> =
            self.active.iter().filter(|(_, a)| stopping || a.job.events.is_closed()).map(|(&id, _)| id).collect();
        for id in gone {
            self.sched.cancel(id);
            if let Some(a) = self.active.remove(&id) {
                self.metrics.cancelled();
                if stopping {
                    let _ = a.job.events.send(Event::Error("cancelled: the server is shutting down".into()));
                }
            }
        }
    }

    fn step(&mut self) {
        // A panic inside the model must cost the running requests only, not the server: they are
        // cancelled (their pages freed) and the next requests start fresh sequences.
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| self.sched.step()));
        let events = match r {
            Ok(Ok(ev)) => ev,
            failed => {
                let msg = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "the engine panicked on this batch".into(),
                };
                for (id, a) in std::mem::take(&mut self.active) {
                    self.sched.cancel(id);
                    let _ = a.job.events.send(Event::Error(msg.clone()));
                }
                return;
            }
        };
        for (id, ev) in events {
            match ev {
                BatchEvent::Token(t) => self.token(id, t),
                BatchEvent::Finished { reason, prompt_tokens, .. } => {
                    if let Some(mut a) = self.active.remove(&id) {
                        let (tail, stopped) = a.stop.push(&a.utf8.finish());
                        let mut out = tail;
                        if !stopped {
                            out += &a.stop.finish();
                        }
                        if !out.is_empty() {
                            let _ = a.job.events.send(Event::Text(out));
                        }
                        let finish = if reason == BatchFinish::Length && !stopped {
                            FinishReason::Length
                        } else {
                            FinishReason::Stop
                        };
                        let done = Event::Done { finish, prompt_tokens, completion_tokens: a.tokens };
                        let _ = a.job.events.send(done);
                    }
                }
            }
        }
    }

    /// Streams one token's text; a stop string ends the request here.
    fn token(&mut self, id: RequestId, t: u32) {
        let Some(a) = self.active.get_mut(&id) else { return };
        let now = Instant::now();
        match a.last {
            None => self.metrics.time_to_first_token(now - a.job.submitted),
            Some(l) => self.metrics.inter_token(now - l),
        }
        a.last = Some(now);
        a.tokens += 1;
        self.metrics.token();
        let (out, stopped) = a.stop.push(&a.utf8.push(&self.tok.piece_bytes(t)));
        if !out.is_empty() && a.job.events.send(Event::Text(out)).is_err() {
            // The client left: cancelled before the next step.
            return;
        }
        if stopped {
            self.sched.cancel(id);
            if let Some(a) = self.active.remove(&id) {
                let prompt_tokens = a.job.req.prompt.len();
                let done = Event::Done { finish: FinishReason::Stop, prompt_tokens, completion_tokens: a.tokens };
                let _ = a.job.events.send(done);
            }
        }
    }
}
