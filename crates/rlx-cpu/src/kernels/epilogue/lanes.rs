//! The epilogue's AVX-512 fast path: a chain of simple steps (add, subtract, multiply or divide
//! by an input that is contiguous over the run, a per-row value or a constant; exp, erf, GELU)
//! applied to 16 lanes in registers, one pass over a row run and one dispatch per run. The
//! step-by-step path dispatched every step of every run: on 128-column blocks of a matmul output
//! that overhead cost more than the adds themselves. Same operations in the same order as the
//! step-by-step path (whose f32 loops use these exp/erf/GELU on AVX-512), so bit-identical.

use super::{Layout, Operand, Step};
use rlx_ir::ops::{BinaryKind, UnaryKind};

/// Most steps the fast path runs.
pub(super) const MAX_STEPS: usize = 4;

/// A binary operation the fast path runs.
#[derive(Clone, Copy)]
pub(super) enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

/// One step resolved for a run.
#[derive(Clone, Copy)]
pub(super) enum Lane {
    /// `acc op x[j]` over the run (`x op acc` when not `left`).
    Slice {
        op: Op,
        x: *const f32,
        left: bool,
    },
    /// `acc op c` (`c op acc` when not `left`).
    Value {
        op: Op,
        c: f32,
        left: bool,
    },
    Unary(UnaryKind),
}

/// The operation of `op`, if the fast path runs it.
fn op_of(op: BinaryKind) -> Option<Op> {
    Some(match op {
        BinaryKind::Add => Op::Add,
        BinaryKind::Sub => Op::Sub,
        BinaryKind::Mul => Op::Mul,
        BinaryKind::Div => Op::Div,
        _ => return None,
    })
}

/// Whether the fast path runs every one of `steps`.
pub(super) fn eligible<T>(steps: &[Step<T>]) -> bool {
    steps.len() <= MAX_STEPS
        && steps.iter().all(|s| match s {
            Step::Unary(u) => matches!(u, UnaryKind::Gelu | UnaryKind::Erf | UnaryKind::Exp),
            Step::Binary { op, .. } => op_of(*op).is_some(),
        })
}

/// The steps resolved for output elements `s .. s + w` (inputs given as (address, length)), or
/// None where an input is not contiguous over them (a bias run that wraps past a row's end).
///
/// # Safety
/// As `RowPlan::run`; `steps` is `eligible` and T is f32.
pub(super) unsafe fn resolve<T: crate::elem::FloatElem>(
    steps: &[Step<T>],
    s: usize,
    w: usize,
    ins: &[(usize, usize)],
) -> Option<[Lane; MAX_STEPS]> {
    if w == 0 {
        return None;
    }
    let mut out = [Lane::Unary(UnaryKind::Exp); MAX_STEPS];
    for (o, step) in out.iter_mut().zip(steps) {
        *o = match *step {
            Step::Unary(u) => Lane::Unary(u),
            Step::Binary { op, ref operand, acc_left } => {
                let op = op_of(op)?;
                match *operand {
                    Operand::Const(c) => Lane::Value { op, c: c.to_f64() as f32, left: acc_left },
                    Operand::Input { index, layout } => {
                        let (p, len) = ins[index];
                        let x = p as *const f32;
                        let (at, contiguous) = match layout {
                            Layout::Same => (s, true),
                            Layout::Splat => (0, false),
                            Layout::Cycle(c) if s % c + w <= c => (s % c, true),
                            Layout::Repeat(c) if s / c == (s + w - 1) / c => (s / c, false),
                            _ => return None,
                        };
                        let end = if contiguous { at + w } else { at + 1 };
                        if end > len {
                            return None;
                        }
                        if contiguous {
                            Lane::Slice { op, x: x.wrapping_add(at), left: acc_left }
                        } else {
                            // SAFETY: `at` < len (checked above); the caller vouched for the input.
                            Lane::Value { op, c: unsafe { *x.add(at) }, left: acc_left }
                        }
                    }
                }
            }
        };
    }
    Some(out)
}

/// Applies `lanes` to the `w` values at `out`, 16 at a time, the tail masked.
///
/// # Safety
/// The CPU has AVX-512F; `out` holds w values; every `Slice` input holds w values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn run(out: *mut f32, w: usize, lanes: &[Lane]) {
    use crate::kernels::vec32::simd16::{erf16, exp16, gelu16};
    use std::arch::x86_64::*;
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn apply(op: Op, a: __m512, b: __m512) -> __m512 {
        match op {
            Op::Add => _mm512_add_ps(a, b),
            Op::Sub => _mm512_sub_ps(a, b),
            Op::Mul => _mm512_mul_ps(a, b),
            Op::Div => _mm512_div_ps(a, b),
        }
    }
    let mut j = 0;
    while j < w {
        let mask: __mmask16 = if w - j >= 16 { 0xffff } else { ((1u32 << (w - j)) - 1) as __mmask16 };
        // SAFETY: lanes j.. under the mask lie inside out and every slice input.
        unsafe {
            let mut v = _mm512_maskz_loadu_ps(mask, out.add(j));
            for lane in lanes {
                v = match *lane {
                    Lane::Slice { op, x, left } => {
                        let y = _mm512_maskz_loadu_ps(mask, x.add(j));
                        if left { apply(op, v, y) } else { apply(op, y, v) }
                    }
                    Lane::Value { op, c, left } => {
                        let y = _mm512_set1_ps(c);
                        if left { apply(op, v, y) } else { apply(op, y, v) }
                    }
                    Lane::Unary(UnaryKind::Gelu) => gelu16(v),
                    Lane::Unary(UnaryKind::Erf) => erf16(v),
                    Lane::Unary(_) => exp16(v),
                };
            }
            _mm512_mask_storeu_ps(out.add(j), mask, v);
        }
        j += 16;
    }
}
