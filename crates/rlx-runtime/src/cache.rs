//! The compile cache: the pipeline's result (optimized graph, state updates, report) keyed by a
//! fingerprint of the graph (structure, types, constants), the options that change what the
//! pipeline makes, and the backend (name, capabilities, `cache_key`, RLX's version). A hit skips
//! the pipeline; the backend still builds its executable, since executables hold their own params.
//!
//! Two layers: a bounded in-memory one per process, and an on-disk one under
//! `CompileOptions::cache_dir` (`RLX_CACHE_DIR`) that survives the process. A disk entry holds
//! the key text and the graph text; a load checks both (a hash collision or a stale format is a
//! miss), and the graph is verified and checked against the backend again before use.

use rlx_driver::{Backend, CompileOptions, DispatchReport, OpDispatch, ParamUpdate, fnv128};
use rlx_ir::{Graph, Result};
use rlx_opt::{CompileReport, FusionReport, Optimized};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Entries the in-memory layer keeps (least recently used leave first).
const MEMORY_ENTRIES: usize = 64;

/// What the compile cache did in this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Compiles served from memory.
    pub memory_hits: usize,
    /// Compiles served from the disk layer.
    pub disk_hits: usize,
    /// Compiles that ran the pipeline.
    pub misses: usize,
    /// Entries written to the disk layer.
    pub disk_stores: usize,
}

static MEMORY_HITS: AtomicUsize = AtomicUsize::new(0);
static DISK_HITS: AtomicUsize = AtomicUsize::new(0);
static MISSES: AtomicUsize = AtomicUsize::new(0);
static DISK_STORES: AtomicUsize = AtomicUsize::new(0);

/// The compile cache's counters since the process started.
pub fn cache_stats() -> CacheStats {
    CacheStats {
        memory_hits: MEMORY_HITS.load(Ordering::Relaxed),
        disk_hits: DISK_HITS.load(Ordering::Relaxed),
        misses: MISSES.load(Ordering::Relaxed),
        disk_stores: DISK_STORES.load(Ordering::Relaxed),
    }
}

/// Empties the in-memory layer (the disk layer stays).
pub fn clear_memory_cache() {
    MEMORY.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

static MEMORY: Mutex<VecDeque<(u128, Arc<Optimized>)>> = Mutex::new(VecDeque::new());

/// Where a compile's optimized graph came from (`CompiledGraph::compile_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileSource {
    /// The in-memory layer of the compile cache.
    Memory,
    /// The on-disk layer (`CompileOptions::cache_dir`).
    Disk,
    /// The optimizer ran (a miss, or the cache was off).
    Pipeline,
}

/// The cache key of one compile: its text (hashed for lookups, kept in disk entries).
pub(crate) struct Key {
    text: String,
    hash: u128,
}

impl Key {
    pub(crate) fn new(g: &Graph, updates: &[ParamUpdate], opts: &CompileOptions, backend: &dyn Backend) -> Key {
        let head = format!(
            "rlx {} compile-cache 1\nbackend {} {:?} {}\noptions {}\nupdates {:?}\n",
            env!("CARGO_PKG_VERSION"),
            backend.name(),
            backend.capabilities(),
            backend.cache_key(),
            opts.fingerprint_text(),
            updates
        );
        let text = format!("{head}{:032x}", fnv128(&[g.to_text().as_bytes()]));
        Key { hash: fnv128(&[text.as_bytes()]), text }
    }
}

/// The pipeline's result for `g`: from memory, from disk, or by running `optimize` (then stored
/// in both layers).
pub(crate) fn optimized(
    key: &Key,
    opts: &CompileOptions,
    backend: &dyn Backend,
    optimize: impl FnOnce() -> Result<Optimized>,
) -> Result<(Arc<Optimized>, CompileSource)> {
    if opts.cache
        && let Some(hit) = memory_get(key.hash)
    {
        MEMORY_HITS.fetch_add(1, Ordering::Relaxed);
        return Ok((hit, CompileSource::Memory));
    }
    let dir = opts.cache_dir.as_deref().filter(|_| opts.cache);
    if let Some(o) = dir.and_then(|d| disk_load(d, key, backend)) {
        DISK_HITS.fetch_add(1, Ordering::Relaxed);
        let o = Arc::new(o);
        memory_put(key.hash, o.clone());
        return Ok((o, CompileSource::Disk));
    }
    MISSES.fetch_add(1, Ordering::Relaxed);
    let o = Arc::new(optimize()?);
    if opts.cache {
        memory_put(key.hash, o.clone());
        if let Some(d) = dir
            && disk_store(d, key, &o)
        {
            DISK_STORES.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok((o, CompileSource::Pipeline))
}

fn memory_get(hash: u128) -> Option<Arc<Optimized>> {
    let mut m = MEMORY.lock().unwrap_or_else(|e| e.into_inner());
    let i = m.iter().position(|(h, _)| *h == hash)?;
    let entry = m.remove(i)?;
    let hit = entry.1.clone();
    m.push_back(entry);
    Some(hit)
}

fn memory_put(hash: u128, o: Arc<Optimized>) {
    let mut m = MEMORY.lock().unwrap_or_else(|e| e.into_inner());
    m.retain(|(h, _)| *h != hash);
    if m.len() >= MEMORY_ENTRIES {
        m.pop_front();
    }
    m.push_back((hash, o));
}

fn disk_path(dir: &Path, key: &Key) -> PathBuf {
    dir.join(format!("graph-{:032x}.rlx", key.hash))
}

/// Separates the sections of a disk entry (never in a key, a report line or graph text).
const SECTION: &str = "\n\u{1e}\n";

/// A disk entry: the key text, the dispatch counts, the updates, the graph text.
fn disk_store(dir: &Path, key: &Key, o: &Optimized) -> bool {
    let counts: Vec<String> = o
        .report
        .dispatch
        .ops
        .iter()
        .map(|(name, d)| format!("{name} {} {} {}", d.native, d.decomposed, d.rewritten))
        .collect();
    let updates: Vec<String> = o.updates.iter().map(|u| format!("{} {}", u.param, u.output)).collect();
    let text = [key.text.as_str(), &counts.join("\n"), &updates.join("\n"), &o.graph.to_text()].join(SECTION);
    let path = disk_path(dir, key);
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let ok = std::fs::create_dir_all(dir).is_ok()
        && std::fs::write(&tmp, text).is_ok()
        && std::fs::rename(&tmp, &path).is_ok();
    if !ok {
        let _ = std::fs::remove_file(&tmp);
    }
    ok
}

/// The disk entry for `key`, when there is a valid one that the backend runs as it stands.
fn disk_load(dir: &Path, key: &Key, backend: &dyn Backend) -> Option<Optimized> {
    let text = std::fs::read_to_string(disk_path(dir, key)).ok()?;
    let mut parts = text.split(SECTION);
    if parts.next()? != key.text {
        return None;
    }
    let (counts, updates, graph) = (parts.next()?, parts.next()?, parts.next()?);
    let graph = Graph::from_text(graph).ok()?;
    let mut dispatch = DispatchReport { backend: backend.name().to_string(), ..Default::default() };
    for line in counts.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let [name, native, decomposed, rewritten] = f[..] else { return None };
        let d = OpDispatch {
            native: native.parse().ok()?,
            decomposed: decomposed.parse().ok()?,
            rewritten: rewritten.parse().ok()?,
            missing: vec![],
        };
        dispatch.ops.insert(name.to_string(), d);
    }
    let updates = updates
        .lines()
        .map(|l| {
            let (p, o) = l.split_once(' ')?;
            Some(ParamUpdate { param: p.parse().ok()?, output: o.parse().ok()? })
        })
        .collect::<Option<Vec<_>>>()?;
    // A stale or edited entry must still be a graph this backend runs as is.
    let (legal, _) = rlx_driver::legalize_with(&graph, backend, &CompileOptions::builtin()).ok()?;
    if legal.len() != graph.len() {
        return None;
    }
    let memory = rlx_driver::memory::plan_updates(&graph, &updates).ok()?;
    let body_bytes = rlx_driver::memory::body_arena_bytes(&graph, backend).ok()?;
    let report = CompileReport { stages: vec![], dispatch, fusion: FusionReport::default(), memory, body_bytes };
    Some(Optimized { graph, updates, report })
}
