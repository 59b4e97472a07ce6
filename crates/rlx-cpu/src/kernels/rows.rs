//! Elementwise regions evaluated one row at a time (the rows of a reduction or a norm), shared
//! by the `fused_reduce` and `fused_norm` kernels. Registers hold the compute type.

use super::half_vec::load;
use super::math::{Compute, Real};
use rlx_ir::Scalar;
use rlx_ir::ops::Instr;
use rlx_ir::ops::util::broadcast_index_map;

/// How a region input lines up with one row (the `k` trailing elements reduced or normalized).
pub(super) enum RowSrc {
    /// Same element order as the region: row r is elements `r*n..(r+1)*n`.
    Same,
    /// One element for the whole region.
    Splat,
    /// Varies only along the reduced axes (a bias `[n]`): the same slice for every row.
    Vector,
    /// Constant along the reduced axes (a per-row `[.., 1]` value): element r.
    PerRow,
    /// Any other broadcast: the input element of each region element.
    Map(Vec<u32>),
}

/// The layout of an input of dims `d` against region dims `od`, rows over the last `k` axes.
pub(super) fn row_src(od: &[usize], d: &[usize], k: usize) -> RowSrc {
    let mut p = vec![1; od.len().saturating_sub(d.len())];
    p.extend_from_slice(d);
    let (lead, tail) = (od.len() - k, od.len());
    if p == od {
        RowSrc::Same
    } else if p.iter().all(|&x| x == 1) {
        RowSrc::Splat
    } else if p[..lead].iter().all(|&x| x == 1) && p[lead..tail] == od[lead..] {
        RowSrc::Vector
    } else if p[lead..].iter().all(|&x| x == 1) && p[..lead] == od[..lead] {
        RowSrc::PerRow
    } else {
        RowSrc::Map(broadcast_index_map(od, d).into_iter().map(|x| x as u32).collect())
    }
}

/// Runs the region over row `r` in the compute type (f32 for f16/bf16 storage, whose inputs are
/// widened with SIMD): register `j` holds instruction `j`'s row.
pub(super) fn region_row<'a, T: Compute>(
    program: &[Instr],
    consts: &[T::C],
    srcs: &[RowSrc],
    input: &dyn Fn(usize) -> &'a [T],
    regs: &mut [T::C],
    r: usize,
    n: usize,
) where
    T::C: Scalar,
{
    for (j, instr) in program.iter().enumerate() {
        let (done, rest) = regs.split_at_mut(j * n);
        let out = &mut rest[..n];
        let reg = |a: usize| &done[a * n..(a + 1) * n];
        match *instr {
            Instr::Input(i) => match &srcs[i] {
                RowSrc::Same => load(&input(i)[r * n..(r + 1) * n], out),
                RowSrc::Splat => out.fill(input(i)[0].load()),
                RowSrc::Vector => load(&input(i)[..n], out),
                RowSrc::PerRow => out.fill(input(i)[r].load()),
                RowSrc::Map(m) => {
                    let x = input(i);
                    out.iter_mut().zip(&m[r * n..(r + 1) * n]).for_each(|(o, &e)| *o = x[e as usize].load())
                }
            },
            Instr::Const(_) => out.fill(consts[j]),
            // f32 runs the vectorized loops of vec32.rs; f64 evaluates the expression.
            Instr::Unary(u, a) if !super::vec32::unary(u, reg(a), out) => {
                out.iter_mut().zip(reg(a)).for_each(|(o, &x)| *o = u.eval(x))
            }
            Instr::Binary(op, a, c) if !super::vec32::binary(op, reg(a), reg(c), out) => {
                out.iter_mut().zip(reg(a).iter().zip(reg(c))).for_each(|(o, (&x, &y))| *o = op.eval(x, y))
            }
            Instr::Unary(..) | Instr::Binary(..) => {}
        }
    }
}

/// The program's constants in the compute type (zero for other instructions).
pub(super) fn consts<C: Real>(program: &[Instr]) -> Vec<C> {
    program.iter().map(|i| C::from_f64(if let Instr::Const(c) = *i { c } else { 0.0 })).collect()
}
