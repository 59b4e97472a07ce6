//! A square f32 matmul timed through the public API, as a user writes it: `a` an input, `b` a
//! param (or a second input with `--two-inputs`), `Session::compile`, `set_param`, then `run`
//! (15 timed runs after 2 warm-ups), beside the GEMM kernel called directly on the same values.
//!
//! `cargo run --release -p rlx --example matmul_api -- 1024 2048`

use rlx::prelude::*;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> rlx::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let two_inputs = args.iter().any(|a| a == "--two-inputs");
    // `--api-only`: no direct calls (for a profile of the compiled graph alone).
    let api_only = args.iter().any(|a| a == "--api-only");
    let sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    for n in if sizes.is_empty() { vec![256, 512, 1024, 2048] } else { sizes } {
        let mut g = Graph::new("matmul");
        let a = g.input("a", Shape::new(&[n, n], DType::F32));
        let b = if two_inputs {
            g.input("b", Shape::new(&[n, n], DType::F32))
        } else {
            g.param("b", Shape::new(&[n, n], DType::F32))
        };
        let c = g.matmul(a, b);
        g.set_outputs(vec![c]);
        let mut exe = Session::new(Device::Cpu).compile(g)?;
        let av: Vec<f32> = (0..n * n).map(|i| ((i * 7 % 13) as f32 - 6.0) / 7.0).collect();
        let bv: Vec<f32> = (0..n * n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 5.0).collect();
        if !two_inputs {
            exe.set_param("b", &bv)?;
        }
        let flops = 2.0 * (n as f64).powi(3);
        let mut api = vec![];
        for r in 0..17 {
            let t = Instant::now();
            let out = if two_inputs { exe.run(&[("a", &av), ("b", &bv)])? } else { exe.run(&[("a", &av)])? };
            std::hint::black_box(out);
            if r >= 2 {
                api.push(t.elapsed().as_secs_f64());
            }
        }
        let mut cbuf = vec![0f32; n * n];
        let mut direct = vec![];
        for r in 0..if api_only { 3 } else { 17 } {
            let t = Instant::now();
            // SAFETY: the buffers hold n*n elements each and do not alias.
            unsafe {
                rlx_cpu::gemm::gemm(
                    n,
                    n,
                    n,
                    rlx_cpu::gemm::MatRef { ptr: av.as_ptr(), rs: n as isize, cs: 1 },
                    rlx_cpu::gemm::MatRef { ptr: bv.as_ptr(), rs: n as isize, cs: 1 },
                    rlx_cpu::gemm::MatMut { ptr: cbuf.as_mut_ptr(), rs: n as isize },
                )
            };
            if r >= 2 {
                direct.push(t.elapsed().as_secs_f64());
            }
        }
        let (ta, td) = (median(api), median(direct));
        println!(
            "n={n}{}: API {:.2} ms ({:.1} GFLOP/s), direct gemm {:.2} ms ({:.1} GFLOP/s), API/direct {:.2}x",
            if two_inputs { " (two inputs)" } else { "" },
            ta * 1e3,
            flops / ta / 1e9,
            td * 1e3,
            flops / td / 1e9,
            ta / td
        );
    }
    Ok(())
}
