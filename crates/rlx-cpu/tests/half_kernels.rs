//! The f16/bf16 kernels that compute in f32, on the SIMD paths this CPU has.

mod half_cases;

#[test]
fn half_kernels_match_the_exact_results_rounded_once() {
    half_cases::all();
}
