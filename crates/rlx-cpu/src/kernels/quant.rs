//! Quantized weights: `qmatmul` (packed GGUF rows times f32 activations) and `dequantize`.
//!
//! Q4_K, Q5_K and Q6_K rows multiply activations quantized on the fly to Q8_K, Q8_0 and Q4_0
//! rows activations in Q8_0 (ggml's scheme), with AVX-512 VNNI, AVX2, NEON `sdot` (dotprod),
//! baseline NEON or portable int8 dot products picked at run time. Other schemes dequantize one
//! block at a time (exact f32 math).
//! Q4_K, Q5_K, Q6_K and Q8_0 weights that are params are repacked once per version into
//! interleaved eight-row groups (`repack.rs`, 1.0-1.03x their size), one copy shared by every
//! kernel and graph (`packed.rs`), and the source pages of a memory-mapped file are then
//! released; decode (`x8.rs`) and prefill (`x8gemm.rs`, MR activation rows per pass over a group;
//! Q8_0: `x8q80.rs`) read only that copy (`RLX_QUANT_REPACK=0`: none). Other weights: decode
//! splits the rows over threads; prefill quantizes each activation row once and runs a batched
//! int8 matmul (`gemm.rs`): weight rows unpacked once into a tile every activation row reuses.
//! On CPUs with AMX-BF16, prefill of at least `amx::MIN_ROWS` rows over the repacked copy
//! dequantizes bands of weight rows to bf16 and runs `tdpbf16ps` tiles instead (`amx.rs`, faster
//! than the int8 kernels: session 15 in docs/benchmarks-history.md; `RLX_QUANT_AMX=0` turns it
//! off).
//! The repacked and batched kernels are x86 only: on aarch64 decode and prefill both take the
//! NEON row dot products (`neon.rs`), one weight row against each activation row.

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod blocks4;
mod dot;
#[cfg(target_arch = "x86_64")]
mod gemm;
#[cfg(target_arch = "aarch64")]
mod neon;
mod packed;
mod repack;
#[cfg(target_arch = "x86_64")]
mod x16gemm;
#[cfg(target_arch = "x86_64")]
mod x8;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x8gemm;
mod x8q80;

use super::{Kernel, KernelBuilder, KernelCtx, unsupported};
use crate::exec::Bufs;
use crate::threads::parallel_for;
use dot::{Q8K, Q80};
pub use packed::{released_bytes, repacks};
use rlx_driver::KernelTable;
use rlx_ir::{DType, Error, Op, OpKind, QuantScheme, Result};

/// Dtypes of the claimed nodes: f32 activations and outputs, u8 packed weights.
const F32_U8: &[DType] = &[DType::F32, DType::U8];

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register(OpKind::QMatMul, F32_U8, qmatmul);
    t.register(OpKind::Dequantize, F32_U8, dequantize);
}

/// The instruction set the int8 dot products use.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // Avx2 and Vnni exist on x86 only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Portable Rust.
    Scalar,
    /// AVX2 `maddubs`.
    Avx2,
    /// AVX-512 VNNI `vpdpbusd` (256-bit).
    Vnni,
    /// Baseline NEON `smull` + `sadalp` (every aarch64 CPU).
    #[cfg(target_arch = "aarch64")]
    Neon,
    /// NEON with the dotprod extension's `sdot`.
    #[cfg(target_arch = "aarch64")]
    NeonDot,
}

impl Isa {
    /// The best the CPU supports (`RLX_QUANT_ISA=scalar|avx2` caps it on x86,
    /// `RLX_QUANT_ISA=scalar|neon` on aarch64, for comparisons).
    pub fn detect() -> Isa {
        use rlx_driver::config::IsaCap;
        let cap = rlx_driver::config().cpu.quant.isa;
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 =
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c");
            let vnni = avx2 && is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl");
            if cap != IsaCap::Scalar && cap != IsaCap::Avx2 && vnni {
                return Isa::Vnni;
            }
            if cap != IsaCap::Scalar && avx2 {
                return Isa::Avx2;
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            if cap != IsaCap::Scalar && cap != IsaCap::Neon && std::arch::is_aarch64_feature_detected!("dotprod") {
                return Isa::NeonDot;
            }
            if cap != IsaCap::Scalar {
                return Isa::Neon;
            }
        }
        let _ = cap;
        Isa::Scalar
    }

    /// Every path this CPU can run (tests compare them).
    #[cfg(test)]
    pub fn available() -> Vec<Isa> {
        // Each architecture's paths, worst first.
        #[cfg(target_arch = "aarch64")]
        let all = [Isa::Scalar, Isa::Neon, Isa::NeonDot];
        #[cfg(not(target_arch = "aarch64"))]
        let all = [Isa::Scalar, Isa::Avx2, Isa::Vnni];
        let best = Isa::detect();
        all.into_iter().filter(|&i| i as u8 <= best as u8).collect()
    }
}

/// Runs `f` with the configuration `settings` (variable, value) make, ignoring the environment,
/// in force on this thread (tests: one process builds every path).
#[cfg(test)]
fn with_settings<R>(settings: &[(&'static str, &'static str)], f: impl FnOnce() -> R) -> R {
    let lookup = |name: &str| settings.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
    rlx_driver::config::with_config(rlx_driver::config::Config::from_lookup(&lookup), f)
}

/// A row dot product against one row of quantized activations.
#[derive(Clone, Copy)]
pub enum RowDot {
    /// K-quant weights, Q8_K activations.
    K(fn(&[u8], &[Q8K]) -> f32),
    /// 32-blocks, Q8_0 activations.
    Z(fn(&[u8], &[Q80]) -> f32),
}

macro_rules! pick {
    ($isa:expr, $m:ident, $f:ident) => {
        match $isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::detect` chose this path only when the CPU has these features.
            Isa::Vnni => |w: &[u8], a: &_| unsafe { $m::vnni::$f(w, a) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Isa::Avx2 => |w: &[u8], a: &_| unsafe { $m::avx2::$f(w, a) },
            // aarch64 has one-block kernels only: both forms take them.
            #[cfg(target_arch = "aarch64")]
            // SAFETY: as above.
            Isa::NeonDot => |w: &[u8], a: &_| unsafe { neon::dotprod::$f(w, a) },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: every aarch64 CPU has NEON.
            Isa::Neon => |w: &[u8], a: &_| unsafe { neon::base::$f(w, a) },
            _ => dot::$f,
        }
    };
}

/// The int8 row dot product for `scheme` on `isa`, or None when the scheme has none.
/// Q8_0 takes four blocks per step by default (faster: docs/benchmarks-history.md); Q4_K and Q6_K
/// one block, as the four-block form ran no faster from DRAM here. `RLX_QUANT_BLOCKS=1` or `=4`
/// forces either form for every scheme (for comparisons).
pub fn row_dot(scheme: QuantScheme, isa: Isa) -> Option<RowDot> {
    let four = match rlx_driver::config().cpu.quant.blocks {
        Some(1) => false,
        Some(4) => true,
        _ => scheme == QuantScheme::Q8_0,
    };
    row_dot_with(scheme, isa, four)
}

/// As `row_dot`; `four` picks the four-blocks-per-step kernels where a scheme has them.
pub fn row_dot_with(scheme: QuantScheme, isa: Isa, four: bool) -> Option<RowDot> {
    Some(match (scheme, four) {
        (QuantScheme::Q4_K, true) => RowDot::K(pick!(isa, blocks4, q4k)),
        (QuantScheme::Q4_K, false) => RowDot::K(pick!(isa, x86, q4k)),
        (QuantScheme::Q5_K, _) => RowDot::K(pick!(isa, x86, q5k)),
        (QuantScheme::Q6_K, true) => RowDot::K(pick!(isa, blocks4, q6k)),
        (QuantScheme::Q6_K, false) => RowDot::K(pick!(isa, x86, q6k)),
        (QuantScheme::Q8_0, true) => RowDot::Z(pick!(isa, blocks4, q8_0)),
        (QuantScheme::Q8_0, false) => RowDot::Z(pick!(isa, x86, q8_0)),
        (QuantScheme::Q4_0, _) => RowDot::Z(pick!(isa, x86, q4_0)),
        _ => return None,
    })
}

/// A raw output pointer shared by tasks that write disjoint elements.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: every task writes a disjoint set of elements, and `parallel_for` joins before return.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// Element `i` (a method, so closures capture the whole `Sync` wrapper).
    fn at(self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

/// Per-call buffers shared by every quantized kernel in the process. A graph runs one node at a
/// time, so one buffer of the largest size serves all of its matmuls, where a buffer per node held
/// about `m * k` bytes for each of a model's matmuls (600 MB more at a 1024-token prefill).
struct Pool<T>(std::sync::Mutex<Vec<Vec<T>>>);

impl<T: Clone + Default> Pool<T> {
    const fn new() -> Self {
        Pool(std::sync::Mutex::new(Vec::new()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<T>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes sure a buffer of at least `len` elements is there (when a kernel is built, so that
    /// runs allocate nothing).
    fn reserve(&self, len: usize) {
        let mut bufs = self.lock();
        match bufs.iter_mut().max_by_key(|v| v.len()) {
            Some(v) if v.len() < len => v.resize(len, T::default()),
            Some(_) => {}
            None => {
                bufs.reserve(4);
                bufs.push(vec![T::default(); len]);
            }
        }
    }

    /// Runs `f` on a free buffer of at least `len` elements: a new one only while every buffer is
    /// in use by graphs running on other threads.
    fn with<R>(&self, len: usize, f: impl FnOnce(&mut Vec<T>) -> R) -> R {
        let mut v = self.lock().pop().unwrap_or_default();
        if v.len() < len {
            v.resize(len, T::default());
        }
        let r = f(&mut v);
        self.lock().push(v);
        r
    }
}

/// Q8_K activations of prefill (m > 1) kernels.
static ACT_K: Pool<Q8K> = Pool::new();
/// Q8_0 activations of prefill kernels.
static ACT_0: Pool<Q80> = Pool::new();
/// Pair sums of Q4_K / Q5_K prefill activations.
#[cfg(target_arch = "x86_64")]
static PAIR_SUMS: Pool<[i32; 4]> = Pool::new();
/// The AMX prefill's bf16 activations.
#[cfg(target_arch = "x86_64")]
static AMX_ACT: Pool<u16> = Pool::new();

/// The activation rows of `x` (`k` values each) quantized to Q8_K in a pooled buffer, for `f`.
fn with_q8k<R>(x: &[f32], k: usize, f: impl FnOnce(&[Q8K]) -> R) -> R {
    let len = x.len() / k * (k / 256);
    ACT_K.with(len, |act| {
        let act = &mut act[..len];
        for (x, a) in x.chunks_exact(k).zip(act.chunks_exact_mut(k / 256)) {
            dot::quantize_q8k(x, a);
        }
        f(act)
    })
}

/// The activation rows of `x` (`k` values each) quantized to Q8_0 in a pooled buffer, for `f`.
fn with_q80<R>(x: &[f32], k: usize, f: impl FnOnce(&[Q80]) -> R) -> R {
    let len = x.len() / k * (k / 32);
    ACT_0.with(len, |act| {
        let act = &mut act[..len];
        for (x, a) in x.chunks_exact(k).zip(act.chunks_exact_mut(k / 32)) {
            dot::quantize_q80(x, a);
        }
        f(act)
    })
}

/// Output rows per task (decode) and activation rows per tile (prefill).
const ROWS_PER_TASK: usize = 32;
const TILE_M: usize = 16;

/// `y[i, j] = dot(w_j, act_i)` for rows `i < m`, every feature `j < n`, threaded over `j`.
fn matmul_rows<A: Sync>(
    act: &[A],
    per_row: usize,
    w: &[u8],
    rb: usize,
    n: usize,
    y: OutPtr,
    f: fn(&[u8], &[A]) -> f32,
) {
    let m = act.len() / per_row;
    let tasks = n.div_ceil(ROWS_PER_TASK);
    parallel_for(tasks, &|t| {
        let (j0, j1) = (t * ROWS_PER_TASK, ((t + 1) * ROWS_PER_TASK).min(n));
        for i0 in (0..m).step_by(TILE_M) {
            for j in j0..j1 {
                let wr = &w[j * rb..(j + 1) * rb];
                for i in i0..(i0 + TILE_M).min(m) {
                    let v = f(wr, &act[i * per_row..(i + 1) * per_row]);
                    // SAFETY: element (i, j) lies in the m x n output, and only this task writes column j.
                    unsafe { *y.at(i * n + j) = v };
                }
            }
        }
    });
}

fn qmatmul(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::QMatMul(op) = ctx.op else { return Err(unsupported(ctx)) };
    let (scheme, k) = (op.scheme, op.k);
    let rb = scheme.row_bytes(k).map_err(|e| Error::eval("qmatmul", e))?;
    let n = ctx.in_dims(1)[0];
    let m = ctx.in_dims(0).iter().product::<usize>() / k;
    let build = BuiltQMatMul { scheme, k, rb, m, n, isa: Isa::detect() };
    build.kernel()
}

/// A compiled quantized matmul: geometry, chosen path and its scratch.
struct BuiltQMatMul {
    scheme: QuantScheme,
    k: usize,
    rb: usize,
    m: usize,
    n: usize,
    isa: Isa,
}

impl BuiltQMatMul {
    fn kernel(self) -> Result<Kernel> {
        let BuiltQMatMul { scheme, k, rb, m, n, isa } = self;
        if repacked(scheme, isa) {
            return Ok(match (scheme, m) {
                (QuantScheme::Q8_0, _) => self.repacked_q80_kernel(),
                (_, 1) => self.repacked_kernel(),
                _ => self.repacked_batched_kernel(),
            });
        }
        if m > 1 && batched(scheme, isa) {
            return Ok(self.batched_kernel());
        }
        if m == 1 && repacked(scheme, isa) {
            return Ok(self.repacked_kernel());
        }
        match row_dot(scheme, isa) {
            Some(RowDot::K(f)) => {
                // Scratch for the quantized activations, reserved once here.
                ACT_K.reserve(m * k / 256);
                Ok(Box::new(move |b: &Bufs<'_>| {
                    let y = OutPtr(b.output::<f32>().as_mut_ptr());
                    with_q8k(b.input::<f32>(0), k, |act| matmul_rows(act, k / 256, b.input::<u8>(1), rb, n, y, f));
                    Ok(())
                }))
            }
            Some(RowDot::Z(f)) => {
                ACT_0.reserve(m * k / 32);
                Ok(Box::new(move |b: &Bufs<'_>| {
                    let y = OutPtr(b.output::<f32>().as_mut_ptr());
                    with_q80(b.input::<f32>(0), k, |act| matmul_rows(act, k / 32, b.input::<u8>(1), rb, n, y, f));
                    Ok(())
                }))
            }
            None => Ok(Box::new(move |b: &Bufs<'_>| generic(scheme, k, rb, m, n, b))),
        }
    }
}

/// Whether prefill (m > 1) takes the batched int8 matmul; `RLX_QUANT_GEMM=0` turns it off
/// (row dot products per activation row instead, for comparisons).
fn batched(scheme: QuantScheme, isa: Isa) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        rlx_driver::config().cpu.quant.gemm && gemm::supported(scheme, isa)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (scheme, isa);
        false
    }
}

/// Whether the AMX prefill (`amx.rs`) takes `m` rows of a repacked `scheme` here; if so its bf16
/// activation buffer is reserved now, so a run allocates nothing. `RLX_QUANT_AMX=0` turns it off
/// (the int8 kernels instead, for comparisons).
#[cfg(target_arch = "x86_64")]
fn amx_rows(scheme: QuantScheme, m: usize, k: usize) -> bool {
    let on = rlx_driver::config().cpu.quant.amx;
    let take = on && m >= amx::MIN_ROWS && amx::supported(scheme) && amx::available();
    if take {
        AMX_ACT.reserve(amx::act_buffer_len(m, k));
    }
    take
}

/// No AMX prefill off x86 (the tests ask).
#[cfg(all(test, not(target_arch = "x86_64")))]
fn amx_rows(_: QuantScheme, _: usize, _: usize) -> bool {
    false
}

/// Whether decode (m = 1) repacks the weights into interleaved row groups (`repack.rs`);
/// `RLX_QUANT_REPACK=0` turns it off (row dot products on the original layout instead). The
/// group kernels exist for x86 only (aarch64 takes the NEON row dot products).
fn repacked(scheme: QuantScheme, isa: Isa) -> bool {
    matches!(isa, Isa::Avx2 | Isa::Vnni)
        && repack::group_block_bytes(scheme).is_some()
        && rlx_driver::config().cpu.quant.repack
}

impl BuiltQMatMul {
    /// The decode kernel over weights repacked once per param version (the first run of each
    /// version makes the copy); weights that are not params take the row path.
    fn repacked_kernel(self) -> Kernel {
        let BuiltQMatMul { scheme, k, rb, n, isa, .. } = self;
        let Some(RowDot::K(f)) = row_dot(scheme, isa) else { unreachable!("repacked schemes are K-quants") };
        let mut act = vec![Q8K::default(); k / 256];
        let mut ps = vec![[0i32; 4]; k / 256];
        let mut shared = packed::Shared::new(scheme, n, k);
        #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))] // The pair kernels are x86 only.
        let pairs = decode_pairs(isa);
        Box::new(move |b: &Bufs<'_>| {
            dot::quantize_q8k(b.input::<f32>(0), &mut act);
            let y = OutPtr(b.output::<f32>().as_mut_ptr());
            let w = b.input::<u8>(1);
            match shared.get(b.input_version(1), w) {
                Some(packed) => {
                    repack::pair_sums_for(scheme, &act, &mut ps);
                    #[cfg(target_arch = "x86_64")]
                    if pairs {
                        x8gemm::gemm(isa, scheme, packed, &act, &ps, (1, k), n, y);
                        return Ok(());
                    }
                    repack::matvec(isa, scheme, packed, &act, &ps, n, k, y);
                }
                None => matmul_rows(&act, k / 256, w, rb, n, y, f),
            }
            Ok(())
        })
    }
}

/// Whether decode over repacked weights takes two groups to a 512-bit vector (`x16gemm`, through
/// the batched driver with one activation row) instead of a group at a time: where the CPU has
/// AVX-512 VNNI and runs 512-bit operations whole. On a Sapphire Rapids host the 256-bit kernels'
/// arithmetic, not memory, bounded decode; where 512-bit operations split in two (Zen 4) the
/// 256-bit kernels already stream at the memory's rate (session 34 in
/// docs/benchmarks-history.md).
fn decode_pairs(isa: Isa) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        isa == Isa::Vnni && x16gemm::available() && !crate::gemm::zmm_fma_split()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        false
    }
}

#[cfg(target_arch = "x86_64")]
impl BuiltQMatMul {
    /// The prefill kernel over the repacked copy (the decode kernels' copy, shared); weights that
    /// are not params take the batched kernel on the original layout.
    fn repacked_batched_kernel(self) -> Kernel {
        let BuiltQMatMul { scheme, k, rb, m, n, isa } = self;
        let sums = if scheme == QuantScheme::Q6_K { 0 } else { m * k / 256 };
        let mut shared = packed::Shared::new(scheme, n, k);
        let mut scratch = gemm::Scratch::new(m, k);
        let amx = amx_rows(scheme, m, k);
        if !amx {
            ACT_K.reserve(m * k / 256);
            PAIR_SUMS.reserve(sums);
        }
        Box::new(move |b: &Bufs<'_>| {
            let y = OutPtr(b.output::<f32>().as_mut_ptr());
            let w = b.input::<u8>(1);
            if amx && let Some(packed) = shared.get(b.input_version(1), w) {
                // SAFETY: `amx_rows` checked the CPU and the scheme; the shapes are the node's.
                AMX_ACT.with(0, |a| unsafe { amx::gemm(scheme, packed, b.input::<f32>(0), m, k, n, y, a) });
                return Ok(());
            }
            with_q8k(b.input::<f32>(0), k, |act| match shared.get(b.input_version(1), w) {
                Some(packed) => PAIR_SUMS.with(sums, |ps| {
                    let ps = &mut ps[..sums];
                    repack::pair_sums_for(scheme, act, ps);
                    x8gemm::gemm(isa, scheme, packed, act, ps, (m, k), n, y);
                }),
                None => gemm::gemm_k(isa, scheme, act, (m, k), w, rb, n, y, &mut scratch),
            });
            Ok(())
        })
    }

    /// The batched (prefill) kernel: activations quantized once per row, weight rows unpacked
    /// once per call into tiles that every activation row reuses.
    fn batched_kernel(self) -> Kernel {
        let BuiltQMatMul { scheme, k, rb, m, n, isa } = self;
        if scheme.block_size() == 256 {
            ACT_K.reserve(m * k / 256);
            let mut scratch = gemm::Scratch::new(m, k);
            Box::new(move |b: &Bufs<'_>| {
                let y = OutPtr(b.output::<f32>().as_mut_ptr());
                with_q8k(b.input::<f32>(0), k, |act| {
                    gemm::gemm_k(isa, scheme, act, (m, k), b.input::<u8>(1), rb, n, y, &mut scratch)
                });
                Ok(())
            })
        } else {
            ACT_0.reserve(m * k / 32);
            let scratch = gemm::Scratch::new(m, k);
            Box::new(move |b: &Bufs<'_>| {
                let y = OutPtr(b.output::<f32>().as_mut_ptr());
                with_q80(b.input::<f32>(0), k, |act| {
                    gemm::gemm_0(isa, scheme, act, (m, k), b.input::<u8>(1), rb, n, y, &scratch)
                });
                Ok(())
            })
        }
    }
}

impl BuiltQMatMul {
    /// Q8_0 decode and prefill over the shared repacked copy (`x8q80.rs`); weights that are not
    /// params take the row path (prefill: the batched kernel where there is one).
    fn repacked_q80_kernel(self) -> Kernel {
        let BuiltQMatMul { scheme, k, rb, m, n, isa } = self;
        let Some(RowDot::Z(f)) = row_dot(scheme, isa) else { unreachable!("Q8_0 has a row dot product") };
        let mut shared = packed::Shared::new(scheme, n, k);
        #[cfg(target_arch = "x86_64")]
        let scratch = (m > 1 && batched(scheme, isa)).then(|| gemm::Scratch::new(m, k));
        #[cfg(target_arch = "x86_64")]
        let amx = amx_rows(scheme, m, k);
        #[cfg(not(target_arch = "x86_64"))]
        let amx = false;
        if !amx {
            ACT_0.reserve(m * k / 32);
        }
        Box::new(move |b: &Bufs<'_>| {
            let y = OutPtr(b.output::<f32>().as_mut_ptr());
            let w = b.input::<u8>(1);
            #[cfg(target_arch = "x86_64")]
            if amx && let Some(packed) = shared.get(b.input_version(1), w) {
                // SAFETY: `amx_rows` checked the CPU and the scheme; the shapes are the node's.
                AMX_ACT.with(0, |a| unsafe { amx::gemm(scheme, packed, b.input::<f32>(0), m, k, n, y, a) });
                return Ok(());
            }
            with_q80(b.input::<f32>(0), k, |act| {
                if let Some(packed) = shared.get(b.input_version(1), w) {
                    x8q80::gemm(isa, packed, act, (m, k), n, y);
                    return;
                }
                #[cfg(target_arch = "x86_64")]
                if let Some(scratch) = &scratch {
                    gemm::gemm_0(isa, scheme, act, (m, k), w, rb, n, y, scratch);
                    return;
                }
                matmul_rows(act, k / 32, w, rb, n, y, f);
            });
            Ok(())
        })
    }
}

#[cfg(not(target_arch = "x86_64"))]
impl BuiltQMatMul {
    fn repacked_batched_kernel(self) -> Kernel {
        unreachable!("no repacked kernel off x86_64")
    }

    fn batched_kernel(self) -> Kernel {
        unreachable!("no batched quantized kernel off x86_64")
    }
}

/// Any other dequantizable scheme: one block at a time into a stack buffer, exact f32 products.
fn generic(scheme: QuantScheme, k: usize, rb: usize, m: usize, n: usize, b: &Bufs<'_>) -> Result<()> {
    let (bs, bb) = (scheme.block_size(), scheme.block_bytes());
    let (x, w) = (b.input::<f32>(0), b.input::<u8>(1));
    let y = OutPtr(b.output::<f32>().as_mut_ptr());
    let failed = std::sync::atomic::AtomicBool::new(false);
    parallel_for(n.div_ceil(ROWS_PER_TASK), &|t| {
        let mut buf = [0f32; 256];
        for j in t * ROWS_PER_TASK..((t + 1) * ROWS_PER_TASK).min(n) {
            for i in 0..m {
                let mut acc = 0f32;
                for blk in 0..k / bs {
                    let src = &w[j * rb + blk * bb..j * rb + (blk + 1) * bb];
                    if scheme.dequantize_rows(src, bs, &mut buf[..bs]).is_err() {
                        failed.store(true, std::sync::atomic::Ordering::Relaxed);
                        return;
                    }
                    let xs = &x[i * k + blk * bs..i * k + (blk + 1) * bs];
                    acc += xs.iter().zip(&buf[..bs]).map(|(a, b)| a * b).sum::<f32>();
                }
                // SAFETY: (i, j) is inside the output and only this task writes column j.
                unsafe { *y.at(i * n + j) = acc };
            }
        }
    });
    if failed.into_inner() {
        return Err(Error::eval("qmatmul", format!("cannot dequantize {scheme} blocks")));
    }
    Ok(())
}

fn dequantize(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::Dequantize(op) = ctx.op else { return Err(unsupported(ctx)) };
    let (scheme, k) = (op.scheme, op.k);
    let rb = scheme.row_bytes(k).map_err(|e| Error::eval("dequantize", e))?;
    Ok(Box::new(move |b: &Bufs<'_>| {
        let w = b.input::<u8>(0);
        let rows = w.len() / rb;
        let y = OutPtr(b.output::<f32>().as_mut_ptr());
        let failed = std::sync::atomic::AtomicBool::new(false);
        parallel_for(rows.div_ceil(ROWS_PER_TASK), &|t| {
            let (r0, r1) = (t * ROWS_PER_TASK, ((t + 1) * ROWS_PER_TASK).min(rows));
            // SAFETY: rows r0..r1 of the output belong to this task only.
            let out = unsafe { std::slice::from_raw_parts_mut(y.at(r0 * k), (r1 - r0) * k) };
            if scheme.dequantize_rows(&w[r0 * rb..r1 * rb], k, out).is_err() {
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        });
        if failed.into_inner() {
            return Err(Error::eval("dequantize", format!("cannot dequantize {scheme} rows")));
        }
        Ok(())
    }))
}

/// Grows every pool thread's weight-panel buffer to the longest any reached (after each run of
/// a compiled graph: warm runs allocate nothing whichever thread takes which task).
pub(crate) fn spread_thread_buffers() {
    #[cfg(target_arch = "x86_64")]
    amx::spread_panels();
}

#[cfg(test)]
mod matrix;
#[cfg(test)]
mod tests;
