//! Repacked weights shared by every kernel that reads the same param bytes at the same version
//! (decode and prefill kernels, across graphs that share params): one copy per param version,
//! made by the first kernel that runs on it and freed when the last kernel holding it is dropped.
//! Once repacked, the source bytes are released when they lie in a read-only shared file
//! mapping (a memory-mapped GGUF): `madvise(MADV_DONTNEED)` drops them from resident memory
//! without changing them (a later read pages them in again). `RLX_QUANT_RELEASE=0`: keep them.

use super::repack::{ROWS, group_block_bytes, repack};
use rlx_ir::QuantScheme;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// A 64-byte aligned byte buffer, zeroed lazily by the system (fresh pages are not touched).
/// Decode streams these bytes from DRAM every token: from one huge page on, they get a mapping
/// of their own on a 2 MiB boundary, so that nearly all of them lie on huge pages.
struct Aligned {
    ptr: *mut u8,
    len: usize,
    storage: Storage,
}

/// Where an `Aligned` buffer's bytes live (freed on drop).
enum Storage {
    /// A heap block from `alloc_zeroed` with this layout.
    Heap { base: *mut u8, layout: std::alloc::Layout },
    /// Its own mapping (unmaps itself).
    Mapped(#[allow(dead_code)] rlx_driver::huge_pages::HugeZeroed),
}

// SAFETY: a plain owned allocation, written only before it is shared (then read-only).
unsafe impl Send for Aligned {}
// SAFETY: as above.
unsafe impl Sync for Aligned {}

impl Aligned {
    fn zeroed(len: usize) -> Aligned {
        if let Some(m) = rlx_driver::huge_pages::HugeZeroed::new(len) {
            return Aligned { ptr: m.as_ptr(), len, storage: Storage::Mapped(m) };
        }
        // 16-byte alignment plus 64 spare bytes, aligned up by hand: `calloc` then leaves fresh
        // pages untouched (an over-aligned layout would memset them).
        let layout = std::alloc::Layout::from_size_align(len + 64, 16).expect("repacked size fits in memory");
        // Decode streams these bytes from DRAM every token: on 2 MiB pages, fewer page walks.
        let base = rlx_driver::huge_pages::alloc_zeroed(layout);
        // SAFETY: at most 63 bytes past `base`, inside the 64 spare bytes.
        let ptr = unsafe { base.add(base.align_offset(64)) };
        Aligned { ptr, len, storage: Storage::Heap { base, layout } }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` initialized (zeroed) bytes owned by this buffer.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, owned exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        if let Storage::Heap { base, layout } = self.storage {
            // SAFETY: allocated in `zeroed` with this layout, freed once.
            unsafe { std::alloc::dealloc(base, layout) };
        }
    }
}

/// What a repacked copy was made from: the param version, the source bytes and the geometry.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Key {
    version: u64,
    addr: usize,
    len: usize,
    scheme: QuantScheme,
    n: usize,
    k: usize,
}

/// One repacked copy (read-only once made).
pub struct Packed {
    buf: Aligned,
}

impl Packed {
    /// The repacked bytes (`repack::repack`'s layout).
    pub fn bytes(&self) -> &[u8] {
        self.buf.bytes()
    }
}

/// Every live copy, by what it was made from (dead entries are dropped on the next insert).
static REGISTRY: Mutex<Vec<(Key, Weak<Packed>)>> = Mutex::new(Vec::new());
/// Copies made and source bytes released since the process started (for tests and reports).
static REPACKS: AtomicU64 = AtomicU64::new(0);
static RELEASED: AtomicU64 = AtomicU64::new(0);

/// Repacked copies made so far (every kernel and graph together).
pub fn repacks() -> u64 {
    REPACKS.load(Ordering::Relaxed)
}

/// Bytes of source weights dropped from resident memory after their repack, so far.
pub fn released_bytes() -> u64 {
    RELEASED.load(Ordering::Relaxed)
}

/// Live copies of `n` rows of `k` values of `s` (tests).
#[cfg(test)]
pub fn live_copies(s: QuantScheme, n: usize, k: usize) -> usize {
    let reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    reg.iter().filter(|e| (e.0.scheme, e.0.n, e.0.k) == (s, n, k) && e.1.strong_count() > 0).count()
}

/// A kernel's handle on the repacked copy of its weight input.
pub struct Shared {
    scheme: QuantScheme,
    n: usize,
    k: usize,
    held: Option<(Key, Arc<Packed>)>,
}

impl Shared {
    /// The handle for `n` rows of `k` values of `s` (a scheme with a repacked layout).
    pub fn new(s: QuantScheme, n: usize, k: usize) -> Shared {
        assert!(group_block_bytes(s).is_some(), "{s} has no repacked layout");
        Shared { scheme: s, n, k, held: None }
    }

    /// The repacked copy of `w` at param `version`: the one this kernel holds, else the one
    /// another kernel made, else a new one (the source bytes are then released, see the
    /// module docs). None (weights that are not a param): the caller uses the file layout.
    pub fn get(&mut self, version: Option<u64>, w: &[u8]) -> Option<&[u8]> {
        let key = Key {
            version: version?,
            addr: w.as_ptr() as usize,
            len: w.len(),
            scheme: self.scheme,
            n: self.n,
            k: self.k,
        };
        if self.held.as_ref().is_none_or(|h| h.0 != key) {
            // Drop the old copy first: the last holder frees it before the new one is made.
            self.held = None;
            self.held = Some((key, lookup_or_make(key, w)));
        }
        self.held.as_ref().map(|h| h.1.bytes())
    }
}

/// The live copy for `key`, or a new one made from `w`.
fn lookup_or_make(key: Key, w: &[u8]) -> Arc<Packed> {
    let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = reg.iter().find(|e| e.0 == key).and_then(|e| e.1.upgrade()) {
        return p;
    }
    reg.retain(|e| e.1.strong_count() > 0);
    let Key { scheme, n, k, .. } = key;
    let len = n.div_ceil(ROWS) * (k / scheme.block_size()) * group_block_bytes(scheme).expect("a repacked layout");
    let mut buf = Aligned::zeroed(len);
    // A few MiB of rows at a time, each chunk's source pages released once it is repacked, so
    // that resident memory grows by one chunk, not by the whole weight, at the peak.
    let rb = w.len() / n.max(1);
    let step = (CHUNK / (ROWS * rb).max(1)).max(1) * ROWS;
    let gb = len / n.div_ceil(ROWS).max(1);
    // Source bytes before `from` were offered for release (up to the page holding the last end).
    let (mut r0, mut from) = (0, 0);
    while r0 < n {
        let r1 = (r0 + step).min(n);
        let out = &mut buf.bytes_mut()[r0 / ROWS * gb..r1.div_ceil(ROWS) * gb];
        repack(scheme, &w[r0 * rb..r1 * rb], r1 - r0, k, out);
        RELEASED.fetch_add(release(&w[from..r1 * rb]) as u64, Ordering::Relaxed);
        // The page that holds byte r1 * rb is released with the next chunk.
        let addr = w.as_ptr() as usize;
        from = from.max(((addr + r1 * rb) / page_size() * page_size()).saturating_sub(addr));
        r0 = r1;
    }
    let p = Arc::new(Packed { buf });
    reg.push((key, Arc::downgrade(&p)));
    REPACKS.fetch_add(1, Ordering::Relaxed);
    p
}

/// Source bytes repacked between two releases.
const CHUNK: usize = 4 << 20;

/// The memory page size.
fn page_size() -> usize {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 {
            return p as usize;
        }
    }
    4096
}

/// Drops the whole pages of `w` from resident memory when they lie in read-only shared file
/// mappings (their contents stay the same); returns the bytes released.
fn release(w: &[u8]) -> usize {
    if !rlx_driver::config().cpu.quant.release {
        return 0;
    }
    #[cfg(target_os = "linux")]
    {
        let page = page_size();
        let (lo, hi) = ((w.as_ptr() as usize).next_multiple_of(page), (w.as_ptr() as usize + w.len()) / page * page);
        if lo >= hi || !in_shared_file_map(lo, hi) {
            return 0;
        }
        // SAFETY: whole pages of a read-only shared file mapping that the caller's borrow keeps
        // mapped; MADV_DONTNEED only unmaps them, and later reads fault in the same file bytes.
        let r = unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED) };
        if r == 0 { hi - lo } else { 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

/// Whether `lo..hi` is covered by read-only shared mappings of files (`/proc/self/maps`).
#[cfg(target_os = "linux")]
fn in_shared_file_map(lo: usize, hi: usize) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return false };
    let mut at = lo;
    for line in maps.lines() {
        // "start-end perms offset dev inode path"
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms), Some(_), Some(_), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else { continue };
        if a <= at && at < b {
            let p = perms.as_bytes();
            if p.len() < 4 || p[0] != b'r' || p[1] != b'-' || p[3] != b's' || inode == "0" {
                return false;
            }
            at = b;
            if at >= hi {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_share_one_copy_per_version_and_source() {
        let (s, n, k) = (QuantScheme::Q4_K, 9, 512);
        let w = vec![0u8; n * s.row_bytes(k).unwrap()];
        let (mut a, mut b) = (Shared::new(s, n, k), Shared::new(s, n, k));
        let pa = a.get(Some(u64::MAX - 7), &w).unwrap().as_ptr();
        assert_eq!(b.get(Some(u64::MAX - 7), &w).unwrap().as_ptr(), pa, "one copy for both");
        // Another version, or the same version over other bytes (a view): another copy.
        assert_ne!(b.get(Some(u64::MAX - 6), &w).unwrap().as_ptr(), pa);
        // (A third holder keeps the first copy alive, so its address cannot be reused.)
        let mut c = Shared::new(s, n, k);
        assert_eq!(c.get(Some(u64::MAX - 7), &w).unwrap().as_ptr(), pa);
        let w2 = w.clone();
        assert_ne!(a.get(Some(u64::MAX - 7), &w2).unwrap().as_ptr(), pa);
        assert_eq!(live_copies(s, n, k), 3);
        assert!(a.get(None, &w).is_none(), "not a param: no copy");
    }

    #[test]
    fn chunked_repacks_equal_one_pass() {
        // Past one chunk of source bytes, with a row count that is not a multiple of 8.
        for (s, n, k) in [(QuantScheme::Q8_0, 4100, 1024), (QuantScheme::Q4_K, 3803, 2048)] {
            let rb = s.row_bytes(k).unwrap();
            assert!(n * rb > CHUNK);
            let w: Vec<u8> = (0..n * rb).map(|i| (i * 7 % 253) as u8).collect();
            let mut want = vec![0u8; n.div_ceil(ROWS) * (k / s.block_size()) * group_block_bytes(s).unwrap()];
            repack(s, &w, n, k, &mut want);
            let mut h = Shared::new(s, n, k);
            assert!(h.get(Some(u64::MAX - 100), &w).unwrap() == &want[..], "{s}");
        }
    }

    #[test]
    fn heap_bytes_are_never_released() {
        // Anonymous memory would read back as zeros: it must be left alone.
        let w = vec![7u8; 1 << 16];
        assert_eq!(release(&w), 0);
        assert!(w.iter().all(|&b| b == 7));
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn file_mapped_bytes_are_released_and_read_back_unchanged() {
        let path = std::env::temp_dir().join(format!("rlx-release-{}.bin", std::process::id()));
        let data: Vec<u8> = (0..(64usize << 10)).map(|i| (i * 31 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a read-only shared mapping of a file nobody else writes.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                data.len(),
                libc::PROT_READ,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        // SAFETY: the mapping has `data.len()` readable bytes until munmap below.
        let bytes = unsafe { std::slice::from_raw_parts(map as *const u8, data.len()) };
        assert_eq!(bytes, &data[..]);
        // An unaligned range: only its whole pages go.
        let got = release(&bytes[100..]);
        assert!(got > 0 && got <= data.len() - 100, "released {got}");
        assert_eq!(bytes, &data[..], "the same bytes after the release");
        // SAFETY: mapped above, unmapped once.
        unsafe { libc::munmap(map, data.len()) };
        std::fs::remove_file(&path).ok();
    }
}
