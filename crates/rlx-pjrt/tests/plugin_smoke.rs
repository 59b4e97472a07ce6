//! Loads the plugin named by RLX_PJRT_PLUGIN, compiles a hand-written StableHLO module and runs it.

use rlx_pjrt::default_client;

#[test]
fn add_two_vectors() {
    if std::env::var_os("RLX_PJRT_PLUGIN").is_none() {
        eprintln!("RLX_PJRT_PLUGIN is not set; skipping");
        return;
    }
    let client = default_client().expect("client");
    eprintln!("{client:?}");
    let mlir = r#"module @t {
  func.func public @main(%a: tensor<3xf32>, %b: tensor<3xf32>) -> (tensor<3xf32>, tensor<f32>) {
    %0 = "stablehlo.add"(%a, %b) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %z = "stablehlo.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
    %1 = "stablehlo.reduce"(%0, %z) ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %s = "stablehlo.add"(%x, %y) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%s) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
    return %0, %1 : tensor<3xf32>, tensor<f32>
  }
}"#;
    let exe = client.compile("t", mlir).expect("compile");
    assert_eq!(exe.num_outputs, 2);
    let a: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let b: Vec<u8> = [10.0f32, 20.0, 30.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let ba = client.upload(&a, 11, &[3]).unwrap();
    let bb = client.upload(&b, 11, &[3]).unwrap();
    let outs = exe.execute(&[&ba, &bb]).unwrap();
    let got = outs[0].to_vec(12).unwrap();
    let v: Vec<f32> = got.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(v, [11.0, 22.0, 33.0]);
    let s = f32::from_le_bytes(outs[1].to_vec(4).unwrap().try_into().unwrap());
    assert_eq!(s, 66.0);
    let bad = client.compile(
        "bad",
        "module {\n func.func @main() -> () {\n  %0 = \"stablehlo.nonsense\"() : () -> tensor<f32>\n }\n}",
    );
    let e = bad.err().expect("a compile error").to_string();
    eprintln!("{e}");
    assert!(e.contains("XLA could not compile graph `bad`"), "{e}");
}
