//! A minimal blocking HTTP/1.1 client for the server tests (127.0.0.1 only, bounded by socket
//! timeouts), so the tests need no HTTP client crate.

#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

/// The tiny Qwen3 fixture: GPT-2 BPE tokenizer, no chat template (the plain fallback).
pub fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rlx-models/tests/fixtures/llm/qwen3-f16.gguf")
}

/// A server on an ephemeral port of 127.0.0.1.
pub fn start(ctx: usize, queue: usize) -> rlx_serve::Server {
    let mut cfg = rlx_serve::ServeConfig::new(fixture());
    cfg.port = 0;
    cfg.ctx = Some(ctx);
    cfg.queue = queue;
    rlx_serve::Server::start(cfg).expect("server starts")
}

/// One response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The `data:` payloads of an event stream, `[DONE]` included as a string.
    pub fn events(&self) -> Vec<Value> {
        self.body
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(|d| if d == "[DONE]" { Value::String(d.into()) } else { serde_json::from_str(d).unwrap() })
            .collect()
    }
}

/// Opens a connection with bounded reads and writes.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// Writes one request (`Connection: close`).
pub fn send(s: &mut TcpStream, method: &str, path: &str, body: &str) {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
}

/// Sends a request and reads the whole response (chunked bodies joined).
pub fn request(addr: SocketAddr, method: &str, path: &str, body: &str) -> Reply {
    let mut s = connect(addr);
    send(&mut s, method, path, body);
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status = line.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("status line {line:?}"));
    let mut headers = vec![];
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let chunked = headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let mut body = vec![];
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            let n = usize::from_str_radix(line.trim(), 16).unwrap();
            if n == 0 {
                break;
            }
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).unwrap();
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        r.read_to_end(&mut body).unwrap();
    }
    Reply { status, headers, body: String::from_utf8(body).unwrap() }
}

pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Reply {
    request(addr, "POST", path, &body.to_string())
}
