//! Param storage that executables can share: one host buffer per param, behind an `Arc`.
//!
//! Rule: executables that share a writable buffer also share a `RunGroup`, a lock that every
//! `run`, `set_param` and `get_param` of the group holds, so two of them never touch the bytes
//! at once even when they live on two threads. Read-only buffers (a memory-mapped file) need no
//! group: nothing writes them.

use std::alloc::Layout;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

enum Owner {
    /// 64-byte-aligned zeroed bytes from `alloc_zeroed` (pages untouched until written).
    Zeroed(*mut u8, Layout),
    /// Read-only bytes owned elsewhere (kept alive by the `Arc`).
    External(#[allow(dead_code)] Arc<dyn AsRef<[u8]> + Send + Sync>),
}

/// Every version handed out comes from this counter, so a version never repeats across buffers.
static NEXT_VERSION: AtomicU64 = AtomicU64::new(1);

fn next_version() -> u64 {
    NEXT_VERSION.fetch_add(1, Ordering::Relaxed)
}

/// The bytes of one param: owned (64-byte aligned, writable) or external (read-only, no copy).
///
/// Its `version` changes whenever the bytes may have changed, so kernels can cache what they
/// derive from a param (packed weights) and notice writes made through any executable.
pub struct ParamBuffer {
    ptr: *mut u8,
    len: usize,
    writable: bool,
    version: AtomicU64,
    owner: Owner,
}

// SAFETY: the pointer targets memory owned by `owner`, which is Send + Sync. Writes happen only
// through `&mut` executables holding the group lock (see the module docs).
unsafe impl Send for ParamBuffer {}
// SAFETY: as above; shared readers never race with a writer because writers hold the group lock.
unsafe impl Sync for ParamBuffer {}

impl std::fmt::Debug for ParamBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParamBuffer").field("len", &self.len).field("writable", &self.writable).finish()
    }
}

impl Drop for ParamBuffer {
    fn drop(&mut self) {
        if let Owner::Zeroed(base, layout) = self.owner {
            // SAFETY: allocated in `zeroed` with this layout, freed once.
            unsafe { std::alloc::dealloc(base, layout) };
        }
    }
}

impl ParamBuffer {
    /// `len` zero bytes, 64-byte aligned and writable.
    pub fn zeroed(len: usize) -> Self {
        // 16-byte alignment plus 64 spare bytes, aligned up by hand: the system allocator's
        // `calloc` then leaves fresh pages untouched (an over-aligned layout would memset them).
        let layout = Layout::from_size_align(len.div_ceil(64).max(1) * 64 + 64, 16).expect("param size fits in memory");
        let base = crate::huge_pages::alloc_zeroed(layout);
        // SAFETY: at most 63 bytes past `base`, inside the 64 spare bytes.
        let ptr = unsafe { base.add(base.align_offset(64)) };
        let owner = Owner::Zeroed(base, layout);
        ParamBuffer { ptr, len, writable: true, version: AtomicU64::new(next_version()), owner }
    }

    /// Bytes `range` of `owner`, read-only and without a copy (a memory-mapped weight file).
    /// Errors when the range lies outside the owner's bytes.
    pub fn external(owner: Arc<dyn AsRef<[u8]> + Send + Sync>, range: Range<usize>) -> rlx_ir::Result<Self> {
        let all = (*owner).as_ref();
        if range.start > range.end || range.end > all.len() {
            let reason = format!("range {range:?} is outside the {} bytes of its owner", all.len());
            return Err(rlx_ir::Error::eval("external param", reason));
        }
        let ptr = all[range.clone()].as_ptr() as *mut u8;
        Ok(ParamBuffer {
            ptr,
            len: range.len(),
            writable: false,
            version: AtomicU64::new(next_version()),
            owner: Owner::External(owner),
        })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether executables may write it (owned) or not (external).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The current version: it changes whenever the bytes may have changed.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }

    /// Marks the bytes as (possibly) changed.
    pub fn touch(&self) {
        self.version.store(next_version(), Ordering::Relaxed);
    }

    /// The version counter, for kernels that read it during a run.
    pub fn version_cell(&self) -> &AtomicU64 {
        &self.version
    }

    /// The first byte. Reads and writes through it follow the module's group rule.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Copies the bytes out.
    pub fn to_vec(&self) -> Vec<u8> {
        // SAFETY: `len` bytes from `ptr` are owned by `owner`; writers hold the group lock,
        // which the executable reading this holds too.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }.to_vec()
    }
}

/// The lock that executables sharing writable params hold while they touch them.
#[derive(Clone, Default)]
pub struct RunGroup(Arc<Mutex<()>>);

impl std::fmt::Debug for RunGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RunGroup({:p})", Arc::as_ptr(&self.0))
    }
}

impl RunGroup {
    /// A new group of one.
    pub fn new() -> Self {
        Self::default()
    }

    /// Holds the group's lock (a panic in another member does not poison it for good).
    pub fn lock(&self) -> MutexGuard<'_, ()> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether both are the same group.
    pub fn same(&self, other: &RunGroup) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Whether some other handle (another executable) uses this group.
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }
}

/// A param buffer handed from one executable to another (`Executable::share_param`), or an
/// external read-only buffer (`group: None`).
#[derive(Clone, Debug)]
pub struct ParamShare {
    /// The bytes.
    pub buffer: Arc<ParamBuffer>,
    /// The lock of the executables already using it, when it is writable.
    pub group: Option<RunGroup>,
}

impl ParamShare {
    /// Read-only bytes `range` of `owner` (no copy): see `ParamBuffer::external`.
    pub fn external(owner: Arc<dyn AsRef<[u8]> + Send + Sync>, range: Range<usize>) -> rlx_ir::Result<Self> {
        Ok(ParamShare { buffer: Arc::new(ParamBuffer::external(owner, range)?), group: None })
    }
}

/// A device-resident param value that executables of one backend share (`share_param` /
/// `bind_param`): the value lives in the slot, so a state update one of them writes (a new device
/// buffer swapped in) is what all of them read next.
pub type DeviceSlot<T> = Arc<Mutex<Option<T>>>;

/// Locks a slot (a panic in another holder does not poison it for good).
pub fn lock_slot<T>(slot: &DeviceSlot<T>) -> MutexGuard<'_, Option<T>> {
    slot.lock().unwrap_or_else(|e| e.into_inner())
}

type DeviceShares = Vec<(std::sync::Weak<ParamBuffer>, Arc<dyn std::any::Any + Send + Sync>, rlx_ir::Shape)>;
static DEVICE_SHARES: Mutex<DeviceShares> = Mutex::new(Vec::new());

fn device_shares() -> MutexGuard<'static, DeviceShares> {
    let mut s = DEVICE_SHARES.lock().unwrap_or_else(|e| e.into_inner());
    s.retain(|(w, _, _)| w.strong_count() > 0);
    s
}

/// A `ParamShare` naming a device-side value (a `ParamShare` carries host bytes, so a device
/// share is an empty handle registered here while it lives). `find_device_share` on another
/// executable of the same backend gets the value back.
pub fn share_device<T: Clone + Send + Sync + 'static>(value: &T, shape: &rlx_ir::Shape) -> ParamShare {
    let handle = Arc::new(ParamBuffer::zeroed(0));
    device_shares().push((Arc::downgrade(&handle), Arc::new(value.clone()), shape.clone()));
    ParamShare { buffer: handle, group: None }
}

/// The value and shape `share_device` registered for this share, when it is one of type `T`.
pub fn find_device_share<T: Clone + 'static>(share: &ParamShare) -> Option<(T, rlx_ir::Shape)> {
    let key = Arc::as_ptr(&share.buffer);
    let s = device_shares();
    let (_, v, shape) = s.iter().find(|(w, _, _)| std::ptr::eq(w.as_ptr(), key))?;
    Some((v.downcast_ref::<T>()?.clone(), shape.clone()))
}

/// What a device backend's `bind_param` does with a share.
pub enum DeviceBind<S> {
    /// Use this slot (the share named one of this backend, with the param's shape).
    Slot(S),
    /// Upload these read-only host bytes (a memory-mapped file) once.
    Upload(Vec<u8>),
}

/// The `bind_param` rule of backends whose params live on a device: a share of the same backend
/// binds its slot; read-only host bytes are uploaded; writable host bytes are refused (the device
/// would not see their writes), as is a slot of another shape.
pub fn bind_device_share<S: Clone + 'static>(
    share: &ParamShare,
    index: usize,
    want: &rlx_ir::Shape,
    backend: &str,
) -> rlx_ir::Result<DeviceBind<S>> {
    if let Some((slot, shape)) = find_device_share::<S>(share) {
        if &shape != want {
            let why = format!("param #{index} is {want}, the shared value {shape}");
            return Err(rlx_ir::Error::eval("bind_param", why));
        }
        return Ok(DeviceBind::Slot(slot));
    }
    if share.buffer.is_writable() {
        let why = format!(
            "param #{index}: a writable host buffer cannot back a {backend} param (the device would not see its \
             writes); share between {backend} executables or use set_param"
        );
        return Err(rlx_ir::Error::Unsupported { backend: backend.into(), missing: why, report: String::new() });
    }
    Ok(DeviceBind::Upload(share.buffer.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_shares_round_trip_by_type_while_the_handle_lives() {
        let slot: DeviceSlot<u32> = Arc::new(Mutex::new(Some(7)));
        let shape = rlx_ir::Shape::new(&[2], rlx_ir::DType::F32);
        let share = share_device(&slot, &shape);
        let (back, s) = find_device_share::<DeviceSlot<u32>>(&share).expect("registered");
        assert!(Arc::ptr_eq(&back, &slot) && s == shape);
        assert!(find_device_share::<DeviceSlot<u64>>(&share).is_none(), "another type is not a match");
        *lock_slot(&back) = Some(9);
        assert_eq!(*lock_slot(&slot), Some(9));
        let host = ParamShare { buffer: Arc::new(ParamBuffer::zeroed(4)), group: None };
        assert!(find_device_share::<DeviceSlot<u32>>(&host).is_none());
        // Binding: the slot, a shape mismatch, writable host bytes refused.
        assert!(matches!(bind_device_share::<DeviceSlot<u32>>(&share, 0, &shape, "t"), Ok(DeviceBind::Slot(_))));
        let other = rlx_ir::Shape::new(&[3], rlx_ir::DType::F32);
        assert!(bind_device_share::<DeviceSlot<u32>>(&share, 0, &other, "t").is_err());
        let e = bind_device_share::<DeviceSlot<u32>>(&host, 1, &shape, "t").err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("writable host buffer")));
    }

    #[test]
    fn owned_buffers_are_aligned_zeroed_and_versioned() {
        let b = ParamBuffer::zeroed(100);
        assert_eq!(b.as_ptr() as usize % 64, 0);
        assert_eq!(b.to_vec(), vec![0u8; 100]);
        let v = b.version();
        b.touch();
        assert_ne!(b.version(), v);
        assert!(b.is_writable());
    }

    #[test]
    fn external_buffers_are_read_only_views_and_check_their_range() {
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new((0u8..32).collect::<Vec<u8>>());
        let b = ParamBuffer::external(owner.clone(), 4..8).unwrap();
        assert_eq!(b.to_vec(), vec![4, 5, 6, 7]);
        assert!(!b.is_writable());
        assert_ne!(b.version(), ParamBuffer::external(owner.clone(), 0..1).unwrap().version());
        assert!(ParamBuffer::external(owner, 30..40).is_err());
    }

    #[test]
    fn groups_compare_by_identity() {
        let a = RunGroup::new();
        assert!(!a.is_shared());
        let b = a.clone();
        assert!(a.same(&b) && a.is_shared());
        assert!(!a.same(&RunGroup::new()));
        drop(a.lock());
    }
}
