//! `rlx export cortexm` end to end on the committed digits MLP checkpoint: sizes printed, files
//! written, and a budget the model exceeds is an error naming it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn rlx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlx")).args(args).output().expect("the rlx binary runs")
}

fn ckpt() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/cortexm/digits_mlp_qat.safetensors")
}

#[test]
fn export_cortexm_prints_sizes_and_checks_budgets() {
    let out_dir = std::env::temp_dir().join(format!("rlx-cli-export-{}", std::process::id()));
    let (c, o) = (ckpt(), out_dir.to_str().unwrap().to_string());
    let out = rlx(&["export", "cortexm", "--model", c.to_str().unwrap(), "--out", &o, "--testset", "digits"]);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(s.contains("arena (RAM): 128 bytes"), "{s}");
    assert!(s.contains("model data (flash): 5624 bytes"), "{s}");
    assert!(s.contains("host check: 359/359 samples bit-identical"), "{s}");
    assert!(out_dir.join("model.rs").exists() && out_dir.join("testset.rs").exists());

    let out = rlx(&["export", "cortexm", "--model", c.to_str().unwrap(), "--out", &o, "--flash-budget", "4K"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("the model needs 5624 bytes of flash, over the 4096-byte flash budget"), "{e}");
    std::fs::remove_dir_all(&out_dir).ok();
}
