//! Attention over key rows in chunks of up to `MAX_T` keys, in f32 with AVX2 + FMA on x86_64
//! (AVX-512 tiles when the CPU has them) or NEON on aarch64 (`dense_neon.rs`), for work items
//! of several query rows (encoders and prefill). A query block's scores for a chunk come from
//! one register-tiled GEMM pass, each row then gets one softmax pass (its max is known before
//! its exps), and `P @ V` is a second GEMM pass; chunks are joined by one rescale per row, so a
//! row of at most `MAX_T` keys is never rescaled. The item body (`item_body`) is shared: it is
//! generic over the ISA's two products and row softmax (`Isa`).

// Other architectures never run this path (`applies`), so the shared body is unused there.
#![cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(dead_code))]

use super::{Geo, Mask, Scratch, Work, item_keys, scaled_queries};
use crate::kernels::math::{Compute, Real};

/// Keys per chunk: a query block's scores (`BQ x MAX_T`) stay in L2; longer rows take several
/// chunks joined by rescaling.
pub(super) const MAX_T: usize = 2048;

/// Whether work items of `g` run here: f32 compute, K transposed (several query rows), non-empty
/// head dims, and the ISA: AVX2 + FMA on x86_64 (`simd`), NEON (always present) on aarch64.
pub(super) fn applies(g: &Geo, f32_compute: bool, simd: bool) -> bool {
    let isa = if cfg!(target_arch = "x86_64") { simd } else { cfg!(target_arch = "aarch64") };
    isa && f32_compute && g.transposed && g.d > 0 && g.dv > 0
}

/// Width of a score row in the scratch: `t` rounded up to 16.
pub(super) fn row_width(t: usize) -> usize {
    t.div_ceil(16) * 16
}

/// `x` as f32 slices; `C` must be f32 (the only 4-byte `Real`).
pub(super) fn f32s<C: Real>(x: &[C]) -> &[f32] {
    assert_eq!(std::mem::size_of::<C>(), 4, "the dense attention path computes in f32");
    // SAFETY: C is f32 (checked above), so the layout is identical.
    unsafe { std::slice::from_raw_parts(x.as_ptr() as *const f32, x.len()) }
}

/// f32 values seen as the compute type `C` (which `applies` made f32).
pub(super) fn c_of<C: Real>(x: &[f32]) -> &[C] {
    assert_eq!(std::mem::size_of::<C>(), 4, "the dense attention path computes in f32");
    // SAFETY: C is f32 (the only 4-byte `Real`), so the layout is identical.
    unsafe { std::slice::from_raw_parts(x.as_ptr() as *const C, x.len()) }
}

/// `x` as mutable f32 slices; `C` must be f32.
pub(super) fn f32s_mut<C: Real>(x: &mut [C]) -> &mut [f32] {
    assert_eq!(std::mem::size_of::<C>(), 4, "the dense attention path computes in f32");
    // SAFETY: as above.
    unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr() as *mut f32, x.len()) }
}

/// One product of the dense path, `c[m, n] (+)= a[m, k] @ b[k, n]` (added to `c` when `acc`):
/// row-major views with row strides `lda`, `ldb`, `ldc` (elements); `m` a multiple of 4.
#[derive(Clone, Copy)]
pub(super) struct Product {
    /// A's first element and row stride.
    pub a: *const f32,
    pub lda: usize,
    /// B's first element and row stride.
    pub b: *const f32,
    pub ldb: usize,
    /// C's first element and row stride.
    pub c: *mut f32,
    pub ldc: usize,
    /// Rows of A and C, columns of B and C, and the inner dimension.
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Add to C instead of overwriting it.
    pub acc: bool,
}

impl Product {
    /// The product of `a` (pointer, row stride) and `b` into `c`, over `(m, n, k)`.
    pub(super) fn new(
        (a, lda): (*const f32, usize),
        (b, ldb): (*const f32, usize),
        (c, ldc): (*mut f32, usize),
        (m, n, k): (usize, usize, usize),
        acc: bool,
    ) -> Self {
        Product { a, lda, b, ldb, c, ldc, m, n, k, acc }
    }

    /// The same product over columns `j..n` only (B and C shifted by `j`; the AVX-512 tails).
    #[cfg(target_arch = "x86_64")]
    pub(super) fn columns_from(self, j: usize) -> Self {
        Product { b: self.b.wrapping_add(j), c: self.c.wrapping_add(j), n: self.n - j, ..self }
    }
}

/// The ISA pieces of the item body: the two products and the row softmax.
trait Isa: Copy {
    /// The product `p` (`Product`).
    ///
    /// # Safety
    /// The CPU has the ISA's features; `p`'s pointers cover its matrices.
    unsafe fn product(self, p: Product);

    /// Softmax numerators of `p[a..b]` in place, as `softmax_span`; returns (max, sum).
    ///
    /// # Safety
    /// The CPU has the ISA's features; `a <= b <= p.len()`; `hide` holds `b - a` bytes.
    unsafe fn softmax(self, p: &mut [f32], a: usize, b: usize, hide: Option<&[u8]>) -> (f32, f32);
}

/// AVX2 + FMA, with AVX-512 tiles and exps when `wide`.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct X86 {
    /// The CPU has AVX-512F (and it is not switched off).
    wide: bool,
}

#[cfg(target_arch = "x86_64")]
impl Isa for X86 {
    #[inline(always)]
    unsafe fn product(self, p: Product) {
        // SAFETY: the caller's contract; `wide` only where the CPU has AVX-512F.
        unsafe { if self.wide { super::dense512::gemm(p) } else { gemm(p) } }
    }

    #[inline(always)]
    unsafe fn softmax(self, p: &mut [f32], a: usize, b: usize, hide: Option<&[u8]>) -> (f32, f32) {
        // SAFETY: the caller's contract; `wide` only where the CPU has AVX-512F.
        unsafe { if self.wide { super::dense512::softmax_span(p, a, b, hide) } else { softmax_span(p, a, b, hide) } }
    }
}

/// NEON (every aarch64 CPU has it).
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
struct Neon;

#[cfg(target_arch = "aarch64")]
impl Isa for Neon {
    #[inline(always)]
    unsafe fn product(self, p: Product) {
        // SAFETY: the caller's contract.
        unsafe { super::dense_neon::gemm(p) }
    }

    #[inline(always)]
    unsafe fn softmax(self, p: &mut [f32], a: usize, b: usize, hide: Option<&[u8]>) -> (f32, f32) {
        // SAFETY: every aarch64 CPU has NEON.
        unsafe { super::dense_neon::softmax_span(p, a, b, hide) }
    }
}

/// The dense scratch: the parent's buffers seen as f32.
struct Buf<'a> {
    q: &'a mut [f32],
    p: &'a mut [f32],
    o: &'a mut [f32],
    m: &'a mut [f32],
    l: &'a mut [f32],
}

/// One work item over its whole visible key span; the compute type must be f32 (`applies`).
pub(super) fn item<T: Compute>(w: &Work<'_, T>, item: usize, sc: &mut Scratch<T::C>) {
    // SAFETY: `applies` was true, so the CPU has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        item_avx2::<T>(w, item, sc)
    }
    // SAFETY: every aarch64 CPU has NEON.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        item_body::<T, _>(Neon, w, item, sc)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = (w, item, sc);
        unreachable!("the dense attention path runs only on x86_64 and aarch64");
    }
}

/// `item_body` compiled with AVX2 + FMA, with AVX-512 tiles when the CPU has them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn item_avx2<T: Compute>(w: &Work<'_, T>, item: usize, sc: &mut Scratch<T::C>) {
    let isa = X86 { wide: crate::kernels::vec32::simd16::avx512() };
    // SAFETY: this function runs with AVX2 and FMA; `wide` says the CPU has AVX-512F.
    unsafe { item_body::<T, _>(isa, w, item, sc) }
}

/// One work item: scores, softmax and `P @ V` per key chunk with `isa`'s kernels, the chunks
/// joined per row, then the rows normalized and stored. Inlined into the function that enables
/// the ISA's features.
///
/// # Safety
/// The CPU has `isa`'s features.
#[inline(always)]
unsafe fn item_body<T: Compute, I: Isa>(isa: I, w: &Work<'_, T>, item: usize, sc: &mut Scratch<T::C>) {
    let Work { g, scale, q, k, tp, v, mask, spans, out, .. } = *w;
    let (q, kt, v, scale) = (f32s(q), f32s(k), f32s(v), scale.to_f64() as f32);
    let sc = Buf {
        q: f32s_mut(&mut sc.q),
        p: f32s_mut(&mut sc.p),
        o: f32s_mut(&mut sc.o),
        m: f32s_mut(&mut sc.m),
        l: f32s_mut(&mut sc.l),
    };
    let (d, dv, t) = (g.d, g.dv, g.t);
    let it = g.item(item);
    let (bi, kv, rows) = (it.bi, it.kv, it.rows());
    let rows4 = rows.div_ceil(4) * 4;
    scaled_queries(g, &it, q, scale, &mut sc.q[..rows4 * d]);
    let (lo, hi_k) = item_keys(g, spans, &it);
    // Columns start on a multiple of 16 so that the score tiles stay inside the padded rows.
    let lo = lo / 16 * 16;
    let pw = row_width(t.min(MAX_T));
    assert!(sc.p.len() >= rows4 * pw && sc.q.len() >= rows4 * d && sc.o.len() >= rows4 * dv);
    sc.m[..rows].fill(f32::NEG_INFINITY);
    sc.l[..rows].fill(0.0);
    sc.o[..rows4 * dv].fill(0.0);
    // Keys in chunks of at most MAX_T: each chunk's softmax is exact over its keys, and the
    // chunks are joined by rescaling (one chunk, the common case, rescales nothing).
    let mut c0 = lo;
    while c0 < hi_k {
        let c1 = (c0 + MAX_T).min(hi_k);
        let (n, n16) = (c1 - c0, (c1 - c0).div_ceil(16) * 16);
        let ktb = &kt[kv * d * tp + c0..(kv + 1) * d * tp];
        assert!(ktb.len() >= (d - 1) * tp + n16);
        // SAFETY: bounds checked above; rows4 is a multiple of 4 and n16 of 16; the caller
        // vouched for the ISA.
        unsafe {
            isa.product(Product::new(
                (sc.q.as_ptr(), d),
                (ktb.as_ptr(), tp),
                (sc.p.as_mut_ptr(), pw),
                (rows4, n16, d),
                false,
            ))
        };
        for r in 0..rows {
            let (hi, i) = it.row(r);
            // Built-in masks hide the keys outside [vlo, vhi) of this row; so does a custom mask
            // row that only hides keys outside its span (the LLM graphs' causal masks), which is
            // then not read at all.
            let ((vlo, vhi), plain) = spans.row_keys(g, bi, hi, i);
            let (a, b) = (vlo.clamp(c0, c1) - c0, vhi.clamp(c0, c1).max(vlo.clamp(c0, c1)) - c0);
            let p = &mut sc.p[r * pw..r * pw + n16];
            let mrow = bi * g.ms[0] + hi * g.ms[1] + i * g.ms[2] + c0 * g.ms[3];
            let mut hide = None;
            match mask {
                _ if plain => {}
                Mask::Bool(m) if g.ms[3] == 1 => hide = Some(&m[mrow + a..mrow + b]),
                Mask::Bool(m) => {
                    for (jj, x) in p.iter_mut().enumerate().take(b).skip(a) {
                        if m[mrow + jj * g.ms[3]] == 0 {
                            *x = f32::NEG_INFINITY;
                        }
                    }
                }
                // A contiguous mask row (the LLM graphs' causal-and-cache mask): one pass the
                // compiler vectorizes, where the strided loop below ran a scalar add per key.
                Mask::Add(m) if g.ms[3] == 1 => {
                    for (x, mv) in p[a..b].iter_mut().zip(&m[mrow + a..mrow + b]) {
                        *x += mv.load().to_f64() as f32;
                    }
                }
                Mask::Add(m) => {
                    for (jj, x) in p.iter_mut().enumerate().take(b).skip(a) {
                        *x += m[mrow + jj * g.ms[3]].load().to_f64() as f32;
                    }
                }
                Mask::None => {}
            }
            // SAFETY: the caller vouched for the ISA; a <= b <= n16 and the mask row holds b - a.
            let (mx, sum) = unsafe { isa.softmax(p, a, b, hide) };
            join_chunk(mx, sum, p, &mut sc.m[r], &mut sc.l[r], &mut sc.o[r * dv..(r + 1) * dv]);
        }
        for r in rows..rows4 {
            sc.p[r * pw..r * pw + n16].fill(0.0);
        }
        let vb = &v[g.v_at(kv, c0)..];
        assert!(n > 0 && vb.len() >= (n - 1) * g.vs[2] + dv);
        // SAFETY: bounds checked above; the caller vouched for the ISA.
        unsafe {
            isa.product(Product::new(
                (sc.p.as_ptr(), pw),
                (vb.as_ptr(), g.vs[2]),
                (sc.o.as_mut_ptr(), dv),
                (rows4, dv, n),
                true,
            ))
        };
        c0 = c1;
    }
    for r in 0..rows {
        let (hi, i) = it.row(r);
        let base = g.o_at(bi, hi, i);
        // SAFETY: each item writes only its own rows of the output.
        let dst = unsafe { out.slice(base, dv) };
        // No visible key at all: NaN, as softmax of an all -inf row.
        let rl = if sc.m[r] == f32::NEG_INFINITY { f32::NAN } else { 1.0 / sc.l[r] };
        let row = &mut sc.o[r * dv..(r + 1) * dv];
        row.iter_mut().for_each(|x| *x *= rl);
        // Narrowed with SIMD when T is f16/bf16 (the scratch is f32, which C is here).
        crate::kernels::half_vec::store::<T>(c_of(row), dst);
    }
}

/// Joins a chunk's softmax numerators `p` (max `mx`, sum `sum`) into a row's running max `m`,
/// sum `l` and output `o` (which the chunk's `p @ V` is then added to): the older part is scaled
/// by `exp(m - new max)`, `p` by `exp(mx - new max)`. A NaN max makes the row NaN.
fn join_chunk(mx: f32, sum: f32, p: &mut [f32], m: &mut f32, l: &mut f32, o: &mut [f32]) {
    let mnew = if mx.is_nan() || m.is_nan() { f32::NAN } else { m.max(mx) };
    if mnew == f32::NEG_INFINITY {
        // Nothing visible so far: `p` is all zero and the row stays empty.
        return;
    }
    // The first chunk of a row (m = -inf) and a chunk holding the row's max skip their exps
    // (the values exp gives there, 0 and 1): one chunk per row is the common case.
    let alpha = if *m == f32::NEG_INFINITY { 0.0 } else { crate::kernels::math::exp_f32(*m - mnew) };
    let beta = if mx == mnew { 1.0 } else { crate::kernels::math::exp_f32(mx - mnew) };
    if beta != 1.0 {
        p.iter_mut().for_each(|x| *x *= beta);
    }
    if alpha != 0.0 {
        o.iter_mut().for_each(|x| *x *= alpha);
    }
    *l = *l * alpha + sum * beta;
    *m = mnew;
}

/// Softmax numerators of `p[a..b]` in place (`exp(x - max)`), zero elsewhere in `p`; returns
/// (max, sum). `hide` (a bool mask row over `a..b`) hides the keys whose byte is 0: they are
/// -inf in the max and 0 after the exp, whatever their score. A span with no visible key gives
/// max -inf (the caller writes NaN).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn softmax_span(p: &mut [f32], a: usize, b: usize, hide: Option<&[u8]>) -> (f32, f32) {
    use crate::kernels::vec32::simd8::exp8;
    use std::arch::x86_64::*;
    p[..a].fill(0.0);
    p[b..].fill(0.0);
    let s = &mut p[a..b];
    let n8 = s.len() / 8 * 8;
    let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
    // Lanes `j..j + 8` with hidden keys set to -inf. Never stored back over the scores: LLVM
    // turns such a store into a masked store, which is slow on AMD.
    let lanes = |s: &[f32], j: usize| -> __m256 {
        // SAFETY: j + 8 <= n8 <= s.len() (and the mask row, which has s.len() bytes).
        unsafe {
            let x = _mm256_loadu_ps(s.as_ptr().add(j));
            match hide {
                Some(m) => {
                    let bytes = _mm_loadl_epi64(m.as_ptr().add(j) as *const __m128i);
                    let zero = _mm256_cmpeq_epi32(_mm256_cvtepu8_epi32(bytes), _mm256_setzero_si256());
                    _mm256_blendv_ps(x, ninf, _mm256_castsi256_ps(zero))
                }
                None => x,
            }
        }
    };
    let hidden = |j: usize| hide.is_some_and(|m| m[j] == 0);
    // Max: a NaN anywhere makes the row NaN later (its exp is NaN), whatever the max says.
    let mut vm = ninf;
    for j in (0..n8).step_by(8) {
        vm = _mm256_max_ps(vm, lanes(s, j));
    }
    let mut buf = [0f32; 8];
    // SAFETY: 8 lanes.
    unsafe { _mm256_storeu_ps(buf.as_mut_ptr(), vm) };
    let tail = (n8..s.len()).filter(|&j| !hidden(j)).map(|j| s[j]);
    let mx = buf.into_iter().chain(tail).fold(f32::NEG_INFINITY, |m, x| if x > m { x } else { m });
    if mx == f32::NEG_INFINITY {
        s.fill(0.0);
        return (mx, 0.0);
    }
    let vmx = _mm256_set1_ps(mx);
    let mut acc = _mm256_setzero_ps();
    for j in (0..n8).step_by(8) {
        let e = exp8(_mm256_sub_ps(lanes(s, j), vmx));
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(s.as_mut_ptr().add(j), e) };
        acc = _mm256_add_ps(acc, e);
    }
    // SAFETY: 8 lanes.
    unsafe { _mm256_storeu_ps(buf.as_mut_ptr(), acc) };
    let mut sum = ((buf[0] + buf[4]) + (buf[1] + buf[5])) + ((buf[2] + buf[6]) + (buf[3] + buf[7]));
    for (j, x) in s.iter_mut().enumerate().skip(n8) {
        *x = if hidden(j) { 0.0 } else { crate::kernels::math::exp_f32(*x - mx) };
        sum += *x;
    }
    (mx, sum)
}

/// The product `p` in AVX2 4 x 16 register tiles; columns past the last full 16 take 8-wide,
/// then scalar steps.
///
/// # Safety
/// The CPU has AVX2 and FMA; `p`'s pointers cover its matrices.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn gemm(p: Product) {
    use std::arch::x86_64::*;
    let Product { a, lda, b, ldb, c, ldc, m, n, k, acc } = p;
    let n16 = n / 16 * 16;
    let n8 = n / 8 * 8;
    // SAFETY (whole body): every access is inside the ranges the caller vouched for.
    unsafe {
        for i in (0..m).step_by(4) {
            let ar = [a.add(i * lda), a.add((i + 1) * lda), a.add((i + 2) * lda), a.add((i + 3) * lda)];
            let cr = [c.add(i * ldc), c.add((i + 1) * ldc), c.add((i + 2) * ldc), c.add((i + 3) * ldc)];
            for j in (0..n16).step_by(16) {
                let mut t = [[_mm256_setzero_ps(); 2]; 4];
                if acc {
                    for r in 0..4 {
                        t[r] = [_mm256_loadu_ps(cr[r].add(j)), _mm256_loadu_ps(cr[r].add(j + 8))];
                    }
                }
                let mut bp = b.add(j);
                for p in 0..k {
                    let (b0, b1) = (_mm256_loadu_ps(bp), _mm256_loadu_ps(bp.add(8)));
                    for r in 0..4 {
                        let av = _mm256_broadcast_ss(&*ar[r].add(p));
                        t[r][0] = _mm256_fmadd_ps(av, b0, t[r][0]);
                        t[r][1] = _mm256_fmadd_ps(av, b1, t[r][1]);
                    }
                    bp = bp.add(ldb);
                }
                for r in 0..4 {
                    _mm256_storeu_ps(cr[r].add(j), t[r][0]);
                    _mm256_storeu_ps(cr[r].add(j + 8), t[r][1]);
                }
            }
            if n8 > n16 {
                let j = n16;
                let mut t = [_mm256_setzero_ps(); 4];
                if acc {
                    for r in 0..4 {
                        t[r] = _mm256_loadu_ps(cr[r].add(j));
                    }
                }
                for p in 0..k {
                    let b0 = _mm256_loadu_ps(b.add(p * ldb + j));
                    for r in 0..4 {
                        t[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&*ar[r].add(p)), b0, t[r]);
                    }
                }
                for r in 0..4 {
                    _mm256_storeu_ps(cr[r].add(j), t[r]);
                }
            }
            for r in 0..4 {
                for j in n8..n {
                    let mut x = if acc { *cr[r].add(j) } else { 0.0 };
                    for p in 0..k {
                        x = (*ar[r].add(p)).mul_add(*b.add(p * ldb + j), x);
                    }
                    *cr[r].add(j) = x;
                }
            }
        }
    }
}
