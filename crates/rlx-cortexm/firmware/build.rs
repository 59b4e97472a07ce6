//! Puts memory.x where cortex-m-rt's link.x finds it, and checks that the exported model is there.
use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    std::fs::copy("memory.x", out.join("memory.x")).unwrap();
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=memory.x");
    println!("cargo:rerun-if-env-changed=RLX_CORTEXM_MODEL_DIR");
    let dir = std::env::var("RLX_CORTEXM_MODEL_DIR")
        .expect("set RLX_CORTEXM_MODEL_DIR to the directory `rlx export cortexm --testset digits` wrote");
    for f in ["model.rs", "testset.rs"] {
        let p = PathBuf::from(&dir).join(f);
        assert!(p.exists(), "{} is missing: run `rlx export cortexm --testset digits --out {dir}`", p.display());
        println!("cargo:rerun-if-changed={}", p.display());
    }
}
