//! A tiny random BERT (F16 weights under `bert.`, tanh GELU, CLS pooling, its own vocabulary)
//! against the numpy reference (tools/minilm_numpy.py --tiny), and the loader's errors for
//! missing and mis-shaped tensors. Runs everywhere: the model is committed (15 KB).

use rlx_driver::Device;
use rlx_ir::Error;
use rlx_models::{Pooling, SafetensorsFile, SentenceEmbedder};
use safetensors::tensor::TensorView;
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-bert")
}

fn cases() -> Vec<(String, Vec<i64>, Vec<f32>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny_bert.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let nums = |x: &serde_json::Value| x.as_array().unwrap().iter().map(|n| n.as_f64().unwrap()).collect::<Vec<_>>();
    let list = v["cases"].as_array().unwrap();
    list.iter()
        .map(|c| {
            let ids = nums(&c["ids"]).into_iter().map(|x| x as i64).collect();
            (
                c["text"].as_str().unwrap().to_string(),
                ids,
                nums(&c["embedding"]).into_iter().map(|x| x as f32).collect(),
            )
        })
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let n = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

#[test]
fn tiny_bert_matches_numpy_alone_and_padded() {
    let cases = cases();
    let mut m = SentenceEmbedder::load(dir(), Device::Cpu).unwrap();
    assert_eq!(m.options().pooling, Pooling::Cls);
    assert_eq!(m.max_len(), 16);
    let texts: Vec<&str> = cases.iter().map(|c| c.0.as_str()).collect();
    let batch = m.tokenizer().encode_batch(&texts).unwrap();
    for (i, (t, ids, _)) in cases.iter().enumerate() {
        assert_eq!(&batch.ids[i * batch.seq..][..ids.len()], ids.as_slice(), "ids of `{t}`");
    }
    let padded = m.embed(&texts).unwrap();
    for ((t, _, want), got) in cases.iter().zip(&padded) {
        let alone = m.embed(&[t.as_str()]).unwrap().remove(0);
        for (what, e) in [("padded", got), ("alone", &alone)] {
            let c = cosine(e, want);
            let d = e.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(c >= 0.99999 && d < 1e-5, "{what} `{t}`: cosine {c}, max abs diff {d}");
        }
    }
}

/// Copies the tiny model to a fresh directory with its weights rewritten by `edit`.
fn edited_copy(tag: &str, edit: impl Fn(&mut Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)>)) -> PathBuf {
    let out = std::env::temp_dir().join(format!("rlx-tiny-bert-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(dir().join(f), out.join(f)).unwrap();
    }
    let bytes = std::fs::read(dir().join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut ts: Vec<_> =
        st.tensors().into_iter().map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec())).collect();
    edit(&mut ts);
    let views: Vec<(String, TensorView<'_>)> =
        ts.iter().map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    safetensors::serialize_to_file(views, None, &out.join("model.safetensors")).unwrap();
    out
}

#[test]
fn a_missing_or_misshaped_tensor_is_named_with_both_shapes() {
    let name = "bert.encoder.layer.1.intermediate.dense.weight";
    let d = edited_copy("missing", |ts| ts.retain(|t| t.0 != name));
    let e = SentenceEmbedder::load(&d, Device::Cpu).unwrap_err();
    assert!(matches!(&e, Error::MissingTensor { name: n, expected, .. } if n == name && expected == &[32, 16]), "{e}");
    std::fs::remove_dir_all(&d).unwrap();

    let d = edited_copy("shape", |ts| {
        let t = ts.iter_mut().find(|t| t.0 == name).unwrap();
        t.2 = vec![16, 32];
    });
    let e = SentenceEmbedder::load(&d, Device::Cpu).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(&e, Error::TensorShape { got, expected, .. } if got == &[16, 32] && expected == &[32, 16]), "{e}");
    assert!(msg.contains(name) && msg.contains("[16, 32]") && msg.contains("[32, 16]"), "{msg}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn f16_weights_are_read_through_the_map() {
    let f = SafetensorsFile::open(dir().join("model.safetensors")).unwrap();
    let e = f.entries();
    assert!(e.iter().all(|t| t.dtype == "F16"));
    let w = f.f32_tensor("bert.embeddings.LayerNorm.bias", &[16]).unwrap();
    assert!(w.iter().all(|x| x.is_finite()) && w.iter().any(|&x| x != 0.0));
}
