//! The FPGA export end to end: the digits MLP's datapath model equals the host INT8 reference at
//! several reuse factors; the emitted SystemVerilog, simulated in iverilog (when installed),
//! equals it on every test image; bad input is a typed error naming the op or resource.

use rlx_cortexm_export::{ExportOptions, TestSet, load_checkpoint, prepare, quantize_input, reference};
use rlx_fpga::{Design, Device, FpgaError, FpgaOptions, export, sim};
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn mlp() -> PathBuf {
    repo().join("data/cortexm/digits_mlp_qat.safetensors")
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rlx-fpga-test-{name}-{}", std::process::id()))
}

#[test]
fn datapath_model_equals_the_int8_reference_at_every_reuse() {
    let (g, params) = load_checkpoint(&mlp()).unwrap();
    let (q, _, _) = prepare(&g, &params, &ExportOptions::default()).unwrap();
    let (_, _, xte, _) = rlx_nn::data::digits(0, 0.2);
    let per = q.tensors[q.input].len();
    let inputs: Vec<Vec<i8>> = xte.chunks(per).map(|x| quantize_input(&q, x)).collect();
    let want = reference::run(&q, &inputs).unwrap();
    // 3 and 7 leave a partial last chunk (zero-padded lanes); 64 is one multiplier per layer.
    for reuse in [1, 3, 4, 7, 16, 64, 100] {
        let d = Design::new(&q, reuse).unwrap();
        let same = inputs.iter().zip(&want).filter(|(x, w)| &d.run(x) == *w).count();
        assert_eq!(same, inputs.len(), "reuse {reuse}");
        let l0 = &d.layers[0];
        assert_eq!(l0.lanes, 64usize.div_ceil(reuse));
        assert!(l0.lanes * l0.chunks >= 64);
    }
}

#[test]
fn mlp_simulates_bit_exact_in_iverilog() {
    let out = tmp("mlp");
    let opts = FpgaOptions { reuse: 16, device: Device::Hx8k, testset: Some(TestSet::Digits) };
    let r = export(&mlp(), &out, &opts).unwrap();
    let c = r.host_check.clone().unwrap();
    assert_eq!(c.identical, c.samples);
    assert!(c.accuracy >= 96.6, "{}", c.accuracy);
    println!("estimate: {:?}, cycles (model) {}", r.estimate, r.design.cycles());
    if !sim::has_tool("iverilog") {
        eprintln!(
            "SKIPPED: iverilog is not installed, so the emitted SystemVerilog was not simulated here (.ci/fpga.sh installs it and runs this check)"
        );
        std::fs::remove_dir_all(&out).ok();
        return;
    }
    let s = sim::iverilog(&out).unwrap();
    println!("iverilog: {s:?}");
    assert_eq!((s.agree, s.samples), (c.samples, c.samples));
    assert_eq!(s.cycles, r.design.cycles());
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn verilator_lint_is_clean() {
    if !sim::has_tool("verilator") {
        eprintln!("SKIPPED: verilator is not installed, so the design was not linted here (.ci/fpga.sh lints it)");
        return;
    }
    for reuse in [1, 5, 16] {
        let out = tmp(&format!("lint{reuse}"));
        let opts = FpgaOptions { reuse, device: Device::Any, testset: None };
        export(&mlp(), &out, &opts).unwrap();
        let log = sim::verilator_lint(&out).unwrap_or_else(|e| panic!("reuse {reuse}: {e}"));
        assert!(log.trim().is_empty(), "reuse {reuse}: {log}");
        std::fs::remove_dir_all(&out).ok();
    }
}

#[test]
fn an_op_without_a_datapath_is_named() {
    let ckpt = repo().join("data/cortexm/digits_conv_qat.safetensors");
    let e = export(&ckpt, &tmp("conv"), &FpgaOptions::default()).unwrap_err();
    assert!(matches!(&e, FpgaError::UnsupportedOp { op, .. } if op == "conv2d"), "{e}");
    assert!(e.to_string().contains("`conv2d`"), "{e}");
}

#[test]
fn a_design_too_large_for_the_device_names_the_resource() {
    let e = export(&mlp(), &tmp("big"), &FpgaOptions { reuse: 1, device: Device::Hx8k, testset: None }).unwrap_err();
    assert!(matches!(e, FpgaError::DoesNotFit { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("iCE40 HX8K") && (msg.contains("BRAM") || msg.contains("LUTs")), "{msg}");
    assert!(matches!(
        export(&mlp(), &tmp("zero"), &FpgaOptions { reuse: 0, ..Default::default() }),
        Err(FpgaError::BadReuse)
    ));
}
