//! Errors that need no plugin: a missing file, a library that is not a PJRT plugin, and the
//! not-found message listing every path tried.

use rlx_pjrt::{PjrtError, Plugin};
use std::path::Path;

#[test]
fn a_missing_file_names_its_path() {
    let e = Plugin::load(Path::new("/nonexistent/libtpu.so")).err().expect("an error").to_string();
    assert!(e.contains("/nonexistent/libtpu.so"), "{e}");
}

#[test]
fn a_library_without_get_pjrt_api_is_not_a_plugin() {
    // Any shared library that exists here and is not a plugin.
    let lib =
        ["/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib/aarch64-linux-gnu/libm.so.6"]
            .into_iter()
            .find(|p| Path::new(p).exists());
    let Some(lib) = lib else {
        eprintln!("no libm found at the usual paths; skipping");
        return;
    };
    let e = Plugin::load(Path::new(lib)).err().expect("an error").to_string();
    assert!(e.contains("not a PJRT plugin") && e.contains("GetPjrtApi"), "{e}");
}

#[test]
fn not_found_lists_what_was_tried() {
    let e =
        PjrtError::PluginNotFound { tried: vec!["libtpu.so (cannot open)".into(), "/opt/x.so (cannot open)".into()] };
    let s = e.to_string();
    assert!(s.contains("libtpu.so (cannot open), /opt/x.so") && s.contains("RLX_PJRT_PLUGIN"), "{s}");
    let r: rlx_ir::Error = e.into();
    assert!(matches!(r, rlx_ir::Error::DeviceUnavailable { .. }));
}
