//! Fits a random scene of Gaussians to a target image by Adam through `splat_render`'s
//! gradient, and writes `target.png`, `initial.png` and `fitted.png`.
//!
//! Run: `cargo run --release -p rlx-splat --example fit -- [out_dir] [steps]`
//! (defaults: `splat_fit`, 300).

use rlx_cpu::CpuBackend;
use rlx_ir::{DType, Graph, Shape};
use rlx_splat::{Camera, Scene, SplatRender};
use std::error::Error;
use std::path::Path;

const COLS: [usize; 5] = [3, 3, 4, 0, 3];
const NAMES: [&str; 5] = ["means", "log_scales", "quats", "opacity_logits", "colors"];
/// Adam step sizes per input: positions move in world units, the rest in log or logit space.
const LR: [f64; 5] = [0.01, 0.02, 0.02, 0.05, 0.02];

fn scene(v: &[Vec<f64>]) -> Scene<'_> {
    Scene { means: &v[0], log_scales: &v[1], quats: &v[2], opacity_logits: &v[3], colors: &v[4] }
}

fn write_png(path: &Path, w: usize, h: usize, img: &[f64]) -> Result<(), Box<dyn Error>> {
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut enc = png::Encoder::new(file, w as u32, h as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let bytes: Vec<u8> = img.iter().map(|v| (v.clamp(0.0, 1.0) * 255.0).round() as u8).collect();
    enc.write_header()?.write_image_data(&bytes)?;
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let out_dir = Path::new(args.get(1).map_or("splat_fit", String::as_str)).to_path_buf();
    let steps: usize = args.get(2).map_or(Ok(300), |s| s.parse())?;
    std::fs::create_dir_all(&out_dir)?;
    rlx_splat::register()?;

    let (w, h) = (96, 96);
    let op = SplatRender { camera: Camera::pinhole(w, h, 90.0, 4.0), background: [0.05, 0.05, 0.1], tile_size: 16 };
    let truth = rlx_splat::random_scene(40, 1, 1.2);
    let target = rlx_splat::render(&op, &scene(&truth), true)?;
    let n = 80;
    let mut params = rlx_splat::random_scene(n, 1000, 1.2);
    // Start grey and half transparent, so the fit has to find colors and opacities too.
    params[3].iter_mut().for_each(|o| *o = 0.0);
    params[4].iter_mut().for_each(|c| *c = 0.5);
    let initial = rlx_splat::render(&op, &scene(&params), true)?;
    write_png(&out_dir.join("target.png"), w, h, &target)?;
    write_png(&out_dir.join("initial.png"), w, h, &initial)?;

    // loss = mean((render(scene) - target)^2), and its gradient wrt the five scene inputs.
    let mut g = Graph::new("fit");
    let dims = |k: usize| if k == 0 { vec![n] } else { vec![n, k] };
    let ins: Vec<_> = NAMES.iter().zip(COLS).map(|(name, k)| g.input(name, Shape::new(&dims(k), DType::F32))).collect();
    let tgt = g.input("target", Shape::new(&[h, w, 3], DType::F32));
    let img = rlx_splat::splat_render(&mut g, op.clone(), &ins);
    let d = g.sub(img, tgt);
    let sq = g.mul(d, d);
    let s = g.sum_all(sq);
    let inv = g.scalar(1.0 / (w * h * 3) as f64, DType::F32);
    let loss = g.mul(s, inv);
    g.set_outputs(vec![loss]);
    let gg = rlx_autodiff::grad_with_loss(&g, &ins)?;
    let cpu = CpuBackend::new();
    let (legal, _) = rlx_driver::legalize(&gg, &cpu)?;
    let mut exe = rlx_driver::compile_graph(&cpu, &legal)?;

    let f32_bytes = |v: &[f64]| -> Vec<u8> { v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect() };
    let target_bytes = f32_bytes(&target);
    let mut out_bufs: Vec<Vec<u8>> =
        std::iter::once(4).chain(COLS.map(|k| 4 * n * k.max(1))).map(|b| vec![0u8; b]).collect();
    let (mut m, mut v2): (Vec<Vec<f64>>, Vec<Vec<f64>>) =
        (params.iter().map(|p| vec![0.0; p.len()]).collect(), params.iter().map(|p| vec![0.0; p.len()]).collect());
    let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-8);
    let start = std::time::Instant::now();
    let mut first = None;
    let mut last = 0.0;
    for step in 1..=steps {
        let feeds: Vec<Vec<u8>> = legal
            .inputs()
            .iter()
            .map(|(_, name)| match NAMES.iter().position(|n| n == name) {
                Some(i) => f32_bytes(&params[i]),
                None => target_bytes.clone(),
            })
            .collect();
        let feed_refs: Vec<&[u8]> = feeds.iter().map(Vec::as_slice).collect();
        let mut outs: Vec<&mut [u8]> = out_bufs.iter_mut().map(Vec::as_mut_slice).collect();
        exe.run(&feed_refs, &mut outs)?;
        let read = |b: &[u8]| -> Vec<f64> {
            b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect()
        };
        last = read(&out_bufs[0])[0];
        first.get_or_insert(last);
        for k in 0..5 {
            let grad = read(&out_bufs[1 + k]);
            let (c1, c2) = (1.0 - b1.powi(step as i32), 1.0 - b2.powi(step as i32));
            for j in 0..grad.len() {
                m[k][j] = b1 * m[k][j] + (1.0 - b1) * grad[j];
                v2[k][j] = b2 * v2[k][j] + (1.0 - b2) * grad[j] * grad[j];
                params[k][j] -= LR[k] * (m[k][j] / c1) / ((v2[k][j] / c2).sqrt() + eps);
            }
        }
        if step == 1 || step % 25 == 0 {
            println!("step {step:4}: loss {last:.6}");
        }
    }
    let fitted = rlx_splat::render(&op, &scene(&params), true)?;
    write_png(&out_dir.join("fitted.png"), w, h, &fitted)?;
    let secs = start.elapsed().as_secs_f64();
    let first = first.unwrap_or(last);
    println!(
        "{steps} steps in {secs:.1} s: loss {first:.6} -> {last:.6} ({:.1}x lower); PNGs in {}",
        first / last.max(1e-12),
        out_dir.display()
    );
    Ok(())
}
