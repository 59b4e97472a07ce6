//! RLX's side of the scan RNN benchmark (JAX's: tools/jax_scan_bench.py, same shapes): a T-step
//! RNN `h <- tanh(x wx + h wh + b)` through one `scan` in f32, loss `sum(hs^2) / T`; compile time
//! (the whole `Session::compile`, cache cleared) and the median run of the forward (loss) and of
//! the forward and backward (loss and gradients of wx, wh, b), on the CPU.
//!
//! Run: `cargo run --release -p rlx-autodiff --example scan_rnn_bench [T] [BATCH] [IN] [HIDDEN] [REPS]`

use rlx_autodiff::{grad_with_loss, leaf};
use rlx_driver::Device;
use rlx_ir::{DType, Graph, HostTensor, NodeId, Shape};
use rlx_runtime::{Session, clear_memory_cache};
use std::time::Instant;

fn rnn(t: usize, n: usize, d: usize, h: usize) -> Graph {
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

fn rand(dims: &[usize], seed: u64) -> HostTensor {
    let n = dims.iter().product();
    HostTensor::from_f64(dims, DType::F32, &rlx_ir::ops::util::rand_f64(n, -0.5, 0.5, seed)).unwrap()
}

fn bench(g: &Graph, feeds: &[(&str, HostTensor)], reps: usize) -> (f64, f64) {
    clear_memory_cache();
    let t0 = Instant::now();
    let mut c = Session::new(Device::Cpu).compile(g.clone()).expect("compile");
    let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
    for (name, t) in feeds {
        if c.params().iter().any(|(p, _)| p == name) {
            c.set_param_tensor(name, t).unwrap();
        }
    }
    let ins: Vec<(&str, &HostTensor)> =
        feeds.iter().filter(|(n, _)| c.inputs().iter().any(|(i, _)| i == n)).map(|(n, t)| (*n, t)).collect();
    c.run_tensors(&ins).unwrap();
    let mut runs: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            c.run_tensors(&ins).unwrap();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    (compile_ms, runs[runs.len() / 2])
}

fn main() {
    let a: Vec<usize> = std::env::args().skip(1).map(|s| s.parse().expect("a number")).collect();
    let at = |i: usize, d: usize| a.get(i).copied().unwrap_or(d);
    let (t, n, d, h, reps) = (at(0, 1000), at(1, 8), at(2, 16), at(3, 64), at(4, 20));
    let g = rnn(t, n, d, h);
    let wrt: Vec<NodeId> = ["wx", "wh", "b"].iter().map(|p| leaf(&g, p).unwrap()).collect();
    let gr = grad_with_loss(&g, &wrt).unwrap();
    let feeds = [
        ("wx", rand(&[d, h], 1)),
        ("wh", rand(&[h, h], 2)),
        ("b", rand(&[h], 3)),
        ("h0", rand(&[n, h], 4)),
        ("xs", rand(&[t, n, d], 5)),
    ];
    let (fc, fr) = bench(&g, &feeds, reps);
    let (bc, br) = bench(&gr, &feeds, reps);
    println!(
        "{{\"rlx\":\"cpu\",\"T\":{t},\"N\":{n},\"D\":{d},\"H\":{h},\"forward_compile_ms\":{fc:.3},\"forward_ms\":{fr:.3},\
         \"backward_compile_ms\":{bc:.3},\"backward_ms\":{br:.3},\"nodes\":[{},{}]}}",
        g.len(),
        gr.len()
    );
}
