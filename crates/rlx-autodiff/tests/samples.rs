//! Every op's samples through every transform: jvp and vjp against central finite differences
//! in f64, second order (hvp) where the op is smooth, and vmap against a loop over the batch on
//! the reference interpreter and on the CPU backend (`rlx_autodiff::check`, which crates
//! defining custom ops run too).

mod common;

use common::*;
use rlx_autodiff::check::{finite_differences, vmap_against_loop, vmap_patterns};
use rlx_ir::{HostTensor, Op, Sample};

/// Ops whose derivative jumps (second order is checked only elsewhere).
const NON_SMOOTH: &[&str] =
    &["abs", "relu", "floor", "round", "sign", "maximum", "minimum", "max", "min", "max_pool2d", "top_k"];

/// Ops whose gradient is an estimator by design (tested against its formula in `estimators.rs`).
const ESTIMATED: &[&str] = &["fake_quant"];

/// At a tie the top-k values are not differentiable: finite differences are meaningless there.
const TIES: &[&str] = &["top_k/values/f32/1d"];

fn float_samples() -> Vec<Sample> {
    Op::all_samples()
        .into_iter()
        .filter(|s| {
            !s.inputs.is_empty() && !ESTIMATED.contains(&s.op.def().name()) && !TIES.contains(&s.label.as_str())
        })
        .collect()
}

#[test]
fn jvp_vjp_and_hvp_match_finite_differences_for_every_sample() {
    let (mut checked, mut failed) = (0, vec![]);
    for s in float_samples() {
        match finite_differences(&s, !NON_SMOOTH.contains(&s.op.def().name())) {
            Ok(true) => checked += 1,
            Ok(false) => {}
            Err(e) => failed.push(format!("{}: {e}", s.label)),
        }
    }
    eprintln!("finite differences: {checked} samples checked");
    assert!(failed.is_empty(), "{} failures:\n{}", failed.len(), failed.join("\n"));
    assert!(checked > 150, "only {checked} samples were checked");
}

#[test]
fn vmap_matches_a_loop_for_every_sample() {
    let cpu = cpu();
    let run = |g: &rlx_ir::Graph, f: &[(&str, HostTensor)]| rlx_driver::run_host(cpu, g, f);
    let (mut checked, mut failed) = (0, vec![]);
    for s in Op::all_samples().into_iter().filter(|s| !s.inputs.is_empty()) {
        for p in vmap_patterns(s.inputs.len()) {
            match vmap_against_loop(&s, &p, Some(&run)) {
                Ok(()) => checked += 1,
                Err(e) => failed.push(format!("{} batched {p:?}: {e}", s.label)),
            }
        }
    }
    eprintln!("vmap: {checked} sample patterns checked");
    assert!(failed.is_empty(), "{} failures:\n{}", failed.len(), failed.join("\n"));
}
