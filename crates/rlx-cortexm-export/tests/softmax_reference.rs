//! The INT8 reference's softmax (TFLite Micro's fixed-point softmax written as an rlx graph)
//! against TFLite Micro's own outputs (rlx-cortexm's fixtures) and against the Cortex-M kernel.

use rlx_cortexm_export::qmodel::{QLayer, QModel, QOp, QTensor, run_host};
use rlx_cortexm_export::{plan, reference};

fn model(depth: usize, scale: f32, zero_point: i32) -> QModel {
    QModel {
        tensors: vec![
            QTensor { dims: vec![1, depth], scale, zero_point, alias_of: None },
            QTensor { dims: vec![1, depth], scale: 1.0 / 256.0, zero_point: -128, alias_of: None },
        ],
        layers: vec![QLayer { op: QOp::Softmax { beta: 1.0 }, input: 0, input2: None, output: 1, node: "s".into() }],
        input: 0,
        output: 1,
    }
}

#[test]
fn reference_softmax_equals_tflite_micro_and_the_kernel() {
    let cases: serde_json::Value =
        serde_json::from_str(include_str!("../../rlx-cortexm/tests/fixtures/tflm.json")).unwrap();
    let mut rows_checked = 0;
    for case in cases.as_array().unwrap().iter().filter(|c| c["op"] == "softmax") {
        let depth = case["depth"].as_u64().unwrap() as usize;
        let q = model(depth, case["s_in"].as_f64().unwrap() as f32, case["zp_in"].as_i64().unwrap() as i32);
        let flat =
            |k: &str| -> Vec<i8> { case[k].as_array().unwrap().iter().map(|v| v.as_i64().unwrap() as i8).collect() };
        let (x, want) = (flat("input"), flat("output"));
        let rows: Vec<Vec<i8>> = x.chunks(depth).map(|r| r.to_vec()).collect();
        let got: Vec<i8> = reference::run(&q, &rows).unwrap().concat();
        assert_eq!(got, want, "softmax depth {depth}");
        rows_checked += rows.len();
    }
    // Random rows across input scales, against the kernel.
    let mut seed = 99u64;
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as u32
    };
    for k in 0..6i32 {
        let scale = 2f32.powi(-k) * 0.37;
        let q = model(10, scale, (next() % 256) as i32 - 128);
        let p = plan::plan(&q);
        let rows: Vec<Vec<i8>> = (0..64).map(|_| (0..10).map(|_| next() as u8 as i8).collect()).collect();
        let want = reference::run(&q, &rows).unwrap();
        for (x, w) in rows.iter().zip(&want) {
            assert_eq!(&run_host(&q, &p.slots, p.arena_size, x).unwrap(), w, "scale {scale}");
        }
        rows_checked += rows.len();
    }
    println!("{rows_checked} softmax rows bit-identical");
}
