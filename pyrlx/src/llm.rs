//! Text generation from Python: `rlx.models.LLM(path).generate(prompt)` streams text pieces from
//! a Qwen3 / Llama model, a GGUF file or a Hugging Face checkpoint folder
//! (`rlx::models::LlmModel`), one model step per `__next__`.

use crate::errors::{IntoPy, guard};
use crate::session::device_arg;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use rlx::driver::Device;
use rlx::models::{LlmModel, LlmTokenizer, LoadOptions, Sampler, SamplerConfig, load_tokenizer};
use std::path::PathBuf;
use std::sync::Mutex;

/// Cache slots of a model loaded without `ctx` (grown, by reloading, when a generation needs
/// more).
const INITIAL_CTX: usize = 128;

/// The loaded model and the id of the generation whose sequence its cache holds.
struct Slot {
    model: LlmModel,
    run: u64,
}

/// A Qwen3 / Llama model from a GGUF file or a Hugging Face checkpoint folder, with its own
/// tokenizer.
#[pyclass(name = "LLM", module = "rlx.models", frozen)]
pub struct PyLlm {
    path: PathBuf,
    device: Device,
    tok: Box<dyn LlmTokenizer>,
    vocab: usize,
    context_length: usize,
    fixed_ctx: Option<usize>,
    kv_dtype: Option<rlx::ir::DType>,
    quantize: Option<rlx::gguf::GgmlType>,
    slot: Mutex<Slot>,
    batch: Mutex<Option<crate::llm_batch::BatchSlot>>,
}

/// The model in `path` with `ctx` cache slots, its cache in `kv_dtype` (else the device's default),
/// its float weights quantized to `quantize` when given.
fn load(
    path: &std::path::Path,
    device: Device,
    ctx: usize,
    kv_dtype: Option<rlx::ir::DType>,
    quantize: Option<rlx::gguf::GgmlType>,
) -> rlx::ir::Result<LlmModel> {
    let m = LlmModel::load_with(path, device, ctx, &LoadOptions { quantize })?;
    match kv_dtype {
        Some(dt) => m.with_kv_dtype(dt),
        None => Ok(m),
    }
}

impl PyLlm {
    /// Token ids from Python ints, each checked against the vocabulary.
    fn ids(&self, ids: Vec<i64>) -> PyResult<Vec<u32>> {
        ids.into_iter()
            .map(|t| match u32::try_from(t) {
                Ok(u) if (u as usize) < self.vocab => Ok(u),
                _ => Err(PyValueError::new_err(format!("token id {t} is outside the vocabulary 0..{}", self.vocab))),
            })
            .collect()
    }

    /// The context a load for `need` tokens gets: the fixed `ctx`, else the next power of two
    /// (at least 256, at most the model's).
    pub(crate) fn ctx_for(&self, need: usize) -> usize {
        self.fixed_ctx.unwrap_or_else(|| need.next_power_of_two().max(256).min(self.context_length).max(need))
    }

    /// A fresh model with `ctx` cache slots, as this one was loaded.
    pub(crate) fn load_model(&self, ctx: usize) -> rlx::ir::Result<LlmModel> {
        load(&self.path, self.device, ctx, self.kv_dtype, self.quantize)
    }

    /// The text of checked token ids.
    pub(crate) fn detokenize_ids(&self, ids: &[u32]) -> String {
        self.tok.decode(ids)
    }

    /// A prompt (text, or a list of token ids) as checked, non-empty token ids.
    pub(crate) fn prompt_ids(&self, prompt: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
        let ids = match prompt.extract::<String>() {
            Ok(text) => self.tokenize(&text)?,
            Err(_) => self.ids(
                prompt
                    .extract::<Vec<i64>>()
                    .map_err(|_| PyValueError::new_err("prompt must be a str or a list of token ids"))?,
            )?,
        };
        if ids.is_empty() {
            return Err(PyValueError::new_err("the prompt is empty: give at least one token"));
        }
        Ok(ids)
    }

    /// Makes sure the cache holds `need` tokens, reloading the model with a larger context
    /// (next power of two, at least 256, at most the model's) when it does not.
    fn ensure_ctx(&self, slot: &mut Slot, need: usize) -> PyResult<()> {
        if need <= slot.model.max_ctx() {
            return Ok(());
        }
        let ctx = self.ctx_for(need);
        slot.model = guard("LLM", || self.load_model(ctx).py())?;
        Ok(())
    }
}

#[pymethods]
impl PyLlm {
    /// Loads the model in `path` (a `.gguf` file or a Hugging Face checkpoint folder) for
    /// `device` (checks every weight up front). `threads`
    /// sets the process-wide CPU thread pool size, which is fixed once RLX first computes;
    /// `ctx` fixes the cache size in tokens (default: grown as generation needs it, which
    /// reloads the weights once per growth); `kv_dtype` keeps the cache in "f16" (the CPU's
    /// default, as llama.cpp's), "bf16" or "f32"; `quantize` ("q8_0" or "q4_k") quantizes the
    /// float weights on load.
    #[new]
    #[pyo3(signature = (path, device = "cpu", threads = None, ctx = None, kv_dtype = None, quantize = None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        device: &str,
        threads: Option<i64>,
        ctx: Option<i64>,
        kv_dtype: Option<&str>,
        quantize: Option<&str>,
    ) -> PyResult<Self> {
        let quantize = match quantize {
            None => None,
            Some("q8_0") => Some(rlx::gguf::GgmlType::Q8_0),
            Some("q4_k") => Some(rlx::gguf::GgmlType::Q4_K),
            Some(other) => {
                return Err(PyValueError::new_err(format!("quantize must be \"q8_0\" or \"q4_k\", got {other:?}")));
            }
        };
        let d = device_arg(device)?;
        let kv_dtype = match kv_dtype {
            None => None,
            Some("f32") => Some(rlx::ir::DType::F32),
            Some("f16") => Some(rlx::ir::DType::F16),
            Some("bf16") => Some(rlx::ir::DType::BF16),
            Some(other) => {
                return Err(PyValueError::new_err(format!(
                    "kv_dtype must be \"f32\", \"f16\" or \"bf16\", got {other:?}"
                )));
            }
        };
        if let Some(n) = threads {
            set_threads(n)?;
        }
        let fixed_ctx = match ctx {
            Some(c) if c < 1 => return Err(PyValueError::new_err(format!("ctx must be >= 1, got {c}"))),
            c => c.map(|c| c as usize),
        };
        let (tok, model) = py.detach(|| {
            guard("LLM", || {
                let tok = load_tokenizer(&path).py()?;
                let model = load(&path, d, fixed_ctx.unwrap_or(INITIAL_CTX), kv_dtype, quantize).py()?;
                Ok((tok, model))
            })
        })?;
        if let Some(why) = d.unavailable_reason() {
            return Err(PyRuntimeError::new_err(format!("device `{device}` is not available: {why}")));
        }
        let context_length = model.config().context_length;
        let vocab = model.config().vocab_size.min(tok.vocab_size());
        if let Some(c) = fixed_ctx
            && c > context_length
        {
            return Err(PyValueError::new_err(format!("ctx {c} exceeds the model's context length {context_length}")));
        }
        let slot = Mutex::new(Slot { model, run: 0 });
        Ok(PyLlm {
            path,
            device: d,
            tok,
            vocab,
            context_length,
            fixed_ctx,
            kv_dtype,
            quantize,
            slot,
            batch: Mutex::new(None),
        })
    }

    /// The number of token ids.
    #[getter]
    fn vocab_size(&self) -> usize {
        self.vocab
    }

    /// The longest sequence (prompt and generated tokens) the model was trained for.
    #[getter]
    fn context_length(&self) -> usize {
        self.context_length
    }

    /// The end-of-sequence token id, if the model has one.
    #[getter]
    fn eos_token(&self) -> Option<u32> {
        self.tok.eos()
    }

    /// Token ids of `text` with the model's tokenizer (BOS first when the model adds one).
    fn tokenize(&self, text: &str) -> PyResult<Vec<u32>> {
        guard("tokenize", || self.tok.encode(text).map_err(|e| PyValueError::new_err(e.to_string())))
    }

    /// The text of `ids` (control tokens such as BOS/EOS give nothing; invalid UTF-8 becomes
    /// U+FFFD).
    fn detokenize(&self, ids: Vec<i64>) -> PyResult<String> {
        let ids = self.ids(ids)?;
        Ok(self.tok.decode(&ids))
    }

    /// Streams the continuation of `prompt` (text, or a list of token ids) as text pieces.
    /// Lazy: each `next()` runs the model until new text is complete (one token, or more for a
    /// character split across tokens). `temperature=0` is greedy; `seed` makes sampling
    /// reproducible. Stops at the end-of-sequence token (unless `ignore_eos`), at any token id
    /// or text in `stop` (the text stops before the stop string), or after `max_tokens`.
    #[pyo3(signature = (prompt, max_tokens = 256, temperature = 0.0, top_k = None, top_p = None,
        repeat_penalty = None, seed = 0, stop = None, ignore_eos = false))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        slf: Bound<'_, Self>,
        prompt: &Bound<'_, PyAny>,
        max_tokens: i64,
        temperature: f64,
        top_k: Option<i64>,
        top_p: Option<f64>,
        repeat_penalty: Option<f64>,
        seed: i64,
        stop: Option<&Bound<'_, PyAny>>,
        ignore_eos: bool,
    ) -> PyResult<PyGeneration> {
        let me = slf.get();
        let bad = |m: String| Err(PyValueError::new_err(m));
        let prompt_ids = me.prompt_ids(prompt)?;
        let cfg = sampler_config(max_tokens, temperature, top_k, top_p, repeat_penalty, seed)?;
        let sampler = Sampler::new(cfg).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let max_tokens = max_tokens as usize;
        let need = prompt_ids.len() + max_tokens;
        let limit = me.fixed_ctx.unwrap_or(me.context_length);
        if need > limit {
            return bad(format!(
                "{} prompt tokens + {max_tokens} new tokens exceed the context of {limit}",
                prompt_ids.len()
            ));
        }
        let (mut stop_tokens, mut stop_text) = (vec![], vec![]);
        if let Some(s) = stop {
            let items: Vec<Bound<'_, PyAny>> = match s.extract::<String>() {
                Ok(_) => vec![s.clone()],
                Err(_) => {
                    s.extract().map_err(|_| PyValueError::new_err("stop must be a str or a list of str / int"))?
                }
            };
            for it in items {
                if let Ok(t) = it.extract::<String>() {
                    if t.is_empty() {
                        return bad("a stop string must not be empty".into());
                    }
                    stop_text.push(t);
                } else if let Ok(id) = it.extract::<i64>() {
                    stop_tokens.extend(me.ids(vec![id])?);
                } else {
                    return bad("stop must be a str or a list of str / int".into());
                }
            }
        }
        if !ignore_eos {
            stop_tokens.extend(me.tok.stop_tokens());
        }
        Ok(PyGeneration {
            llm: slf.clone().unbind(),
            run: 0,
            sampler,
            history: prompt_ids.clone(),
            prompt: prompt_ids,
            tokens: vec![],
            bytes: vec![],
            logits: None,
            max_tokens,
            stop_tokens,
            stop_text,
            emitted: 0,
            finish: None,
            done: false,
        })
    }

    /// Generates from every prompt at once (continuous batching over a paged KV cache: up to
    /// `max_batch` sequences per forward step, new ones joining as others finish) and returns,
    /// per prompt, a dict with `text`, `tokens` and `finish_reason`. Sequence `i` samples with
    /// seed `seed + i`; greedy results equal `generate`'s. `stop` takes token ids here (stop
    /// strings need `generate`, which streams).
    #[pyo3(signature = (prompts, max_tokens = 256, temperature = 0.0, top_k = None, top_p = None,
        repeat_penalty = None, seed = 0, stop = None, ignore_eos = false, max_batch = 8))]
    #[allow(clippy::too_many_arguments)]
    fn generate_batch<'py>(
        &self,
        py: Python<'py>,
        prompts: Vec<Bound<'py, PyAny>>,
        max_tokens: i64,
        temperature: f64,
        top_k: Option<i64>,
        top_p: Option<f64>,
        repeat_penalty: Option<f64>,
        seed: i64,
        stop: Option<Vec<i64>>,
        ignore_eos: bool,
        max_batch: i64,
    ) -> PyResult<Vec<Bound<'py, pyo3::types::PyDict>>> {
        let ids = prompts.iter().map(|p| self.prompt_ids(p)).collect::<PyResult<Vec<_>>>()?;
        let cfg = sampler_config(max_tokens, temperature, top_k, top_p, repeat_penalty, seed)?;
        if max_batch < 1 {
            return Err(PyValueError::new_err(format!("max_batch must be >= 1, got {max_batch}")));
        }
        let max_tokens = max_tokens as usize;
        let limit = self.fixed_ctx.unwrap_or(self.context_length);
        if let Some(p) = ids.iter().find(|p| p.len() + max_tokens > limit) {
            return Err(PyValueError::new_err(format!(
                "{} prompt tokens + {max_tokens} new tokens exceed the context of {limit}",
                p.len()
            )));
        }
        let mut stop_tokens = self.ids(stop.unwrap_or_default())?;
        if !ignore_eos {
            stop_tokens.extend(self.tok.stop_tokens());
        }
        if max_tokens == 0 || ids.is_empty() {
            let empty = ids.iter().map(|_| (String::new(), vec![], "length")).collect::<Vec<_>>();
            return empty.into_iter().map(|r| result_dict(py, r)).collect();
        }
        let out = py.detach(|| {
            guard("generate_batch", || {
                let mut slot =
                    self.batch.lock().map_err(|_| PyRuntimeError::new_err("the model's lock is poisoned"))?;
                crate::llm_batch::run(self, &mut slot, &ids, max_tokens, &cfg, &stop_tokens, max_batch as usize).py()
            })
        })?;
        out.into_iter().map(|r| result_dict(py, r)).collect()
    }
}

/// Sampling settings from `generate`'s arguments, checked.
pub(crate) fn sampler_config(
    max_tokens: i64,
    temperature: f64,
    top_k: Option<i64>,
    top_p: Option<f64>,
    repeat_penalty: Option<f64>,
    seed: i64,
) -> PyResult<SamplerConfig> {
    let bad = |m: String| Err(PyValueError::new_err(m));
    if max_tokens < 0 {
        return bad(format!("max_tokens must be >= 0, got {max_tokens}"));
    }
    if seed < 0 {
        return bad(format!("seed must be >= 0, got {seed}"));
    }
    if top_k.is_some_and(|k| k < 0) {
        return bad(format!("top_k must be >= 0, got {}", top_k.unwrap_or(0)));
    }
    let cfg = SamplerConfig {
        temperature: temperature as f32,
        top_k: top_k.unwrap_or(0) as usize,
        top_p: top_p.unwrap_or(1.0) as f32,
        repetition_penalty: repeat_penalty.unwrap_or(1.0) as f32,
        repeat_last_n: 64,
        seed: seed as u64,
    };
    cfg.validate().map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(cfg)
}

/// `{"text", "tokens", "finish_reason"}` of one batch result.
fn result_dict(
    py: Python<'_>,
    (text, tokens, finish): crate::llm_batch::BatchResult,
) -> PyResult<Bound<'_, pyo3::types::PyDict>> {
    let d = pyo3::types::PyDict::new(py);
    d.set_item("text", text)?;
    d.set_item("tokens", tokens)?;
    d.set_item("finish_reason", finish)?;
    Ok(d)
}

/// Sets the CPU pool size through `RLX_NUM_THREADS`; an error if the pool already runs another.
fn set_threads(n: i64) -> PyResult<()> {
    if n < 1 {
        return Err(PyValueError::new_err(format!("threads must be >= 1, got {n}")));
    }
    if std::env::var("RLX_NUM_THREADS").ok().as_deref() != Some(&n.to_string()) {
        // SAFETY: called with the GIL held; RLX reads the variable once, on first use.
        unsafe { std::env::set_var("RLX_NUM_THREADS", n.to_string()) };
    }
    // The CPU backend reports its pool size through the Session; it is fixed on first use.
    let Some(have) = rlx::runtime::Session::new(Device::Cpu).threads() else {
        return Err(PyValueError::new_err("this build's CPU backend has no thread pool to size"));
    };
    if have != n as usize {
        let msg =
            format!("the CPU thread pool already runs {have} threads (fixed per process on first use); cannot use {n}");
        return Err(PyValueError::new_err(msg));
    }
    Ok(())
}

/// A running generation: iterate it for text pieces; `tokens` and `finish_reason` tell what
/// was generated. A later `generate` on the same model that starts running invalidates it.
#[pyclass(name = "Generation", module = "rlx.models")]
pub struct PyGeneration {
    llm: Py<PyLlm>,
    run: u64,
    sampler: Sampler,
    history: Vec<u32>,
    prompt: Vec<u32>,
    tokens: Vec<u32>,
    bytes: Vec<u8>,
    logits: Option<Vec<f32>>,
    max_tokens: usize,
    stop_tokens: Vec<u32>,
    stop_text: Vec<String>,
    emitted: usize,
    finish: Option<&'static str>,
    done: bool,
}

impl PyGeneration {
    /// Picks the next token (prefilling first); sets `finish` at a stop token or `max_tokens`.
    fn step(&mut self, llm: &PyLlm) -> PyResult<()> {
        if self.tokens.len() >= self.max_tokens {
            self.finish = Some("length");
            return Ok(());
        }
        let mut slot = llm.slot.lock().unwrap_or_else(|e| e.into_inner());
        if self.logits.is_some() && slot.run != self.run {
            return Err(PyRuntimeError::new_err(
                "this generation was invalidated: a later generate() on the same LLM reused its cache",
            ));
        }
        let logits = match self.logits.take() {
            Some(l) => l,
            None => {
                llm.ensure_ctx(&mut slot, self.prompt.len() + self.max_tokens)?;
                slot.run += 1;
                self.run = slot.run;
                let (model, prompt) = (&mut slot.model, &self.prompt);
                guard("generate", || model.prefill(std::slice::from_ref(prompt)).py())?.remove(0)
            }
        };
        let t = guard("generate", || self.sampler.sample(&logits, &self.history).py())?;
        if self.stop_tokens.contains(&t) {
            self.finish = Some("stop");
            return Ok(());
        }
        self.tokens.push(t);
        self.history.push(t);
        self.bytes.extend(llm.tok.piece_bytes(t));
        if self.tokens.len() == self.max_tokens {
            self.finish = Some("length");
            return Ok(());
        }
        let model = &mut slot.model;
        self.logits = Some(guard("generate", || model.decode(&[t]).py())?.remove(0));
        Ok(())
    }

    /// New text ready to hand out, holding back an incomplete UTF-8 character or a possible
    /// start of a stop string until generation ends.
    fn take_text(&mut self, llm: &PyLlm) -> PyResult<Option<String>> {
        let ended = self.finish.is_some();
        let incomplete = ends_mid_char(&self.bytes);
        if incomplete && !ended {
            return Ok(None);
        }
        let full = llm.tok.decode(&self.tokens);
        if !full.is_char_boundary(self.emitted.min(full.len())) || full.len() < self.emitted {
            return Err(PyRuntimeError::new_err("internal error in generate: the streamed text is not a prefix"));
        }
        let hit = self.stop_text.iter().filter_map(|s| full.find(s.as_str())).min();
        let end = if let Some(i) = hit {
            self.finish = Some("stop");
            i.max(self.emitted)
        } else if ended {
            full.len()
        } else {
            let held = (1..full.len().min(self.max_stop_len()) + 1)
                .rev()
                .find(|&k| {
                    full.is_char_boundary(full.len() - k)
                        && self.stop_text.iter().any(|s| s.starts_with(&full[full.len() - k..]))
                })
                .unwrap_or(0);
            full.len() - held
        };
        let out = full[self.emitted..end].to_string();
        self.emitted = end;
        Ok(Some(out).filter(|s| !s.is_empty()))
    }

    fn max_stop_len(&self) -> usize {
        self.stop_text.iter().map(String::len).max().unwrap_or(0)
    }
}

/// Whether `b` ends inside a UTF-8 character that later bytes may complete.
fn ends_mid_char(b: &[u8]) -> bool {
    let from = b.len().saturating_sub(4);
    let lead = (from..b.len()).rev().find(|&i| b[i] & 0xC0 != 0x80);
    lead.is_some_and(|i| matches!(std::str::from_utf8(&b[i..]), Err(e) if e.error_len().is_none()))
}

#[pymethods]
impl PyGeneration {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<String>> {
        let llm = self.llm.clone_ref(py);
        let llm = llm.get();
        py.detach(|| {
            while !self.done {
                // After an error the generation is over: its cache state is unknown.
                let text = if self.finish.is_none() { self.step(llm) } else { Ok(()) }
                    .and_then(|()| self.take_text(llm))
                    .inspect_err(|_| self.done = true)?;
                if self.finish.is_some() {
                    self.done = true;
                }
                if text.is_some() {
                    return Ok(text);
                }
            }
            Ok(None)
        })
    }

    /// The token ids generated so far (a stop token is not included).
    #[getter]
    fn tokens(&self) -> Vec<u32> {
        self.tokens.clone()
    }

    /// The prompt's token ids.
    #[getter]
    fn prompt_tokens(&self) -> Vec<u32> {
        self.prompt.clone()
    }

    /// Why generation ended: "stop" (a stop token or string), "length" (max_tokens), or None
    /// while it runs.
    #[getter]
    fn finish_reason(&self) -> Option<&'static str> {
        if self.done { self.finish } else { None }
    }
}
