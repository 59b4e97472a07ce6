//! Trains a digits classifier with QAT and writes the checkpoint `rlx export cortexm` reads:
//!
//!     cargo run --release -p rlx-cortexm-export --example train_digits -- mlp data/cortexm/digits_mlp_qat.safetensors

use rlx_cortexm_export::digits::{self, Arch};
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (arch, out) = match args.get(1..3) {
        Some([a, o]) => (a.as_str(), o.as_str()),
        _ => return Err("usage: train_digits mlp|conv|separable OUT.safetensors".into()),
    };
    let arch = match arch {
        "mlp" => Arch::Mlp,
        "conv" => Arch::Conv,
        "separable" => Arch::Separable,
        a => return Err(format!("unknown arch {a}").into()),
    };
    let epochs: usize = std::env::var("EPOCHS").ok().and_then(|e| e.parse().ok()).unwrap_or(30);
    let t = digits::train_qat(arch, epochs, 5)?;
    println!("{arch:?}: float {:.2}%, QAT fake-quant {:.2}%", t.float_accuracy, t.qat_accuracy);
    if let Some(dir) = Path::new(out).parent() {
        std::fs::create_dir_all(dir)?;
    }
    digits::save(&t, Path::new(out))?;
    println!("wrote {out}");
    Ok(())
}
