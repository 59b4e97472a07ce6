//! The dense attention cases with AVX-512 switched off (`RLX_CPU_SIMD=avx2`): the AVX2 tiles and
//! softmax must pass the same checks. One test per binary, so the variable is set before any
//! detection.

mod attention_cases;

#[test]
fn dense_attention_on_avx2_matches_the_reference() {
    // SAFETY: set before any other thread starts (the only test of this binary).
    unsafe { std::env::set_var("RLX_CPU_SIMD", "avx2") };
    attention_cases::all();
}
