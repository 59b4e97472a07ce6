module @embed attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<3xi64>, %arg1: tensor<5x2xf32>) -> (tensor<3x2xf32>, tensor<i1>) {
    %v0 = "stablehlo.constant"() {value = dense<0> : tensor<3xi64>} : () -> tensor<3xi64>
    %v1 = "stablehlo.constant"() {value = dense<5> : tensor<3xi64>} : () -> tensor<3xi64>
    %v2 = "stablehlo.compare"(%arg0, %v0) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi1>
    %v3 = "stablehlo.compare"(%arg0, %v1) {comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi1>
    %v4 = "stablehlo.or"(%v2, %v3) : (tensor<3xi1>, tensor<3xi1>) -> tensor<3xi1>
    %v5 = "stablehlo.constant"() {value = dense<false> : tensor<i1>} : () -> tensor<i1>
    %v6 = "stablehlo.reduce"(%v4, %v5)({
    ^bb0(%ra: tensor<i1>, %rb: tensor<i1>):
      %rr = "stablehlo.or"(%ra, %rb) : (tensor<i1>, tensor<i1>) -> tensor<i1>
      "stablehlo.return"(%rr) : (tensor<i1>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<3xi1>, tensor<i1>) -> tensor<i1>
    %v7 = "stablehlo.gather"(%arg1, %arg0) {dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 2>, indices_are_sorted = false} : (tensor<5x2xf32>, tensor<3xi64>) -> tensor<3x2xf32>
    "func.return"(%v7, %v6) : (tensor<3x2xf32>, tensor<i1>) -> ()
  }
}
