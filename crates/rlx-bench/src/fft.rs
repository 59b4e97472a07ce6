//! rfft of 2^16 .. 2^22 f32 points: RLX (`Graph::rfft` compiled through `Session`, the CPU
//! kernel on realfft) against numpy.fft.rfft (pocketfft; float32 in, complex64 out), interleaved
//! rounds, medians. RLX's time includes copying the input into its arena and the spectrum out.

use crate::peers::PyPeers;
use crate::stats::{Timer, median};
use rlx_driver::Device;
use rlx_ir::ops::FftNorm;
use rlx_ir::{DType, Graph, Shape};
use rlx_runtime::Session;

/// Runs per round for `n` points (fewer for the long transforms).
fn reps(n: usize) -> usize {
    if n >= 1 << 21 { 5 } else { 20 }
}

/// Prints one table row per log2 size in `logs`.
pub fn run(logs: &[usize], rounds: usize, py: &mut Option<PyPeers>) -> Result<(), String> {
    println!("\n## rfft, f32 (median ms; numpy / RLX > 1 means RLX is faster)\n");
    println!("| n | RLX ms | numpy ms | numpy / RLX |");
    println!("|---|---|---|---|");
    for &lg in logs {
        let n = 1usize << lg;
        let mut g = Graph::new("rfft");
        let x = g.input("x", Shape::new(&[n], DType::F32));
        let y = g.rfft(x, None, FftNorm::Backward);
        g.set_outputs(vec![y]);
        let mut c = Session::new(Device::Cpu).compile(g).map_err(|e| e.to_string())?;
        // The same values numpy draws (uniform in [0, 1)); the timing does not depend on them.
        let input: Vec<u8> = (0..n)
            .flat_map(|i| (((i as u32).wrapping_mul(2_654_435_761) >> 8) as f32 / 16_777_216.0).to_le_bytes())
            .collect();
        let mut out = vec![0u8; (n / 2 + 1) * 2 * 4];
        let mut once = || c.run_into(&[&input], &mut [&mut out]).map_err(|e| e.to_string());
        once()?;
        let (mut rlx, mut np) = (Timer::default(), vec![]);
        for _ in 0..rounds {
            for _ in 0..reps(n) {
                rlx.time(&mut once)?;
            }
            if let Some(p) = py.as_mut().filter(|p| p.has("numpy")) {
                np.extend(PyPeers::ms(&p.ask(&format!("rfft {n} {}", reps(n)))?));
            }
        }
        let (r, p) = (rlx.median_ms(), median(&np));
        let show = |v: f64| if v.is_nan() { "skipped".to_string() } else { format!("{v:.3}") };
        println!(
            "| 2^{lg} | {r:.3} | {} | {} |",
            show(p),
            if p.is_nan() { "-".into() } else { format!("{:.2}x", p / r) }
        );
    }
    Ok(())
}
