//! Text to token ids through a Hugging Face `tokenizer.json` (the `tokenizers` crate), with
//! truncation and padding to the longest text of a batch, as sentence-transformers does.

use rlx_ir::{Error, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use tokenizers::{PaddingParams, PaddingStrategy, TruncationParams};

/// A padded batch of token ids, row-major `[batch, seq]`.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenBatch {
    /// Number of texts.
    pub batch: usize,
    /// Padded length (the longest text, after truncation).
    pub seq: usize,
    /// Token ids.
    pub ids: Vec<i64>,
    /// Segment (token type) ids.
    pub type_ids: Vec<i64>,
    /// 1 for real tokens, 0 for padding.
    pub mask: Vec<i64>,
}

impl TokenBatch {
    /// The number of real tokens of each text.
    pub fn lengths(&self) -> Vec<usize> {
        self.mask.chunks(self.seq.max(1)).map(|r| r.iter().filter(|&&m| m != 0).count()).collect()
    }
}

/// Checks what `tokenizers` checks when it builds a template post-processor but not when it
/// reads one from a file; either mistake panics while encoding: a special token a template names
/// but `special_tokens` does not define, and the second sequence (`$B`) in the template of one
/// text. `p` is the post-processor as `tokenizers` serializes it.
pub(crate) fn check_templates(p: &Value) -> std::result::Result<(), String> {
    match p.get("type").and_then(Value::as_str) {
        Some("TemplateProcessing") => {
            let defined = p.get("special_tokens").and_then(Value::as_object);
            for which in ["single", "pair"] {
                for piece in p.get(which).and_then(Value::as_array).into_iter().flatten() {
                    if let Some(id) = piece.pointer("/SpecialToken/id").and_then(Value::as_str)
                        && !defined.is_some_and(|m| m.contains_key(id))
                    {
                        return Err(format!("the {which} template names special token `{id}`, which is not defined"));
                    }
                    if which == "single" && piece.pointer("/Sequence/id").and_then(Value::as_str) == Some("B") {
                        return Err("the single template uses the second sequence `$B`".into());
                    }
                }
            }
            Ok(())
        }
        Some("Sequence") => {
            p.get("processors").and_then(Value::as_array).into_iter().flatten().try_for_each(check_templates)
        }
        _ => Ok(()),
    }
}

/// A tokenizer loaded from `tokenizer.json`.
pub struct TextTokenizer {
    path: PathBuf,
    inner: tokenizers::Tokenizer,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer").field("path", &self.path).finish()
    }
}

impl TextTokenizer {
    /// Loads `tokenizer.json`; texts are truncated to `max_len` tokens (special tokens included)
    /// and a batch is padded to its longest text with the file's pad token.
    pub fn from_file(path: impl AsRef<Path>, max_len: usize) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path)
            .map_err(|e| Error::ModelFile { path: path.display().to_string(), reason: e.to_string() })?;
        Self::from_bytes(&bytes, path, max_len)
    }

    /// `from_file` of a `tokenizer.json` already in memory; `path` names it in errors.
    pub fn from_bytes(bytes: &[u8], path: impl AsRef<Path>, max_len: usize) -> Result<Self> {
        let path = path.as_ref();
        let err = |reason: String| Error::ModelFile { path: path.display().to_string(), reason };
        // `tokenizers` panics on any JSON error inside the decoder (its decoder reader unwraps
        // it): the file is read here first as a JSON value, so that every bad file is an error.
        // A value, not `IgnoredAny`: skipping a string or number checks neither that the string
        // is UTF-8 nor that the number fits an f64, and the decoder reader checks both.
        serde_json::from_slice::<Value>(bytes).map_err(|e| err(format!("bad tokenizer JSON: {e}")))?;
        let mut inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| err(format!("bad tokenizer: {e}")))?;
        if let Some(p) = inner.get_post_processor() {
            let p = serde_json::to_value(p).map_err(|e| err(format!("bad post-processor: {e}")))?;
            check_templates(&p).map_err(|e| err(format!("bad post-processor: {e}")))?;
        }
        let file_pad = inner.get_padding().cloned().unwrap_or_default();
        let pad = PaddingParams { strategy: PaddingStrategy::BatchLongest, pad_to_multiple_of: None, ..file_pad };
        inner.with_padding(Some(pad));
        let trunc = TruncationParams { max_length: max_len, ..inner.get_truncation().cloned().unwrap_or_default() };
        inner.with_truncation(Some(trunc)).map_err(|e| err(format!("bad truncation {max_len}: {e}")))?;
        Ok(TextTokenizer { path: path.to_path_buf(), inner })
    }

    /// Encodes texts with special tokens into one padded batch.
    pub fn encode_batch(&self, texts: &[&str]) -> Result<TokenBatch> {
        if texts.is_empty() {
            return Ok(TokenBatch { batch: 0, seq: 0, ids: vec![], type_ids: vec![], mask: vec![] });
        }
        let enc = self.inner.encode_batch(texts.to_vec(), true).map_err(|e| Error::ModelFile {
            path: self.path.display().to_string(),
            reason: format!("tokenizing failed: {e}"),
        })?;
        let seq = enc[0].get_ids().len();
        let mut b = TokenBatch { batch: texts.len(), seq, ids: vec![], type_ids: vec![], mask: vec![] };
        for e in &enc {
            debug_assert_eq!(e.get_ids().len(), seq, "BatchLongest pads every row");
            b.ids.extend(e.get_ids().iter().map(|&v| v as i64));
            b.type_ids.extend(e.get_type_ids().iter().map(|&v| v as i64));
            b.mask.extend(e.get_attention_mask().iter().map(|&v| v as i64));
        }
        Ok(b)
    }

    /// Vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}
