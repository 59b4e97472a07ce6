//! The server under load: 32 requests from 8 concurrent clients (completions and chat,
//! streaming and not) all complete, and greedy outputs equal the library's `generate`.

mod common;

use common::{post, request};
use rlx_driver::Device;
use rlx_models::llm::{GenerateOptions, LlmModel, generate};
use rlx_models::{GgufTokenizer, SamplerConfig};
use rlx_serve::chat::{ChatFormat, Message};
use serde_json::{Value, json};

const CTX: usize = 64;
const MAX_TOKENS: usize = 12;
const PROMPTS: [&str; 4] = ["hello world", "the quick brown fox", "a", "one two three four five"];

/// The library's greedy text for `prompt` tokens, with the server's stop token (EOS).
fn library_greedy(model: &mut LlmModel, tok: &GgufTokenizer, prompt: &[u32]) -> (String, usize) {
    let opts = GenerateOptions {
        max_tokens: MAX_TOKENS,
        sampler: SamplerConfig::default(),
        stop_tokens: tok.eos.into_iter().collect(),
    };
    let stats = generate(model, prompt, &opts, |_| true).unwrap();
    (tok.decode(&stats.tokens), stats.tokens.len())
}

/// The text, finish reason and usage of a reply, streamed or not.
fn outcome(r: &common::Reply, chat: bool, stream: bool) -> (String, String, Value) {
    assert_eq!(r.status, 200, "{}", r.body);
    if !stream {
        let v = r.json();
        let c = &v["choices"][0];
        let text = if chat { &c["message"]["content"] } else { &c["text"] };
        return (text.as_str().unwrap().to_string(), c["finish_reason"].as_str().unwrap().into(), v["usage"].clone());
    }
    let ev = r.events();
    assert_eq!(ev.last(), Some(&json!("[DONE]")), "{}", r.body);
    let (mut text, mut finish, mut usage) = (String::new(), String::new(), Value::Null);
    for e in &ev[..ev.len() - 1] {
        if let Some(u) = e.get("usage").filter(|u| !u.is_null()) {
            usage = u.clone();
        }
        for c in e["choices"].as_array().unwrap() {
            let t = if chat { &c["delta"]["content"] } else { &c["text"] };
            text += t.as_str().unwrap_or("");
            if let Some(f) = c["finish_reason"].as_str() {
                finish = f.to_string();
            }
        }
    }
    (text, finish, usage)
}

#[test]
fn concurrent_clients_get_the_librarys_greedy_tokens() {
    let path = common::fixture();
    let file = rlx_gguf::GgufFile::open(&path).unwrap();
    let tok = GgufTokenizer::from_gguf(file.gguf(), "fixture").unwrap();
    let mut model = LlmModel::load(&path, Device::Cpu, CTX).unwrap();
    // Expected (text, tokens) per prompt, for completions and for chat (plain format: the fixture
    // has no chat template).
    let mut expected = vec![];
    for p in PROMPTS {
        let ids = tok.encode(p).unwrap();
        let completion = library_greedy(&mut model, &tok, &ids);
        let msgs = [Message { role: "user".into(), content: p.into() }];
        let chat_ids = tok.encode_special(&ChatFormat::Plain.render(&msgs), tok.add_bos).unwrap();
        let chat = library_greedy(&mut model, &tok, &chat_ids);
        expected.push((completion, chat));
    }
    drop(model);

    let server = common::start(CTX, 64);
    let addr = server.addr();
    let expected = std::sync::Arc::new(expected);
    let clients: Vec<_> = (0..8)
        .map(|c| {
            let expected = expected.clone();
            std::thread::spawn(move || {
                for r in 0..4 {
                    let (chat, stream) = ((c + r) % 2 == 1, (c / 2 + r) % 2 == 1);
                    let pi = (c + 3 * r) % PROMPTS.len();
                    let mut body = json!({"model": "m", "max_tokens": MAX_TOKENS, "temperature": 0, "stream": stream});
                    if stream {
                        body["stream_options"] = json!({"include_usage": true});
                    }
                    let endpoint = if chat {
                        body["messages"] = json!([{"role": "user", "content": PROMPTS[pi]}]);
                        "/v1/chat/completions"
                    } else {
                        body["prompt"] = json!(PROMPTS[pi]);
                        "/v1/completions"
                    };
                    let reply = post(addr, endpoint, &body);
                    let (text, finish, usage) = outcome(&reply, chat, stream);
                    let (want_text, want_n) = if chat { &expected[pi].1 } else { &expected[pi].0 };
                    assert_eq!(&text, want_text, "client {c} request {r} ({endpoint}, stream {stream})");
                    assert_eq!(usage["completion_tokens"], json!(want_n));
                    let want_finish = if *want_n == MAX_TOKENS { "length" } else { "stop" };
                    assert_eq!(finish, want_finish);
                }
            })
        })
        .collect();
    for c in clients {
        c.join().expect("client thread");
    }
    let m = request(addr, "GET", "/metrics", "").body;
    assert!(m.contains("rlx_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 16"), "{m}");
    assert!(m.contains("rlx_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 16"), "{m}");
    assert!(m.contains("rlx_time_to_first_token_seconds_count 32"), "{m}");
    assert!(m.contains("rlx_queue_depth 0"), "{m}");
    // Every page is back in the pool; requests ran side by side (8 rows by default).
    assert!(m.contains("rlx_kv_pages_used 0"), "{m}");
    assert!(m.contains("rlx_requests_running 0"), "{m}");
    // Batched: far fewer forward steps than tokens generated (serially there would be one per token).
    let count = |name: &str| -> u64 {
        let line = m.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name} in {m}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let (steps, tokens) = (count("rlx_engine_steps_total "), count("rlx_generated_tokens_total "));
    eprintln!("32 requests: {tokens} tokens in {steps} steps");
    assert!(steps * 2 < tokens, "{steps} steps for {tokens} tokens");
    let models = request(addr, "GET", "/v1/models", "").json();
    assert_eq!(models["data"][0]["id"], json!("qwen3-f16"));
    server.shutdown().unwrap();
}

#[test]
fn stop_strings_cut_the_text_and_are_never_streamed() {
    let server = common::start(CTX, 8);
    let addr = server.addr();
    let base = json!({"prompt": "hello world", "max_tokens": MAX_TOKENS, "temperature": 0});
    let full = post(addr, "/v1/completions", &base).json()["choices"][0]["text"].as_str().unwrap().to_string();
    // A stop string from the middle of the greedy text (two characters, so a prefix of it is
    // held back while streaming).
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() >= 4, "{full:?}");
    let stop: String = chars[2..4].iter().collect();
    let cut = &full[..full.find(&stop).unwrap()];
    for stream in [false, true] {
        let mut body = base.clone();
        body["stop"] = json!([stop]);
        body["stream"] = json!(stream);
        let (text, finish, _) = outcome(&post(addr, "/v1/completions", &body), false, stream);
        assert_eq!((text.as_str(), finish.as_str()), (cut, "stop"), "stream {stream}");
    }
    server.shutdown().unwrap();
}

/// A Hugging Face checkpoint folder serves like a GGUF file: its tokenizer.json, the ChatML
/// template of its tokenizer_config.json (the prompt format) and the stop ids of
/// generation_config.json; a chat reply is the library's greedy text for the same prompt.
#[test]
fn a_hugging_face_folder_serves_chat_with_its_template() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rlx-models/tests/fixtures/hf/qwen3-bf16");
    let tok = rlx_models::load_tokenizer(&dir).unwrap();
    let chat = ChatFormat::detect(tok.chat_template());
    assert_eq!(chat, ChatFormat::ChatMl);
    let msgs = [Message { role: "user".into(), content: "hello world".into() }];
    let ids = tok.encode_special(&chat.render(&msgs), tok.add_bos()).unwrap();
    let mut stop_tokens = tok.stop_tokens();
    stop_tokens.extend(chat.end_tokens().iter().filter_map(|t| tok.token_id(t)));
    let opts = GenerateOptions { max_tokens: MAX_TOKENS, sampler: SamplerConfig::default(), stop_tokens };
    let mut model = LlmModel::load(&dir, Device::Cpu, CTX).unwrap();
    let want = tok.decode(&generate(&mut model, &ids, &opts, |_| true).unwrap().tokens);
    drop(model);

    let mut cfg = rlx_serve::ServeConfig::new(dir);
    (cfg.port, cfg.ctx, cfg.queue) = (0, Some(CTX), 4);
    let server = rlx_serve::Server::start(cfg).expect("server starts");
    let body = json!({"model": "m", "max_tokens": MAX_TOKENS, "temperature": 0,
        "messages": [{"role": "user", "content": "hello world"}]});
    let (text, _, _) = outcome(&post(server.addr(), "/v1/chat/completions", &body), true, false);
    assert_eq!(text, want);
    server.shutdown().unwrap();
}
