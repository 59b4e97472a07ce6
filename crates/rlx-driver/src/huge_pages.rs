//! Buffers on 2 MiB pages: large host buffers (a backend's arena, params, packed operands) are
//! marked for transparent huge pages before their pages are first touched, as numpy does for its
//! arrays. A product that streams a few MiB through 4 KiB pages spends time in page walks (session
//! 16 in docs/benchmarks-history.md). Linux only; elsewhere, where the kernel declines, or with
//! `RLX_HUGE_PAGES=0`, the pages stay as they are.

/// Bytes from which `advise` asks for huge pages: one huge page.
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Whether `advise` asks for huge pages: yes unless `RLX_HUGE_PAGES=0` (read once).
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::config().cpu.huge_pages)
}

/// Asks the kernel to back `len` bytes from `ptr` with huge pages on their first touch
/// (`madvise(MADV_HUGEPAGE)` on the whole 4 KiB pages inside; a hint: errors are ignored).
/// Pages touched already keep their size. Spans under `HUGE_PAGE_BYTES` are left alone, and all
/// of them with `RLX_HUGE_PAGES=0`.
pub fn advise(ptr: *const u8, len: usize) {
    if len < HUGE_PAGE_BYTES || !enabled() {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let (start, end) = ((ptr as usize).next_multiple_of(PAGE), (ptr as usize + len) / PAGE * PAGE);
        if end > start {
            // SAFETY: MADV_HUGEPAGE changes how the kernel backs the pages, never their contents,
            // whatever the range (an unmapped one fails with ENOMEM, ignored here).
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = ptr;
}

/// `len` copies of `value` in a `Vec` whose pages are advised (`advise`) before they are written.
///
/// ```
/// let v = rlx_driver::huge_pages::vec(1 << 20, 0f32);
/// assert_eq!(v.len(), 1 << 20);
/// ```
pub fn vec<T: Clone>(len: usize, value: T) -> Vec<T> {
    let mut v = Vec::with_capacity(len);
    advise(v.as_ptr() as *const u8, len * std::mem::size_of::<T>());
    v.resize(len, value);
    v
}

/// `len` zeros in a `Vec` whose pages are advised (`advise`) before their first touch, and
/// left untouched: a large block comes zeroed from a fresh mapping, so its pages are faulted in
/// (as huge pages) only as they are written. For outputs a kernel then fills: `vec![0; len]` of
/// tens of MiB faults in 4 KiB pages one by one while the kernel writes them.
///
/// ```
/// let v: Vec<f32> = rlx_driver::huge_pages::zeroed_vec(1 << 20);
/// assert!(v.len() == 1 << 20 && v.iter().all(|&x| x == 0.0));
/// ```
pub fn zeroed_vec<T: bytemuck::Zeroable + Clone>(len: usize) -> Vec<T> {
    let bytes = len.saturating_mul(std::mem::size_of::<T>());
    if bytes < HUGE_PAGE_BYTES {
        return std::vec![T::zeroed(); len];
    }
    let layout = std::alloc::Layout::array::<T>(len).unwrap_or_else(|_| panic!("{len} elements overflow a layout"));
    let ptr = alloc_zeroed(layout);
    // SAFETY: allocated by the global allocator with T's layout for `len` elements, all zero
    // bytes, which `Zeroable` makes valid values of T.
    unsafe { Vec::from_raw_parts(ptr as *mut T, len, len) }
}

/// Zeroed bytes of `layout` (of non-zero size) from the global allocator, advised (`advise`)
/// before their first touch; free with `std::alloc::dealloc` and the same layout. Ends the
/// process (`handle_alloc_error`) when memory runs out, as `Vec` does. With the system
/// allocator a large block is a fresh mapping whose pages stay untouched until written; an
/// alignment above 16 would make `calloc` clear them by hand.
pub fn alloc_zeroed(layout: std::alloc::Layout) -> *mut u8 {
    assert!(layout.size() > 0, "alloc_zeroed: a zero-size layout");
    // SAFETY: a non-zero size (asserted above).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    advise(ptr, layout.size());
    ptr
}

/// Grows `buf` to `len` elements (`value` past its old end), advising the new allocation's
/// pages first when it has to grow.
pub fn grow<T: Clone>(buf: &mut Vec<T>, len: usize, value: T) {
    if len > buf.capacity() {
        let mut fresh = Vec::with_capacity(len);
        advise(fresh.as_ptr() as *const u8, len * std::mem::size_of::<T>());
        fresh.extend_from_slice(buf);
        *buf = fresh;
    }
    if len > buf.len() {
        buf.resize(len, value);
    }
}

/// Zeroed bytes in their own anonymous mapping that starts on a 2 MiB boundary, advised for huge
/// pages: every whole 2 MiB of it can be one huge page, where a heap block (which starts anywhere)
/// loses up to one per buffer at each end. Only the bytes asked for are mapped (the tail past the
/// last 2 MiB boundary stays on 4 KiB pages), so no memory is spent on rounding.
pub struct HugeZeroed {
    ptr: *mut u8,
    len: usize,
    mapped: usize,
}

// SAFETY: a plain owned mapping; shared access goes through `&self` (reads) only.
unsafe impl Send for HugeZeroed {}
// SAFETY: as above.
unsafe impl Sync for HugeZeroed {}

impl HugeZeroed {
    /// `len` zeroed bytes, or None where huge pages are off (`RLX_HUGE_PAGES=0`), the size is
    /// under one huge page, the system is not Linux, or the mapping fails: the caller then
    /// allocates as usual.
    pub fn new(len: usize) -> Option<HugeZeroed> {
        if len < HUGE_PAGE_BYTES || !enabled() {
            return None;
        }
        #[cfg(target_os = "linux")]
        {
            const PAGE: usize = 4096;
            let mapped = len.next_multiple_of(PAGE);
            let reserve = mapped + HUGE_PAGE_BYTES;
            // SAFETY: a fresh private anonymous mapping; the parts outside the aligned span are
            // unmapped at once and never touched.
            unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    reserve,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                if p == libc::MAP_FAILED {
                    return None;
                }
                let base = p as usize;
                let start = base.next_multiple_of(HUGE_PAGE_BYTES);
                if start > base {
                    libc::munmap(p, start - base);
                }
                let end = start + mapped;
                if base + reserve > end {
                    libc::munmap(end as *mut libc::c_void, base + reserve - end);
                }
                advise(start as *const u8, mapped);
                Some(HugeZeroed { ptr: start as *mut u8, len, mapped })
            }
        }
        #[cfg(not(target_os = "linux"))]
        None
    }

    /// The bytes' start (2 MiB aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The bytes asked for.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: `new` declines empty buffers.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for HugeZeroed {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        // SAFETY: the span mapped in `new`, unmapped once.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.mapped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kilobytes of anonymous huge pages this process holds (`/proc/self/smaps_rollup`).
    #[cfg(target_os = "linux")]
    fn anon_huge_kb() -> Option<u64> {
        let s = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
        let line = s.lines().find(|l| l.starts_with("AnonHugePages:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn huge_zeroed_spans_start_on_a_huge_page_and_read_zero() {
        if !enabled() {
            return;
        }
        let len = 5 * HUGE_PAGE_BYTES + 12345;
        let z = HugeZeroed::new(len).expect("an anonymous mapping");
        assert_eq!(z.as_ptr() as usize % HUGE_PAGE_BYTES, 0);
        // SAFETY: `len` bytes owned by `z`, zeroed by the kernel.
        let bytes = unsafe { std::slice::from_raw_parts_mut(z.as_ptr(), z.len()) };
        assert!(bytes.iter().step_by(4093).all(|&b| b == 0));
        bytes[len - 1] = 7;
        assert_eq!(bytes[len - 1], 7);
        assert!(HugeZeroed::new(HUGE_PAGE_BYTES - 1).is_none(), "under one huge page: the heap");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn advised_buffers_get_huge_pages_where_the_kernel_offers_them() {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
        if mode.contains("[never]") || mode.is_empty() || !enabled() {
            eprintln!("transparent huge pages off here ({}): nothing to check", mode.trim());
            return;
        }
        let before = anon_huge_kb().expect("smaps_rollup lists AnonHugePages");
        let v = vec(16 << 20, 1u8);
        let after = anon_huge_kb().expect("smaps_rollup lists AnonHugePages");
        assert!(after >= before + 2048, "16 MiB advised and written: AnonHugePages {before} -> {after} kB");
        drop(v);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn zeroed_vecs_read_zero_and_get_huge_pages_as_written() {
        let small: Vec<u16> = zeroed_vec(100);
        assert_eq!(small, [0u16; 100]);
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
        let before = anon_huge_kb().expect("smaps_rollup lists AnonHugePages");
        let mut v: Vec<f32> = zeroed_vec(5 << 20);
        assert!(v.iter().step_by(1021).all(|&x| x == 0.0));
        v.iter_mut().for_each(|x| *x = 1.0);
        let after = anon_huge_kb().expect("smaps_rollup lists AnonHugePages");
        if !mode.contains("[never]") && !mode.is_empty() && enabled() {
            assert!(after >= before + 2048, "20 MiB zeroed and written: AnonHugePages {before} -> {after} kB");
        }
        assert_eq!((v.len(), v[0], v[(5 << 20) - 1]), (5 << 20, 1.0, 1.0));
    }

    #[test]
    fn vec_and_grow_keep_their_contents() {
        let mut v = vec(3 << 20, 7u8);
        assert!(v.iter().all(|&x| x == 7));
        v[0] = 1;
        grow(&mut v, 5 << 20, 9u8);
        assert_eq!((v[0], v[1], v[(3 << 20) - 1], v[3 << 20], v.len()), (1, 7, 7, 9, 5 << 20));
        // Small buffers and shrinking requests are plain Vec operations.
        let mut s = vec(4, 1u32);
        grow(&mut s, 2, 0);
        assert_eq!(s, [1, 1, 1, 1]);
    }
}
