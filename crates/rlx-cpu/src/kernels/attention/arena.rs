//! The buffers attention needs only while one node runs: K transposed, and Q, K and V widened
//! from half precision. One arena per calling thread, shared by every attention node that thread
//! runs (a model's layers run one after another), so they hold one copy between them instead of
//! one each; it grows to the largest node and warm runs allocate nothing.

use super::Geo;
use crate::kernels::math::{Compute, Real, SharedMut};
use crate::threads::parallel_for;
use std::cell::RefCell;

thread_local! {
    /// f64 words: room for either compute type, 64-byte aligned by `aligned_buf`.
    static ARENA: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with four disjoint buffers of `lens` elements of `C` (f32 or f64) from this thread's
/// arena. Contents are stale: callers write before they read. A nested call on the same thread
/// (never made today) gets a fresh allocation instead of a panic.
pub(super) fn with_buffers<C: Real, R>(lens: [usize; 4], f: impl FnOnce([&mut [C]; 4]) -> R) -> R {
    let size = std::mem::size_of::<C>();
    // Each part starts on a cache line.
    let line = 64 / size;
    // An array, not a Vec: the warm path allocates nothing.
    let padded = lens.map(|n| n.div_ceil(line) * line);
    let total: usize = padded.iter().sum();
    let words = (total * size).div_ceil(8);
    let split = |words: &mut [f64]| {
        // SAFETY: C is f32 or f64 (every bit pattern valid, alignment at most 8); the words hold
        // `total` elements of C.
        let all = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut C, total) };
        let (a, rest) = all.split_at_mut(padded[0]);
        let (b, rest) = rest.split_at_mut(padded[1]);
        let (c, d) = rest.split_at_mut(padded[2]);
        [&mut a[..lens[0]], &mut b[..lens[1]], &mut c[..lens[2]], &mut d[..lens[3]]]
    };
    ARENA.with(|cell| match cell.try_borrow_mut() {
        Ok(mut arena) => f(split(crate::gemm::aligned_buf(&mut arena, words))),
        Err(_) => f(split(&mut vec![0f64; words])),
    })
}

/// `x` in the compute type: borrowed when that is its storage type, else widened into `buf`.
pub(super) fn view<'a, T: Compute>(x: &'a [T], buf: &'a mut [T::C]) -> &'a [T::C] {
    if let Some(same) = crate::kernels::half_vec::cast::<T, T::C>(x) {
        return same;
    }
    widen(x, &mut buf[..x.len()]);
    &buf[..x.len()]
}

/// `dst = src` widened with SIMD (f16/bf16), in pieces spread over the pool when large.
fn widen<T: Compute>(src: &[T], dst: &mut [T::C]) {
    let n = src.len();
    let (out, pieces) = (SharedMut(dst.as_mut_ptr()), n.div_ceil(WIDEN_PIECE));
    parallel_for(if n < 2 * WIDEN_PIECE { 1 } else { pieces }, &|t| {
        let (lo, hi) = if n < 2 * WIDEN_PIECE { (0, n) } else { (t * WIDEN_PIECE, ((t + 1) * WIDEN_PIECE).min(n)) };
        // SAFETY: pieces are disjoint ranges of `dst`, which holds n elements.
        let d = unsafe { out.slice(lo, hi - lo) };
        crate::kernels::half_vec::load(&src[lo..hi], d);
    });
}

/// Elements one task widens in `view`.
const WIDEN_PIECE: usize = 1 << 16;

/// K or V (`strides`, rows of `width`) in the compute type over positions `0..t_used` only (a
/// long KV cache is mostly empty): borrowed with its own strides when stored in the compute type
/// (and `copy` is false), else widened or copied into `buf` (`b * kvh * t_used * width`
/// elements) with each head's rows contiguous, `[batch, kv_heads, t_used, width]`.
pub(super) fn view_keys<'a, KV: Compute>(
    g: &Geo,
    x: &'a [KV],
    buf: &'a mut [KV::C],
    (strides, width): ([usize; 3], usize),
    t_used: usize,
    copy: bool,
) -> (&'a [KV::C], [usize; 3]) {
    if let Some(same) = crate::kernels::half_vec::cast::<KV, KV::C>(x)
        && !copy
    {
        return (same, strides);
    }
    let heads = g.b * g.kvh;
    let out = SharedMut(buf.as_mut_ptr());
    assert!(buf.len() >= heads * t_used * width);
    let one = |hk: usize| {
        let (bi, h) = (hk / g.kvh, hk % g.kvh);
        let src = bi * strides[0] + h * strides[1];
        // SAFETY: each head writes only its own t_used rows, inside `buf` (asserted above).
        let dst = unsafe { out.slice(hk * t_used * width, t_used * width) };
        if strides[2] == width {
            // The head's rows are contiguous already: one run.
            crate::kernels::half_vec::load(&x[src..src + t_used * width], dst);
        } else {
            for (j, row) in dst.chunks_exact_mut(width).enumerate() {
                let at = src + j * strides[2];
                crate::kernels::half_vec::load(&x[at..at + width], row);
            }
        }
    };
    // Spread over the pool by heads when there is enough to copy (then a head's run is at
    // least WIDEN_PIECE / 4 elements on average).
    if heads > 1 && heads * t_used * width >= 4 * WIDEN_PIECE {
        parallel_for(heads, &|hk| one(hk));
    } else {
        (0..heads).for_each(one);
    }
    (&buf[..heads * t_used * width], [g.kvh * t_used * width, t_used * width, width])
}
