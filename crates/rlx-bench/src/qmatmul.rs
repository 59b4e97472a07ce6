//! Quantized matmul through `Session`, as a model runs it: `x [m, k] @ dequant(w)^T` with `w` a
//! Q4_K (or, with `q6_k` among the arguments, Q6_K) param of the FFN shape of the 362M Llama (k = 2048, n = 5632), for m = 1 (decode) up to
//! prefill-sized row counts. The product runs over copies of the weights (96 MiB in all, more
//! than any L3 here) in turn, so every call streams its weights from memory as a model's layers
//! do. Beside each, a read-bandwidth probe in the same round (a sum over 512 MiB on the same
//! threads), so weight streaming shows as a fraction of what the memory gives.

use crate::stats::{Timer, median};
use rlx_ir::{DType, Graph, QuantScheme, Shape};
use rlx_runtime::CompiledGraph;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

const K: usize = 2048;
const N: usize = 5632;

/// GB/s of a read-sum over `buf` split across the CPU pool's threads.
pub fn read_gbs(buf: &[u32]) -> f64 {
    let tasks = rlx_cpu::threads::num_threads() * 8;
    let chunk = buf.len().div_ceil(tasks);
    let total = AtomicU32::new(0);
    let t = Instant::now();
    rlx_cpu::threads::parallel_for(tasks, &|i| {
        let part = &buf[(i * chunk).min(buf.len())..((i + 1) * chunk).min(buf.len())];
        // Wrapping integer sums vectorize (float sums would keep their order and not).
        let s = part.iter().fold(0u32, |a, &x| a.wrapping_add(x));
        total.fetch_add(s, Ordering::Relaxed);
    });
    std::hint::black_box(total.load(Ordering::Relaxed));
    std::mem::size_of_val(buf) as f64 / t.elapsed().as_secs_f64() / 1e9
}

/// The compiled `x @ w^T` for `m` rows, its quantized weights set.
fn compiled(m: usize, packed: &[u8], rb: usize, scheme: QuantScheme) -> Result<CompiledGraph, String> {
    let mut g = Graph::new("qmatmul");
    let x = g.input("x", Shape::new(&[m, K], DType::F32));
    let w = g.param("w", Shape::new(&[N, rb], DType::U8));
    let y = g.qmatmul(x, w, scheme, K);
    g.set_outputs(vec![y]);
    let mut c = rlx_runtime::Session::new(rlx_driver::Device::Cpu).compile(g).map_err(|e| e.to_string())?;
    c.set_param_typed("w", packed, DType::U8).map_err(|e| e.to_string())?;
    Ok(c)
}

/// Prints one line per row count: ms per product, GB/s of weights read, GMAC/s, and the probe.
pub fn run(rows: &[usize], rounds: usize, scheme: QuantScheme) -> Result<(), String> {
    let rb = scheme.row_bytes(K)?;
    let w: Vec<f32> = (0..N * K).map(|i| ((i * 7919 % 2003) as f32 - 1001.0) / 1001.0).collect();
    let packed = scheme.quantize_rows(&w, K).map_err(|e| e.to_string())?;
    let gb = packed.len() as f64 / 1e9;
    // On huge pages, as the weights are: the probe is what memory gives without page walks.
    let probe_buf = rlx_driver::huge_pages::vec(128usize << 20, 1u32);
    println!("\n## {scheme:?} matmul x [m, {K}] . w [{N}, {K}]^T through Session (median of {rounds} rounds)");
    println!("| m | ms | weights GB/s | GMAC/s | read probe GB/s | weights / probe |");
    println!("|---|---|---|---|---|---|");
    let copies = (96usize << 20).div_ceil(packed.len());
    for &m in rows {
        let mut cs = (0..copies).map(|_| compiled(m, &packed, rb, scheme)).collect::<Result<Vec<_>, _>>()?;
        let x: Vec<f32> = (0..m * K).map(|i| ((i * 31 % 97) as f32 - 48.0) / 48.0).collect();
        let mut next = 0;
        let mut call = || {
            next = (next + 1) % copies;
            cs[next].run(&[("x", &x)]).map(std::hint::black_box).map(|_| ()).map_err(|e| e.to_string())
        };
        for _ in 0..copies {
            call()?;
        }
        let reps = (64 / m).clamp(2, 32);
        let (mut t, mut probe) = (Timer::default(), vec![]);
        for _ in 0..rounds {
            probe.push(read_gbs(&probe_buf));
            for _ in 0..reps {
                t.time(&mut call)?;
            }
        }
        let ms = t.median_ms();
        let p = median(&probe);
        let wgbs = gb / (ms * 1e-3);
        let gmacs = (m * N * K) as f64 / (ms * 1e-3) / 1e9;
        println!("| {m} | {ms:.3} | {wgbs:.1} | {gmacs:.1} | {p:.1} | {:.2} |", wgbs / p);
    }
    Ok(())
}
