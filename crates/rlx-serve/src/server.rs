//! The HTTP side: loading the model, the axum router and its handlers, server-sent events, and
//! start-up / shutdown.

use crate::api::{self, Prompt, Shape};
use crate::chat::ChatFormat;
use crate::engine::{BatchEngine, Engine, Event, GenRequest, SubmitError};
use crate::error::{ApiError, ServeError};
use crate::metrics::Metrics;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rlx_driver::Device;
use rlx_models::llm::{BatchScheduler, LlmModel, PagedConfig, PagedModel};
use rlx_models::{LlmTokenizer, SamplerConfig, load_tokenizer};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot};

/// How `rlx serve` is set up.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The model (Qwen3, Llama): a `.gguf` file or a Hugging Face checkpoint folder.
    pub model: PathBuf,
    /// Address to listen on.
    pub host: String,
    /// Port; 0 picks a free one (`Server::addr` says which).
    pub port: u16,
    /// Context per request (prompt + generated); default: the model's, at most 4096.
    pub ctx: Option<usize>,
    /// Sequences run together (rows of one forward step).
    pub max_batch: usize,
    /// Tokens one step runs, all sequences together (decodes and prefill chunks).
    pub max_step_tokens: usize,
    /// Tokens per KV-cache page.
    pub page_size: usize,
    /// KV-cache pages in the pool; default: room for `max_batch` full contexts (or `kv_memory`).
    pub kv_pages: Option<usize>,
    /// Bytes of KV cache, when `kv_pages` is not given.
    pub kv_memory: Option<u64>,
    /// Requests that may wait; beyond that a request gets 429.
    pub queue: usize,
    /// The device the model runs on.
    pub device: Device,
    /// Stop on SIGINT / SIGTERM (the CLI); tests stop through `Server::shutdown`.
    pub handle_signals: bool,
}

impl ServeConfig {
    /// Defaults for `model`: 127.0.0.1:8080, the model's context, 8 sequences per step, 256
    /// tokens per step, 16-token pages for 8 full contexts, a queue of 64, CPU.
    pub fn new(model: impl Into<PathBuf>) -> Self {
        ServeConfig {
            model: model.into(),
            host: "127.0.0.1".into(),
            port: 8080,
            ctx: None,
            max_batch: 8,
            max_step_tokens: 256,
            page_size: 16,
            kv_pages: None,
            kv_memory: None,
            queue: 64,
            device: Device::Cpu,
            handle_signals: false,
        }
    }
}

/// The page pool from `--kv-pages`, else `--kv-memory`, else room for `max_batch` full contexts.
fn paged_config(cfg: &ServeConfig, model: &LlmModel, ctx: usize) -> Result<PagedConfig, ServeError> {
    let pages = match (cfg.kv_pages, cfg.kv_memory) {
        (Some(n), _) => n,
        (None, Some(bytes)) => PagedConfig::pages_for_bytes(model.config(), model.kv_dtype(), cfg.page_size, bytes),
        (None, None) => cfg.max_batch * ctx.div_ceil(cfg.page_size) + 1,
    };
    let pc = PagedConfig {
        page_size: cfg.page_size,
        pages,
        max_seqs: cfg.max_batch,
        max_step_tokens: cfg.max_step_tokens,
        max_ctx: ctx,
    };
    let need = ctx.div_ceil(cfg.page_size) + 1;
    if pages < need {
        return Err(ServeError::Config(format!(
            "a KV cache of {pages} pages cannot hold one request of {ctx} tokens ({need} pages of {} tokens; \
             raise --kv-pages / --kv-memory or lower --ctx)",
            cfg.page_size
        )));
    }
    Ok(pc)
}

/// What the handlers share.
struct AppState {
    engine: Arc<dyn Engine>,
    tok: Arc<dyn LlmTokenizer>,
    chat: ChatFormat,
    chat_stops: Vec<u32>,
    ctx: usize,
    model_id: String,
    created: u64,
    metrics: Arc<Metrics>,
    next_id: AtomicU64,
}

type Shared = Arc<AppState>;

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: std::thread::JoinHandle<Result<(), ServeError>>,
}

impl Server {
    /// Loads the model, binds the socket and serves on a background runtime.
    pub fn start(cfg: ServeConfig) -> Result<Server, ServeError> {
        if cfg.max_batch == 0 || cfg.queue == 0 || cfg.max_step_tokens == 0 || cfg.page_size == 0 {
            return Err(ServeError::Config(
                "--max-batch, --max-step-tokens, --page-size and --queue must be at least 1".into(),
            ));
        }
        // A `.gguf` file or a Hugging Face checkpoint folder.
        let tok: Arc<dyn LlmTokenizer> = Arc::from(load_tokenizer(&cfg.model)?);
        let chat = ChatFormat::detect(tok.chat_template());
        let chat_stops = chat.end_tokens().iter().filter_map(|t| tok.token_id(t)).collect();
        let model_ctx = LlmModel::read_config(&cfg.model)?.context_length;
        let ctx = cfg.ctx.unwrap_or(model_ctx.min(4096));
        if ctx == 0 || ctx > model_ctx {
            return Err(ServeError::Config(format!("--ctx {ctx} must be in [1, {model_ctx}] (the model's context)")));
        }
        let model = LlmModel::load(&cfg.model, cfg.device, ctx)?;
        // Page the weights in and compile every step bucket now, not on the first requests.
        model.warm_weights(|_, _| {});
        let paged = paged_config(&cfg, &model, ctx)?;
        let mut model = PagedModel::new(model, paged)?;
        model.prepare(paged.max_step_tokens)?;
        let metrics = Arc::new(Metrics::default());
        let sched = BatchScheduler::new(model);
        let engine: Arc<dyn Engine> = Arc::new(BatchEngine::start(sched, tok.clone(), cfg.queue, metrics.clone()));
        let model_id = cfg.model.file_stem().map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
        let state = Arc::new(AppState {
            engine,
            tok,
            chat,
            chat_stops,
            ctx,
            model_id,
            created: unix_now(),
            metrics,
            next_id: AtomicU64::new(1),
        });
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let listener = rt.block_on(tokio::net::TcpListener::bind((cfg.host.as_str(), cfg.port)))?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new().name("rlx-serve-http".into()).spawn(move || {
            rt.block_on(serve(listener, state, stopped, cfg.handle_signals))?;
            // Streams still open after the grace period are dropped with the runtime.
            rt.shutdown_timeout(Duration::from_secs(1));
            Ok(())
        })?;
        Ok(Server { addr, stop: Some(stop), thread })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits until the server stops (a signal, when `handle_signals`).
    pub fn wait(mut self) -> Result<(), ServeError> {
        let stop = self.stop.take();
        let r = self.thread.join().map_err(|_| ServeError::Config("the server thread panicked".into()))?;
        drop(stop);
        r
    }

    /// Stops taking requests, cancels those in flight and waits for the server to stop.
    pub fn shutdown(mut self) -> Result<(), ServeError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.wait()
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    state: Shared,
    stopped: oneshot::Receiver<()>,
    signals: bool,
) -> Result<(), ServeError> {
    let engine = state.engine.clone();
    let app = router(state);
    let (down_tx, mut down_rx) = tokio::sync::watch::channel(false);
    let shutdown = async move {
        wait_for_stop(stopped, signals).await;
        // Cancel in-flight work first, so that open streams end and graceful shutdown completes.
        engine.shutdown();
        let _ = down_tx.send(true);
    };
    let server = axum::serve(listener, app).with_graceful_shutdown(shutdown);
    let server = server.into_future();
    tokio::pin!(server);
    tokio::select! {
        r = &mut server => r?,
        _ = async {
            let _ = down_rx.wait_for(|d| *d).await;
            tokio::time::sleep(Duration::from_secs(5)).await;
        } => {}
    }
    Ok(())
}

async fn wait_for_stop(stopped: oneshot::Receiver<()>, signals: bool) {
    if !signals {
        let _ = stopped.await;
        return;
    }
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
            let _ = stopped.await;
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
            _ = stopped => {}
        }
    }
    #[cfg(not(unix))]
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = stopped => {}
    }
}

fn router(state: Shared) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/health", get(|| async { json_response(StatusCode::OK, &json!({"status": "ok"})) }))
        .route("/metrics", get(metrics))
        .layer(middleware::from_fn_with_state(state.clone(), count_requests))
        .with_state(state)
}

/// Counts every response by endpoint and status (unknown paths as `other`).
async fn count_requests(State(s): State<Shared>, req: Request, next: Next) -> Response {
    const KNOWN: [&str; 5] = ["/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics"];
    let path = req.uri().path().to_string();
    let endpoint = KNOWN.iter().find(|&&k| k == path).copied().unwrap_or("other");
    let r = next.run(req).await;
    s.metrics.request(endpoint, r.status().as_u16());
    r
}

fn json_response(status: StatusCode, v: &Value) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

async fn models(State(s): State<Shared>) -> Response {
    let m = json!({"id": s.model_id, "object": "model", "created": s.created, "owned_by": "rlx"});
    json_response(StatusCode::OK, &json!({"object": "list", "data": [m]}))
}

async fn metrics(State(s): State<Shared>) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render()).into_response()
}

async fn completions(State(s): State<Shared>, body: Bytes) -> Response {
    respond(s, body, false).await.unwrap_or_else(IntoResponse::into_response)
}

async fn chat_completions(State(s): State<Shared>, body: Bytes) -> Response {
    respond(s, body, true).await.unwrap_or_else(IntoResponse::into_response)
}

/// Validates and tokenizes a request, submits it, and answers with SSE or one JSON body.
async fn respond(s: Shared, body: Bytes, chat: bool) -> Result<Response, ApiError> {
    let o = api::object(&body)?;
    api::model_name(&o)?;
    let sampling = api::sampling(&o)?;
    let (prompt, mut stop_tokens, mut stop) = if chat {
        let msgs = api::messages(&o)?;
        let text = s.chat.render(&msgs);
        let add_bos = s.tok.add_bos() && !s.chat.has_bos();
        let ids = s.tok.encode_special(&text, add_bos).map_err(|e| ApiError::bad("messages", e.to_string()))?;
        let stops: Vec<String> = s.chat.stop_strings().iter().map(|x| x.to_string()).collect();
        (ids, s.chat_stops.clone(), stops)
    } else {
        let ids = match api::prompt(&o)? {
            Prompt::Text(t) => s.tok.encode(&t).map_err(|e| ApiError::bad("prompt", e.to_string()))?,
            Prompt::Tokens(ids) => ids,
        };
        if let Some(bad) = ids.iter().find(|&&t| t as usize >= s.tok.vocab_size()) {
            return Err(ApiError::bad("prompt", format!("token id {bad} is outside the vocabulary")));
        }
        (ids, vec![], vec![])
    };
    if !sampling.ignore_eos {
        stop_tokens.extend(s.tok.stop_tokens());
    }
    stop.extend(sampling.stop.iter().cloned());
    if prompt.is_empty() {
        return Err(ApiError::bad(if chat { "messages" } else { "prompt" }, "the prompt has no tokens"));
    }
    let room = s.ctx.saturating_sub(prompt.len());
    let too_long = |msg: String| ApiError::BadRequest {
        message: msg,
        param: Some(if chat { "messages" } else { "prompt" }.into()),
        code: Some("context_length_exceeded"),
    };
    if room == 0 {
        return Err(too_long(format!("the prompt has {} tokens; the context is {}", prompt.len(), s.ctx)));
    }
    // OpenAI's defaults: 16 tokens for completions, the rest of the context for chat.
    let max_tokens = sampling.max_tokens.unwrap_or(if chat { room } else { 16.min(room) });
    if max_tokens > room {
        let msg = format!("{} prompt tokens + max_tokens {max_tokens} exceed the context of {}", prompt.len(), s.ctx);
        return Err(too_long(msg));
    }
    let seed = sampling.seed.unwrap_or_else(|| {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
            ^ s.next_id.load(Ordering::Relaxed)
    });
    let sampler = SamplerConfig {
        temperature: sampling.temperature,
        top_k: sampling.top_k,
        top_p: sampling.top_p,
        repetition_penalty: sampling.repetition_penalty,
        repeat_last_n: 64,
        seed,
    };
    let req = GenRequest { prompt, max_tokens, sampler, stop_tokens, stop };
    let rx = s.engine.submit(req).map_err(|e| match e {
        SubmitError::QueueFull(n) => ApiError::QueueFull(n),
        SubmitError::ShuttingDown => ApiError::ShuttingDown,
    })?;
    let n = s.next_id.fetch_add(1, Ordering::Relaxed);
    let id = if chat { format!("chatcmpl-{n}") } else { format!("cmpl-{n}") };
    let shape = Shape { id, created: unix_now(), model: s.model_id.clone(), chat };
    if sampling.stream { Ok(sse(rx, shape, sampling.include_usage)) } else { collect(rx, shape).await }
}

/// Waits for the whole answer. If the client leaves, the handler is dropped with `rx`, which
/// cancels the request.
async fn collect(mut rx: mpsc::UnboundedReceiver<Event>, shape: Shape) -> Result<Response, ApiError> {
    let mut text = String::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Text(t) => text += &t,
            Event::Done { finish, prompt_tokens, completion_tokens } => {
                let body = shape.full(&text, finish.as_str(), prompt_tokens, completion_tokens);
                return Ok(json_response(StatusCode::OK, &body));
            }
            Event::Error(e) => return Err(ApiError::Engine(e)),
        }
    }
    Err(ApiError::Engine("the engine dropped the request".into()))
}

/// The state of one event stream: the engine's events become `data:` lines.
struct Sse {
    rx: mpsc::UnboundedReceiver<Event>,
    shape: Shape,
    include_usage: bool,
    out: VecDeque<String>,
    first: bool,
    done: bool,
}

impl Sse {
    fn data(&mut self, v: &Value) {
        self.out.push_back(format!("data: {v}\n\n"));
    }

    async fn next(&mut self) -> Option<String> {
        loop {
            if let Some(s) = self.out.pop_front() {
                return Some(s);
            }
            if self.done {
                return None;
            }
            match self.rx.recv().await {
                Some(Event::Text(t)) => {
                    let c = self.shape.chunk(Some(&t), None, self.first);
                    self.first = false;
                    self.data(&c);
                }
                Some(Event::Done { finish, prompt_tokens, completion_tokens }) => {
                    let c = self.shape.chunk(None, Some(finish.as_str()), self.first);
                    self.data(&c);
                    if self.include_usage {
                        let u = self.shape.usage_chunk(prompt_tokens, completion_tokens);
                        self.data(&u);
                    }
                    self.out.push_back("data: [DONE]\n\n".into());
                    self.done = true;
                }
                Some(Event::Error(e)) => {
                    // The status line is sent already: the error goes in the stream.
                    let body = ApiError::Engine(e).body();
                    self.data(&body);
                    self.done = true;
                }
                None => {
                    let body = ApiError::Engine("the engine dropped the request".into()).body();
                    self.data(&body);
                    self.done = true;
                }
            }
        }
    }
}

/// A `text/event-stream` response. When the client disconnects, hyper drops the body, and with
/// it `rx`: the engine sees the closed channel at its next token and cancels.
fn sse(rx: mpsc::UnboundedReceiver<Event>, shape: Shape, include_usage: bool) -> Response {
    let st = Sse { rx, shape, include_usage, out: VecDeque::new(), first: true, done: false };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        let s = st.next().await?;
        Some((Ok::<_, Infallible>(s), st))
    });
    let headers = [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")];
    (StatusCode::OK, headers, Body::from_stream(stream)).into_response()
}
