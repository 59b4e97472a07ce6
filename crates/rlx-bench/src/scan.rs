//! A T-step RNN `h <- tanh(x wx + h wh + b)` through one `scan` in f32, loss `sum(hs^2) / T`:
//! RLX (CPU, `Session`) against JAX jit of `jax.lax.scan` (`tools/jax_scan_bench.py`, run as a
//! subprocess each round with the same shapes), forward (loss) and forward + backward (loss and
//! the gradients of wx, wh, b); compile times (RLX: the whole `Session::compile`, cache cleared;
//! JAX: lower + compile). Interleaved rounds, medians of the rounds' medians.

use crate::stats::{Timer, median};
use rlx_autodiff::{grad_with_loss, leaf};
use rlx_driver::Device;
use rlx_ir::{DType, Graph, HostTensor, NodeId, Shape};
use rlx_runtime::{Session, clear_memory_cache};
use std::time::Instant;

/// The RNN loss graph for `t` steps, batch `n`, input `d`, hidden `h`.
pub fn rnn(t: usize, n: usize, d: usize, h: usize) -> Graph {
    let s = |dims: &[usize]| Shape::new(dims, DType::F32);
    let mut body = Graph::new("step");
    let hh = body.input("h", s(&[n, h]));
    let x = body.input("x", s(&[n, d]));
    let wx = body.input("wx", s(&[d, h]));
    let wh = body.input("wh", s(&[h, h]));
    let b = body.input("b", s(&[h]));
    let a = body.matmul(x, wx);
    let r = body.matmul(hh, wh);
    let z = body.add(a, r);
    let z = body.add(z, b);
    let hn = body.tanh(z);
    body.set_outputs(vec![hn, hn]);
    let mut g = Graph::new("rnn");
    let wx = g.param("wx", s(&[d, h]));
    let wh = g.param("wh", s(&[h, h]));
    let b = g.param("b", s(&[h]));
    let h0 = g.input("h0", s(&[n, h]));
    let xs = g.input("xs", s(&[t, n, d]));
    let (_, hs) = g.scan(body, h0, xs, &[wx, wh, b]);
    let sq = g.square(hs);
    let e = g.sum_all(sq);
    let k = g.scalar(1.0 / t as f64, DType::F32);
    let l = g.mul(e, k);
    g.set_outputs(vec![l]);
    g
}

fn rand(dims: &[usize], seed: u64) -> Result<HostTensor, String> {
    let n = dims.iter().product();
    HostTensor::from_f64(dims, DType::F32, &rlx_ir::ops::util::rand_f64(n, -0.5, 0.5, seed)).map_err(|e| e.to_string())
}

/// A compiled graph with its feeds bound: compile time and a closure running it once.
struct Compiled {
    compile_ms: f64,
    run: Box<dyn FnMut() -> Result<(), String>>,
}

fn compile(g: &Graph, feeds: &[(&'static str, HostTensor)]) -> Result<Compiled, String> {
    clear_memory_cache();
    let t0 = Instant::now();
    let mut c = Session::new(Device::Cpu).compile(g.clone()).map_err(|e| e.to_string())?;
    let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
    let params: Vec<String> = c.params().iter().map(|(p, _)| p.to_string()).collect();
    let inputs: Vec<String> = c.inputs().iter().map(|(i, _)| i.to_string()).collect();
    for (name, t) in feeds.iter().filter(|(n, _)| params.iter().any(|p| p == n)) {
        c.set_param_tensor(name, t).map_err(|e| e.to_string())?;
    }
    let ins: Vec<(&'static str, HostTensor)> =
        feeds.iter().filter(|(n, _)| inputs.iter().any(|i| i == n)).map(|(n, t)| (*n, t.clone())).collect();
    let run = Box::new(move || {
        let refs: Vec<(&str, &HostTensor)> = ins.iter().map(|(n, t)| (*n, t)).collect();
        c.run_tensors(&refs).map(|_| ()).map_err(|e| e.to_string())
    });
    Ok(Compiled { compile_ms, run })
}

/// JAX's figures for one round: (forward compile, forward, backward compile, backward) in ms.
fn jax_round(t: usize, n: usize, d: usize, h: usize, reps: usize) -> Result<[f64; 4], String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/jax_scan_bench.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .args([t, n, d, h, reps].map(|v| v.to_string()))
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    if !out.status.success() {
        return Err(format!("jax_scan_bench.py: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("jax_scan_bench.py: {e}"))?;
    let f = |k: &str| v[k].as_f64().ok_or_else(|| format!("jax_scan_bench.py printed no {k}"));
    Ok([f("forward_compile_ms")?, f("forward_ms")?, f("backward_compile_ms")?, f("backward_ms")?])
}

/// Prints the table for `t` steps (batch 8, input 16, hidden 64): `rounds` interleaved rounds
/// of `reps` runs each; JAX is skipped (with a note) when its script fails.
pub fn run(t: usize, rounds: usize) -> Result<(), String> {
    let (n, d, h, reps) = (8, 16, 64, 20);
    let g = rnn(t, n, d, h);
    let wrt: Vec<NodeId> =
        ["wx", "wh", "b"].iter().map(|p| leaf(&g, p)).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let gr = grad_with_loss(&g, &wrt).map_err(|e| e.to_string())?;
    let feeds = [
        ("wx", rand(&[d, h], 1)?),
        ("wh", rand(&[h, h], 2)?),
        ("b", rand(&[h], 3)?),
        ("h0", rand(&[n, h], 4)?),
        ("xs", rand(&[t, n, d], 5)?),
    ];
    // Per figure (forward compile, forward, backward compile, backward): each round's value.
    let (mut rlx, mut jax): ([Vec<f64>; 4], [Vec<f64>; 4]) = Default::default();
    let mut jax_err = None;
    for _ in 0..rounds {
        for (k, graph) in [&g, &gr].into_iter().enumerate() {
            let mut c = compile(graph, &feeds)?;
            (c.run)()?;
            let mut timer = Timer::default();
            for _ in 0..reps {
                timer.time(&mut c.run)?;
            }
            rlx[2 * k].push(c.compile_ms);
            rlx[2 * k + 1].push(timer.median_ms());
        }
        match jax_round(t, n, d, h, reps) {
            Ok(v) => (0..4).for_each(|k| jax[k].push(v[k])),
            Err(e) => jax_err = Some(e),
        }
    }
    let (r, j): (Vec<f64>, Vec<f64>) =
        (rlx.iter().map(|v| median(v)).collect(), jax.iter().map(|v| median(v)).collect());
    println!(
        "\n## scan RNN, {t} steps, batch {n}, input {d}, hidden {h}, f32 (median ms; JAX / RLX > 1 means RLX is faster)\n"
    );
    if let Some(e) = jax_err {
        println!("JAX skipped in some rounds: {e}\n");
    }
    println!("| figure | RLX ms | JAX ms | JAX / RLX |");
    println!("|---|---|---|---|");
    for (k, name) in
        ["forward compile", "forward run", "forward + backward compile", "forward + backward run"].iter().enumerate()
    {
        let ratio = if j[k].is_nan() { "-".to_string() } else { format!("{:.2}x", j[k] / r[k]) };
        println!("| {name} | {:.3} | {:.3} | {ratio} |", r[k], j[k]);
    }
    Ok(())
}
