//! Fuzzes the JSON (serde) form of a graph, `Graph::from_json`: any bytes must parse or give an
//! error, never panic, hang or over-allocate; a graph that parses must print to JSON that parses
//! back to the same JSON, and to the text form that parses back too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rlx_ir::Graph;

fuzz_target!(|data: &[u8]| {
    let Ok(json) = std::str::from_utf8(data) else { return };
    let Ok(g) = Graph::from_json(json) else { return };
    let printed = g.to_json();
    let back = Graph::from_json(&printed).unwrap_or_else(|e| panic!("printed JSON does not parse: {e}\n{printed}"));
    assert_eq!(back.to_json(), printed, "the JSON form does not round-trip");
    let text = g.to_text();
    let t = Graph::from_text(&text).unwrap_or_else(|e| panic!("text of a JSON graph does not parse: {e}\n{text}"));
    assert_eq!(t.to_text(), text, "the text form of a JSON graph does not round-trip");
});
