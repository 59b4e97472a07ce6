//! Matmul epilogues as in-place passes over finished runs of the output: a program that is one
//! chain from the GEMM's result (bias add, residual add, activation, scaling) becomes a list of
//! steps, each one tight loop over the run while it is still in L1. No scratch registers, locks
//! or copies; other programs keep the general chunked evaluator (`fused::Prog`).

use super::fused::{Buf, Src};
use crate::elem::FloatElem;
use rlx_ir::ops::{BinaryKind, Instr, UnaryKind};

#[cfg(target_arch = "x86_64")]
mod lanes;

/// The operand of a binary step besides the running value.
enum Operand<T> {
    /// A constant of the program.
    Const(T),
    /// Input `index` (into the caller's input list), laid out against the output as `layout`.
    Input { index: usize, layout: Layout },
}

/// How an input lines up with the output: the `Src` kinds that are runs (no index map).
#[derive(Clone, Copy)]
pub(super) enum Layout {
    Same,
    Splat,
    Cycle(usize),
    Repeat(usize),
}

impl Layout {
    /// The run layout of `src`, or None for an index map.
    pub(super) fn of(src: &Src) -> Option<Layout> {
        Some(match *src {
            Src::Same => Layout::Same,
            Src::Splat => Layout::Splat,
            Src::Cycle(c) => Layout::Cycle(c),
            Src::Repeat(c) => Layout::Repeat(c),
            Src::Map(_) => return None,
        })
    }

    /// The length of this layout's runs over an output of `n` elements (the last may be shorter).
    pub(super) fn run_len(self, n: usize) -> usize {
        match self {
            Layout::Same | Layout::Splat => n,
            Layout::Cycle(c) | Layout::Repeat(c) => c,
        }
    }

    /// Splits output elements `s0 .. s0 + len` into runs over which the input is contiguous from
    /// element `i` (`step` true) or the one element `i`: `f(offset in the span, length, i, step)`.
    pub(super) fn runs(self, s0: usize, len: usize, mut f: impl FnMut(usize, usize, usize, bool)) {
        let mut done = 0;
        while done < len {
            let at = s0 + done;
            let (take, i, step) = match self {
                Layout::Same => (len - done, at, true),
                Layout::Splat => (len - done, 0, false),
                Layout::Cycle(c) => ((c - at % c).min(len - done), at % c, true),
                Layout::Repeat(c) => ((c - at % c).min(len - done), at / c, false),
            };
            f(done, take, i, step);
            done += take;
        }
    }
}

enum Step<T> {
    Unary(UnaryKind),
    /// `acc = op(acc, operand)`, or `op(operand, acc)` when `acc_left` is false.
    Binary {
        op: BinaryKind,
        operand: Operand<T>,
        acc_left: bool,
    },
}

/// An epilogue program compiled to in-place steps over the output.
pub(super) struct RowPlan<T> {
    steps: Vec<Step<T>>,
    /// Runs take the AVX-512 fast path (`lanes`): f32, simple steps, the CPU has AVX-512F.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    lanes: bool,
}

/// Elements per piece of a block whose rows are contiguous.
const PIECE: usize = 512;
/// Pieces ahead whose inputs are prefetched.
const AHEAD: usize = 4;

/// An operand's values for one run: a slice as long as the run, or one value.
#[derive(Clone, Copy)]
enum Rhs<'a, T> {
    Slice(&'a [T]),
    Scalar(T),
}

impl<T: FloatElem> RowPlan<T> {
    /// The plan of `program` when it is one chain that starts from the output (every other
    /// instruction is an input or constant used once, right where the chain consumes it), and
    /// every input it reads is the same shape as the output, a suffix (bias), a prefix (per-row
    /// value) or a scalar. None otherwise.
    pub(super) fn compile(program: &[Instr], srcs: &[(Buf, Src)]) -> Option<Self> {
        let mut acc = None;
        // Instructions computed but not yet consumed: inputs and constants waiting for their step.
        let mut pending: Vec<(usize, Operand<T>)> = vec![];
        let mut steps = vec![];
        for (k, ins) in program.iter().enumerate() {
            match *ins {
                Instr::Input(i) => {
                    let (buf, src) = srcs.get(i)?;
                    match (buf, acc) {
                        (Buf::Out, None) if matches!(src, Src::Same) => acc = Some(k),
                        (Buf::In(index), Some(_)) => {
                            let layout = Layout::of(src)?;
                            pending.push((k, Operand::Input { index: *index, layout }));
                        }
                        _ => return None,
                    }
                }
                Instr::Const(c) if acc.is_some() => pending.push((k, Operand::Const(T::from_f64(c)))),
                Instr::Unary(u, a) if Some(a) == acc && pending.is_empty() => {
                    steps.push(Step::Unary(u));
                    acc = Some(k);
                }
                Instr::Binary(op, a, b) if pending.len() == 1 => {
                    let (p, operand) = pending.pop()?;
                    let acc_left = match (Some(a) == acc, Some(b) == acc) {
                        (true, false) if b == p => true,
                        (false, true) if a == p => false,
                        _ => return None,
                    };
                    steps.push(Step::Binary { op, operand, acc_left });
                    acc = Some(k);
                }
                _ => return None,
            }
        }
        #[cfg(target_arch = "x86_64")]
        let lanes = std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
            && lanes::eligible(&steps)
            && super::vec32::simd16::avx512();
        #[cfg(not(target_arch = "x86_64"))]
        let lanes = false;
        (acc == Some(program.len().checked_sub(1)?) && pending.is_empty()).then_some(RowPlan { steps, lanes })
    }

    /// Applies the plan to a block of the output at `out`: `rows` runs of `w` elements, the first
    /// at flat index `s0`, the next `stride` further. Pieces of about `PIECE` elements go through
    /// every step while in L1; the inputs read in output order are prefetched `AHEAD` pieces
    /// early (a residual produced a few ops before sits in L3, and short row runs never wake the
    /// hardware prefetcher).
    ///
    /// # Safety
    /// `out` is the whole output, the block lies inside it and only this call touches it; the
    /// inputs as for `run`.
    pub(super) unsafe fn run_rows(
        &self,
        out: *mut T,
        s0: usize,
        rows: usize,
        w: usize,
        stride: usize,
        ins: &[(usize, usize)],
    ) {
        let whole = w == stride;
        let count = if whole { (rows * w).div_ceil(PIECE) } else { rows };
        let piece =
            |p: usize| if whole { (s0 + p * PIECE, PIECE.min(rows * w - p * PIECE)) } else { (s0 + p * stride, w) };
        // The output's own rows too: the GEMM left them in L2, and a row of a few lines is too
        // short for the hardware prefetcher.
        let fetch = |p: usize| {
            let (s, len) = piece(p);
            self.prefetch(s, len, ins);
            if !whole {
                let first = out as usize + s * std::mem::size_of::<T>();
                (first..first + len * std::mem::size_of::<T>()).step_by(64).for_each(crate::prefetch::to_l1);
            }
        };
        (0..count).take(AHEAD).for_each(fetch);
        for p in 0..count {
            if p + AHEAD < count {
                fetch(p + AHEAD);
            }
            let (s, len) = piece(p);
            #[cfg(target_arch = "x86_64")]
            if self.lanes
                // SAFETY: the caller's contract; the plan is `eligible` and T is f32 (`lanes`).
                && let Some(resolved) = unsafe { lanes::resolve(&self.steps, s, len, ins) }
            {
                // SAFETY: T is f32 and the CPU has AVX-512F (`lanes`); the piece and the resolved
                // input runs hold `len` values.
                unsafe { lanes::run(out.add(s) as *mut f32, len, &resolved[..self.steps.len()]) };
                continue;
            }
            // SAFETY: a piece of the block (the caller's contract).
            unsafe { self.run(std::slice::from_raw_parts_mut(out.add(s), len), s, ins) };
        }
    }

    /// Prefetches elements `s .. s + len` of every input read in output order.
    fn prefetch(&self, s: usize, len: usize, ins: &[(usize, usize)]) {
        for step in &self.steps {
            if let Step::Binary { operand: Operand::Input { index, layout: Layout::Same }, .. } = step {
                let (p, l) = ins[*index];
                if s + len <= l {
                    let bytes = len * std::mem::size_of::<T>();
                    let first = p + s * std::mem::size_of::<T>();
                    (first..first + bytes).step_by(64).for_each(crate::prefetch::to_l1);
                }
            }
        }
    }

    /// Applies the plan to output elements `s0 .. s0 + out.len()` (`out` holds the GEMM's
    /// values), reading inputs from `ins` as (address, length) pairs.
    ///
    /// # Safety
    /// Each `ins[index]` a step reads is a live buffer of `T` with that length, laid out as the
    /// plan was compiled for, not overlapping `out`.
    pub(super) unsafe fn run(&self, out: &mut [T], s0: usize, ins: &[(usize, usize)]) {
        let simd = super::math::avx2_fma();
        for step in &self.steps {
            match step {
                Step::Unary(u) => unary_in_place(simd, *u, out),
                Step::Binary { op, operand: Operand::Const(c), acc_left } => {
                    binary_in_place(simd, *op, out, Rhs::Scalar(*c), *acc_left)
                }
                Step::Binary { op, operand: Operand::Input { index, layout }, acc_left } => {
                    let (p, l) = ins[*index];
                    // SAFETY: the caller's contract.
                    let x = unsafe { std::slice::from_raw_parts(p as *const T, l) };
                    let (op, left) = (*op, *acc_left);
                    for_runs(*layout, x, s0, out.len(), |at, len, rhs| {
                        binary_in_place(simd, op, &mut out[at..at + len], rhs, left)
                    });
                }
            }
        }
    }
}

/// Splits output elements `s0 .. s0 + len` into runs over which input `x` (laid out as
/// `layout`) is one contiguous slice or one value; `f(offset in the run, length, values)`.
fn for_runs<'a, T: Copy>(
    layout: Layout,
    x: &'a [T],
    s0: usize,
    len: usize,
    mut f: impl FnMut(usize, usize, Rhs<'a, T>),
) {
    layout.runs(s0, len, |at, n, i, step| f(at, n, if step { Rhs::Slice(&x[i..i + n]) } else { Rhs::Scalar(x[i]) }));
}

/// `acc = u(acc)`: f32 through the vectorized loops, other types through `UnaryKind::eval`.
fn unary_in_place<T: FloatElem>(simd: bool, u: UnaryKind, acc: &mut [T]) {
    match super::vec32::as_f32_mut(acc) {
        Some(acc) => super::vec32::unary_in_place(simd, u, acc),
        None => acc.iter_mut().for_each(|o| *o = u.eval(*o)),
    }
}

/// `acc = op(acc, rhs)` (or `op(rhs, acc)`).
fn binary_in_place<T: FloatElem>(simd: bool, op: BinaryKind, acc: &mut [T], rhs: Rhs<'_, T>, acc_left: bool) {
    if let Some(a) = super::vec32::as_f32_mut(acc) {
        let rhs32 = match rhs {
            Rhs::Slice(s) => super::vec32::as_f32(s).map(Rhs::Slice),
            Rhs::Scalar(c) => Some(Rhs::Scalar(c.to_f64() as f32)),
        };
        if let Some(r) = rhs32 {
            return binary_f32(simd, op, a, r, acc_left);
        }
    }
    let f = |o: &mut T, y: T| *o = if acc_left { op.eval(*o, y) } else { op.eval(y, *o) };
    match rhs {
        Rhs::Slice(s) => acc.iter_mut().zip(s).for_each(|(o, &y)| f(o, y)),
        Rhs::Scalar(c) => acc.iter_mut().for_each(|o| f(o, c)),
    }
}

/// `acc = op(acc, c)` (or `op(c, acc)` when `acc_left` is false), one vectorized loop per op.
pub(super) fn binary_scalar_f32(op: BinaryKind, acc: &mut [f32], c: f32, acc_left: bool) {
    binary_f32(super::math::avx2_fma(), op, acc, Rhs::Scalar(c), acc_left)
}

crate::simd_entry!(binary_f32 = binary_f32_body<>(op: BinaryKind, acc: &mut [f32], rhs: Rhs<'_, f32>, acc_left: bool));

/// One loop per hot op and operand form, so each is inlined and vectorized.
#[inline(always)]
fn binary_f32_body<const FMA: bool>(op: BinaryKind, acc: &mut [f32], rhs: Rhs<'_, f32>, acc_left: bool) {
    use super::vec32::V32;
    // The operand form and order are matched outside the loops, so each loop is branch-free.
    macro_rules! loops {
        ($f:expr) => {
            match (rhs, acc_left) {
                (Rhs::Slice(s), true) => acc.iter_mut().zip(s).for_each(|(o, &y)| *o = $f(*o, y)),
                (Rhs::Slice(s), false) => acc.iter_mut().zip(s).for_each(|(o, &y)| *o = $f(y, *o)),
                (Rhs::Scalar(c), true) => acc.iter_mut().for_each(|o| *o = $f(*o, c)),
                (Rhs::Scalar(c), false) => acc.iter_mut().for_each(|o| *o = $f(c, *o)),
            }
        };
    }
    macro_rules! each {
        ($($k:ident),*) => {
            match op {
                $(BinaryKind::$k => loops!(|x: f32, y: f32| BinaryKind::$k.eval(V32(x), V32(y)).0),)*
                _ => loops!(|x: f32, y: f32| op.eval(x, y)),
            }
        };
    }
    each!(Add, Sub, Mul, Div, Maximum, Minimum);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(program: &[Instr], srcs: Vec<(Buf, Src)>) -> Option<RowPlan<f32>> {
        RowPlan::compile(program, &srcs)
    }

    #[test]
    fn chains_compile_and_everything_else_falls_back() {
        use Instr::*;
        let bias = || vec![(Buf::Out, Src::Same), (Buf::In(2), Src::Cycle(4)), (Buf::In(3), Src::Same)];
        let add = BinaryKind::Add;
        // bias + residual, gelu(bias), 2 * x - bias (operand on the left).
        assert!(plan(&[Input(0), Input(1), Binary(add, 0, 1), Input(2), Binary(add, 2, 3)], bias()).is_some());
        assert!(plan(&[Input(0), Input(1), Binary(add, 0, 1), Unary(UnaryKind::Gelu, 2)], bias()).is_some());
        assert!(
            plan(
                &[Input(0), Const(2.0), Binary(BinaryKind::Mul, 1, 0), Input(1), Binary(BinaryKind::Sub, 2, 3)],
                bias()
            )
            .is_some()
        );
        // The running value used twice (x * sigmoid(x)), and two operands pending: not chains.
        assert!(plan(&[Input(0), Unary(UnaryKind::Sigmoid, 0), Binary(BinaryKind::Mul, 0, 1)], bias()).is_none());
        assert!(plan(&[Input(0), Input(1), Input(2), Binary(add, 1, 2), Binary(add, 0, 3)], bias()).is_none());
        // A broadcast needing an index map.
        let map = vec![(Buf::Out, Src::Same), (Buf::In(2), Src::Map(vec![0, 0]))];
        assert!(plan(&[Input(0), Input(1), Binary(add, 0, 1)], map).is_none());
    }

    /// Runs every program through the chunked evaluator over the whole output, and through the
    /// plan over whole-row blocks and over column blocks; the results must agree bit for bit.
    fn same_as_chunked<T: FloatElem>() {
        use crate::kernels::fused::{CHUNK, Prog, fill};
        use Instr::*;
        // 689 elements: more than one piece and more than one evaluator chunk.
        let (rows, n) = (53usize, 13usize);
        let srcs = || {
            vec![
                (Buf::Out, Src::Same),
                (Buf::In(0), Src::Cycle(n)),
                (Buf::In(1), Src::Same),
                (Buf::In(2), Src::Repeat(n)),
                (Buf::In(3), Src::Splat),
            ]
        };
        let val = |i: usize, s: f64| T::from_f64(((i * 37 % 23) as f64 - 11.0) * s);
        let inputs: Vec<Vec<T>> = vec![
            (0..n).map(|i| val(i, 0.3)).collect(),
            (0..rows * n).map(|i| val(i + 5, 0.25)).collect(),
            (0..rows).map(|i| val(i + 2, 0.5)).collect(),
            vec![T::from_f64(0.75)],
        ];
        let gemm: Vec<T> = (0..rows * n).map(|i| val(i + 9, 0.4)).collect();
        let ins: Vec<(usize, usize)> = inputs.iter().map(|v| (v.as_ptr() as usize, v.len())).collect();
        let (add, mul) = (BinaryKind::Add, BinaryKind::Mul);
        let programs: Vec<Vec<Instr>> = vec![
            vec![Input(0), Input(1), Binary(add, 0, 1), Input(2), Binary(add, 2, 3), Unary(UnaryKind::Gelu, 4)],
            vec![Input(0), Input(3), Binary(BinaryKind::Sub, 1, 0), Const(0.5), Binary(mul, 2, 3), Input(4)],
            vec![Input(0), Input(3), Binary(BinaryKind::Sub, 1, 0), Const(0.5), Binary(mul, 2, 3)],
            vec![Input(0), Unary(UnaryKind::Tanh, 0), Input(4), Binary(BinaryKind::Maximum, 2, 1)],
            vec![Input(0), Const(2.0), Binary(BinaryKind::Pow, 0, 1), Input(2), Binary(BinaryKind::Div, 2, 3)],
            vec![Input(0), Unary(UnaryKind::Erf, 0), Unary(UnaryKind::Silu, 1), Input(1), Binary(mul, 3, 2)],
        ];
        for program in programs {
            let Some(plan) = RowPlan::<T>::compile(&program, &srcs()) else {
                // Only the second program (an unused input left over) is not a chain.
                assert!(matches!(program.last(), Some(Input(_))), "{program:?} should compile");
                continue;
            };
            let prog = Prog::<T>::new(program.clone(), srcs());
            let mut regs = vec![T::from_f64(0.0); program.len() * CHUNK];
            let mut want = vec![];
            for s in (0..rows * n).step_by(CHUNK) {
                let e = (s + CHUNK).min(rows * n);
                want.extend_from_slice(prog.eval(&mut regs, s, e - s, |buf, src, r| match buf {
                    Buf::Out => r.copy_from_slice(&gemm[s..e]),
                    Buf::In(i) => fill(src, &inputs[i], r, s),
                }));
            }
            // Whole rows (one contiguous block), then column blocks over two row bands.
            let blocks: [&[(usize, usize, usize, usize)]; 2] =
                [&[(0, rows, 0, n)], &[(0, 30, 0, 5), (0, 30, 5, 8), (30, 23, 0, 6), (30, 23, 6, 7)]];
            for split in blocks {
                let mut out = gemm.clone();
                for &(i0, r, j0, w) in split {
                    // SAFETY: the blocks lie inside `out` and the inputs are live.
                    unsafe { plan.run_rows(out.as_mut_ptr(), i0 * n + j0, r, w, n, &ins) };
                }
                let bits = |v: &[T]| v.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&out), bits(&want), "{program:?} over {split:?}");
            }
        }
    }

    #[test]
    fn plans_match_the_chunked_evaluator_bit_for_bit() {
        same_as_chunked::<f32>();
        same_as_chunked::<f64>();
    }

    #[test]
    fn runs_split_at_row_ends_and_per_row_values() {
        let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let mut seen = vec![];
        for_runs(Layout::Cycle(4), &x, 6, 7, |at, len, rhs| {
            let Rhs::Slice(s) = rhs else { panic!("a slice") };
            seen.push((at, len, s.to_vec()));
        });
        assert_eq!(seen, vec![(0, 2, vec![2.0, 3.0]), (2, 4, vec![0.0, 1.0, 2.0, 3.0]), (6, 1, vec![0.0])]);
        let mut rows = vec![];
        for_runs(Layout::Repeat(5), &x, 3, 8, |at, len, rhs| {
            let Rhs::Scalar(v) = rhs else { panic!("a value") };
            rows.push((at, len, v));
        });
        assert_eq!(rows, vec![(0, 2, 0.0), (2, 5, 1.0), (7, 1, 2.0)]);
    }
}
