//! The full 12-row x 2-zmm tile over a packed A panel in one asm block: accumulators zeroed in
//! registers, the k loop, C's rows prefetched into L1 near the end, and C written (or added to)
//! straight from the registers. Split across Rust code, the 24 accumulators went through the stack
//! on entry and exit (48 zmm stores and loads a tile, about 5% of a 256-deep tile in L1).

/// One k step of the packed tile: B's two vectors at `b + bo0`, `b + bo1`, A's 12 values at
/// `a + d_i` (no pointer moves).
#[rustfmt::skip]
macro_rules! packed_step {
    ($bc:literal, $fma:literal, $ptr:literal, $bo0:literal, $bo1:literal, [$d0:literal, $d1:literal, $d2:literal,
     $d3:literal, $d4:literal, $d5:literal, $d6:literal, $d7:literal, $d8:literal, $d9:literal, $d10:literal,
     $d11:literal]) => {
        concat!(
            "vmovups zmm0, [{b} + ", $bo0, "]\n",
            "vmovups zmm1, [{b} + ", $bo1, "]\n",
            $bc, " zmm2, ", $ptr, " ptr [{a} + ", $d0, "]\n",
            $fma, " zmm8, zmm2, zmm0\n", $fma, " zmm9, zmm2, zmm1\n",
            $bc, " zmm3, ", $ptr, " ptr [{a} + ", $d1, "]\n",
            $fma, " zmm10, zmm3, zmm0\n", $fma, " zmm11, zmm3, zmm1\n",
            $bc, " zmm4, ", $ptr, " ptr [{a} + ", $d2, "]\n",
            $fma, " zmm12, zmm4, zmm0\n", $fma, " zmm13, zmm4, zmm1\n",
            $bc, " zmm5, ", $ptr, " ptr [{a} + ", $d3, "]\n",
            $fma, " zmm14, zmm5, zmm0\n", $fma, " zmm15, zmm5, zmm1\n",
            $bc, " zmm6, ", $ptr, " ptr [{a} + ", $d4, "]\n",
            $fma, " zmm16, zmm6, zmm0\n", $fma, " zmm17, zmm6, zmm1\n",
            $bc, " zmm7, ", $ptr, " ptr [{a} + ", $d5, "]\n",
            $fma, " zmm18, zmm7, zmm0\n", $fma, " zmm19, zmm7, zmm1\n",
            $bc, " zmm2, ", $ptr, " ptr [{a} + ", $d6, "]\n",
            $fma, " zmm20, zmm2, zmm0\n", $fma, " zmm21, zmm2, zmm1\n",
            $bc, " zmm3, ", $ptr, " ptr [{a} + ", $d7, "]\n",
            $fma, " zmm22, zmm3, zmm0\n", $fma, " zmm23, zmm3, zmm1\n",
            $bc, " zmm4, ", $ptr, " ptr [{a} + ", $d8, "]\n",
            $fma, " zmm24, zmm4, zmm0\n", $fma, " zmm25, zmm4, zmm1\n",
            $bc, " zmm5, ", $ptr, " ptr [{a} + ", $d9, "]\n",
            $fma, " zmm26, zmm5, zmm0\n", $fma, " zmm27, zmm5, zmm1\n",
            $bc, " zmm6, ", $ptr, " ptr [{a} + ", $d10, "]\n",
            $fma, " zmm28, zmm6, zmm0\n", $fma, " zmm29, zmm6, zmm1\n",
            $bc, " zmm7, ", $ptr, " ptr [{a} + ", $d11, "]\n",
            $fma, " zmm30, zmm7, zmm0\n", $fma, " zmm31, zmm7, zmm1\n",
        )
    };
}

/// One row of C: `add` reads it and adds, `store` overwrites; then the two stores; `c += rs`.
#[rustfmt::skip]
macro_rules! c_row {
    (add $add:literal, $r0:literal, $r1:literal) => {
        concat!(
            $add, " ", $r0, ", ", $r0, ", [{c}]\n",
            $add, " ", $r1, ", ", $r1, ", [{c} + 64]\n",
            "vmovups [{c}], ", $r0, "\n",
            "vmovups [{c} + 64], ", $r1, "\n",
            "add {c}, {rs}\n",
        )
    };
    (store, $r0:literal, $r1:literal) => {
        concat!("vmovups [{c}], ", $r0, "\n", "vmovups [{c} + 64], ", $r1, "\n", "add {c}, {rs}\n")
    };
}

/// The loop bodies: `one` k step, or `two` (B and A read at displacements, pointers moved once);
/// `$pf1` / `$pf2`: the stream's prefetches for one or two steps (or a comment naming operands).
#[rustfmt::skip]
macro_rules! steps {
    (one $pf1:literal, $bc:literal, $fma:literal, $ptr:literal, $d:tt, $d2:tt, $astep:literal, $astep2:literal) => {
        concat!(
            $pf1, "\n",
            $crate::gemm::avx512_full::packed_step!($bc, $fma, $ptr, "0", "64", $d),
            "add {a}, ", $astep, "\n", "add {b}, 128\n",
        )
    };
    (two $pf2:literal, $bc:literal, $fma:literal, $ptr:literal, $d:tt, $d2:tt, $astep:literal, $astep2:literal) => {
        concat!(
            $pf2, "\n",
            $crate::gemm::avx512_full::packed_step!($bc, $fma, $ptr, "0", "64", $d),
            $crate::gemm::avx512_full::packed_step!($bc, $fma, $ptr, "128", "192", $d2),
            "add {a}, ", $astep2, "\n", "add {b}, 256\n",
        )
    };
}

/// The whole tile (see the module docs): `head` k steps, C's 12 rows (128 bytes each, `rs` bytes
/// apart) prefetched into L1, `tail` more steps, then C = (or +=, `acc != 0`) the product.
/// `$pfi`: the per-step prefetch of a stream (`prefetcht1 [{pf}]` and `add {pf}, {pfs}`), or a
/// comment naming both operands.
macro_rules! zmm_12x2_packed_tile {
    ($pf1:literal, $pf2:literal, $bc:literal, $fma:literal, $add:literal, $ptr:literal, $d:tt, $d2:tt, $astep:literal,
     $astep2:literal; $pairs:expr, $tail:expr, $a:expr, $b:expr, $c:expr, $rs:expr, $acc:expr, $pf:expr, $pfs:expr) => {
        std::arch::asm!(
            "vpxord zmm8, zmm8, zmm8", "vpxord zmm9, zmm9, zmm9", "vpxord zmm10, zmm10, zmm10",
            "vpxord zmm11, zmm11, zmm11", "vpxord zmm12, zmm12, zmm12", "vpxord zmm13, zmm13, zmm13",
            "vpxord zmm14, zmm14, zmm14", "vpxord zmm15, zmm15, zmm15", "vpxord zmm16, zmm16, zmm16",
            "vpxord zmm17, zmm17, zmm17", "vpxord zmm18, zmm18, zmm18", "vpxord zmm19, zmm19, zmm19",
            "vpxord zmm20, zmm20, zmm20", "vpxord zmm21, zmm21, zmm21", "vpxord zmm22, zmm22, zmm22",
            "vpxord zmm23, zmm23, zmm23", "vpxord zmm24, zmm24, zmm24", "vpxord zmm25, zmm25, zmm25",
            "vpxord zmm26, zmm26, zmm26", "vpxord zmm27, zmm27, zmm27", "vpxord zmm28, zmm28, zmm28",
            "vpxord zmm29, zmm29, zmm29", "vpxord zmm30, zmm30, zmm30", "vpxord zmm31, zmm31, zmm31",
            "test {pairs}, {pairs}",
            "jz 3f",
            "2:",
            $crate::gemm::avx512_full::steps!(two $pf2, $bc, $fma, $ptr, $d, $d2, $astep, $astep2),
            "dec {pairs}",
            "jnz 2b",
            "3:",
            // C's rows towards L1 while the last steps run (rows need not be 64-byte aligned).
            "mov {t}, {c}",
            "prefetcht0 [{t}]", "prefetcht0 [{t} + 64]", "prefetcht0 [{t} + 127]", "add {t}, {rs}",
            "prefetcht0 [{t}]", "prefetcht0 [{t} + 64]", "prefetcht0 [{t} + 127]", "add {t}, {rs}",
            "prefetcht0 [{t}]", "prefetcht0 [{t} + 64]", "prefetcht0 [{t} + 127]", "add {t}, {rs}",
            "prefetcht0 [{t}]", "prefetcht0 [{t} + 64]", "prefetcht0 [{t} + 127]", "add {t}, {rs}",
            "prefetcht0 [{t}]", "prefetcht0 [{t} + 64]", "prefetcht0 [{t} + 127]", "add {t}, {rs}",
            "prefetcht0 [{t}]", "prefetcht0 [{t} + 64]", "prefetcht0 [{t} + 127]", "add {t}, {rs}",
            "prefetcht0 [{t}]", "prefetcht0 [{t} + 64]", "prefetcht0 [{t} + 127]", "add {t}, {rs}",
            "prefetcht0 [{t}]", "prefetcht0 [{t} + 64]", "prefetcht0 [{t} + 127]", "add {t}, {rs}",
            "prefetcht0 [{t}]", "prefetcht0 [{t} + 64]", "prefetcht0 [{t} + 127]", "add {t}, {rs}",
            "prefetcht0 [{t}]", "prefetcht0 [{t} + 64]", "prefetcht0 [{t} + 127]", "add {t}, {rs}",
            "prefetcht0 [{t}]", "prefetcht0 [{t} + 64]", "prefetcht0 [{t} + 127]", "add {t}, {rs}",
            "prefetcht0 [{t}]", "prefetcht0 [{t} + 64]", "prefetcht0 [{t} + 127]",
            "test {tail}, {tail}",
            "jz 5f",
            "4:",
            $crate::gemm::avx512_full::steps!(one $pf1, $bc, $fma, $ptr, $d, $d2, $astep, $astep2),
            "dec {tail}",
            "jnz 4b",
            "5:",
            "test {acc}, {acc}",
            "jz 6f",
            $crate::gemm::avx512_full::c_row!(add $add, "zmm8", "zmm9"),
            $crate::gemm::avx512_full::c_row!(add $add, "zmm10", "zmm11"),
            $crate::gemm::avx512_full::c_row!(add $add, "zmm12", "zmm13"),
            $crate::gemm::avx512_full::c_row!(add $add, "zmm14", "zmm15"),
            $crate::gemm::avx512_full::c_row!(add $add, "zmm16", "zmm17"),
            $crate::gemm::avx512_full::c_row!(add $add, "zmm18", "zmm19"),
            $crate::gemm::avx512_full::c_row!(add $add, "zmm20", "zmm21"),
            $crate::gemm::avx512_full::c_row!(add $add, "zmm22", "zmm23"),
            $crate::gemm::avx512_full::c_row!(add $add, "zmm24", "zmm25"),
            $crate::gemm::avx512_full::c_row!(add $add, "zmm26", "zmm27"),
            $crate::gemm::avx512_full::c_row!(add $add, "zmm28", "zmm29"),
            $crate::gemm::avx512_full::c_row!(add $add, "zmm30", "zmm31"),
            "jmp 7f",
            "6:",
            $crate::gemm::avx512_full::c_row!(store, "zmm8", "zmm9"),
            $crate::gemm::avx512_full::c_row!(store, "zmm10", "zmm11"),
            $crate::gemm::avx512_full::c_row!(store, "zmm12", "zmm13"),
            $crate::gemm::avx512_full::c_row!(store, "zmm14", "zmm15"),
            $crate::gemm::avx512_full::c_row!(store, "zmm16", "zmm17"),
            $crate::gemm::avx512_full::c_row!(store, "zmm18", "zmm19"),
            $crate::gemm::avx512_full::c_row!(store, "zmm20", "zmm21"),
            $crate::gemm::avx512_full::c_row!(store, "zmm22", "zmm23"),
            $crate::gemm::avx512_full::c_row!(store, "zmm24", "zmm25"),
            $crate::gemm::avx512_full::c_row!(store, "zmm26", "zmm27"),
            $crate::gemm::avx512_full::c_row!(store, "zmm28", "zmm29"),
            $crate::gemm::avx512_full::c_row!(store, "zmm30", "zmm31"),
            "7:",
            a = inout(reg) $a => _,
            b = inout(reg) $b => _,
            c = inout(reg) $c => _,
            rs = in(reg) $rs,
            t = out(reg) _,
            pairs = inout(reg) $pairs => _,
            tail = inout(reg) $tail => _,
            acc = in(reg) $acc,
            pf = inout(reg) $pf => _,
            pfs = in(reg) $pfs,
            out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
            out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
            out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
            out("zmm12") _, out("zmm13") _, out("zmm14") _, out("zmm15") _,
            out("zmm16") _, out("zmm17") _, out("zmm18") _, out("zmm19") _,
            out("zmm20") _, out("zmm21") _, out("zmm22") _, out("zmm23") _,
            out("zmm24") _, out("zmm25") _, out("zmm26") _, out("zmm27") _,
            out("zmm28") _, out("zmm29") _, out("zmm30") _, out("zmm31") _,
            options(nostack),
        )
    };
}

pub(crate) use {c_row, packed_step, steps};

/// Defines `$name`, the full tile for one element type (see `f32_packed_full`).
macro_rules! packed_full {
    ($(#[$doc:meta])* $name:ident, $t:ty, $bc:literal, $fma:literal, $add:literal, $ptr:literal, $d:tt, $d2:tt,
     $astep:literal, $astep2:literal) => {
        $(#[$doc])*
        #[target_feature(enable = "avx512f")]
        #[allow(clippy::too_many_arguments)]
        pub(super) unsafe fn $name(
            head: usize,
            tail: usize,
            a: *const $t,
            b: *const $t,
            c: *mut $t,
            rs: isize,
            acc: bool,
            pf: usize,
            pfs: usize,
        ) {
            let (rs, acc) = (rs * std::mem::size_of::<$t>() as isize, acc as usize);
            // The head in pairs of steps; an odd one goes to the tail.
            let (pairs, tail) = (head / 2, tail + head % 2);
            // SAFETY: the caller's contract; the asm touches only the named memory.
            unsafe {
                if pfs == 0 {
                    zmm_12x2_packed_tile!("/* {pf} {pfs} */", "", $bc, $fma, $add, $ptr, $d, $d2, $astep, $astep2;
                        pairs, tail, a, b, c, rs, acc, pf, pfs);
                } else {
                    zmm_12x2_packed_tile!("prefetcht1 [{pf}]\n add {pf}, {pfs}",
                        "prefetcht1 [{pf}]\n prefetcht1 [{pf} + {pfs}]\n lea {pf}, [{pf} + {pfs} * 2]",
                        $bc, $fma, $add, $ptr, $d, $d2, $astep, $astep2; pairs, tail, a, b, c, rs, acc, pf, pfs);
                }
            }
        }
    };
}

packed_full!(
    /// The full f32 tile (12 x 32) over a packed A panel (`a`: 12 values a k step), B's packed
    /// panel `b`, C at `c` with rows `rs` elements apart: `head` steps, C's rows prefetched, `tail`
    /// steps; `pfs > 0`: a prefetch stream from `pf` (see `f32_tile_stream`).
    ///
    /// # Safety
    /// AVX-512F; A holds 12 * (head + tail) values, B 32 * (head + tail), C 12 rows of 32.
    f32_packed_full, f32, "vbroadcastss", "vfmadd231ps", "vaddps", "dword",
    ["0", "4", "8", "12", "16", "20", "24", "28", "32", "36", "40", "44"],
    ["48", "52", "56", "60", "64", "68", "72", "76", "80", "84", "88", "92"], "48", "96"
);

packed_full!(
    /// `f32_packed_full` for f64 (12 x 16).
    ///
    /// # Safety
    /// As `f32_packed_full`, with f64 elements.
    f64_packed_full, f64, "vbroadcastsd", "vfmadd231pd", "vaddpd", "qword",
    ["0", "8", "16", "24", "32", "40", "48", "56", "64", "72", "80", "88"],
    ["96", "104", "112", "120", "128", "136", "144", "152", "160", "168", "176", "184"], "96", "192"
);
