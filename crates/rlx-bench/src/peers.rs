//! Python peers (numpy, JAX, ONNX Runtime) in one long-lived subprocess (`py/peer_server.py`),
//! so that their runs interleave with RLX's in the same rounds.

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// The Python interpreter: `RLX_PYTHON`, else `python3`.
pub fn python() -> String {
    std::env::var("RLX_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// A Python script that answers each command line on its stdin with one JSON line.
pub struct LineServer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    name: &'static str,
}

impl LineServer {
    /// Starts `python3 script`; `name` labels its errors.
    pub fn spawn(script: &str, name: &'static str) -> Result<Self, String> {
        let mut child = Command::new(python())
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {} {script}: {e}", python()))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(LineServer { child, stdin, stdout, name })
    }

    /// Sends one command and reads its JSON answer (an `error` field becomes Err).
    pub fn ask(&mut self, cmd: &str) -> Result<Value, String> {
        let name = self.name;
        // In-process peers (candle's rayon pool) and RLX's own pool go quiet first, too.
        settle();
        writeln!(self.stdin, "{cmd}").map_err(|e| format!("{name}: {e}"))?;
        self.stdin.flush().map_err(|e| format!("{name}: {e}"))?;
        let mut line = String::new();
        self.stdout.read_line(&mut line).map_err(|e| format!("{name}: {e}"))?;
        if line.is_empty() {
            return Err(format!("the {name} exited (are its Python modules installed?)"));
        }
        let v: Value = serde_json::from_str(&line).map_err(|e| format!("{name} answer: {e}"))?;
        settle();
        match v.get("error") {
            Some(e) => Err(e.as_str().unwrap_or("error").to_string()),
            None => Ok(v),
        }
    }
}

/// Waits for a peer's idle worker threads to stop spinning before anything else is timed:
/// OpenBLAS spins ~2^28 cycles (~70 ms here) after a call, XLA's and ONNX Runtime's pools spin
/// too, and on 2 cores that halved RLX's GFLOP/s timed right after. `RLX_BENCH_SETTLE_MS`
/// (default 200) sets the wait.
fn settle() {
    let ms = std::env::var("RLX_BENCH_SETTLE_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(200u64);
    std::thread::sleep(std::time::Duration::from_millis(ms));
}

impl Drop for LineServer {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The running peer server.
pub struct PyPeers {
    server: LineServer,
    /// Module versions that import (None where missing).
    pub have: Value,
}

impl PyPeers {
    /// Starts the server; fails with the reason when Python or numpy is missing.
    pub fn start() -> Result<Self, String> {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/peer_server.py");
        let mut p = PyPeers { server: LineServer::spawn(script, "peer server")?, have: Value::Null };
        p.have = p.ask("probe")?;
        Ok(p)
    }

    /// Whether `module` imports in the server.
    pub fn has(&self, module: &str) -> bool {
        self.have.get(module).is_some_and(|v| !v.is_null())
    }

    /// Sends one command and reads its JSON answer (an `error` field becomes Err).
    pub fn ask(&mut self, cmd: &str) -> Result<Value, String> {
        self.server.ask(cmd)
    }

    /// The `seconds` list of an answer, in milliseconds.
    pub fn ms(v: &Value) -> Vec<f64> {
        v.get("seconds")
            .and_then(Value::as_array)
            .map_or(vec![], |a| a.iter().filter_map(Value::as_f64).map(|s| s * 1e3).collect())
    }
}

/// The ONNX file of MiniLM written by the peers' `build_onnx.py`, built once into
/// `$CARGO_TARGET_DIR/peers`; Err with the reason otherwise. The script and its `common.py` are not
/// in this repository, so `RLX_PEERS_DIR` must name the folder that holds them: no default path,
/// which pointed at one machine's folder.
pub fn onnx_model() -> Result<String, String> {
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let dir = std::path::Path::new(&target).join("peers");
    let out = dir.join("bert_plain.onnx");
    if out.exists() {
        return Ok(out.display().to_string());
    }
    let peers = std::env::var("RLX_PEERS_DIR").map_err(|_| {
        "RLX_PEERS_DIR is not set: it names the folder of build_onnx.py and common.py, which write the ONNX graph of MiniLM"
            .to_string()
    })?;
    let script = std::path::Path::new(&peers).join("build_onnx.py");
    if !script.exists() {
        return Err(format!("{} not found (RLX_PEERS_DIR={peers})", script.display()));
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let st = Command::new(python())
        .arg(&script)
        .current_dir(&dir)
        .env("PYTHONPATH", &peers)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| e.to_string())?;
    if !out.exists() {
        return Err(format!("build_onnx.py did not write bert_plain.onnx ({st})"));
    }
    Ok(out.display().to_string())
}
