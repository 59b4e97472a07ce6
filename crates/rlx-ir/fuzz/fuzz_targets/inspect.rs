//! Fuzzes all of `rlx inspect FILE` on a graph file: the text form parsed, what `inspect`
//! prints, and the dispatch report (the graph legalized for the CPU backend). Any text must give
//! a report or an error, never panic, hang or over-allocate. Run with `RLX_NUM_THREADS=1`: the
//! CPU backend's worker pool is not needed to legalize.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rlx_driver::Device;
use rlx_ir::Graph;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(g) = Graph::from_text(text) else { return };
    for (id, _) in g.inputs().into_iter().chain(g.params()) {
        let _ = g.shape(id).map(|s| s.to_string());
    }
    for &o in g.outputs() {
        let _ = g.shape(o).map(|s| s.to_string());
    }
    let _ = rlx_runtime::Session::new(Device::Cpu).dispatch_report(&g).map(|r| r.to_string());
});
