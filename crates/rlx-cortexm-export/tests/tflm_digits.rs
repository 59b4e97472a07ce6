//! The committed digits models end to end against TFLite Micro: `fixtures/tflm_digits.json`
//! holds TFLite Micro's int8 outputs for every test image, from the same exported model rebuilt
//! as a .tflite flatbuffer (tools/tflm_digits.py, fed by `examples/dump_qmodel.rs`). The rlx INT8
//! reference and the Cortex-M kernels (on the host) must both give exactly those outputs.

use rlx_cortexm_export::qmodel::run_host;
use rlx_cortexm_export::{ExportOptions, load_checkpoint, prepare, quantize_input, reference};
use std::path::PathBuf;

#[test]
fn digits_models_equal_tflite_micro_on_every_test_image() {
    let fixture: serde_json::Value = serde_json::from_str(include_str!("fixtures/tflm_digits.json")).unwrap();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    for name in ["mlp", "conv", "separable"] {
        let want: Vec<Vec<i8>> = fixture[name]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().iter().map(|v| v.as_i64().unwrap() as i8).collect())
            .collect();
        let (g, params) = load_checkpoint(&root.join(format!("data/cortexm/digits_{name}_qat.safetensors"))).unwrap();
        let (q, plan, _) = prepare(&g, &params, &ExportOptions::default()).unwrap();
        let (_, _, xte, _) = rlx_nn::data::digits(0, 0.2);
        let inputs: Vec<Vec<i8>> = xte.chunks(q.tensors[q.input].len()).map(|x| quantize_input(&q, x)).collect();
        assert_eq!(inputs.len(), want.len());
        let got = reference::run(&q, &inputs).unwrap();
        let same = got.iter().zip(&want).filter(|(a, b)| a == b).count();
        println!("{name}: {same}/{} test images: rlx INT8 reference == TFLite Micro", want.len());
        assert_eq!(same, want.len(), "{name}");
        for (x, w) in inputs.iter().zip(&want) {
            assert_eq!(&run_host(&q, &plan.slots, plan.arena_size, x).unwrap(), w, "{name}: kernels");
        }
    }
}
