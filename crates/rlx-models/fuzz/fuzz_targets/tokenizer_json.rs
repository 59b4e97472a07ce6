//! Fuzzes `tokenizer.json` loading as `rlx embed` does it (`TextTokenizer`): any bytes must load
//! or give an error, never panic, hang or over-allocate; a tokenizer that loads encodes a fixed
//! batch of texts into a padded batch of consistent shape.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rlx_models::TextTokenizer;

/// ASCII, accents, CJK, an emoji, an empty text and a long one: the padding has work to do.
const TEXTS: [&str; 5] = ["hello world", "Ünïcödé façade, 東京 🎉", "", "a b c d e f g h i j k l m n o p", "[CLS] x"];

fuzz_target!(
    init: {
        // One thread: a panic on a rayon worker would abort without saving the input, and the
        // pool's hand-offs cost more than a batch of five short texts.
        // SAFETY: set before any other thread of this process starts.
        unsafe { std::env::set_var("TOKENIZERS_PARALLELISM", "false") };
    },
    |data: &[u8]| {
        let Ok(tok) = TextTokenizer::from_bytes(data, "tokenizer.json", 16) else { return };
        let _ = tok.vocab_size();
        if let Ok(b) = tok.encode_batch(&TEXTS) {
            assert_eq!(b.batch, TEXTS.len());
            let n = b.batch * b.seq;
            assert!(b.ids.len() == n && b.type_ids.len() == n && b.mask.len() == n, "{b:?}");
            let _ = b.lengths();
        }
    }
);
