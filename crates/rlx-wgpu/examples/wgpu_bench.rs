//! Side-by-side smoke timings: f32 matmul and a MiniLM-sized block on wgpu and on the CPU
//! backend, in the same process; median of several runs. On lavapipe (a CPU Vulkan driver) the
//! wgpu figures say little about GPUs. Run: `cargo run --release -p rlx-wgpu --example wgpu_bench`.

use rlx_driver::Device;
use rlx_ir::{DType, Graph, Shape};
use rlx_runtime::Session;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median seconds of `reps` runs of `g` (params and inputs of ones) after one warm-up run.
fn time(device: Device, g: &Graph, reps: usize) -> rlx_ir::Result<f64> {
    let mut c = Session::new(device).compile(g.clone())?;
    for (name, s) in c.params().to_vec() {
        c.set_param(&name, &vec![0.01; s.numel().unwrap_or(0)])?;
    }
    let inputs: Vec<(String, Vec<u8>)> =
        c.inputs().iter().map(|(n, s)| (n.clone(), vec![0u8; s.size_bytes().unwrap_or(0)])).collect();
    let refs: Vec<&[u8]> = inputs.iter().map(|(_, b)| b.as_slice()).collect();
    let mut outs: Vec<Vec<u8>> = c.outputs().iter().map(|s| vec![0u8; s.size_bytes().unwrap_or(0)]).collect();
    let mut run = |c: &mut rlx_runtime::CompiledGraph| -> rlx_ir::Result<f64> {
        let mut o: Vec<&mut [u8]> = outs.iter_mut().map(|b| b.as_mut_slice()).collect();
        let t = Instant::now();
        c.run_into(&refs, &mut o)?;
        Ok(t.elapsed().as_secs_f64())
    };
    run(&mut c)?;
    let v = (0..reps).map(|_| run(&mut c)).collect::<rlx_ir::Result<Vec<_>>>()?;
    Ok(median(v))
}

fn matmul(n: usize) -> Graph {
    let mut g = Graph::new(format!("matmul{n}"));
    let a = g.input("a", Shape::new(&[n, n], DType::F32));
    let b = g.param("b", Shape::new(&[n, n], DType::F32));
    let y = g.matmul(a, b);
    g.set_outputs(vec![y]);
    g
}

/// One BERT-base-like encoder block at MiniLM width: attention projections, softmax, MLP, norms.
fn block(seq: usize, d: usize) -> Graph {
    let mut g = Graph::new("block");
    let x = g.input("x", Shape::new(&[seq, d], DType::F32));
    let p = |g: &mut Graph, n: &str, dims: &[usize]| g.param(n, Shape::new(dims, DType::F32));
    let (wq, wk, wv, wo) =
        (p(&mut g, "wq", &[d, d]), p(&mut g, "wk", &[d, d]), p(&mut g, "wv", &[d, d]), p(&mut g, "wo", &[d, d]));
    let (w1, w2) = (p(&mut g, "w1", &[d, 4 * d]), p(&mut g, "w2", &[4 * d, d]));
    let (gm, bt) = (p(&mut g, "gamma", &[d]), p(&mut g, "beta", &[d]));
    let q = g.matmul(x, wq);
    let k = g.matmul(x, wk);
    let v = g.matmul(x, wv);
    let kt = g.transpose(k, &[1, 0]);
    let s = g.matmul(q, kt);
    let a = g.softmax(s, -1);
    let h = g.matmul(a, v);
    let h = g.matmul(h, wo);
    let h = g.add(h, x);
    let h = g.layer_norm(h, gm, bt, 1e-12);
    let f = g.matmul(h, w1);
    let f = g.gelu(f);
    let f = g.matmul(f, w2);
    let y = g.add(f, h);
    let y = g.layer_norm(y, gm, bt, 1e-12);
    g.set_outputs(vec![y]);
    g
}

fn main() -> rlx_ir::Result<()> {
    let info = rlx_wgpu::WgpuBackend::adapter_info()?;
    println!("adapter: {} ({:?}, {:?})", info.name, info.device_type, info.backend);
    println!("| workload | cpu ms | wgpu ms | wgpu/cpu time | wgpu GFLOP/s |");
    println!("|---|---|---|---|---|");
    // Per-run overhead: upload, one submission, readback of 4 bytes.
    let mut g = Graph::new("tiny");
    let x = g.input("x", Shape::new(&[1], DType::F32));
    let y = g.exp(x);
    g.set_outputs(vec![y]);
    let (c, w) = (time(Device::Cpu, &g, 21)?, time(Device::Wgpu, &g, 21)?);
    println!("| exp of 1 element (per-run overhead) | {:.3} | {:.3} | {:.0} | - |", c * 1e3, w * 1e3, w / c);
    for n in [256, 512, 1024] {
        let g = matmul(n);
        let (c, w) = (time(Device::Cpu, &g, 7)?, time(Device::Wgpu, &g, 7)?);
        let gf = 2.0 * (n as f64).powi(3) / w / 1e9;
        println!("| matmul {n}^3 | {:.2} | {:.2} | {:.2} | {gf:.1} |", c * 1e3, w * 1e3, w / c);
    }
    let g = block(128, 384);
    let (c, w) = (time(Device::Cpu, &g, 7)?, time(Device::Wgpu, &g, 7)?);
    println!("| encoder block s128 d384 | {:.2} | {:.2} | {:.2} | - |", c * 1e3, w * 1e3, w / c);
    // all-MiniLM-L6-v2 on 7 sentences, when RLX_MINILM_DIR points at the model files.
    if let Ok(dir) = std::env::var("RLX_MINILM_DIR") {
        let texts =
            ["The cat sits on the mat.", "A quick brown fox", "Rust is a systems language", "hello", "x", "y", "z"];
        let mut ms = vec![];
        for device in [Device::Cpu, Device::Wgpu] {
            let mut m = rlx_models::SentenceEmbedder::load(&dir, device)?;
            m.embed(&texts)?;
            let v = (0..5)
                .map(|_| {
                    let t = Instant::now();
                    m.embed(&texts).map(|_| t.elapsed().as_secs_f64())
                })
                .collect::<rlx_ir::Result<Vec<_>>>()?;
            ms.push(median(v));
        }
        println!("| MiniLM-L6 embed, 7 texts | {:.2} | {:.2} | {:.2} | - |", ms[0] * 1e3, ms[1] * 1e3, ms[1] / ms[0]);
    }
    Ok(())
}
