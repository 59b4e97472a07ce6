//! The GGUF tokenizers (gpt2-style BPE for Qwen3, SentencePiece-style for Llama) against
//! llama.cpp's tokenize / detokenize of the same strings (tools/tiny_llm.py).

use rlx_gguf::GgufFile;
use rlx_models::GgufTokenizer;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llm")
}

#[test]
fn encode_and_decode_match_llama_cpp() {
    let text = std::fs::read_to_string(dir().join("tokenizer.json")).unwrap();
    let refs: serde_json::Value = serde_json::from_str(&text).unwrap();
    for arch in ["qwen3", "llama"] {
        let f = GgufFile::open(dir().join(format!("{arch}-f16.gguf"))).unwrap();
        let tok = GgufTokenizer::from_gguf(f.gguf(), arch).unwrap();
        let cases = refs[arch].as_array().unwrap();
        assert!(cases.len() >= 7);
        for c in cases {
            let s = c["text"].as_str().unwrap();
            let want: Vec<u32> = c["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
            assert_eq!(tok.encode(s).unwrap(), want, "{arch}: encode {s:?}");
            assert_eq!(tok.decode(&want), c["detok"].as_str().unwrap(), "{arch}: decode {s:?}");
        }
    }
}

#[test]
fn special_tokens_and_bos_follow_the_metadata() {
    let f = GgufFile::open(dir().join("llama-f16.gguf")).unwrap();
    let tok = GgufTokenizer::from_gguf(f.gguf(), "llama").unwrap();
    assert_eq!((tok.bos, tok.eos, tok.add_bos), (Some(1), Some(2), true));
    assert_eq!(tok.encode_with("hello", false).unwrap()[0], tok.encode("hello").unwrap()[1]);
    let f = GgufFile::open(dir().join("qwen3-f16.gguf")).unwrap();
    let tok = GgufTokenizer::from_gguf(f.gguf(), "qwen3").unwrap();
    assert!(!tok.add_bos);
    let eos = tok.eos.unwrap();
    assert_eq!(tok.token(eos), Some("<|im_end|>"));
    // Control tokens decode to nothing; their text in a prompt is plain text.
    assert_eq!(tok.decode(&[eos]), "");
    assert!(tok.encode("<|im_end|>").unwrap().len() > 1);
}

#[test]
fn encode_special_reads_control_token_text_as_the_tokens() {
    let f = GgufFile::open(dir().join("qwen3-f16.gguf")).unwrap();
    let tok = GgufTokenizer::from_gguf(f.gguf(), "qwen3").unwrap();
    let (start, end) = (tok.token_id("<|im_start|>").unwrap(), tok.token_id("<|im_end|>").unwrap());
    let mut want = vec![start];
    want.extend(tok.encode("user\nhello world").unwrap());
    want.push(end);
    want.extend(tok.encode("\n").unwrap());
    assert_eq!(tok.encode_special("<|im_start|>user\nhello world<|im_end|>\n", false).unwrap(), want);
    // No control token text: the same as `encode_with`; BOS first when asked.
    assert_eq!(tok.encode_special("hello", false).unwrap(), tok.encode("hello").unwrap());
    assert_eq!(tok.encode_special("<|im_end|>", true).unwrap(), vec![tok.bos.unwrap(), end]);
}
