//! The tokenizer embedded in a GGUF file, as llama.cpp reads it: byte-level BPE with ranked
//! merges and a regex pre-tokenizer (`tokenizer.ggml.model = gpt2`: Qwen, Llama 3) or
//! SentencePiece-style score merges with byte fallback (`llama`: Llama 1/2, Mistral).

use rlx_gguf::{Array, Gguf, Value};
use rlx_ir::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// llama.cpp's token types.
const CONTROL: i32 = 3;
const BYTE: i32 = 6;

/// The pre-tokenizer regexes of llama.cpp's `tokenizer.ggml.pre` values.
fn pre_regex(pre: &str) -> Option<&'static str> {
    const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
    match pre {
        "qwen2" | "deepseek-r1-qwen" => Some(QWEN2),
        "llama3" | "llama-bpe" | "llama-v3" | "smaug-bpe" => Some(LLAMA3),
        "gpt2" | "gpt-2" => Some(GPT2),
        _ => None,
    }
}

/// The compiled regex of a pattern of `pre_regex`: compiled once per process, as compiling one
/// takes longer than reading a whole vocabulary.
fn compiled(pattern: &'static str) -> std::result::Result<Arc<fancy_regex::Regex>, String> {
    static CACHE: OnceLock<Mutex<HashMap<&'static str, Arc<fancy_regex::Regex>>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(r) = cache.get(pattern) {
        return Ok(r.clone());
    }
    let r = Arc::new(fancy_regex::Regex::new(pattern).map_err(|e| e.to_string())?);
    cache.insert(pattern, r.clone());
    Ok(r)
}

/// GPT-2's printable stand-in for each byte.
fn byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable = (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        out[b as usize] = if printable {
            char::from_u32(b).expect("latin-1")
        } else {
            n += 1;
            char::from_u32(255 + n).expect("valid")
        };
    }
    out
}

enum Kind {
    Bpe {
        ranks: HashMap<(String, String), usize>,
        regex: Arc<fancy_regex::Regex>,
        byte_char: Box<[char; 256]>,
        char_byte: HashMap<char, u8>,
    },
    Spm {
        scores: Vec<f32>,
        add_space_prefix: bool,
    },
}

/// A GGUF tokenizer: encode text to ids and decode ids to text.
pub struct GgufTokenizer {
    tokens: Vec<String>,
    types: Vec<i32>,
    ids: HashMap<String, u32>,
    kind: Kind,
    /// The beginning-of-sequence token.
    pub bos: Option<u32>,
    /// The end-of-sequence token.
    pub eos: Option<u32>,
    /// Whether `encode` starts with `bos` (`tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
    /// The Jinja chat template (`tokenizer.chat_template`), if the file has one.
    pub chat_template: Option<String>,
}

impl std::fmt::Debug for GgufTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            Kind::Bpe { .. } => "gpt2",
            Kind::Spm { .. } => "llama",
        };
        f.debug_struct("GgufTokenizer").field("kind", &kind).field("vocab", &self.tokens.len()).finish()
    }
}

fn strings(v: Option<&Value>) -> Option<&Vec<String>> {
    match v {
        Some(Value::Array(Array::String(s))) => Some(s),
        _ => None,
    }
}

impl GgufTokenizer {
    /// Reads the `tokenizer.ggml.*` metadata; `path` names the file in errors.
    pub fn from_gguf(g: &Gguf, path: &str) -> Result<Self> {
        let err = |r: String| Error::ModelFile { path: path.into(), reason: r };
        let model = g.get("tokenizer.ggml.model").and_then(Value::as_str).unwrap_or("");
        let tokens = strings(g.get("tokenizer.ggml.tokens"))
            .ok_or_else(|| err("metadata `tokenizer.ggml.tokens` is missing or not a string array".into()))?
            .clone();
        let types: Vec<i32> = match g.get("tokenizer.ggml.token_type") {
            Some(Value::Array(Array::I32(t))) if t.len() == tokens.len() => t.clone(),
            None => vec![1; tokens.len()],
            Some(v) => return Err(err(format!("`tokenizer.ggml.token_type` is not {} i32 values: {v}", tokens.len()))),
        };
        let n = tokens.len();
        // Range-checked before narrowing: `x as u32` would make 2^32 + 1 the valid id 1.
        let id = |k: &str| g.get(k).and_then(Value::as_u64).filter(|&x| x < n as u64).map(|x| x as u32);
        let flag = |k: &str, d: bool| match g.get(k) {
            Some(Value::Bool(b)) => *b,
            _ => d,
        };
        let kind = match model {
            "gpt2" => {
                let pre = g.get("tokenizer.ggml.pre").and_then(Value::as_str).unwrap_or("gpt2");
                let re = pre_regex(pre).ok_or_else(|| err(format!("pre-tokenizer `{pre}` is not supported")))?;
                let regex = compiled(re).map_err(|e| err(format!("pre-tokenizer regex: {e}")))?;
                let merges = strings(g.get("tokenizer.ggml.merges"))
                    .ok_or_else(|| err("metadata `tokenizer.ggml.merges` is missing".into()))?;
                let mut ranks = HashMap::new();
                for (i, m) in merges.iter().enumerate() {
                    let (a, b) = m.split_once(' ').ok_or_else(|| err(format!("merge {i} `{m}` is not `a b`")))?;
                    ranks.insert((a.to_string(), b.to_string()), i);
                }
                let byte_char = Box::new(byte_chars());
                let char_byte = byte_char.iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
                Kind::Bpe { ranks, regex, byte_char, char_byte }
            }
            "llama" => {
                let scores = match g.get("tokenizer.ggml.scores") {
                    Some(Value::Array(Array::F32(s))) if s.len() == tokens.len() => s.clone(),
                    _ => return Err(err("metadata `tokenizer.ggml.scores` is missing or of the wrong length".into())),
                };
                Kind::Spm { scores, add_space_prefix: flag("tokenizer.ggml.add_space_prefix", true) }
            }
            m => return Err(err(format!("tokenizer model `{m}` is not supported (gpt2, llama)"))),
        };
        let ids = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let add_bos = flag("tokenizer.ggml.add_bos_token", matches!(kind, Kind::Spm { .. }));
        let (bos, eos) = (id("tokenizer.ggml.bos_token_id"), id("tokenizer.ggml.eos_token_id"));
        let chat_template = g.get("tokenizer.chat_template").and_then(Value::as_str).map(str::to_string);
        Ok(GgufTokenizer { tokens, types, ids, kind, bos, eos, add_bos, chat_template })
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The token string of `id`.
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// Tokenizes `text` (special-token text is not parsed), with BOS first when the model adds it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_with(text, self.add_bos)
    }

    /// Tokenizes `text`, with BOS first when `add_bos` (and the model has one).
    pub fn encode_with(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let mut out = vec![];
        if add_bos && let Some(b) = self.bos {
            out.push(b);
        }
        match &self.kind {
            Kind::Bpe { ranks, regex, byte_char, .. } => {
                for m in regex.find_iter(text) {
                    let m = m.map_err(|e| Error::eval("tokenize", format!("pre-tokenizer: {e}")))?;
                    let word: String = m.as_str().bytes().map(|b| byte_char[b as usize]).collect();
                    self.bpe_word(&word, ranks, &mut out)?;
                }
            }
            Kind::Spm { scores, add_space_prefix } => {
                if !text.is_empty() {
                    let prefix = if *add_space_prefix { " " } else { "" };
                    self.spm(&format!("{prefix}{text}").replace(' ', "\u{2581}"), scores, &mut out);
                }
            }
        }
        Ok(out)
    }

    /// Tokenizes `text` in which the text of control tokens (`<|im_start|>`, `<|eot_id|>`, ...)
    /// stands for those tokens, as chat templates write them; the rest is encoded as `encode_with`
    /// does, without BOS between pieces. The longest control token wins where several match.
    pub fn encode_special(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let specials: Vec<(&str, u32)> = (0..self.tokens.len())
            .filter(|&i| self.types[i] == CONTROL && !self.tokens[i].is_empty())
            .map(|i| (self.tokens[i].as_str(), i as u32))
            .collect();
        crate::llm_tokenizer::encode_around_specials(text, &specials, add_bos, |t, bos| self.encode_with(t, bos))
    }

    /// The id of the token whose text is exactly `text`, if the vocabulary has one.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// Merges the lowest-ranked adjacent pair (leftmost on ties) until none applies.
    fn bpe_word(&self, word: &str, ranks: &HashMap<(String, String), usize>, out: &mut Vec<u32>) -> Result<()> {
        let mut sym: Vec<String> = word.chars().map(String::from).collect();
        loop {
            let best = (0..sym.len().saturating_sub(1))
                .filter_map(|i| ranks.get(&(sym[i].clone(), sym[i + 1].clone())).map(|&r| (r, i)))
                .min();
            let Some((_, i)) = best else { break };
            let right = sym.remove(i + 1);
            sym[i].push_str(&right);
        }
        for s in sym {
            match self.ids.get(&s) {
                Some(&id) => out.push(id),
                None => return Err(Error::eval("tokenize", format!("symbol `{s}` is not in the vocabulary"))),
            }
        }
        Ok(())
    }

    /// SentencePiece: merge the best-scoring adjacent pair that is a token (leftmost on ties);
    /// symbols left that are not tokens fall back to `<0xXX>` byte tokens.
    fn spm(&self, text: &str, scores: &[f32], out: &mut Vec<u32>) {
        let mut sym: Vec<String> = text.chars().map(String::from).collect();
        loop {
            let mut best: Option<(f32, usize)> = None;
            for i in 0..sym.len().saturating_sub(1) {
                let joined = format!("{}{}", sym[i], sym[i + 1]);
                if let Some(&id) = self.ids.get(&joined) {
                    let s = scores[id as usize];
                    if best.is_none_or(|(bs, _)| s > bs) {
                        best = Some((s, i));
                    }
                }
            }
            let Some((_, i)) = best else { break };
            let right = sym.remove(i + 1);
            sym[i].push_str(&right);
        }
        for s in sym {
            match self.ids.get(&s) {
                Some(&id) => out.push(id),
                None => {
                    for b in s.bytes() {
                        let id = self.ids.get(&format!("<0x{b:02X}>")).copied();
                        out.push(id.unwrap_or(0));
                    }
                }
            }
        }
    }

    /// The text of `ids`; control tokens (BOS, EOS, ...) give nothing, as llama.cpp's
    /// detokenize without special tokens. Invalid UTF-8 becomes U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = vec![];
        for &id in ids {
            bytes.extend(self.piece_bytes(id));
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        match &self.kind {
            Kind::Spm { add_space_prefix: true, .. } => text.strip_prefix(' ').map(str::to_string).unwrap_or(text),
            _ => text,
        }
    }

    /// The bytes one token stands for (for streaming: join bytes, then decode UTF-8).
    pub fn piece_bytes(&self, id: u32) -> Vec<u8> {
        let (Some(t), Some(&ty)) = (self.tokens.get(id as usize), self.types.get(id as usize)) else {
            return vec![];
        };
        if ty == CONTROL {
            return vec![];
        }
        match &self.kind {
            Kind::Bpe { char_byte, .. } => {
                let mut out = vec![];
                for c in t.chars() {
                    match char_byte.get(&c) {
                        Some(&b) => out.push(b),
                        None => out.extend(c.to_string().bytes()),
                    }
                }
                out
            }
            Kind::Spm { .. } if ty == BYTE => {
                let hex = t.strip_prefix("<0x").and_then(|s| s.strip_suffix('>'));
                hex.and_then(|h| u8::from_str_radix(h, 16).ok()).map_or_else(|| t.clone().into_bytes(), |b| vec![b])
            }
            Kind::Spm { .. } => t.replace('\u{2581}', " ").into_bytes(),
        }
    }
}
