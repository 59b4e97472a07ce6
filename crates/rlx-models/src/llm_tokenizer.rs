//! `LlmTokenizer`: what generation needs of a tokenizer, for the tokenizer embedded in a GGUF
//! file and for a Hugging Face checkpoint's; `load_tokenizer` picks one by the model path.

use crate::gguf_tokenizer::GgufTokenizer;
use crate::hf_tokenizer::HfTokenizer;
use rlx_ir::{Error, Result};
use std::path::Path;

/// Text to token ids and back, as an LLM's generation uses it.
pub trait LlmTokenizer: Send + Sync + std::fmt::Debug {
    /// Vocabulary size.
    fn vocab_size(&self) -> usize;
    /// Tokenizes `text` (special-token text is not parsed), BOS first when the model adds it.
    fn encode(&self, text: &str) -> Result<Vec<u32>>;
    /// Tokenizes `text` in which special-token text (`<|im_start|>`, ...) stands for those
    /// tokens, as chat templates write them; BOS first when `add_bos`.
    fn encode_special(&self, text: &str, add_bos: bool) -> Result<Vec<u32>>;
    /// The text of `ids`, control / special tokens left out.
    fn decode(&self, ids: &[u32]) -> String;
    /// The bytes one token stands for (for streaming: join bytes, then decode UTF-8).
    fn piece_bytes(&self, id: u32) -> Vec<u8>;
    /// The id of the token whose text is exactly `text`.
    fn token_id(&self, text: &str) -> Option<u32>;
    /// The beginning-of-sequence token.
    fn bos(&self) -> Option<u32>;
    /// Whether `encode` starts with the BOS token.
    fn add_bos(&self) -> bool;
    /// The end-of-sequence token.
    fn eos(&self) -> Option<u32>;
    /// Every token that ends generation (the EOS token first).
    fn stop_tokens(&self) -> Vec<u32>;
    /// The model's chat template (Jinja source), if it has one.
    fn chat_template(&self) -> Option<&str>;
}

/// `text` with the text of `specials` (token text, id) standing for those tokens, as chat
/// templates write them: the earliest match becomes its token (the longest where several start
/// there), the pieces between are encoded by `encode` (BOS only before the first, when `add_bos`).
pub(crate) fn encode_around_specials(
    text: &str,
    specials: &[(&str, u32)],
    add_bos: bool,
    encode: impl Fn(&str, bool) -> Result<Vec<u32>>,
) -> Result<Vec<u32>> {
    let mut out = encode("", add_bos)?;
    let mut rest = text;
    while !rest.is_empty() {
        let hit =
            specials.iter().filter_map(|&(t, id)| rest.find(t).map(|at| (at, std::cmp::Reverse(t.len()), id))).min();
        let Some((at, std::cmp::Reverse(len), id)) = hit else {
            out.extend(encode(rest, false)?);
            break;
        };
        if at > 0 {
            out.extend(encode(&rest[..at], false)?);
        }
        out.push(id);
        rest = &rest[at + len..];
    }
    Ok(out)
}

/// The trait methods both tokenizers answer from inherent methods and fields of the same names;
/// `stop` is the expression for `stop_tokens`.
macro_rules! forward_llm_tokenizer {
    ($ty:ty, |$s:ident| $stop:expr) => {
        impl LlmTokenizer for $ty {
            fn vocab_size(&self) -> usize {
                <$ty>::vocab_size(self)
            }
            fn encode(&self, text: &str) -> Result<Vec<u32>> {
                <$ty>::encode(self, text)
            }
            fn encode_special(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
                <$ty>::encode_special(self, text, add_bos)
            }
            fn decode(&self, ids: &[u32]) -> String {
                <$ty>::decode(self, ids)
            }
            fn piece_bytes(&self, id: u32) -> Vec<u8> {
                <$ty>::piece_bytes(self, id)
            }
            fn token_id(&self, text: &str) -> Option<u32> {
                <$ty>::token_id(self, text)
            }
            fn bos(&self) -> Option<u32> {
                self.bos
            }
            fn add_bos(&self) -> bool {
                self.add_bos
            }
            fn eos(&self) -> Option<u32> {
                self.eos
            }
            fn stop_tokens(&self) -> Vec<u32> {
                let $s = self;
                $stop
            }
            fn chat_template(&self) -> Option<&str> {
                self.chat_template.as_deref()
            }
        }
    };
}

forward_llm_tokenizer!(GgufTokenizer, |t| t.eos.into_iter().collect());
forward_llm_tokenizer!(HfTokenizer, |t| t.stop.clone());

/// The tokenizer of the model at `path`: a Hugging Face checkpoint folder's files, or the one
/// embedded in a `.gguf` file.
pub fn load_tokenizer(path: impl AsRef<Path>) -> Result<Box<dyn LlmTokenizer>> {
    let path = path.as_ref();
    if path.is_dir() {
        return Ok(Box::new(HfTokenizer::from_dir(path)?));
    }
    let p = path.display().to_string();
    let file =
        rlx_gguf::GgufFile::open(path).map_err(|e| Error::ModelFile { path: p.clone(), reason: e.to_string() })?;
    Ok(Box::new(GgufTokenizer::from_gguf(file.gguf(), &p)?))
}
