//! Fuzzes the tokenizer a GGUF model carries (`GgufTokenizer::from_gguf`, as `rlx generate`
//! loads it): any metadata must load or give an error, never panic, hang or over-allocate; a
//! tokenizer that loads encodes fixed texts and decodes the ids back, and decodes ids it does
//! not have.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rlx_gguf::Gguf;
use rlx_models::GgufTokenizer;

/// ASCII, spaces, digits, newlines, accents, CJK and an emoji (byte fallback and byte-level BPE).
const TEXTS: [&str; 4] = ["Hello, world!", "  two  spaces\n\nand 12345 digits", "Ünïcödé 東京 🎉", ""];

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::parse(data) else { return };
    let Ok(tok) = GgufTokenizer::from_gguf(&g, "fuzz.gguf") else { return };
    let n = tok.vocab_size() as u32;
    for text in TEXTS {
        if let Ok(ids) = tok.encode(text) {
            let _ = tok.decode(&ids);
        }
    }
    let ids: Vec<u32> = (0..n.min(256)).chain([n, u32::MAX]).collect();
    let _ = tok.decode(&ids);
    for id in ids {
        let _ = (tok.token(id), tok.piece_bytes(id));
    }
});
