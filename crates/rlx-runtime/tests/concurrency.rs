//! Concurrency: one compiled graph run from several threads through every form of sharing the
//! API offers, and different graphs run at once on the one process-wide CPU thread pool.
//!
//! `CompiledGraph::run` takes `&mut self` and a compiled graph is `Send` but not `Sync`, so one
//! graph reaches several threads behind a `Mutex`, or as compiled copies that share its params
//! (`share_params_from`): read-only (external) params let the copies run at once, writable ones
//! make them take one lock per run. Every result must equal a serial run of the same inputs bit
//! for bit (each kernel splits its work the same way whichever pool thread runs which part), and
//! every test waits for its threads with a timeout, so a deadlock fails naming what hung.
//! The process's thread count (`RLX_NUM_THREADS`, 1 included) changes nothing here.

use rlx_driver::Device;
use rlx_ir::ops::UnaryKind;
use rlx_ir::ops::util::rand_f64;
use rlx_ir::{DType, Graph, HostTensor, MaskKind, NodeId, QuantScheme, Shape};
use rlx_runtime::{CompiledGraph, Session};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Threads that share one graph.
const THREADS: usize = 4;
/// Runs per thread.
const ITERS: usize = 50;
/// How long a test waits for its threads before calling it a hang.
const LIMIT: Duration = Duration::from_secs(120);
/// Input sets per case; threads start at different ones, so runs at once see different inputs.
const SETS: usize = 3;

type Job<T> = (String, Box<dyn FnOnce() -> T + Send>);

fn job<T>(name: impl Into<String>, f: impl FnOnce() -> T + Send + 'static) -> Job<T> {
    (name.into(), Box::new(f))
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

/// Runs each job on a thread of its own and returns their results in order. Fails when a job
/// panics (with its name and message), or when they have not all finished within `LIMIT`,
/// naming those still running: a deadlock shows as a hang, never as a slow assertion.
fn run_jobs<T: Send + 'static>(jobs: Vec<Job<T>>) -> Vec<T> {
    let (tx, rx) = channel();
    let names: Vec<String> = jobs.iter().map(|(n, _)| n.clone()).collect();
    for (i, (name, f)) in jobs.into_iter().enumerate() {
        let tx = tx.clone();
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send((i, r.map_err(panic_message)));
        });
        spawned.expect("spawn a test thread");
    }
    drop(tx);
    let deadline = Instant::now() + LIMIT;
    let mut results: Vec<Option<T>> = names.iter().map(|_| None).collect();
    for _ in 0..names.len() {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((i, Ok(v))) => results[i] = Some(v),
            Ok((i, Err(msg))) => panic!("`{}` panicked: {msg}", names[i]),
            Err(RecvTimeoutError::Timeout) => {
                let hung: Vec<&String> =
                    names.iter().zip(&results).filter(|(_, r)| r.is_none()).map(|(n, _)| n).collect();
                panic!("hung: {hung:?} still running after {LIMIT:?} (a deadlock?)");
            }
            Err(RecvTimeoutError::Disconnected) => panic!("a test thread ended without reporting"),
        }
    }
    results.into_iter().map(|r| r.expect("every job reported")).collect()
}

fn f32s(d: &[usize]) -> Shape {
    Shape::new(d, DType::F32)
}

fn rand(n: usize, scale: f64, seed: u64) -> Vec<f32> {
    rand_f64(n, -scale, scale, seed).into_iter().map(|v| v as f32).collect()
}

/// A graph to run at once with others, the values of its params (one or more sets: a job may
/// switch between them; they differ in one param, since `set_param` writes one param per call
/// and a run on another copy may come between two calls) and its input sets.
struct Case {
    name: &'static str,
    graph: fn() -> Graph,
    params: Vec<Vec<(&'static str, HostTensor)>>,
    inputs: Vec<Vec<(&'static str, Vec<f32>)>>,
}

/// Outputs as bits, so that equality is exact (and -0.0 differs from 0.0).
type Bits = Vec<Vec<u32>>;

impl Case {
    fn compile(&self) -> CompiledGraph {
        self.compile_in(&Session::new(Device::Cpu))
    }

    fn compile_in(&self, session: &Session) -> CompiledGraph {
        let mut c = session.compile((self.graph)()).unwrap();
        self.set_params(&mut c, 0);
        c
    }

    fn set_params(&self, c: &mut CompiledGraph, set: usize) {
        for (name, t) in &self.params[set] {
            c.set_param_tensor(name, t).unwrap();
        }
    }

    fn names(&self) -> Vec<&'static str> {
        self.params[0].iter().map(|(n, _)| *n).collect()
    }

    fn run(&self, c: &mut CompiledGraph, set: usize) -> Bits {
        let feeds: Vec<(&str, &[f32])> = self.inputs[set].iter().map(|(n, v)| (*n, v.as_slice())).collect();
        let outs = c.run(&feeds).unwrap_or_else(|e| panic!("{}: {e}", self.name));
        outs.iter().map(|o| o.iter().map(|x| x.to_bits()).collect()).collect()
    }

    /// Serial results of every input set under every param set, `[params][inputs]`, from `c`
    /// (left with the first param set).
    fn serial(&self, c: &mut CompiledGraph) -> Vec<Vec<Bits>> {
        let refs = (0..self.params.len())
            .map(|p| {
                self.set_params(c, p);
                (0..SETS).map(|s| self.run(c, s)).collect()
            })
            .collect();
        self.set_params(c, 0);
        refs
    }

    /// Runs input set `set` and checks it against the serial result `want`.
    fn check(&self, c: &mut CompiledGraph, set: usize, want: &Bits, what: &str) {
        self.check_any(c, set, &[want], what)
    }

    /// Runs input set `set` and checks that it equals one of the serial results `wants`.
    fn check_any(&self, c: &mut CompiledGraph, set: usize, wants: &[&Bits], what: &str) {
        let got = self.run(c, set);
        if wants.iter().any(|w| **w == got) {
            return;
        }
        let w = wants[0];
        let o = (0..got.len()).find(|&o| got[o] != w[o]).expect("an output differs");
        let i = (0..got[o].len()).find(|&i| got[o][i] != w[o][i]).expect("an element differs");
        let (g, w) = (f32::from_bits(got[o][i]), f32::from_bits(w[o][i]));
        let also = if wants.len() > 1 { format!(" (nor any of {} others)", wants.len() - 1) } else { String::new() };
        panic!("{} ({what}, input set {set}): output {o}[{i}] is {g:e}, the serial run gave {w:e}{also}", self.name);
    }

    /// `ITERS` checked runs of `c` with the first param set, starting at input set `first`.
    fn check_many(&self, c: &mut CompiledGraph, refs: &[Vec<Bits>], first: usize, what: &str) {
        for j in 0..ITERS {
            let set = (first + j) % SETS;
            self.check(c, set, &refs[0][set], &format!("{what}, run {j}"));
        }
    }
}

/// `set` with param `name` replaced by `value`.
fn replaced(
    set: &[(&'static str, HostTensor)],
    (name, value): (&'static str, HostTensor),
) -> Vec<(&'static str, HostTensor)> {
    assert!(set.iter().any(|(n, _)| *n == name), "no param `{name}`");
    set.iter().map(|(n, t)| (*n, if *n == name { value.clone() } else { t.clone() })).collect()
}

fn weight(name: &'static str, dims: &[usize], scale: f64, seed: u64) -> (&'static str, HostTensor) {
    let n = dims.iter().product();
    (name, HostTensor::from_f32(dims, &rand(n, scale, seed)).unwrap())
}

const SEQ: usize = 64;
const D: usize = 128;
const HEADS: usize = 4;
const FF: usize = 256;
const VOCAB: usize = 192;

/// A pre-norm transformer block and a softmax head: layer norms, Q/K/V projections (merged into
/// one stacked matmul), causal attention, residuals, a GELU MLP.
fn block_graph() -> Graph {
    let mut g = Graph::new("block");
    let x = g.input("x", f32s(&[SEQ, D]));
    let mut p = |name: &str, dims: &[usize]| g.param(name, f32s(dims));
    let (g1, b1, wq, wk, wv, wo) =
        (p("g1", &[D]), p("b1", &[D]), p("wq", &[D, D]), p("wk", &[D, D]), p("wv", &[D, D]), p("wo", &[D, D]));
    let (g2, b2, w1, w2, head) =
        (p("g2", &[D]), p("b2", &[D]), p("w1", &[D, FF]), p("w2", &[FF, D]), p("head", &[D, VOCAB]));
    let h = g.layer_norm(x, g1, b1, 1e-5);
    let heads = |g: &mut Graph, w: NodeId| {
        let y = g.matmul(h, w);
        let y = g.reshape(y, &[1, SEQ, HEADS, D / HEADS]);
        g.transpose(y, &[0, 2, 1, 3])
    };
    let (q, k, v) = (heads(&mut g, wq), heads(&mut g, wk), heads(&mut g, wv));
    let a = g.attention(q, k, v, MaskKind::Causal, 1.0 / ((D / HEADS) as f32).sqrt());
    let a = g.transpose(a, &[0, 2, 1, 3]);
    let a = g.reshape(a, &[SEQ, D]);
    let o = g.matmul(a, wo);
    let x2 = g.add(x, o);
    let h2 = g.layer_norm(x2, g2, b2, 1e-5);
    let f = g.matmul(h2, w1);
    let f = g.unary(UnaryKind::Gelu, f);
    let f = g.matmul(f, w2);
    let x3 = g.add(x2, f);
    let logits = g.matmul(x3, head);
    let probs = g.softmax(logits, -1);
    g.set_outputs(vec![probs, x3]);
    g
}

fn block() -> Case {
    let ws = |seed: u64| {
        let ones = HostTensor::from_f32(&[D], &[1.0; D]).unwrap();
        vec![
            ("g1", ones.clone()),
            weight("b1", &[D], 0.1, seed),
            weight("wq", &[D, D], 0.1, seed + 1),
            weight("wk", &[D, D], 0.1, seed + 2),
            weight("wv", &[D, D], 0.1, seed + 3),
            weight("wo", &[D, D], 0.1, seed + 4),
            ("g2", ones),
            weight("b2", &[D], 0.1, seed + 5),
            weight("w1", &[D, FF], 0.1, seed + 6),
            weight("w2", &[FF, D], 0.1, seed + 7),
            weight("head", &[D, VOCAB], 0.1, seed + 8),
        ]
    };
    let inputs = (0..SETS).map(|s| vec![("x", rand(SEQ * D, 1.0, 100 + s as u64))]).collect();
    let other = replaced(&ws(10), weight("wq", &[D, D], 0.1, 31));
    Case { name: "block", graph: block_graph, params: vec![ws(10), other], inputs }
}

const M_BIG: usize = 512;
const K_BIG: usize = 256;
const N_BIG: usize = 384;

/// A product of two runtime inputs with many rows: B is a view, packed by the product itself
/// into buffers shared by the process (the whole-B buffer and its claim states).
fn big_matmul_graph() -> Graph {
    let mut g = Graph::new("big_matmul");
    let a = g.input("a", f32s(&[M_BIG, K_BIG]));
    let b = g.input("b", f32s(&[K_BIG, N_BIG]));
    let y = g.matmul(a, b);
    g.set_outputs(vec![y]);
    g
}

fn big_matmul() -> Case {
    let inputs = (0..SETS)
        .map(|s| vec![("a", rand(M_BIG * K_BIG, 1.0, 200 + s as u64)), ("b", rand(K_BIG * N_BIG, 1.0, 210 + s as u64))])
        .collect();
    Case { name: "big_matmul", graph: big_matmul_graph, params: vec![vec![]], inputs }
}

/// A product with B transposed (packed whole before the tasks run) and several k blocks: with
/// `big_matmul` it contends for the process's whole-B buffer, and the one that finds it busy
/// takes another path, whose sums must come out the same.
fn big_matmul_t_graph() -> Graph {
    let mut g = Graph::new("big_matmul_t");
    let a = g.input("a", f32s(&[448, 640]));
    let b = g.input("b", f32s(&[256, 640]));
    let y = g.matmul_t(a, b, false, true);
    g.set_outputs(vec![y]);
    g
}

fn big_matmul_t() -> Case {
    let inputs = (0..SETS)
        .map(|s| vec![("a", rand(448 * 640, 1.0, 220 + s as u64)), ("b", rand(256 * 640, 1.0, 230 + s as u64))])
        .collect();
    Case { name: "big_matmul_t", graph: big_matmul_t_graph, params: vec![vec![]], inputs }
}

const K_WIDE: usize = 1024;

/// A product whose A rows lie 4 KiB apart (copied with a padded stride into the process's shared
/// buffer), a packed weight, and a bias + ReLU epilogue.
fn wide_k_graph() -> Graph {
    let mut g = Graph::new("wide_k");
    let x = g.input("x", f32s(&[64, K_WIDE]));
    let w = g.param("w", f32s(&[K_WIDE, 256]));
    let b = g.param("bias", f32s(&[256]));
    let y = g.matmul(x, w);
    let y = g.add(y, b);
    let y = g.unary(UnaryKind::Relu, y);
    g.set_outputs(vec![y]);
    g
}

fn wide_k() -> Case {
    let ws = |seed| vec![weight("w", &[K_WIDE, 256], 0.05, seed), weight("bias", &[256], 0.1, seed + 1)];
    let inputs = (0..SETS).map(|s| vec![("x", rand(64 * K_WIDE, 1.0, 300 + s as u64))]).collect();
    let other = replaced(&ws(40), weight("w", &[K_WIDE, 256], 0.05, 50));
    Case { name: "wide_k", graph: wide_k_graph, params: vec![ws(40), other], inputs }
}

const KQ: usize = 512;

/// Quantized matmuls: a Q4_K weight read by prefill (16 rows) and decode (1 row) inputs, then a
/// Q8_0 layer; the Q4_K weight is repacked once per param version, one copy for all graphs.
fn quant_graph() -> Graph {
    let mut g = Graph::new("quant");
    let xp = g.input("xp", f32s(&[16, KQ]));
    let xd = g.input("xd", f32s(&[1, KQ]));
    let w4 = g.param("w4", Shape::new(&[256, QuantScheme::Q4_K.row_bytes(KQ).unwrap()], DType::U8));
    let w8 = g.param("w8", Shape::new(&[128, QuantScheme::Q8_0.row_bytes(256).unwrap()], DType::U8));
    let yp = g.qmatmul(xp, w4, QuantScheme::Q4_K, KQ);
    let yp = g.qmatmul(yp, w8, QuantScheme::Q8_0, 256);
    let yd = g.qmatmul(xd, w4, QuantScheme::Q4_K, KQ);
    g.set_outputs(vec![yp, yd]);
    g
}

fn quant() -> Case {
    let packed = |name, s: QuantScheme, n: usize, k: usize, seed| {
        let bytes = s.quantize_rows(&rand(n * k, 1.0, seed), k).unwrap();
        let bytes: Vec<i64> = bytes.into_iter().map(i64::from).collect();
        (name, HostTensor::from_i64(&[n, bytes.len() / n], DType::U8, &bytes).unwrap())
    };
    let ws = |seed| {
        vec![packed("w4", QuantScheme::Q4_K, 256, KQ, seed), packed("w8", QuantScheme::Q8_0, 128, 256, seed + 1)]
    };
    let inputs = (0..SETS)
        .map(|s| vec![("xp", rand(16 * KQ, 1.0, 400 + s as u64)), ("xd", rand(KQ, 1.0, 410 + s as u64))])
        .collect();
    // The repacked Q4_K weight is the one that changes.
    let other = replaced(&ws(60), packed("w4", QuantScheme::Q4_K, 256, KQ, 70));
    Case { name: "quant", graph: quant_graph, params: vec![ws(60), other], inputs }
}

/// Elementwise math fused into one parallel loop, and a row reduction.
fn elementwise_graph() -> Graph {
    let mut g = Graph::new("elementwise");
    let x = g.input("x", f32s(&[512, 512]));
    let t = g.unary(UnaryKind::Tanh, x);
    let sq = g.mul(x, x);
    let e = g.unary(UnaryKind::Neg, sq);
    let e = g.unary(UnaryKind::Exp, e);
    let s = g.unary(UnaryKind::Sigmoid, x);
    let s = g.mul(s, x);
    let y = g.mul(t, e);
    let y = g.add(y, s);
    let r = g.sum(y, &[1], false);
    g.set_outputs(vec![y, r]);
    g
}

fn elementwise() -> Case {
    let inputs = (0..SETS).map(|s| vec![("x", rand(512 * 512, 3.0, 500 + s as u64))]).collect();
    Case { name: "elementwise", graph: elementwise_graph, params: vec![vec![]], inputs }
}

/// A bf16 product and GELU (AMX tiles where the CPU has them, else f32 sums of widened values).
fn bf16_graph() -> Graph {
    let mut g = Graph::new("bf16");
    let x = g.input("x", Shape::new(&[128, 256], DType::BF16));
    let w = g.param("w", Shape::new(&[256, 256], DType::BF16));
    let y = g.matmul(x, w);
    let y = g.unary(UnaryKind::Gelu, y);
    g.set_outputs(vec![y]);
    g
}

fn bf16() -> Case {
    let w =
        |seed| vec![("w", HostTensor::from_f32(&[256, 256], &rand(256 * 256, 0.1, seed)).unwrap().cast(DType::BF16))];
    let inputs = (0..SETS).map(|s| vec![("x", rand(128 * 256, 1.0, 600 + s as u64))]).collect();
    Case { name: "bf16", graph: bf16_graph, params: vec![w(80)], inputs }
}

/// Read-only bytes of every param of a case, each at a 64-byte offset (as a weight file's).
struct Blob(Vec<u64>);

impl AsRef<[u8]> for Blob {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: u64s are plain bytes; the slice covers exactly the vector's elements.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast::<u8>(), self.0.len() * 8) }
    }
}

/// Binds every param of `c` (compiled from `case`) to read-only bytes of one shared blob.
fn bind_external(case: &Case, c: &mut CompiledGraph) {
    let bytes: Vec<Vec<u8>> = case.params[0].iter().map(|(_, t)| t.to_bytes()).collect();
    let mut at = Vec::new();
    let mut blob = Vec::new();
    for b in &bytes {
        at.push(blob.len());
        blob.extend_from_slice(b);
        blob.resize(blob.len().next_multiple_of(64), 0);
    }
    let words = blob.chunks(8).map(|w| u64::from_le_bytes(w.try_into().unwrap())).collect();
    let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(Blob(words));
    for (((name, t), b), &o) in case.params[0].iter().zip(&bytes).zip(&at) {
        c.bind_param_external(name, owner.clone(), o..o + b.len(), t.dtype()).unwrap();
    }
}

/// `case` compiled `THREADS` times, params set (or bound, `external`) in the first and shared by
/// the others, with the serial results of the first. The copies share every param buffer, and
/// a lock only where the params are writable.
fn copies(case: &Case, external: bool) -> (Vec<CompiledGraph>, Vec<Vec<Bits>>) {
    let mut first = case.compile();
    let refs = case.serial(&mut first);
    if external {
        bind_external(case, &mut first);
    }
    let names = case.names();
    let mut all = vec![first];
    for _ in 1..THREADS {
        let mut c = Session::new(Device::Cpu).compile((case.graph)()).unwrap();
        c.share_params_from(&all[0], &names).unwrap();
        all.push(c);
    }
    for name in &names {
        let source = all[0].param_share(name).unwrap();
        for c in &all[1..] {
            let share = c.param_share(name).unwrap();
            assert!(Arc::ptr_eq(&share.buffer, &source.buffer), "{}: `{name}` is not shared", case.name);
            match (&share.group, &source.group) {
                (None, None) => assert!(external, "{}: writable `{name}` shared without a lock", case.name),
                (Some(a), Some(b)) => assert!(!external && a.same(b), "{}: `{name}` in another group", case.name),
                _ => panic!("{}: `{name}` is locked by one graph and not by the other", case.name),
            }
        }
    }
    (all, refs)
}

/// Every copy of `cases` on its own thread, all at once, each checked against the serial runs.
/// With writable params, the first copy switches them between two sets before each of its runs,
/// so each run of the others must match the serial run under one set or the other: the shared
/// lock keeps a write from landing half-way through a run.
fn run_copies(cases: Vec<Case>, external: bool) {
    let mut jobs = Vec::new();
    for case in cases {
        let case = Arc::new(case);
        let (graphs, refs) = copies(&case, external);
        let refs = Arc::new(refs);
        for (t, mut c) in graphs.into_iter().enumerate() {
            let (case, refs) = (case.clone(), refs.clone());
            let switches = !external && case.params.len() > 1;
            jobs.push(job(format!("{} copy {t}", case.name), move || {
                for j in 0..ITERS {
                    let set = (t + j) % SETS;
                    let what = format!("copy {t}, run {j}");
                    if !switches {
                        case.check(&mut c, set, &refs[0][set], &what);
                    } else if t == 0 {
                        let p = (j + 1) % 2;
                        case.set_params(&mut c, p);
                        case.check(&mut c, set, &refs[p][set], &format!("{what}, its own param set {p}"));
                    } else {
                        case.check_any(&mut c, set, &[&refs[0][set], &refs[1][set]], &what);
                    }
                }
            }));
        }
    }
    run_jobs(jobs);
}

#[test]
fn one_graph_behind_a_mutex_serves_four_threads() {
    // A compiled graph moves to another thread (`Send`); `run` needs `&mut`, hence the mutex.
    fn sendable<T: Send>() {}
    sendable::<CompiledGraph>();
    let mut jobs = Vec::new();
    for case in [block(), quant()] {
        let case = Arc::new(case);
        let mut c = case.compile();
        let refs = Arc::new(case.serial(&mut c));
        let shared = Arc::new(Mutex::new(c));
        for t in 0..THREADS {
            let (case, refs, shared) = (case.clone(), refs.clone(), shared.clone());
            jobs.push(job(format!("{} thread {t}", case.name), move || {
                for j in 0..ITERS {
                    let set = (t + j) % SETS;
                    // A panicking thread poisons the mutex: the others go on, so its message is the one reported.
                    let mut c = shared.lock().unwrap_or_else(|e| e.into_inner());
                    case.check(&mut c, set, &refs[0][set], &format!("thread {t}, run {j}"));
                }
            }));
        }
    }
    run_jobs(jobs);
}

#[test]
fn copies_sharing_read_only_params_run_at_once() {
    // No lock between them: the copies' runs overlap, the quantized weight's repacked copy is
    // made by whichever first run gets there and shared by the four.
    run_copies(vec![block(), quant(), wide_k()], true);
}

#[test]
fn copies_sharing_writable_params_take_turns() {
    run_copies(vec![block(), quant(), wide_k()], false);
}

#[test]
fn different_graphs_run_at_once_on_one_pool() {
    // One session compiles for every thread (`compile` takes `&self`).
    fn shareable<T: Send + Sync>() {}
    shareable::<Session>();
    let session = Arc::new(Session::new(Device::Cpu));
    let cases = [block(), big_matmul(), big_matmul_t(), wide_k(), quant(), elementwise(), bf16()];
    let mut jobs = Vec::new();
    for case in cases {
        let case = Arc::new(case);
        let refs = Arc::new(case.serial(&mut case.compile()));
        // Compiled inside the thread: compiles (each starts the pool and waits for every worker
        // to check in) overlap the other graphs' runs.
        let (c2, r2, s2) = (case.clone(), refs.clone(), session.clone());
        jobs.push(job(case.name, move || c2.check_many(&mut c2.compile_in(&s2), &r2, 0, "alone on its thread")));
        if case.params.len() > 1 {
            // Params rewritten before every run: kernels re-derive what they cache per param
            // version (packed weights, the shared repacked quantized copy) while others run.
            let session = session.clone();
            jobs.push(job(format!("{} with params switched", case.name), move || {
                let mut c = case.compile_in(&session);
                for j in 0..ITERS {
                    let (p, set) = (j % 2, (j + 1) % SETS);
                    case.set_params(&mut c, p);
                    case.check(&mut c, set, &refs[p][set], &format!("param set {p}, run {j}"));
                }
            }));
        }
    }
    run_jobs(jobs);
}

const STATE: usize = 1 << 16;

/// `c <- c + x`, `t <- t + c` (the new c), both outputs: after k runs with x = 1 every element
/// of c is k and every element of t is k(k+1)/2, so a lost update or a run that saw another
/// half-way shows in any output.
fn counter_graph() -> Graph {
    let mut g = Graph::new("counter");
    let c = g.param("c", f32s(&[STATE]));
    let t = g.param("t", f32s(&[STATE]));
    let x = g.input("x", f32s(&[STATE]));
    let c2 = g.add(c, x);
    let t2 = g.add(t, c2);
    g.update_param(c, c2);
    g.update_param(t, t2);
    g.set_outputs(vec![c2, t2]);
    g
}

/// Reads the state without changing it: `c * one`, `t * one`.
fn observer_graph() -> Graph {
    let mut g = Graph::new("observer");
    let c = g.param("c", f32s(&[STATE]));
    let t = g.param("t", f32s(&[STATE]));
    let one = g.input("one", f32s(&[1]));
    let (c, t) = (g.mul(c, one), g.mul(t, one));
    g.set_outputs(vec![c, t]);
    g
}

/// The value every element of `v` holds; fails on a torn state (elements that differ).
fn uniform(v: &[f32], what: &str) -> f32 {
    if let Some(i) = v.iter().position(|&x| x != v[0]) {
        panic!("{what}: element {i} is {} where element 0 is {}: a torn update", v[i], v[0]);
    }
    v[0]
}

/// The k with k(k+1)/2 = `t`: the run count a whole t shows.
fn triangular_root(t: f32, what: &str) -> usize {
    let k = ((2.0 * t as f64 + 0.25).sqrt() - 0.5).round() as usize;
    assert_eq!((k * (k + 1) / 2) as f32, t, "{what}: t = {t} is no count of runs");
    k
}

/// The run count k that a state `(c, t)` read at once shows, checking that it is whole: every
/// element of c equal to k and of t to k(k+1)/2.
fn count_of(c: &[f32], t: &[f32], what: &str) -> usize {
    let k = uniform(c, &format!("{what}, c"));
    assert_eq!(triangular_root(uniform(t, &format!("{what}, t")), what) as f32, k, "{what}: c and t disagree");
    k as usize
}

/// Checks that the counts every run saw are exactly 1..=n: no two runs saw the same state.
fn assert_each_count_once(mut seen: Vec<usize>, what: &str) {
    seen.sort_unstable();
    let n = seen.len();
    if let Some(i) = (0..n).find(|&i| seen[i] != i + 1) {
        panic!("{what}: {n} runs, but the {i}-th smallest count is {} (a lost update or a run seen twice)", seen[i]);
    }
}

fn counter() -> CompiledGraph {
    let mut c = Session::new(Device::Cpu).compile(counter_graph()).unwrap();
    c.set_param("c", &vec![0.0; STATE]).unwrap();
    c.set_param("t", &vec![0.0; STATE]).unwrap();
    c
}

fn count_once(c: &mut CompiledGraph, ones: &[f32], what: &str) -> usize {
    let out = c.run(&[("x", ones)]).unwrap();
    count_of(&out[0], &out[1], what)
}

#[test]
fn a_state_shared_by_four_copies_loses_no_update_and_is_never_seen_torn() {
    // Three writers and an observer share the state: each run holds the group's lock, so every
    // writer sees a count no other run saw, and the observer only whole states, never fewer
    // runs than it saw before.
    let first = counter();
    let mut graphs = vec![first];
    for _ in 1..THREADS - 1 {
        let mut c = Session::new(Device::Cpu).compile(counter_graph()).unwrap();
        c.share_params_from(&graphs[0], &["c", "t"]).unwrap();
        graphs.push(c);
    }
    let mut observer = Session::new(Device::Cpu).compile(observer_graph()).unwrap();
    observer.share_params_from(&graphs[0], &["c", "t"]).unwrap();
    // Kept here to read the final state once the threads are done.
    let mut reader = Session::new(Device::Cpu).compile(observer_graph()).unwrap();
    reader.share_params_from(&graphs[0], &["c", "t"]).unwrap();
    let writers = graphs.len();
    let mut jobs: Vec<Job<Vec<usize>>> = graphs
        .into_iter()
        .enumerate()
        .map(|(w, mut c)| {
            job(format!("writer {w}"), move || {
                let ones = vec![1.0; STATE];
                (0..ITERS).map(|j| count_once(&mut c, &ones, &format!("writer {w}, run {j}"))).collect()
            })
        })
        .collect();
    jobs.push(job("observer", move || {
        let mut last = 0;
        for j in 0..2 * ITERS {
            let out = observer.run(&[("one", &[1.0])]).unwrap();
            let k = count_of(&out[0], &out[1], &format!("observer run {j}"));
            // Two reads, each whole, a writer's run possibly between them.
            let c = observer.get_param("c").unwrap().to_f32_vec().unwrap();
            let kc = uniform(&c, &format!("get_param(c) after run {j}")) as usize;
            let t = observer.get_param("t").unwrap().to_f32_vec().unwrap();
            let what = format!("get_param(t) after run {j}");
            let k2 = triangular_root(uniform(&t, &what), &what);
            assert!(
                last <= k && k <= kc && kc <= k2,
                "observer run {j}: counts {last}, {k}, {kc}, {k2} went backwards"
            );
            last = k2;
        }
        vec![]
    }));
    let seen: Vec<usize> = run_jobs(jobs).into_iter().flatten().collect();
    assert_each_count_once(seen, "writers sharing the state");
    let (c, t) = (reader.get_param("c").unwrap(), reader.get_param("t").unwrap());
    assert_eq!(count_of(&c.to_f32_vec().unwrap(), &t.to_f32_vec().unwrap(), "the final state"), writers * ITERS);
}

#[test]
fn a_stateful_graph_behind_a_mutex_counts_every_run() {
    let shared = Arc::new(Mutex::new(counter()));
    let jobs = (0..THREADS)
        .map(|t| {
            let shared = shared.clone();
            job(format!("thread {t}"), move || {
                let ones = vec![1.0; STATE];
                let what = |j| format!("thread {t}, run {j}");
                let mut runs = Vec::new();
                for j in 0..ITERS {
                    // A panicking thread poisons the mutex: the others go on, so its message is the one reported.
                    runs.push(count_once(&mut shared.lock().unwrap_or_else(|e| e.into_inner()), &ones, &what(j)));
                }
                runs
            })
        })
        .collect();
    let seen: Vec<usize> = run_jobs(jobs).into_iter().flatten().collect();
    assert_each_count_once(seen, "threads sharing the graph");
    let c = shared.lock().unwrap_or_else(|e| e.into_inner());
    let (cs, ts) = (c.get_param("c").unwrap().to_f32_vec().unwrap(), c.get_param("t").unwrap().to_f32_vec().unwrap());
    assert_eq!(count_of(&cs, &ts, "the final state"), THREADS * ITERS);
}
