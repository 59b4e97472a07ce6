//! The dense attention cases (`attention_cases`) on the best SIMD this CPU has.

mod attention_cases;

#[test]
fn dense_attention_matches_the_reference() {
    attention_cases::all();
}
