//! rlx-bench: RLX and its peers measured side by side in the same run (interleaved rounds,
//! medians), printed as Markdown tables with ratios.
//!
//! `rlx-bench all | matmul [N..] | matmul_bf16 [N..] | minilm [BATCH..] | qwen3 [SEQ..] | qwen3_bf16 [SEQ..] | ops [RUNS [FILTER]] | qmatmul [q6_k] [M..] | decode MODEL.gguf [TOKENS] |
//! profile [BATCH SEQ RUNS] | train [STEPS] | pjrt [BATCH..] | mlx [BATCH..] | fft [LOG2_N..] | linalg [BATCH..] | sparse [GRID] | scan [T]` (MiniLM through rlx-pjrt vs JAX jit, rlx-mlx vs MLX Python);
//! `RLX_BENCH_ROUNDS` sets the rounds (default 5).

mod candle_peer;
mod decode;
mod fft;
mod linalg;
mod matmul;
mod minilm;
mod ops;
mod peers;
mod pjrt;
mod probe;
mod qmatmul;
mod qwen3;
mod scan;
mod sparse;
mod stats;
mod train;

use peers::PyPeers;

fn header() {
    println!("# rlx-bench");
    println!(
        "threads {} (RLX_NUM_THREADS / affinity), AVX2+FMA {}, load average {:.2} at start",
        rlx_cpu::threads::num_threads(),
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma"),
        probe::load_avg()
    );
}

fn python(need: bool) -> Option<PyPeers> {
    if !need {
        return None;
    }
    match PyPeers::start() {
        Ok(p) => {
            println!("python peers: {}", p.have);
            Some(p)
        }
        Err(e) => {
            println!("python peers skipped: {e}");
            None
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nums: Vec<usize> = args.iter().skip(1).filter_map(|s| s.parse().ok()).collect();
    let rounds = std::env::var("RLX_BENCH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5usize).max(1);
    let mm_sizes = |d: &[usize]| if nums.is_empty() { d.to_vec() } else { nums.clone() };
    let r = match args.first().map(String::as_str) {
        Some("all") => {
            header();
            let mut py = python(true);
            minilm::compare(1, 128, rounds, &mut py)
                .and_then(|_| minilm::compare(8, 128, rounds, &mut py))
                .and_then(|_| qwen3::compare(128, rounds, &mut py, false))
                .and_then(|_| matmul::run(&[256, 512, 1024, 2048, 4096], rounds, &mut py))
        }
        Some("matmul") => {
            header();
            matmul::run(&mm_sizes(&[256, 512, 1024, 2048, 4096]), rounds, &mut python(true))
        }
        Some("matmul_bf16") => {
            header();
            matmul::run_bf16(&mm_sizes(&[512, 1024, 2048]), rounds, &mut python(true))
        }
        Some("minilm") => {
            header();
            let mut py = python(true);
            let batches = if nums.is_empty() { vec![1, 8] } else { nums.clone() };
            batches.iter().try_for_each(|&b| minilm::compare(b, 128, rounds, &mut py))
        }
        Some(cmd @ ("qwen3" | "qwen3_bf16")) => {
            header();
            let mut py = python(true);
            let seqs = if nums.is_empty() { vec![128] } else { nums.clone() };
            seqs.iter().try_for_each(|&s| qwen3::compare(s, rounds, &mut py, cmd == "qwen3_bf16"))
        }
        Some("pjrt") => {
            header();
            let mut py = python(true);
            let batches = if nums.is_empty() { vec![1, 8] } else { nums.clone() };
            batches.iter().try_for_each(|&b| pjrt::compare(rlx_driver::Device::Tpu, b, 128, rounds, &mut py))
        }
        Some("mlx") => {
            header();
            let mut py = python(true);
            let batches = if nums.is_empty() { vec![1, 8] } else { nums.clone() };
            batches.iter().try_for_each(|&b| pjrt::compare(rlx_driver::Device::Mlx, b, 128, rounds, &mut py))
        }
        Some("qmatmul") => {
            header();
            let q6 = args.iter().any(|a| a.eq_ignore_ascii_case("q6_k"));
            let scheme = if q6 { rlx_ir::QuantScheme::Q6_K } else { rlx_ir::QuantScheme::Q4_K };
            qmatmul::run(&if nums.is_empty() { vec![1, 2, 4, 8, 16, 128] } else { nums.clone() }, rounds, scheme)
        }
        Some("decode") => {
            header();
            match args.get(1) {
                Some(path) => decode::run(path, nums.first().copied().unwrap_or(128), rounds),
                None => Err("usage: rlx-bench decode MODEL.gguf [TOKENS]".into()),
            }
        }
        Some("compile") => minilm::compile_only(nums.first().copied().unwrap_or(1)),
        Some("train") => {
            header();
            train::compare(rounds, nums.first().copied().unwrap_or(3))
        }
        Some("fft") => {
            header();
            fft::run(&if nums.is_empty() { (16..=22).collect() } else { nums.clone() }, rounds, &mut python(true))
        }
        Some("linalg") => {
            header();
            linalg::run(1024, &if nums.is_empty() { vec![1, 4] } else { nums.clone() }, rounds, &mut python(true))
        }
        Some("sparse") => {
            header();
            sparse::run(nums.first().copied().unwrap_or(512), rounds, &mut python(true))
        }
        Some("scan") => {
            header();
            scan::run(nums.first().copied().unwrap_or(1000), rounds)
        }
        Some("ops") => ops::run(nums.first().copied().unwrap_or(20), args.get(2).map(String::as_str)),
        Some("profile") => {
            let n = |i: usize, d: usize| nums.get(i).copied().unwrap_or(d);
            minilm::profile(n(0, 1), n(1, 128), n(2, 20))
        }
        _ => {
            Err("usage: rlx-bench all | matmul [N..] | matmul_bf16 [N..] | minilm [BATCH..] | qwen3 [SEQ..] | qwen3_bf16 [SEQ..] | ops [RUNS [FILTER]] | qmatmul [q6_k] [M..] | decode MODEL.gguf [TOKENS] | profile [BATCH SEQ RUNS] | train [STEPS_PER_ROUND] | pjrt [BATCH..] | mlx [BATCH..] | fft [LOG2_N..] | linalg [BATCH..] | sparse [GRID] | scan [T]".into())
        }
    };
    if let Err(e) = r {
        eprintln!("rlx-bench: {e}");
        std::process::exit(1);
    }
}
