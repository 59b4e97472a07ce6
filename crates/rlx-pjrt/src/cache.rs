//! The on-disk layer of the compile cache for XLA executables (`RLX_CACHE_DIR=dir`): a compiled
//! executable is serialized under a hash of its StableHLO text and the plugin's identity, and a
//! later compile of the same module (in this process or another) loads it instead of running
//! XLA's compiler again.
//!
//! A file holds a header (format, plugin, API version, platform), the module text and the
//! executable; a load checks the header and the text byte for byte, so a hash collision or a
//! different plugin is a miss, never a wrong executable.

use crate::plugin::{Client, LoadedExecutable};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

static HITS: AtomicUsize = AtomicUsize::new(0);
static STORES: AtomicUsize = AtomicUsize::new(0);

/// How many compiles this process served from the disk cache, and how many it wrote there.
pub fn counters() -> (usize, usize) {
    (HITS.load(Ordering::Relaxed), STORES.load(Ordering::Relaxed))
}

/// The cache directory, when `RLX_CACHE_DIR` names one.
pub fn dir() -> Option<PathBuf> {
    std::env::var_os("RLX_CACHE_DIR").filter(|d| !d.is_empty()).map(PathBuf::from)
}

/// 128-bit FNV-1a: stable across Rust versions and platforms (std's hasher is not).
fn fnv128(parts: &[&[u8]]) -> u128 {
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for p in parts {
        for &b in p.iter().chain(&[0xff]) {
            h ^= b as u128;
            h = h.wrapping_mul(0x0000000001000000000000000000013B);
        }
    }
    h
}

fn header(client: &Client) -> String {
    let p = &client.plugin;
    format!("RLX-PJRT-CACHE 1\n{}\n{}.{}\n{}\n", p.path.display(), p.version.0, p.version.1, client.platform)
}

fn path(client: &Client, text: &str) -> Option<PathBuf> {
    let h = fnv128(&[header(client).as_bytes(), text.as_bytes()]);
    dir().map(|d| d.join(format!("pjrt-{h:032x}.bin")))
}

/// The cached executable of this module, when there is a valid one.
pub fn load(client: &Arc<Client>, text: &str) -> Option<LoadedExecutable> {
    let bytes = std::fs::read(path(client, text)?).ok()?;
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
pub fn store(client: &Arc<Client>, text: &str, exe: &LoadedExecutable) {
    let (Some(path), Ok(blob)) = (path(client, text), exe.serialize()) else { return };
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
