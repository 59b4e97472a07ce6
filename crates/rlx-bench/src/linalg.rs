//! Batched dense solve, f64: RLX (`rlx_linalg::solve` compiled through `Session`, the CPU kernel
//! on faer, batch items spread over RLX's pool) against numpy.linalg.solve (LAPACK gesv through
//! numpy's BLAS, items one after another, each on BLAS's threads), interleaved rounds, medians.
//! Both solve `B` systems `[n, n] x = [n, 1]`; RLX's time includes copying the operands into its
//! arena and the solution out.

use crate::peers::PyPeers;
use crate::stats::{Timer, median};
use rlx_driver::Device;
use rlx_ir::{DType, Graph, Shape};
use rlx_runtime::Session;

/// Runs per round.
const REPS: usize = 3;

/// Prints one table row per batch size in `batches`, for `n x n` systems.
pub fn run(n: usize, batches: &[usize], rounds: usize, py: &mut Option<PyPeers>) -> Result<(), String> {
    rlx_linalg::register().map_err(|e| e.to_string())?;
    println!("\n## batched solve, f64, {n}x{n} (median ms; numpy / RLX > 1 means RLX is faster)\n");
    println!("| batch | RLX ms | numpy ms | numpy / RLX |");
    println!("|---|---|---|---|");
    for &bs in batches {
        let mut g = Graph::new("solve");
        let a = g.input("a", Shape::new(&[bs, n, n], DType::F64));
        let b = g.input("b", Shape::new(&[bs, n, 1], DType::F64));
        let x = rlx_linalg::solve(&mut g, a, b);
        g.set_outputs(vec![x]);
        let mut c = Session::new(Device::Cpu).compile(g).map_err(|e| e.to_string())?;
        // Uniform values in [0, 1) plus n on the diagonal, as numpy's operands: well conditioned.
        let val = |i: usize| ((i as u32).wrapping_mul(2_654_435_761) >> 8) as f64 / 16_777_216.0;
        let av: Vec<u8> = (0..bs * n * n)
            .flat_map(|i| (val(i) + if (i / n) % n == i % n { n as f64 } else { 0.0 }).to_le_bytes())
            .collect();
        let bv: Vec<u8> = (0..bs * n).flat_map(|i| val(i + 7).to_le_bytes()).collect();
        let mut out = vec![0u8; bs * n * 8];
        let mut once = || c.run_into(&[&av, &bv], &mut [&mut out]).map_err(|e| e.to_string());
        once()?;
        let (mut rlx, mut np) = (Timer::default(), vec![]);
        for _ in 0..rounds {
            for _ in 0..REPS {
                rlx.time(&mut once)?;
            }
            if let Some(p) = py.as_mut().filter(|p| p.has("numpy")) {
                np.extend(PyPeers::ms(&p.ask(&format!("solve {n} {bs} {REPS}"))?));
            }
        }
        let (r, p) = (rlx.median_ms(), median(&np));
        let show = |v: f64| if v.is_nan() { "skipped".to_string() } else { format!("{v:.2}") };
        println!(
            "| {bs} | {r:.2} | {} | {} |",
            show(p),
            if p.is_nan() { "-".into() } else { format!("{:.2}x", p / r) }
        );
    }
    Ok(())
}
