//! Inputs the fuzzers (crates/rlx-ir/fuzz) found that panicked the text or JSON readers: each
//! must now be an error that names the problem.

use rlx_ir::{Error, Graph};

/// Parses `text`, expecting a parse error on `line` whose reason contains `needle`.
fn parse_error(text: &str, line: usize, needle: &str) {
    match Graph::from_text(text) {
        Err(Error::Parse { line: l, reason }) => {
            assert_eq!(l, line, "{reason}");
            assert!(reason.contains(needle), "{reason}");
        }
        other => panic!("expected a parse error on line {line}, got {other:?}"),
    }
}

#[test]
fn a_close_paren_before_the_open_one_is_an_error() {
    let text = "graph \"g\" {\n  %0 = inup t)({\"name\":\"x\",\"shape\":\"f32[2]\"} : f32[2]\n  return %0\n}\n";
    parse_error(text, 2, "missing `)`");
}
