//! Fuzzes the graph text form as `rlx inspect FILE` reads it: any text must parse or give an
//! error, never panic, hang or over-allocate. A graph that parses must print to text that parses
//! back to the same text (the form promises an exact round trip). `inspect.rs` adds the
//! legalization `inspect` runs next; this target stays small, so it runs faster.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rlx_ir::Graph;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(g) = Graph::from_text(text) else { return };
    let printed = g.to_text();
    let back = Graph::from_text(&printed).unwrap_or_else(|e| panic!("printed graph does not parse: {e}\n{printed}"));
    assert_eq!(back.to_text(), printed, "the text form does not round-trip");
});
