//! The tokenizer of a Hugging Face checkpoint folder: `tokenizer.json` (the `tokenizers`
//! crate), the special tokens and chat template of `tokenizer_config.json`, and the
//! end-of-sequence ids of `generation_config.json`; the same interface as `GgufTokenizer`
//! (`LlmTokenizer`).

use crate::llm::hf::read_json;
use crate::tokenizer::check_templates;
use rlx_ir::{Error, Result};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// GPT-2's byte for each printable stand-in character (byte-level BPE vocabularies).
fn char_bytes() -> HashMap<char, u8> {
    let mut out = HashMap::new();
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable = (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        let c = if printable {
            char::from_u32(b)
        } else {
            n += 1;
            char::from_u32(255 + n)
        };
        out.insert(c.expect("valid scalar"), b as u8);
    }
    out
}

/// Whether a decoder (as `tokenizer.json` writes it) maps bytes to printable characters.
fn is_byte_level(d: &Value) -> bool {
    match d.get("type").and_then(Value::as_str) {
        Some("ByteLevel") => true,
        Some("Sequence") => d.get("decoders").and_then(Value::as_array).is_some_and(|v| v.iter().any(is_byte_level)),
        _ => false,
    }
}

/// A token named in `tokenizer_config.json`: a string, or an object with `content`.
fn token_text(v: Option<&Value>) -> Option<&str> {
    let v = v?;
    v.as_str().or_else(|| v.get("content").and_then(Value::as_str))
}

/// A Hugging Face tokenizer for generation.
pub struct HfTokenizer {
    path: PathBuf,
    /// Special-token text in the input is encoded as text (`encode_special` splits it out).
    inner: tokenizers::Tokenizer,
    /// Special tokens (text, id), longest first.
    specials: Vec<(String, u32)>,
    /// Added tokens by id: their text and whether they are special.
    added: HashMap<u32, (String, bool)>,
    /// The byte of each stand-in character, for byte-level vocabularies.
    char_byte: Option<HashMap<char, u8>>,
    /// The beginning-of-sequence token.
    pub bos: Option<u32>,
    /// The end-of-sequence token.
    pub eos: Option<u32>,
    /// Every token that ends generation (`eos` and the ids of `generation_config.json`).
    pub stop: Vec<u32>,
    /// Whether `encode` starts with `bos`.
    pub add_bos: bool,
    /// The Jinja chat template of `tokenizer_config.json`.
    pub chat_template: Option<String>,
}

impl std::fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfTokenizer").field("path", &self.path).field("vocab", &self.vocab_size()).finish()
    }
}

impl HfTokenizer {
    /// Reads the tokenizer files of checkpoint folder `dir` (`tokenizer.json` is required,
    /// `tokenizer_config.json` and `generation_config.json` are read when present).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let path = dir.join("tokenizer.json");
        let err = |p: &Path, reason: String| Error::ModelFile { path: p.display().to_string(), reason };
        let bytes = std::fs::read(&path).map_err(|e| err(&path, e.to_string()))?;
        // Parsed as JSON first: `tokenizers` panics on some malformed files (tokenizer.rs).
        let json: Value = serde_json::from_slice(&bytes).map_err(|e| err(&path, format!("bad tokenizer JSON: {e}")))?;
        let mut inner =
            tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| err(&path, format!("bad tokenizer: {e}")))?;
        if let Some(p) = json.get("post_processor").filter(|p| !p.is_null()) {
            check_templates(p).map_err(|e| err(&path, format!("bad post-processor: {e}")))?;
        }
        inner.set_encode_special_tokens(true);
        let added: HashMap<u32, (String, bool)> =
            inner.get_added_tokens_decoder().into_iter().map(|(id, t)| (id, (t.content, t.special))).collect();
        let mut specials: Vec<(String, u32)> =
            added.iter().filter(|(_, (t, s))| *s && !t.is_empty()).map(|(&id, (t, _))| (t.clone(), id)).collect();
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        let char_byte = json.get("decoder").is_some_and(is_byte_level).then(char_bytes);
        let vocab = inner.get_vocab_size(true);

        let cfg_path = dir.join("tokenizer_config.json");
        let tc = if cfg_path.exists() { read_json(&cfg_path)? } else { Value::Null };
        let id_of = |p: &Path, key: &str, text: Option<&str>| -> Result<Option<u32>> {
            match text {
                None => Ok(None),
                Some(t) => inner
                    .token_to_id(t)
                    .map(Some)
                    .ok_or_else(|| err(p, format!("`{key}` `{t}` is not a token of tokenizer.json"))),
            }
        };
        let mut bos = id_of(&cfg_path, "bos_token", token_text(tc.get("bos_token")))?;
        let mut eos = id_of(&cfg_path, "eos_token", token_text(tc.get("eos_token")))?;
        let chat_template = match tc.get("chat_template") {
            Some(Value::String(s)) => Some(s.clone()),
            // A list of named templates: the `default` one, else the first.
            Some(Value::Array(a)) => {
                let named = |n: &Value| n.get("template").and_then(Value::as_str).map(str::to_string);
                let default = a.iter().find(|t| t.get("name").and_then(Value::as_str) == Some("default"));
                default.or(a.first()).and_then(named)
            }
            _ => None,
        };

        let gen_path = dir.join("generation_config.json");
        let gc = if gen_path.exists() { read_json(&gen_path)? } else { Value::Null };
        let check = |p: &Path, key: &str, v: &Value| -> Result<u32> {
            v.as_u64()
                .filter(|&x| x < vocab as u64)
                .map(|x| x as u32)
                .ok_or_else(|| err(p, format!("`{key}` {v} is not a token id below the vocabulary size {vocab}")))
        };
        let mut stop = vec![];
        match gc.get("eos_token_id") {
            Some(Value::Array(a)) => {
                for v in a {
                    stop.push(check(&gen_path, "eos_token_id", v)?);
                }
            }
            Some(v) if !v.is_null() => stop.push(check(&gen_path, "eos_token_id", v)?),
            _ => {}
        }
        if bos.is_none()
            && let Some(v) = gc.get("bos_token_id").filter(|v| !v.is_null())
        {
            bos = Some(check(&gen_path, "bos_token_id", v)?);
        }
        if eos.is_none() {
            eos = stop.first().copied();
        }
        if let Some(e) = eos {
            stop.retain(|&t| t != e);
            stop.insert(0, e);
        }
        // Without `add_bos_token`, BOS is added when the post-processor adds it to a text.
        let add_bos = match tc.get("add_bos_token").and_then(Value::as_bool) {
            Some(b) => b,
            None => bos.is_some() && inner.encode("", true).is_ok_and(|e| e.get_ids().first().copied() == bos),
        };
        Ok(HfTokenizer { path, inner, specials, added, char_byte, bos, eos, stop, add_bos, chat_template })
    }

    /// Vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Tokenizes `text` (special-token text is not parsed), with BOS first when the model adds it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.encode_with(text, self.add_bos)
    }

    /// Tokenizes `text` (special-token text is not parsed), with BOS first when `add_bos`.
    pub fn encode_with(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let mut out: Vec<u32> = if add_bos { self.bos.into_iter().collect() } else { vec![] };
        if !text.is_empty() {
            let enc = self.inner.encode(text, false).map_err(|e| Error::ModelFile {
                path: self.path.display().to_string(),
                reason: format!("tokenizing failed: {e}"),
            })?;
            out.extend_from_slice(enc.get_ids());
        }
        Ok(out)
    }

    /// Tokenizes `text` in which the text of special tokens (`<|im_start|>`, ...) stands for
    /// those tokens, as chat templates write them; the longest wins where several match.
    pub fn encode_special(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let specials: Vec<(&str, u32)> = self.specials.iter().map(|(t, id)| (t.as_str(), *id)).collect();
        crate::llm_tokenizer::encode_around_specials(text, &specials, add_bos, |t, bos| self.encode_with(t, bos))
    }

    /// The text of `ids`, special tokens left out.
    pub fn decode(&self, ids: &[u32]) -> String {
        self.inner.decode(ids, true).unwrap_or_default()
    }

    /// The bytes one token stands for (special tokens: none).
    pub fn piece_bytes(&self, id: u32) -> Vec<u8> {
        if let Some((text, special)) = self.added.get(&id) {
            return if *special { vec![] } else { text.clone().into_bytes() };
        }
        let Some(t) = self.inner.id_to_token(id) else { return vec![] };
        match &self.char_byte {
            Some(map) => {
                let mut out = vec![];
                for c in t.chars() {
                    match map.get(&c) {
                        Some(&b) => out.push(b),
                        None => out.extend(c.to_string().bytes()),
                    }
                }
                out
            }
            // SentencePiece style: byte-fallback pieces and `▁` for spaces.
            None => {
                let hex = t.strip_prefix("<0x").and_then(|s| s.strip_suffix('>'));
                match hex.filter(|h| h.len() == 2).and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => vec![b],
                    None => t.replace('\u{2581}', " ").into_bytes(),
                }
            }
        }
    }

    /// The id of the token whose text is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.inner.token_to_id(text)
    }
}
