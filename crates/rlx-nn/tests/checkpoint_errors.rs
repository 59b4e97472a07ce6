//! Checkpoints that must be refused with an error naming the problem, not a panic, a hang or a
//! huge allocation: cases of `rlx train --resume` and `rlx generate` found by the checkpoint
//! fuzzer (crates/rlx-nn/fuzz) and by reading its target.

use rlx_ir::{Error, HostTensor};
use rlx_nn::gpt::{self, CharGpt, GptConfig};
use rlx_nn::{ParamStore, train::COUNT};
use std::path::Path;

fn tiny() -> (GptConfig, ParamStore) {
    let cfg = GptConfig { ctx: 4, layers: 1, heads: 1, dim: 4, mlp_mult: 1, ..GptConfig::small("ab\n".into()) };
    let (_, specs) = gpt::loss_graph(&cfg, 1).unwrap();
    let mut store = ParamStore::init(&specs, 0).unwrap();
    store.insert(COUNT, HostTensor::from_f32(&[], &[7.0]).unwrap());
    (cfg, store)
}

fn bytes(cfg: &GptConfig, store: &ParamStore) -> Vec<u8> {
    gpt::to_bytes(Path::new("m.safetensors"), cfg, store, &[]).unwrap()
}

fn resume_error(cfg: &GptConfig, store: &ParamStore) -> String {
    let e = gpt::resume_from_bytes(&bytes(cfg, store), Path::new("m.safetensors")).unwrap_err();
    assert!(matches!(e, Error::ModelFile { .. } | Error::UnknownName { .. }), "{e:?}");
    e.to_string()
}

#[test]
fn a_sound_checkpoint_resumes_at_its_step() {
    let (cfg, store) = tiny();
    let (back, loaded, step) = gpt::resume_from_bytes(&bytes(&cfg, &store), Path::new("m.safetensors")).unwrap();
    assert_eq!((back, step), (cfg.clone(), 7));
    CharGpt::new(cfg, &loaded, rlx_driver::Device::Cpu).unwrap();
}

#[test]
fn a_step_count_that_is_not_one_whole_number_is_refused() {
    let (cfg, mut store) = tiny();
    for bad in [vec![], vec![1.0, 2.0], vec![f32::NAN], vec![-1.0], vec![2.5], vec![f32::INFINITY], vec![1e30]] {
        // `rlx train --resume` indexed the first value (an empty count panicked) and multiplied
        // the step into a seed (a huge one overflowed).
        store.insert(COUNT, HostTensor::from_f32(&[bad.len()], &bad).unwrap());
        let e = resume_error(&cfg, &store);
        assert!(e.contains(COUNT) && e.contains("whole number"), "{bad:?}: {e}");
    }
    let mut store = tiny().1;
    store.insert(COUNT, HostTensor::from_f32(&[], &[16_777_216.0]).unwrap());
    assert_eq!(gpt::resume_from_bytes(&bytes(&cfg, &store), Path::new("m.safetensors")).unwrap().2, 16_777_216);
}

#[test]
fn a_missing_step_count_is_refused_by_name() {
    let (cfg, store) = tiny();
    let mut without = ParamStore::new();
    for (n, t) in store.iter().filter(|(n, _)| *n != COUNT) {
        without.insert(n, t.clone());
    }
    assert!(resume_error(&cfg, &without).contains(COUNT));
}

#[test]
fn a_config_larger_than_its_weights_is_refused_before_building_a_graph() {
    let (cfg, store) = tiny();
    // A million layers (or a width whose matrices overflow) would build a graph without end.
    for big in [
        GptConfig { layers: 1_000_000, ..cfg.clone() },
        GptConfig { dim: 1 << 40, ..cfg.clone() },
        GptConfig { ctx: usize::MAX, ..cfg.clone() },
    ] {
        let e = resume_error(&big, &store);
        assert!(e.contains("needs at least") && e.contains("weights"), "{e}");
        // `rlx generate` reads the same config.
        assert!(gpt::from_bytes(&bytes(&big, &store), Path::new("m.safetensors")).is_err());
    }
}

#[test]
fn params_of_the_wrong_dims_or_dtype_are_refused_by_name() {
    let (cfg, store) = tiny();
    let mut wrong = store.clone();
    wrong.insert("wpe.w", HostTensor::from_f32(&[2, 8], &[0.0; 16]).unwrap());
    let e = resume_error(&cfg, &wrong);
    assert!(e.contains("`wpe.w` is f32[2,8]") && e.contains("needs f32[4,4]"), "{e}");
    let mut ints = store.clone();
    ints.insert("wpe.w", HostTensor::from_i64(&[4, 4], rlx_ir::DType::I32, &[0; 16]).unwrap());
    let e = resume_error(&cfg, &ints);
    assert!(e.contains("`wpe.w` is i32[4,4]"), "{e}");
}
