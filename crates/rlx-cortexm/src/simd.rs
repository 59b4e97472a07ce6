//! The ARMv7E-M DSP instructions the kernels use (`SXTB16`, `SADD16`, `SMLAD`) and the int8 dot
//! product built from them, which CMSIS-NN's `arm_nn_read_s8x4` / `arm_nn_sxtb16` loops use too.
//!
//! On a target with the DSP extension (`target_feature = "dsp"`: Cortex-M4, M7, M33 with DSP) each
//! helper is one instruction; elsewhere it is a portable emulation with the instruction's exact
//! semantics, so the host tests run the same packed algorithm bit for bit.

/// `SXTB16 x`: bytes 0 and 2 of `x`, sign-extended into the low and high halfwords.
#[inline(always)]
pub fn sxtb16(x: u32) -> u32 {
    #[cfg(all(target_arch = "arm", target_feature = "dsp"))]
    {
        let r: u32;
        // SAFETY: a register-only instruction of the DSP extension, which this target has.
        unsafe { core::arch::asm!("sxtb16 {0}, {1}", out(reg) r, in(reg) x, options(pure, nomem, nostack)) };
        r
    }
    #[cfg(not(all(target_arch = "arm", target_feature = "dsp")))]
    {
        let lo = (x as u8 as i8 as i16) as u16 as u32;
        let hi = ((x >> 16) as u8 as i8 as i16) as u16 as u32;
        lo | (hi << 16)
    }
}

/// `SXTB16 x, ROR #8`: bytes 1 and 3 of `x`, sign-extended into the low and high halfwords.
#[inline(always)]
pub fn sxtb16_ror8(x: u32) -> u32 {
    #[cfg(all(target_arch = "arm", target_feature = "dsp"))]
    {
        let r: u32;
        // SAFETY: a register-only instruction of the DSP extension, which this target has.
        unsafe { core::arch::asm!("sxtb16 {0}, {1}, ror #8", out(reg) r, in(reg) x, options(pure, nomem, nostack)) };
        r
    }
    #[cfg(not(all(target_arch = "arm", target_feature = "dsp")))]
    {
        sxtb16(x.rotate_right(8))
    }
}

/// `SADD16 a, b`: halfword-wise wrapping addition.
#[inline(always)]
pub fn sadd16(a: u32, b: u32) -> u32 {
    #[cfg(all(target_arch = "arm", target_feature = "dsp"))]
    {
        let r: u32;
        // SAFETY: a register-only instruction of the DSP extension, which this target has.
        unsafe {
            core::arch::asm!("sadd16 {0}, {1}, {2}", out(reg) r, in(reg) a, in(reg) b, options(pure, nomem, nostack))
        };
        r
    }
    #[cfg(not(all(target_arch = "arm", target_feature = "dsp")))]
    {
        let lo = (a as u16).wrapping_add(b as u16) as u32;
        let hi = ((a >> 16) as u16).wrapping_add((b >> 16) as u16) as u32;
        lo | (hi << 16)
    }
}

/// `SMLAD a, b, acc`: `acc + a.lo * b.lo + a.hi * b.hi` on signed halfwords, wrapping.
#[inline(always)]
pub fn smlad(a: u32, b: u32, acc: i32) -> i32 {
    #[cfg(all(target_arch = "arm", target_feature = "dsp"))]
    {
        let r: i32;
        // SAFETY: a register-only instruction of the DSP extension, which this target has. It sets
        // the Q flag on overflow, which nothing here reads.
        unsafe {
            core::arch::asm!("smlad {0}, {1}, {2}, {3}", out(reg) r, in(reg) a, in(reg) b, in(reg) acc,
                options(pure, nomem, nostack))
        };
        r
    }
    #[cfg(not(all(target_arch = "arm", target_feature = "dsp")))]
    {
        let p0 = (a as u16 as i16 as i32).wrapping_mul(b as u16 as i16 as i32);
        let p1 = ((a >> 16) as u16 as i16 as i32).wrapping_mul((b >> 16) as u16 as i16 as i32);
        acc.wrapping_add(p0).wrapping_add(p1)
    }
}

/// `SMLABB a, b, acc`: `acc + a.lo * b.lo` on signed halfwords, wrapping.
#[inline(always)]
pub fn smlabb(a: u32, b: u32, acc: i32) -> i32 {
    #[cfg(all(target_arch = "arm", target_feature = "dsp"))]
    {
        let r: i32;
        // SAFETY: a register-only instruction of the DSP extension, which this target has.
        unsafe {
            core::arch::asm!("smlabb {0}, {1}, {2}, {3}", out(reg) r, in(reg) a, in(reg) b, in(reg) acc,
                options(pure, nomem, nostack))
        };
        r
    }
    #[cfg(not(all(target_arch = "arm", target_feature = "dsp")))]
    {
        acc.wrapping_add((a as u16 as i16 as i32).wrapping_mul(b as u16 as i16 as i32))
    }
}

/// `SMLATT a, b, acc`: `acc + a.hi * b.hi` on signed halfwords, wrapping.
#[inline(always)]
pub fn smlatt(a: u32, b: u32, acc: i32) -> i32 {
    #[cfg(all(target_arch = "arm", target_feature = "dsp"))]
    {
        let r: i32;
        // SAFETY: a register-only instruction of the DSP extension, which this target has.
        unsafe {
            core::arch::asm!("smlatt {0}, {1}, {2}, {3}", out(reg) r, in(reg) a, in(reg) b, in(reg) acc,
                options(pure, nomem, nostack))
        };
        r
    }
    #[cfg(not(all(target_arch = "arm", target_feature = "dsp")))]
    {
        acc.wrapping_add(((a >> 16) as u16 as i16 as i32).wrapping_mul((b >> 16) as u16 as i16 as i32))
    }
}

/// Whether this build runs the DSP instructions (true) or their portable emulation.
pub const HAS_DSP: bool = cfg!(all(target_arch = "arm", target_feature = "dsp"));

/// Four int8 values as one little-endian word: one (unaligned) `LDR` on ARMv7-M.
#[inline(always)]
pub(crate) fn read4(c: &[i8]) -> u32 {
    // Indexing c[3] first proves the length (a panic-free caller passes four or more values).
    let c = &c[..4];
    // SAFETY: `c` has exactly four bytes; `read_unaligned` has no alignment requirement.
    u32::from_le(unsafe { core::ptr::read_unaligned(c.as_ptr() as *const u32) })
}

/// The offset twice, as the halfword pair `SADD16` adds.
#[inline(always)]
pub(crate) fn pair(offset: i32) -> u32 {
    ((offset as u16 as u32) << 16) | offset as u16 as u32
}

/// `sum(w[i] * (x[i] + offset))` four elements per step with `SXTB16` and `SMLAD`: `x + offset`
/// is formed on halfwords (it lies in `-255..=255` for int8 data and an int8 zero point's
/// negation), which is exactly the sum the scalar loop forms. `w` and `x` have equal lengths.
#[inline]
pub fn dot_s8_packed(w: &[i8], x: &[i8], offset: i32) -> i32 {
    let n = w.len().min(x.len());
    let off = pair(offset);
    let mut acc = 0i32;
    // Exact chunks: no bounds check and one word load per four values.
    let (wc, xc) = (w[..n].chunks_exact(4), x[..n].chunks_exact(4));
    let (wr, xr) = (wc.remainder(), xc.remainder());
    for (a, b) in wc.zip(xc) {
        let (wv, xv) = (read4(a), read4(b));
        let (w02, w13) = (sxtb16(wv), sxtb16_ror8(wv));
        let (x02, x13) = (sadd16(sxtb16(xv), off), sadd16(sxtb16_ror8(xv), off));
        acc = smlad(w02, x02, acc);
        acc = smlad(w13, x13, acc);
    }
    for (&a, &b) in wr.iter().zip(xr) {
        acc = acc.wrapping_add(a as i32 * (b as i32 + offset));
    }
    acc
}

/// The scalar loop: `sum(w[i] * (x[i] + offset))`.
#[inline]
pub fn dot_s8_portable(w: &[i8], x: &[i8], offset: i32) -> i32 {
    w.iter().zip(x).fold(0i32, |acc, (&a, &b)| acc.wrapping_add(a as i32 * (b as i32 + offset)))
}

/// The dot product the kernels call: the packed DSP form where the target has the extension
/// and the run holds at least one word, the scalar loop elsewhere (the emulated packed form
/// would only be slower there, and a run under four values has nothing to pack).
#[inline(always)]
pub fn dot_s8(w: &[i8], x: &[i8], offset: i32) -> i32 {
    if HAS_DSP && w.len() >= 4 { dot_s8_packed(w, x, offset) } else { dot_s8_portable(w, x, offset) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instruction_emulations_follow_the_architecture_manual() {
        assert_eq!(sxtb16(0x80_7f_ff_01), 0x007f_0001);
        assert_eq!(sxtb16_ror8(0x80_7f_ff_01), 0xff80_ffff);
        assert_eq!(sadd16(0x7fff_0001, 0x0001_ffff), 0x8000_0000);
        assert_eq!(smlad(0xffff_0002, 0x0003_0004, 10), 10 + 8 - 3);
        assert_eq!(smlabb(0xffff_0002, 0x0003_fffc, 10), 10 - 8);
        assert_eq!(smlatt(0xffff_0002, 0x0003_0004, 10), 10 - 3);
    }

    #[test]
    fn packed_and_portable_dots_agree() {
        let mut seed = 12345u32;
        let mut next = || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 24) as u8 as i8
        };
        for n in [0usize, 1, 3, 4, 7, 64, 129] {
            let w: [i8; 129] = core::array::from_fn(|_| next());
            let x: [i8; 129] = core::array::from_fn(|_| next());
            for off in [-127, -128, 0, 128, 5] {
                assert_eq!(
                    dot_s8_packed(&w[..n], &x[..n], off),
                    dot_s8_portable(&w[..n], &x[..n], off),
                    "n {n} off {off}"
                );
            }
        }
    }
}
