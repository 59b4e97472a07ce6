//! f16/bf16 `fused` regions and `fused_matmul` epilogues, computed in f32: each input chunk is
//! widened with SIMD, the program runs through the f32 vector loops (`fused::Prog<f32>`), and
//! the result is rounded once. The matmul epilogue runs on the GEMM's f32 tile before rounding.

use super::Kernel;
use super::fused::{Buf, CHUNK, Prog, Src, fill};
use super::half_vec::{narrow, widen};
use crate::exec::Bufs;
use crate::gemm::half::HalfElem;
use rlx_ir::ops::Instr;

/// A half type the arena holds.
pub(super) trait Half: HalfElem + bytemuck::Pod {}
impl Half for half::f16 {}
impl Half for half::bf16 {}

/// Runs `$body` with `$H` bound to f16 or bf16 for those dtypes; `$else` otherwise.
macro_rules! with_half {
    ($dt:expr, $H:ident => $body:expr, else $else:expr) => {
        match $dt {
            rlx_ir::DType::F16 => {
                type $H = half::f16;
                $body
            }
            rlx_ir::DType::BF16 => {
                type $H = half::bf16;
                $body
            }
            _ => $else,
        }
    };
}
pub(super) use with_half;

/// Fills f32 register `r` with elements `s..s + r.len()` of half input `x` laid out as `src`.
fn load_wide<H: Half>(src: &Src, x: &[H], r: &mut [f32], s: usize, tmp: &mut [H; CHUNK]) {
    match src {
        Src::Same => widen(&x[s..s + r.len()], r),
        Src::Splat => r.fill(x[0].to_f32()),
        src => {
            let t = &mut tmp[..r.len()];
            fill(src, x, t, s);
            widen(t, r);
        }
    }
}

/// The `fused` kernel for f16/bf16 storage: chunks of the output, the program in f32.
pub(super) fn build<H: Half>(program: Vec<Instr>, srcs: Vec<(Buf, Src)>, n: usize) -> Kernel {
    let prog = Prog::<f32>::new(program, srcs);
    let mut regs = vec![0f32; prog.program.len() * CHUNK];
    Box::new(move |b: &Bufs<'_>| {
        let mut tmp = [H::default(); CHUNK];
        let mut s = 0;
        while s < n {
            let e = (s + CHUNK).min(n);
            let res = prog.eval(&mut regs, s, e - s, |buf, src, r| match (buf, src) {
                (Buf::Out, _) => widen(b.output_range::<H>(s, e), r),
                // In place: read this chunk of the input before the chunk is written.
                (Buf::In(i), Src::Same) => widen(b.input_range::<H>(i, s, e), r),
                (Buf::In(i), Src::Splat) => r.fill(b.input_range::<H>(i, 0, 1)[0].to_f32()),
                (Buf::In(i), src) => load_wide(src, b.input::<H>(i), r, s, &mut tmp),
            });
            narrow(res, b.output_range::<H>(s, e));
            s = e;
        }
        Ok(())
    })
}

/// The `fused_matmul` kernel for f16/bf16: the half GEMM (f32 sums) hands each finished f32
/// tile row to the epilogue, which runs the program on it in f32 before the one rounding.
pub(super) fn in_gemm<H: Half>(geo: super::matmul::Geometry, program: Vec<Instr>, srcs: Vec<(Buf, Src)>) -> Kernel {
    let prog = Prog::<f32>::new(program, srcs);
    let scratch = super::scratch::ScratchPool::new(prog.program.len() * CHUNK, 0f32);
    let mut ins: Vec<(usize, usize)> = Vec::with_capacity(prog.program.len() + 2);
    let mut cache = super::matmul::BCache::<f32>::default();
    Box::new(move |b: &Bufs<'_>| {
        // Input slices as (address, length), so the callback is Sync.
        ins.clear();
        ins.extend((0..b.num_inputs()).map(|i| (b.input::<H>(i).as_ptr() as usize, b.input::<H>(i).len())));
        let ins = &ins;
        let epi = |s0: usize, vals: &mut [f32]| {
            let mut regs = scratch.take();
            let mut tmp = [H::default(); CHUNK];
            for (c, v) in vals.chunks_mut(CHUNK).enumerate() {
                let s = s0 + c * CHUNK;
                let res = prog.eval(&mut regs, s, v.len(), |k, src, r| match k {
                    Buf::Out => r.copy_from_slice(v),
                    Buf::In(i) => {
                        let (p, l) = ins[i];
                        // SAFETY: a live input buffer of the step, disjoint from the output.
                        load_wide(src, unsafe { std::slice::from_raw_parts(p as *const H, l) }, r, s, &mut tmp);
                    }
                });
                v.copy_from_slice(res);
            }
        };
        let pb = cache.get_half(b.input_version(1), &geo, b.input::<H>(1));
        super::matmul::half_packed::<H>(&geo, b.input::<H>(0), b.input::<H>(1), b.output::<H>(), pb, Some(&epi));
        Ok(())
    })
}
