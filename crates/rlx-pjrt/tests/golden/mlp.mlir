module @mlp attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<2x3xf32>, %arg1: tensor<3x4xf32>, %arg2: tensor<4xf32>) -> (tensor<2x4xf32>, tensor<2xf32>) {
    %v0 = "stablehlo.dot_general"(%arg0, %arg1) {dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [], rhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
    %v1 = "stablehlo.broadcast_in_dim"(%arg2) {broadcast_dimensions = array<i64: 1>} : (tensor<4xf32>) -> tensor<2x4xf32>
    %v2 = "stablehlo.add"(%v0, %v1) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %v3 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<2x4xf32>} : () -> tensor<2x4xf32>
    %v4 = "stablehlo.maximum"(%v2, %v3) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %v5 = "stablehlo.constant"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>
    %v6 = "stablehlo.reduce"(%v4, %v5)({
    ^bb0(%ra: tensor<f32>, %rb: tensor<f32>):
      %rr = "stablehlo.add"(%ra, %rb) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%rr) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x4xf32>, tensor<f32>) -> tensor<2xf32>
    "func.return"(%v4, %v6) : (tensor<2x4xf32>, tensor<2xf32>) -> ()
  }
}
