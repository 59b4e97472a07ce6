//! The on-disk layer of the compile cache for XLA executables (`CompileOptions::cache_dir`, `RLX_CACHE_DIR`): a compiled
//! executable is serialized under a hash of its StableHLO text and the plugin's identity, and a
//! later compile of the same module (in this process or another) loads it instead of running
//! XLA's compiler again.
//!
//! A file holds a header (format, plugin, API version, platform), the module text and the
//! executable; a load checks the header and the text byte for byte, so a hash collision or a
//! different plugin is a miss, never a wrong executable.

use crate::plugin::{Client, LoadedExecutable};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

static HITS: AtomicUsize = AtomicUsize::new(0);
static STORES: AtomicUsize = AtomicUsize::new(0);

/// How many compiles this process served from the disk cache, and how many it wrote there.
pub fn counters() -> (usize, usize) {
    (HITS.load(Ordering::Relaxed), STORES.load(Ordering::Relaxed))
}

fn header(client: &Client) -> String {
    let p = &client.plugin;
    format!("RLX-PJRT-CACHE 1\n{}\n{}.{}\n{}\n", p.path.display(), p.version.0, p.version.1, client.platform)
}

fn path(dir: &Path, client: &Client, text: &str) -> PathBuf {
    let h = rlx_driver::fnv128(&[header(client).as_bytes(), text.as_bytes()]);
    dir.join(format!("pjrt-{h:032x}.bin"))
}

/// The cached executable of this module in `dir` (the compile's `cache_dir`), when there is a
/// valid one.
pub fn load(dir: &Path, client: &Arc<Client>, text: &str) -> Option<LoadedExecutable> {
    let bytes = std::fs::read(path(dir, client, text)).ok()?;
    let head = header(client);
    let rest = bytes.strip_prefix(head.as_bytes())?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let len: usize = std::str::from_utf8(&rest[..nl]).ok()?.parse().ok()?;
    let rest = &rest[nl + 1..];
    if rest.len() < len || &rest[..len] != text.as_bytes() {
        return None;
    }
    let exe = client.deserialize(&rest[len..]).ok()?;
    HITS.fetch_add(1, Ordering::Relaxed);
    Some(exe)
}

/// Writes the executable for this module (best effort: a cache that cannot be written only
/// costs the next compile its time, so failures are ignored).
pub fn store(dir: &Path, client: &Arc<Client>, text: &str, exe: &LoadedExecutable) {
    let path = path(dir, client, text);
    let Ok(blob) = exe.serialize() else { return };
    if blob.is_empty() {
        return;
    }
    let mut bytes = header(client).into_bytes();
    bytes.extend(format!("{}\n", text.len()).as_bytes());
    bytes.extend(text.as_bytes());
    bytes.extend(&blob);
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let ok = path.parent().is_some_and(|d| std::fs::create_dir_all(d).is_ok())
        && std::fs::write(&tmp, &bytes).is_ok()
        && std::fs::rename(&tmp, &path).is_ok();
    if ok {
        STORES.fetch_add(1, Ordering::Relaxed);
    } else {
        let _ = std::fs::remove_file(&tmp);
    }
}
