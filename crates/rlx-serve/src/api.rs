//! The OpenAI request bodies, read field by field from JSON so that each wrong field gets a 400
//! naming it (a typed extractor would answer 422 with serde's message), and the response bodies.

use crate::chat::Message;
use crate::error::ApiError;
use serde_json::{Map, Value, json};

/// The fields both endpoints share.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// `max_tokens` (or `max_completion_tokens`); `None`: the endpoint's default.
    pub max_tokens: Option<usize>,
    /// 0..=2; 0 is greedy.
    pub temperature: f32,
    /// (0, 1].
    pub top_p: f32,
    /// 0: off (an extension, as llama.cpp and vLLM take it).
    pub top_k: usize,
    /// The sampler's seed; `None`: a fresh one per request.
    pub seed: Option<u64>,
    /// Stop strings.
    pub stop: Vec<String>,
    /// llama.cpp's repetition penalty (an extension); 1: off.
    pub repetition_penalty: f32,
    /// `stream`.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// Generate past the model's end-of-text tokens (an extension, as llama.cpp's server and
    /// vLLM take it: benchmarks that need a fixed length).
    pub ignore_eos: bool,
}

/// What a completion request asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Text to tokenize.
    Text(String),
    /// Token ids as given.
    Tokens(Vec<u32>),
}

/// The most tokens one request may ask for; larger values are a 400 before the context check.
const MAX_TOKENS_LIMIT: u64 = 1 << 20;

/// Parses a body as a JSON object.
pub fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::bad_body("the request body must be a JSON object")),
        Err(e) => Err(ApiError::bad_body(format!("the request body is not valid JSON: {e}"))),
    }
}

fn number(o: &Map<String, Value>, k: &str) -> Result<Option<f64>, ApiError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            n.as_f64().map(Some).ok_or_else(|| ApiError::bad(k, format!("`{k}` is not a number")))
        }
        Some(v) => Err(ApiError::bad(k, format!("`{k}` must be a number, got {v}"))),
    }
}

fn integer(o: &Map<String, Value>, k: &str) -> Result<Option<u64>, ApiError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
        Some(v) => Err(ApiError::bad(k, format!("`{k}` must be a non-negative integer, got {v}"))),
    }
}

fn boolean(o: &Map<String, Value>, k: &str) -> Result<bool, ApiError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(ApiError::bad(k, format!("`{k}` must be a boolean, got {v}"))),
    }
}

fn in_range(k: &str, v: Option<f64>, default: f64, lo: f64, hi: f64, lo_open: bool) -> Result<f32, ApiError> {
    let x = v.unwrap_or(default);
    let ok = x.is_finite() && (if lo_open { x > lo } else { x >= lo }) && x <= hi;
    let open = if lo_open { "(" } else { "[" };
    if ok { Ok(x as f32) } else { Err(ApiError::bad(k, format!("`{k}` must be in {open}{lo}, {hi}], got {x}"))) }
}

/// Reads the sampling fields; rejects `n` other than 1 and options the sampler does not have.
pub fn sampling(o: &Map<String, Value>) -> Result<Sampling, ApiError> {
    if let Some(n) = number(o, "n")?
        && n != 1.0
    {
        return Err(ApiError::bad("n", format!("only n = 1 is supported, got {n}")));
    }
    for k in ["presence_penalty", "frequency_penalty"] {
        if number(o, k)?.is_some_and(|x| x != 0.0) {
            return Err(ApiError::bad(k, format!("`{k}` is not supported; use `repetition_penalty` (1 is off)")));
        }
    }
    if o.get("logprobs").is_some_and(|v| !matches!(v, Value::Null | Value::Bool(false))) {
        return Err(ApiError::bad("logprobs", "`logprobs` is not supported"));
    }
    let mut max_tokens = None;
    for k in ["max_tokens", "max_completion_tokens"] {
        if let Some(v) = o.get(k).filter(|v| !v.is_null()) {
            let n = v.as_i64().ok_or_else(|| ApiError::bad(k, format!("`{k}` must be an integer, got {v}")))?;
            if n < 1 || n as u64 > MAX_TOKENS_LIMIT {
                return Err(ApiError::bad(k, format!("`{k}` must be in [1, {MAX_TOKENS_LIMIT}], got {n}")));
            }
            max_tokens = Some(n as usize);
        }
    }
    let stop = match o.get("stop") {
        None | Some(Value::Null) => vec![],
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) if a.len() <= 16 => a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ApiError::bad("stop", "`stop` must be a string or a list of strings"))?,
        Some(_) => return Err(ApiError::bad("stop", "`stop` must be a string or a list of at most 16 strings")),
    };
    let include_usage = match o.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(so)) => boolean(so, "include_usage").map_err(|_| {
            ApiError::bad("stream_options.include_usage", "`stream_options.include_usage` must be a boolean")
        })?,
        Some(_) => return Err(ApiError::bad("stream_options", "`stream_options` must be an object")),
    };
    let top_k = integer(o, "top_k")?.unwrap_or(0);
    Ok(Sampling {
        max_tokens,
        temperature: in_range("temperature", number(o, "temperature")?, 1.0, 0.0, 2.0, false)?,
        top_p: in_range("top_p", number(o, "top_p")?, 1.0, 0.0, 1.0, true)?,
        top_k: usize::try_from(top_k).unwrap_or(usize::MAX),
        seed: match o.get("seed") {
            None | Some(Value::Null) => None,
            // OpenAI seeds are signed 64-bit; the bits are the seed.
            Some(Value::Number(n)) if n.as_i64().is_some() => n.as_i64().map(|s| s as u64),
            Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64(),
            Some(v) => return Err(ApiError::bad("seed", format!("`seed` must be an integer, got {v}"))),
        },
        stop,
        repetition_penalty: in_range("repetition_penalty", number(o, "repetition_penalty")?, 1.0, 0.0, 10.0, true)?,
        stream: boolean(o, "stream")?,
        include_usage,
        ignore_eos: boolean(o, "ignore_eos")?,
    })
}

/// Reads `model`, which may be absent (one model is served) but must be a string if present.
pub fn model_name(o: &Map<String, Value>) -> Result<(), ApiError> {
    match o.get("model") {
        None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
        Some(v) => Err(ApiError::bad("model", format!("`model` must be a string, got {v}"))),
    }
}

/// Reads `prompt`: a string, a list of one string, or a list of token ids.
pub fn prompt(o: &Map<String, Value>) -> Result<Prompt, ApiError> {
    let bad = || ApiError::bad("prompt", "`prompt` must be a string, a list of one string, or a list of token ids");
    match o.get("prompt") {
        None => Err(ApiError::bad("prompt", "`prompt` is required")),
        Some(Value::String(s)) => Ok(Prompt::Text(s.clone())),
        Some(Value::Array(a)) => match a.as_slice() {
            [Value::String(s)] => Ok(Prompt::Text(s.clone())),
            [Value::String(_), ..] => Err(ApiError::bad("prompt", "several prompts in one request are not supported")),
            ids => ids
                .iter()
                .map(|v| v.as_u64().and_then(|x| u32::try_from(x).ok()))
                .collect::<Option<Vec<u32>>>()
                .map(Prompt::Tokens)
                .ok_or_else(bad),
        },
        Some(_) => Err(bad()),
    }
}

/// Reads `messages`: objects with a string `role` and a `content` that is a string, null, or a
/// list of `{"type": "text", "text": ...}` parts.
pub fn messages(o: &Map<String, Value>) -> Result<Vec<Message>, ApiError> {
    let Some(Value::Array(a)) = o.get("messages") else {
        return Err(ApiError::bad("messages", "`messages` must be a list of messages"));
    };
    if a.is_empty() {
        return Err(ApiError::bad("messages", "`messages` is empty"));
    }
    a.iter()
        .enumerate()
        .map(|(i, m)| {
            let p = format!("messages[{i}]");
            let role =
                m.get("role").and_then(Value::as_str).ok_or_else(|| ApiError::bad(&p, "`role` must be a string"))?;
            let content = match m.get("content") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .map(|part| {
                        match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
                            (Some("text"), Some(t)) => Ok(t),
                            _ => Err(ApiError::bad(&p, "only text content parts are supported")),
                        }
                    })
                    .collect::<Result<String, _>>()?,
                Some(_) => return Err(ApiError::bad(&p, "`content` must be a string or a list of text parts")),
            };
            Ok(Message { role: role.to_string(), content })
        })
        .collect()
}

/// `usage`.
pub fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

/// The shape of one endpoint's responses.
#[derive(Debug, Clone)]
pub struct Shape {
    /// `cmpl-...` or `chatcmpl-...`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The served model's id.
    pub model: String,
    /// Chat (`message` / `delta`) or completion (`text`).
    pub chat: bool,
}

impl Shape {
    /// A streamed chunk holding `text` (and the finish reason on the last one).
    pub fn chunk(&self, text: Option<&str>, finish: Option<&str>, first: bool) -> Value {
        let choice = if self.chat {
            let mut delta = Map::new();
            if first {
                delta.insert("role".into(), "assistant".into());
            }
            if let Some(t) = text {
                delta.insert("content".into(), t.into());
            }
            json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
        } else {
            json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish})
        };
        self.wrap(vec![choice], if self.chat { "chat.completion.chunk" } else { "text_completion" })
    }

    /// The final usage chunk of a stream with `include_usage` (no choices).
    pub fn usage_chunk(&self, prompt: usize, completion: usize) -> Value {
        let mut v = self.wrap(vec![], if self.chat { "chat.completion.chunk" } else { "text_completion" });
        v["usage"] = usage(prompt, completion);
        v
    }

    /// The whole response when not streaming.
    pub fn full(&self, text: &str, finish: &str, prompt: usize, completion: usize) -> Value {
        let (choice, object) = if self.chat {
            let msg = json!({"role": "assistant", "content": text});
            (json!({"index": 0, "message": msg, "logprobs": null, "finish_reason": finish}), "chat.completion")
        } else {
            (json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish}), "text_completion")
        };
        let mut v = self.wrap(vec![choice], object);
        v["usage"] = usage(prompt, completion);
        v
    }

    fn wrap(&self, choices: Vec<Value>, object: &str) -> Value {
        json!({"id": self.id, "object": object, "created": self.created, "model": self.model, "choices": choices})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(s: &str) -> Map<String, Value> {
        object(s.as_bytes()).unwrap()
    }

    #[test]
    fn sampling_fields_are_read_and_checked() {
        let s = sampling(&obj(r#"{"max_tokens": 5, "temperature": 0, "stop": ["a", "b"], "seed": -1}"#)).unwrap();
        assert_eq!((s.max_tokens, s.temperature, s.seed), (Some(5), 0.0, Some(u64::MAX)));
        assert_eq!(s.stop, vec!["a", "b"]);
        for bad in [
            r#"{"n": 2}"#,
            r#"{"max_tokens": -1}"#,
            r#"{"max_tokens": 0}"#,
            r#"{"max_tokens": "5"}"#,
            r#"{"max_tokens": 1e12}"#,
            r#"{"temperature": 3}"#,
            r#"{"top_p": 0}"#,
            r#"{"stop": 3}"#,
            r#"{"stream": "yes"}"#,
            r#"{"presence_penalty": 0.5}"#,
        ] {
            assert!(sampling(&obj(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn prompts_and_messages_take_their_openai_forms() {
        assert_eq!(prompt(&obj(r#"{"prompt": ["hi"]}"#)).unwrap(), Prompt::Text("hi".into()));
        assert_eq!(prompt(&obj(r#"{"prompt": [1, 2]}"#)).unwrap(), Prompt::Tokens(vec![1, 2]));
        assert!(prompt(&obj(r#"{"prompt": 7}"#)).is_err());
        assert!(prompt(&obj(r#"{"prompt": ["a", "b"]}"#)).is_err());
        let m = messages(&obj(r#"{"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}"#));
        assert_eq!(m.unwrap()[0].content, "x");
        assert!(messages(&obj(r#"{"messages": [{"content": "x"}]}"#)).is_err());
        assert!(object(b"[1]").is_err() && object(b"{").is_err());
    }
}
