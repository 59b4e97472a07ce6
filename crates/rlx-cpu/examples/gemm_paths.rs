//! The n^3 f32 product with B packed whole before the tasks run (the default) against B packed
//! a block at a time (`set_whole_b_packing(false)`: shared by the threads; with
//! `RLX_NUM_THREADS=1` the blocked loop), as % of the FMA peak measured in the same round, the
//! two alternated call by call; operands on 2 MiB pages, as RLX's own buffers are.
//!
//! `cargo run --release -p rlx-cpu --example gemm_paths -- [n..] [--rounds R]`

use rlx_cpu::gemm::{MatMut, MatRef, gemm, set_whole_b_packing};
use rlx_cpu::peak::fma_peak_gflops;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let (mut rounds, mut sizes) = (7usize, Vec::new());
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), arg.parse::<usize>()) {
            ("--rounds", _) => rounds = args.next().and_then(|r| r.parse().ok()).expect("--rounds takes a count"),
            (_, Ok(n)) if n > 0 => sizes.push(n),
            _ => panic!("unexpected argument {arg:?}: sizes and --rounds R"),
        }
    }
    let rounds = rounds.max(1);
    if sizes.is_empty() {
        sizes = vec![512, 1024, 2048, 4096];
    }
    let threads = rlx_cpu::threads::num_threads();
    println!("f32 n^3 on {threads} threads, % of the FMA peak (median of {rounds} rounds)");
    println!("| n | B packed whole | B a block at a time | whole / block |");
    println!("|---|---|---|---|");
    for n in sizes {
        let fill = |f: fn(usize) -> f32| {
            let mut v = rlx_driver::huge_pages::vec(n * n, 0f32);
            v.iter_mut().enumerate().for_each(|(i, x)| *x = f(i));
            v
        };
        let (a, b) = (fill(|i| (i % 11) as f32 * 0.01), fill(|i| (i % 13) as f32 * 0.01));
        let mut c = rlx_driver::huge_pages::vec(n * n, 0f32);
        let view = |x: &[f32]| MatRef { ptr: x.as_ptr(), rs: n as isize, cs: 1 };
        let flops = 2.0 * (n as f64).powi(3);
        let calls = ((3e10 / flops).ceil() as usize).max(2);
        let mut run = |whole: bool| {
            set_whole_b_packing(whole);
            let t = Instant::now();
            // SAFETY: the buffers hold n * n elements each and do not alias.
            unsafe { gemm(n, n, n, view(&a), view(&b), MatMut { ptr: c.as_mut_ptr(), rs: n as isize }) };
            flops / t.elapsed().as_secs_f64() / 1e9
        };
        run(true);
        run(false);
        let (mut whole, mut shared) = (vec![], vec![]);
        for r in 0..rounds {
            let peak = fma_peak_gflops(threads);
            let (mut w, mut s) = (vec![], vec![]);
            for i in 0..calls {
                // Alternated, the first of each pair swapping round by round.
                let first = (i + r) % 2 == 0;
                let x = run(first);
                let y = run(!first);
                let (gw, gs) = if first { (x, y) } else { (y, x) };
                w.push(gw);
                s.push(gs);
            }
            whole.push(median(w) / peak);
            shared.push(median(s) / peak);
        }
        set_whole_b_packing(true);
        let (w, s) = (median(whole), median(shared));
        println!("| {n} | {:.1}% | {:.1}% | {:.3}x |", 100.0 * w, 100.0 * s, w / s);
    }
}
