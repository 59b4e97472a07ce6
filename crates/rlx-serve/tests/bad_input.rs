//! Bad input and overload: each bad request gets its status (and an OpenAI-style error body),
//! a full queue answers 429 with Retry-After, a client that leaves mid-stream does not stop the
//! next request, and the server stays healthy throughout.

mod common;

use common::{connect, post, request, send};
use serde_json::json;
use std::io::Read;

#[test]
fn each_bad_request_gets_its_status_and_the_server_stays_healthy() {
    let server = common::start(32, 8);
    let addr = server.addr();
    let long_prompt = "hello ".repeat(40);
    let cases: Vec<(&str, &str, String, u16)> = vec![
        ("malformed json", "/v1/completions", "{\"prompt\": ".into(), 400),
        ("not an object", "/v1/completions", "[1, 2]".into(), 400),
        ("prompt missing", "/v1/completions", json!({"max_tokens": 4}).to_string(), 400),
        ("prompt a number", "/v1/completions", json!({"prompt": 7}).to_string(), 400),
        ("token id outside the vocabulary", "/v1/completions", json!({"prompt": [1, 999999]}).to_string(), 400),
        ("max_tokens negative", "/v1/completions", json!({"prompt": "a", "max_tokens": -1}).to_string(), 400),
        ("max_tokens huge", "/v1/completions", json!({"prompt": "a", "max_tokens": 1u64 << 40}).to_string(), 400),
        ("max_tokens over the context", "/v1/completions", json!({"prompt": "a", "max_tokens": 40}).to_string(), 400),
        ("max_tokens a string", "/v1/completions", json!({"prompt": "a", "max_tokens": "4"}).to_string(), 400),
        ("prompt longer than the context", "/v1/completions", json!({"prompt": long_prompt}).to_string(), 400),
        ("n = 2", "/v1/completions", json!({"prompt": "a", "n": 2}).to_string(), 400),
        ("temperature negative", "/v1/completions", json!({"prompt": "a", "temperature": -1}).to_string(), 400),
        ("top_p a string", "/v1/completions", json!({"prompt": "a", "top_p": "x"}).to_string(), 400),
        ("stop a number", "/v1/completions", json!({"prompt": "a", "stop": 3}).to_string(), 400),
        ("stream not a bool", "/v1/completions", json!({"prompt": "a", "stream": "yes"}).to_string(), 400),
        ("model not a string", "/v1/completions", json!({"prompt": "a", "model": 3}).to_string(), 400),
        ("messages missing", "/v1/chat/completions", json!({"prompt": "a"}).to_string(), 400),
        ("message without role", "/v1/chat/completions", json!({"messages": [{"content": "a"}]}).to_string(), 400),
        (
            "content a number",
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": 1}]}).to_string(),
            400,
        ),
        ("unknown path", "/v1/nothing", "{}".into(), 404),
    ];
    for (what, path, body, status) in &cases {
        let r = request(addr, "POST", path, body);
        assert_eq!(r.status, *status, "{what}: {}", r.body);
        if *status == 400 {
            let e = &r.json()["error"];
            assert!(e["message"].is_string() && e["type"] == "invalid_request_error", "{what}: {}", r.body);
            assert!(e.get("param").is_some() && e.get("code").is_some(), "{what}: {}", r.body);
        }
    }
    assert_eq!(request(addr, "GET", "/v1/completions", "").status, 405);
    let long = request(addr, "POST", "/v1/completions", &json!({"prompt": "hello ".repeat(40)}).to_string());
    assert_eq!(long.json()["error"]["code"], "context_length_exceeded");
    assert_eq!(request(addr, "GET", "/health", "").status, 200);
    let ok = post(addr, "/v1/completions", &json!({"prompt": "a", "max_tokens": 3, "temperature": 0}));
    assert_eq!(ok.status, 200, "{}", ok.body);
    let m = request(addr, "GET", "/metrics", "").body;
    assert!(m.contains("rlx_requests_total{endpoint=\"/v1/completions\",status=\"400\"} 17"), "{m}");
    server.shutdown().unwrap();
}

#[test]
fn a_client_that_leaves_mid_stream_does_not_stop_the_next_request() {
    let server = common::start(256, 8);
    let addr = server.addr();
    let body = json!({"prompt": "hello world", "max_tokens": 250, "temperature": 0.8, "seed": 1, "stream": true});
    let mut s = connect(addr);
    send(&mut s, "POST", "/v1/completions", &body.to_string());
    // Read until the first event has arrived, then hang up.
    let (mut got, mut buf) = (vec![], [0u8; 512]);
    while !String::from_utf8_lossy(&got).contains("data: ") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended before its first event");
        got.extend_from_slice(&buf[..n]);
    }
    drop(s);
    for _ in 0..3 {
        let r = post(addr, "/v1/completions", &json!({"prompt": "a", "max_tokens": 4, "temperature": 0}));
        assert_eq!(r.status, 200, "{}", r.body);
        let r = post(
            addr,
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": true}),
        );
        assert_eq!(r.events().last(), Some(&json!("[DONE]")));
    }
    assert_eq!(request(addr, "GET", "/health", "").status, 200);
    // Every page is back in the pool, the abandoned request's too (cancelled, or ended by a
    // sampled end-of-text token before the hang-up was seen). The scheduler notices the hang-up
    // on its next step, which may come after the requests above: wait for it, up to 10 s.
    let mut m = String::new();
    for _ in 0..200 {
        m = request(addr, "GET", "/metrics", "").body;
        if m.contains("rlx_kv_pages_used 0") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(m.contains("rlx_kv_pages_used 0"), "{m}");
    server.shutdown().unwrap();
}

#[test]
fn a_full_queue_answers_429_with_retry_after() {
    // One running and one waiting at most: of 16 simultaneous requests for 240 tokens each, the
    // later ones find the queue full (each takes far longer than all 16 take to arrive).
    let server = common::start(256, 1);
    let addr = server.addr();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(16));
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let r = post(addr, "/v1/completions", &json!({"prompt": "hello", "max_tokens": 240, "temperature": 0}));
                (r.status, r.header("retry-after").map(str::to_string), r.body)
            })
        })
        .collect();
    let replies: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    for (status, _, body) in &replies {
        assert!(*status == 200 || *status == 429, "{status}: {body}");
    }
    let busy: Vec<_> = replies.iter().filter(|r| r.0 == 429).collect();
    assert!(!busy.is_empty(), "no request was refused");
    assert!(replies.iter().any(|r| r.0 == 200));
    for (_, retry, body) in busy {
        assert_eq!(retry.as_deref(), Some("1"));
        assert!(body.contains("\"queue_full\""), "{body}");
    }
    assert_eq!(request(addr, "GET", "/health", "").status, 200);
    server.shutdown().unwrap();
}

#[test]
fn a_dropped_receiver_cancels_its_request_and_the_next_one_runs() {
    use rlx_models::llm::{BatchScheduler, PagedConfig, PagedModel};
    use rlx_models::{GgufTokenizer, SamplerConfig};
    use rlx_serve::{BatchEngine, Engine, Event, GenRequest};
    let path = common::fixture();
    let file = rlx_gguf::GgufFile::open(&path).unwrap();
    let tok = std::sync::Arc::new(GgufTokenizer::from_gguf(file.gguf(), "fixture").unwrap());
    let model = rlx_models::LlmModel::load(&path, rlx_driver::Device::Cpu, 256).unwrap();
    // One sequence row: requests run one after the other.
    let model = PagedModel::new(model, PagedConfig { max_seqs: 1, ..PagedConfig::full(1, 256) }).unwrap();
    let metrics = std::sync::Arc::new(rlx_serve::metrics::Metrics::default());
    let engine = BatchEngine::start(BatchScheduler::new(model), tok.clone(), 4, metrics.clone());
    let req = |max_tokens| GenRequest {
        prompt: tok.encode("hello world").unwrap(),
        max_tokens,
        sampler: SamplerConfig::default(),
        stop_tokens: vec![],
        stop: vec![],
    };
    // Dropped at once: cancelled in the queue or at its first token, never run to the end.
    drop(engine.submit(req(250)).unwrap());
    let mut rx = engine.submit(req(5)).unwrap();
    let mut done = None;
    while let Some(ev) = rx.blocking_recv() {
        if let Event::Done { completion_tokens, .. } = ev {
            done = Some(completion_tokens);
        }
    }
    assert_eq!(done, Some(5));
    // FCFS: the first request was settled before the second ran.
    let m = metrics.render();
    assert!(m.contains("rlx_requests_cancelled_total 1"), "{m}");
    assert!(!m.contains("rlx_generated_tokens_total 255"), "{m}");
    engine.shutdown();
    assert!(engine.submit(req(1)).is_err());
}
