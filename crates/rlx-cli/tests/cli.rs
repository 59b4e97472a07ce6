//! The `rlx` binary end to end: inspect of safetensors, GGUF and text graphs, embed errors, and embed
//! on the tiny committed BERT model (tools/minilm_numpy.py --tiny writes it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn rlx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlx")).args(args).output().expect("the rlx binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn inspect_reads_a_safetensors_table_and_a_text_graph() {
    // A hand-written file: 8-byte header length, JSON header, then the data.
    let header = r#"{"__metadata__":{"format":"pt"},"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&[0u8; 12]);
    let p = std::env::temp_dir().join(format!("rlx-cli-{}.safetensors", std::process::id()));
    std::fs::write(&p, &bytes).unwrap();
    let out = rlx(&["inspect", p.to_str().unwrap()]);
    let s = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(s.contains("1 tensors, 12 bytes") && s.contains("meta format = pt"), "{s}");
    assert!(s.lines().any(|l| l.contains(" w ") && l.contains("F16") && l.contains("[2, 3]")), "{s}");

    std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
    let out = rlx(&["inspect", p.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("not a valid safetensors file"), "{}", text(&out.stderr));
    std::fs::remove_file(&p).unwrap();

    let out = rlx(&["inspect", root().join("examples/mlp.rlx").to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("graph `mlp`"));
}

#[test]
fn embed_prints_one_normalized_json_array_per_text() {
    let dir = root().join("crates/rlx-models/tests/fixtures/tiny-bert");
    let out = rlx(&["embed", "--threads", "1", "--model", dir.to_str().unwrap(), "hello world", "the cat"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    let rows: Vec<Vec<f64>> = s.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r.len(), 16);
        let n: f64 = r.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((n - 1.0).abs() < 1e-5, "norm {n}");
    }
    assert_ne!(rows[0], rows[1]);
}

#[test]
fn embed_errors_name_the_problem() {
    let out = rlx(&["embed", "--model", "/nonexistent-rlx-model", "x"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("/nonexistent-rlx-model/config.json"), "{}", text(&out.stderr));
    let out = rlx(&["--device", "tpu", "ops"]);
    assert!(out.status.success(), "ops needs no device");
    let out = rlx(&["--device", "nope", "ops"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("unknown device `nope`"));
    let out = rlx(&["--threads", "0", "ops"]);
    assert!(text(&out.stderr).contains("--threads must be at least 1"));
}

#[test]
fn inspect_reads_a_gguf_file_and_rejects_a_bad_one() {
    let f = root().join("crates/rlx-gguf/tests/fixtures/dequant.gguf");
    let out = rlx(&["inspect", f.to_str().unwrap()]);
    let s = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(s.starts_with("GGUF v3") && s.contains("Q4_K.packed") && s.contains("general.architecture"), "{s}");

    let p = std::env::temp_dir().join(format!("rlx-cli-{}.gguf", std::process::id()));
    std::fs::write(&p, b"garbage!").unwrap();
    let out = rlx(&["inspect", p.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("not a GGUF file"), "{}", text(&out.stderr));
    std::fs::remove_file(&p).unwrap();
}

/// Without the `mpi` feature, asking for (or being started for) data-parallel training says how
/// to get it instead of training alone N times over.
#[cfg(not(feature = "mpi"))]
#[test]
fn distributed_training_without_mpi_says_how_to_get_it() {
    let out = rlx(&["train", "--distributed", "--steps", "1"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("rebuild with --features mpi"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_rlx"))
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .args(["train", "--steps", "1"])
        .output()
        .expect("the rlx binary runs");
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("started by mpirun with 2 processes") && err.contains("--features mpi"), "{err}");
}
