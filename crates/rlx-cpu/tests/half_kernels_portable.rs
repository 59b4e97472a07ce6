//! The f16/bf16 kernels with SIMD switched off (`RLX_CPU_SIMD=scalar`): the portable loops must
//! give the same results. One test per binary, so the variable is set before any detection.

mod half_cases;

#[test]
fn half_kernels_on_the_portable_path() {
    // SAFETY: set before any other thread starts (the only test of this binary).
    unsafe { std::env::set_var("RLX_CPU_SIMD", "scalar") };
    half_cases::all();
}
