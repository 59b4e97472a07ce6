//! Square f32 matmul, n = 256 .. 4096: RLX's packed GEMM against candle, numpy and JAX (jit), interleaved
//! round by round; GFLOP/s from the median run of each. oneMKL (Intel's BLAS, the strongest f32
//! GEMM on Intel hosts) joins when `RLX_BENCH_MKL` names the folders holding `libmkl_rt.so.3` (or `.so.2`)
//! and `libiomp5.so`, e.g. from unpacked wheels (no system install):
//! `pip download mkl intel-openmp --no-deps -d /tmp/mklwheel && mkdir -p /tmp/mklx && cd /tmp/mklx &&
//! for w in /tmp/mklwheel/*.whl; do unzip -qo $w; done`, then
//! `RLX_BENCH_MKL=$(dirname $(find /tmp/mklx -name "libmkl_rt.so.*")):$(dirname $(find /tmp/mklx -name libiomp5.so))`.

use crate::candle_peer::CandleMatmul;
use crate::peers::PyPeers;
use crate::probe::{fma_peak_gflops, pingpong_ns};
use crate::stats::{Timer, median};
use rlx_cpu::gemm::{MatMut, MatRef, gemm};

/// Runs per round for size `n` (fewer for the big ones).
fn reps(n: usize) -> usize {
    match n {
        0..=512 => 20,
        513..=1024 => 8,
        // Two at 4096 as well: with one run a round, a neighbour's burst during one of the few
        // samples moved the median.
        _ => 2,
    }
}

/// The two n x n operands (the same values for every dtype), made with `cast`, on huge pages as
/// RLX's own buffers are (numpy's arrays from 4 MiB are too).
fn inputs<T: Clone>(n: usize, cast: impl Fn(f32) -> T) -> (Vec<T>, Vec<T>) {
    let fill = |f: &dyn Fn(usize) -> f32| {
        let mut v = rlx_driver::huge_pages::vec(n * n, cast(0.0));
        v.iter_mut().enumerate().for_each(|(i, x)| *x = cast(f(i)));
        v
    };
    (fill(&|i| ((i * 7 % 13) as f32 - 6.0) / 7.0), fill(&|i| ((i * 5 % 11) as f32 - 5.0) / 5.0))
}

/// A row-major n x n view of `x`.
fn view<T>(x: &[T], n: usize) -> MatRef<T> {
    MatRef { ptr: x.as_ptr(), rs: n as isize, cs: 1 }
}

/// Prints one line per size: GFLOP/s of each and RLX over the best peer.
pub fn run(sizes: &[usize], rounds: usize, py: &mut Option<PyPeers>) -> Result<(), String> {
    println!("\n## f32 matmul n x n x n (GFLOP/s, median; {rounds} interleaved rounds)");
    println!(
        "| n | RLX kernel | RLX Session a x param | RLX Session a x b | candle | numpy | JAX | oneMKL | RLX kernel / best peer | Session / best peer | FMA peak | RLX kernel / peak | Session / peak | ping-pong ns |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let threads = rlx_cpu::threads::num_threads();
    for &n in sizes {
        let (a, b) = inputs(n, |x| x);
        let mut c = rlx_driver::huge_pages::vec(n * n, 0f32);
        let cm = CandleMatmul::new(n)?;
        let (mut rlx, mut cand, mut np, mut jx, mut mk, mut pp) =
            (Timer::default(), Timer::default(), vec![], vec![], vec![], vec![]);
        // The same product as a user runs it: a compiled graph with B a param, and with B an input.
        let (mut sess_p, mut sess_i) = (Timer::default(), Timer::default());
        let mut with_param = session_matmul(n, true)?;
        with_param.set_param("b", &b).map_err(|e| e.to_string())?;
        let mut with_input = session_matmul(n, false)?;
        let mut param_run =
            || with_param.run(&[("a", &a)]).map(std::hint::black_box).map(|_| ()).map_err(|e| e.to_string());
        let mut input_run =
            || with_input.run(&[("a", &a), ("b", &b)]).map(std::hint::black_box).map(|_| ()).map_err(|e| e.to_string());
        param_run()?;
        input_run()?;
        // The FMA peak of the same threads, once per round (it moves with the clocks).
        let mut peak = vec![];
        let r = reps(n);
        let mut rlx_run = || {
            // SAFETY: the buffers hold n*n elements each and do not alias.
            unsafe { gemm(n, n, n, view(&a, n), view(&b, n), MatMut { ptr: c.as_mut_ptr(), rs: n as isize }) };
            Ok::<(), String>(())
        };
        rlx_run()?;
        cm.run()?;
        for _ in 0..rounds {
            pp.push(pingpong_ns());
            peak.push(fma_peak_gflops(threads));
            for _ in 0..r {
                rlx.time(&mut rlx_run)?;
            }
            for _ in 0..r {
                sess_p.time(&mut param_run)?;
            }
            for _ in 0..r {
                sess_i.time(&mut input_run)?;
            }
            for _ in 0..r {
                cand.time(|| cm.run())?;
            }
            if let Some(p) = py.as_mut().filter(|p| p.has("numpy")) {
                np.extend(PyPeers::ms(&p.ask(&format!("matmul {n} {r}"))?));
            }
            if let Some(p) = py.as_mut().filter(|p| p.has("jax")) {
                jx.extend(PyPeers::ms(&p.ask(&format!("jax_matmul {n} {r}"))?));
            }
            if let Some(p) = py.as_mut().filter(|p| p.has("mkl")) {
                mk.extend(PyPeers::ms(&p.ask(&format!("mkl_matmul {n} {r} {threads}"))?));
            }
        }
        let gf = |ms: f64| 2.0 * (n as f64).powi(3) / (ms * 1e-3) / 1e9;
        // `RLX_BENCH_TRACE=1`: every RLX run's GFLOP/s in order (shows rounds that ran slow).
        if std::env::var("RLX_BENCH_TRACE").is_ok() {
            eprintln!("{n}: RLX runs, GFLOP/s: {:?}", rlx.ms.iter().map(|&m| gf(m).round()).collect::<Vec<_>>());
        }
        let (g_rlx, g_c, g_np, g_jx) = (gf(rlx.median_ms()), gf(cand.median_ms()), gf(median(&np)), gf(median(&jx)));
        let g_mk = gf(median(&mk));
        let (g_sp, g_si) = (gf(sess_p.median_ms()), gf(sess_i.median_ms()));
        let g_sess = g_sp.min(g_si);
        // A missing peer is NaN: f64::max ignores it.
        let best = g_c.max(g_np).max(g_jx).max(g_mk);
        let show = |g: f64| if g.is_nan() { "skipped".to_string() } else { format!("{g:.1}") };
        let g_peak = median(&peak);
        println!(
            "| {n} | {g_rlx:.1} | {g_sp:.1} | {g_si:.1} | {g_c:.1} | {} | {} | {} | {:.3}x | {:.3}x | {g_peak:.1} | {:.1}% | {:.1}% | {:.0} |",
            show(g_np),
            show(g_jx),
            show(g_mk),
            g_rlx / best,
            g_sess / best,
            100.0 * g_rlx / g_peak,
            100.0 * g_sess / g_peak,
            median(&pp)
        );
    }
    Ok(())
}

/// `c = a @ b` for n x n f32 operands compiled through `Session` (the public API), with `b` a
/// param (`as_param`) or a second input.
fn session_matmul(n: usize, as_param: bool) -> Result<rlx_runtime::CompiledGraph, String> {
    use rlx_ir::{DType, Graph, Shape};
    let mut g = Graph::new("matmul");
    let a = g.input("a", Shape::new(&[n, n], DType::F32));
    let b = if as_param {
        g.param("b", Shape::new(&[n, n], DType::F32))
    } else {
        g.input("b", Shape::new(&[n, n], DType::F32))
    };
    let c = g.matmul(a, b);
    g.set_outputs(vec![c]);
    rlx_runtime::Session::new(rlx_driver::Device::Cpu).compile(g).map_err(|e| e.to_string())
}

/// bf16 n x n matmul (GFLOP/s): RLX's bf16 GEMM (f32 sums, bf16 out) against candle bf16 and
/// JAX jit with a bf16 result and with an f32 result (`preferred_element_type`), interleaved.
pub fn run_bf16(sizes: &[usize], rounds: usize, py: &mut Option<PyPeers>) -> Result<(), String> {
    use half::bf16;
    use rlx_cpu::gemm::half::gemm as gemm_half;
    println!("\n## bf16 matmul n x n x n (GFLOP/s, median; {rounds} interleaved rounds)");
    println!("| n | RLX (bf16 out) | candle | JAX (bf16 out) | JAX (f32 out) | RLX / best peer |");
    println!("|---|---|---|---|---|---|");
    for &n in sizes {
        let (a, b) = inputs(n, bf16::from_f32);
        let mut c = vec![bf16::ZERO; n * n];
        // candle 0.9 has no bf16 matmul on the CPU ("unsupported dtype"): its column says so.
        let cm = CandleMatmul::of(n, candle_core::DType::BF16).and_then(|c| c.run().map(|_| c)).ok();
        let (mut rlx, mut cand, mut jb, mut jf) = (Timer::default(), Timer::default(), vec![], vec![]);
        let r = reps(n);
        let mut rlx_run = || {
            // SAFETY: the buffers hold n*n elements each and do not alias.
            unsafe { gemm_half(n, n, n, view(&a, n), view(&b, n), MatMut { ptr: c.as_mut_ptr(), rs: n as isize }) };
            Ok::<(), String>(())
        };
        rlx_run()?;
        for _ in 0..rounds {
            for _ in 0..r {
                rlx.time(&mut rlx_run)?;
            }
            for _ in 0..r {
                if let Some(cm) = &cm {
                    cand.time(|| cm.run())?;
                }
            }
            if let Some(p) = py.as_mut().filter(|p| p.has("jax")) {
                jb.extend(PyPeers::ms(&p.ask(&format!("jax_matmul_bf16 {n} {r} 0"))?));
                jf.extend(PyPeers::ms(&p.ask(&format!("jax_matmul_bf16 {n} {r} 1"))?));
            }
        }
        let gf = |ms: f64| 2.0 * (n as f64).powi(3) / (ms * 1e-3) / 1e9;
        let (g_rlx, g_c, g_jb, g_jf) = (gf(rlx.median_ms()), gf(cand.median_ms()), gf(median(&jb)), gf(median(&jf)));
        let best = g_c.max(g_jb).max(g_jf);
        let show = |g: f64| if g.is_nan() { "skipped".to_string() } else { format!("{g:.1}") };
        let cand_s = if cm.is_some() { show(g_c) } else { "unsupported".into() };
        println!("| {n} | {g_rlx:.1} | {cand_s} | {} | {} | {:.3}x |", show(g_jb), show(g_jf), g_rlx / best);
    }
    Ok(())
}
