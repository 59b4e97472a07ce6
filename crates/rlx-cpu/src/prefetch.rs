//! Software prefetch hints: ask for a cache line ahead of use (never faults, whatever the
//! address; a no-op where the target has no stable prefetch intrinsic).

/// Asks for the cache line holding `addr` in L1.
#[inline(always)]
pub(crate) fn to_l1(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint and never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// Asks for the cache line holding `addr` in L2 (not L1: data needed a while from now).
#[inline(always)]
pub(crate) fn to_l2(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as `to_l1`.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(addr as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}
