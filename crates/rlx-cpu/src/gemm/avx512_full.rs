//! The full 12-row x 2-zmm tile in one asm block, over a packed A panel or A read in place:
//! accumulators zeroed in registers, the k loop (the head in pairs of steps; in fours, with A's
//! rows prefetched into L1, for A in place), C's rows prefetched into L1 near the end, and C
//! written (or added to) straight from the registers.
//! Split across Rust code, the 24 accumulators went through the stack on entry and exit (48 zmm
//! stores and loads a tile: session 16 in docs/benchmarks-history.md).

/// One k step: B's two vectors at `b + bo0`, `b + bo1` against A's 12 values at the addresses
/// `$x` (assembler address expressions), into accumulators zmm8..zmm31.
#[rustfmt::skip]
macro_rules! zmm_step {
    ($bc:literal, $fma:literal, $ptr:literal, $bo0:literal, $bo1:literal, [$x0:expr, $x1:expr, $x2:expr, $x3:expr,
     $x4:expr, $x5:expr, $x6:expr, $x7:expr, $x8:expr, $x9:expr, $x10:expr, $x11:expr]) => {
        concat!(
            "vmovups zmm0, [{b} + ", $bo0, "]\n",
            "vmovups zmm1, [{b} + ", $bo1, "]\n",
            $bc, " zmm2, ", $ptr, " ptr [", $x0, "]\n",
            $fma, " zmm8, zmm2, zmm0\n", $fma, " zmm9, zmm2, zmm1\n",
            $bc, " zmm3, ", $ptr, " ptr [", $x1, "]\n",
            $fma, " zmm10, zmm3, zmm0\n", $fma, " zmm11, zmm3, zmm1\n",
            $bc, " zmm4, ", $ptr, " ptr [", $x2, "]\n",
            $fma, " zmm12, zmm4, zmm0\n", $fma, " zmm13, zmm4, zmm1\n",
            $bc, " zmm5, ", $ptr, " ptr [", $x3, "]\n",
            $fma, " zmm14, zmm5, zmm0\n", $fma, " zmm15, zmm5, zmm1\n",
            $bc, " zmm6, ", $ptr, " ptr [", $x4, "]\n",
            $fma, " zmm16, zmm6, zmm0\n", $fma, " zmm17, zmm6, zmm1\n",
            $bc, " zmm7, ", $ptr, " ptr [", $x5, "]\n",
            $fma, " zmm18, zmm7, zmm0\n", $fma, " zmm19, zmm7, zmm1\n",
            $bc, " zmm2, ", $ptr, " ptr [", $x6, "]\n",
            $fma, " zmm20, zmm2, zmm0\n", $fma, " zmm21, zmm2, zmm1\n",
            $bc, " zmm3, ", $ptr, " ptr [", $x7, "]\n",
            $fma, " zmm22, zmm3, zmm0\n", $fma, " zmm23, zmm3, zmm1\n",
            $bc, " zmm4, ", $ptr, " ptr [", $x8, "]\n",
            $fma, " zmm24, zmm4, zmm0\n", $fma, " zmm25, zmm4, zmm1\n",
            $bc, " zmm5, ", $ptr, " ptr [", $x9, "]\n",
            $fma, " zmm26, zmm5, zmm0\n", $fma, " zmm27, zmm5, zmm1\n",
            $bc, " zmm6, ", $ptr, " ptr [", $x10, "]\n",
            $fma, " zmm28, zmm6, zmm0\n", $fma, " zmm29, zmm6, zmm1\n",
            $bc, " zmm7, ", $ptr, " ptr [", $x11, "]\n",
            $fma, " zmm30, zmm7, zmm0\n", $fma, " zmm31, zmm7, zmm1\n",
        )
    };
}

/// `zmm_step` over a packed panel: A's 12 values at `a + d_i` (no pointer moves).
#[rustfmt::skip]
macro_rules! packed_step {
    ($bc:literal, $fma:literal, $ptr:literal, $bo0:literal, $bo1:literal, [$($d:literal),*]) => {
        $crate::gemm::avx512_full::zmm_step!($bc, $fma, $ptr, $bo0, $bo1, [$(concat!("{a} + ", $d)),*])
    };
}

/// `zmm_step` with A in place: 12 rows from four row pointers three rows apart (`{lda}` bytes
/// between rows), each value `ad` bytes on.
#[rustfmt::skip]
macro_rules! inplace_step {
    ($bc:literal, $fma:literal, $ptr:literal, $bo0:literal, $bo1:literal, $ad:literal) => {
        $crate::gemm::avx512_full::zmm_step!($bc, $fma, $ptr, $bo0, $bo1, [
            concat!("{a0} + ", $ad), concat!("{a0} + {lda} + ", $ad), concat!("{a0} + {lda} * 2 + ", $ad),
            concat!("{a3} + ", $ad), concat!("{a3} + {lda} + ", $ad), concat!("{a3} + {lda} * 2 + ", $ad),
            concat!("{a6} + ", $ad), concat!("{a6} + {lda} + ", $ad), concat!("{a6} + {lda} * 2 + ", $ad),
            concat!("{a9} + ", $ad), concat!("{a9} + {lda} + ", $ad), concat!("{a9} + {lda} * 2 + ", $ad)
        ])
    };
}

/// A's rows 256 bytes ahead with the hint of tile kind `$kind` (`a_rows_hint`): the first six
/// (`first`) or the last six, each half once per four steps (a new line every 16 steps in f32;
/// the repeats hit L1). A read in place is 12 streams, and its lines serve 16 steps each next to
/// a B panel that nearly fills L1. Prefetching beat none, 256 bytes ahead beat 512, and half as
/// many prefetches in a four-step loop gained again (session 24 in docs/benchmarks-history.md).
#[rustfmt::skip]
macro_rules! prefetch_a_rows {
    (first $kind:ident) => { $crate::gemm::avx512_full::prefetch_a_rows!(@six $kind, "{a0}", "{a3}") };
    (second $kind:ident) => { $crate::gemm::avx512_full::prefetch_a_rows!(@six $kind, "{a6}", "{a9}") };
    (@six $kind:ident, $p:literal, $q:literal) => {
        concat!(
            $crate::gemm::avx512_full::prefetch_a_rows!(@three $kind, $p),
            $crate::gemm::avx512_full::prefetch_a_rows!(@three $kind, $q),
        )
    };
    (@three $kind:ident, $p:literal) => {
        concat!(
            $crate::gemm::avx512_full::a_rows_hint!($kind), " [", $p, " + 256]\n",
            $crate::gemm::avx512_full::a_rows_hint!($kind), " [", $p, " + {lda} + 256]\n",
            $crate::gemm::avx512_full::a_rows_hint!($kind), " [", $p, " + {lda} * 2 + 256]\n",
        )
    };
}

/// The prefetch instruction for A's rows read in place by a tile of kind `inplace` (A's lines
/// marked non-temporal: they go first from L1, which helps next to a B panel that nearly fills
/// it, on AMD Zen 5) or `inplace_l2` (`prefetcht1`: on Intel cores a non-temporal prefetch fills
/// L1 but not L2, so the row block of A, read once per B panel, came back from L3 for every
/// panel: session 36 in docs/benchmarks-history.md).
#[rustfmt::skip]
macro_rules! a_rows_hint {
    (inplace) => { "prefetchnta" };
    (inplace_l2) => { "prefetcht1" };
}

/// The loop bodies: `one` k step or `two` (two steps read at displacements, pointers moved once;
/// four for `inplace` and `inplace_l2`, with A's rows prefetched), over a `packed` panel (`$d`,
/// `$d2`: A's displacements in the two steps; `$astep2`: a pair's bytes) or A in place (`$esz`:
/// the element size; `$esz2` twice it), B packed, or B rows `{ldb}` bytes apart (`strided`, no stream; `packb`:
/// each step's B also stored to `{bd}`, the packed panel, and B's rows prefetched from `{pf}`).
/// `$pf`: the stream's prefetches for two steps.
#[rustfmt::skip]
macro_rules! steps {
    (packed one $pf:literal, $bc:literal, $fma:literal, $ptr:literal, $d:tt, $d2:tt, $astep:literal,
     $astep2:literal) => {
        concat!(
            $pf, "\n",
            $crate::gemm::avx512_full::packed_step!($bc, $fma, $ptr, "0", "64", $d),
            "add {a}, ", $astep, "\n", "add {b}, 128\n",
        )
    };
    (packed two $pf:literal, $bc:literal, $fma:literal, $ptr:literal, $d:tt, $d2:tt, $astep:literal,
     $astep2:literal) => {
        concat!(
            $pf, "\n",
            $crate::gemm::avx512_full::packed_step!($bc, $fma, $ptr, "0", "64", $d),
            $crate::gemm::avx512_full::packed_step!($bc, $fma, $ptr, "128", "192", $d2),
            "add {a}, ", $astep2, "\n", "add {b}, 256\n",
        )
    };
    (strided one $pf:literal, $bc:literal, $fma:literal, $ptr:literal, $esz:literal, $esz2:literal) => {
        concat!(
            $crate::gemm::avx512_full::inplace_step!($bc, $fma, $ptr, "0", "64", "0"),
            "add {a0}, ", $esz, "\n", "add {a3}, ", $esz, "\n", "add {a6}, ", $esz, "\n", "add {a9}, ", $esz, "\n",
            "add {b}, {ldb}\n",
        )
    };
    (strided two $pf:literal, $bc:literal, $fma:literal, $ptr:literal, $esz:literal, $esz2:literal) => {
        concat!(
            $crate::gemm::avx512_full::inplace_step!($bc, $fma, $ptr, "0", "64", "0"),
            $crate::gemm::avx512_full::inplace_step!($bc, $fma, $ptr, "{ldb}", "{ldb} + 64", $esz),
            "add {a0}, ", $esz2, "\n", "add {a3}, ", $esz2, "\n", "add {a6}, ", $esz2, "\n", "add {a9}, ", $esz2, "\n",
            "lea {b}, [{b} + {ldb} * 2]\n",
        )
    };
    (packb one $pf:literal, $bc:literal, $fma:literal, $ptr:literal, $esz:literal, $esz2:literal) => {
        concat!(
            "prefetcht1 [{pf}]\n prefetcht1 [{pf} + 64]\n add {pf}, {ldb}\n",
            $crate::gemm::avx512_full::inplace_step!($bc, $fma, $ptr, "0", "64", "0"),
            "vmovups [{bd}], zmm0\n vmovups [{bd} + 64], zmm1\n",
            "add {a0}, ", $esz, "\n", "add {a3}, ", $esz, "\n", "add {a6}, ", $esz, "\n", "add {a9}, ", $esz, "\n",
            "add {b}, {ldb}\n add {bd}, 128\n",
        )
    };
    (packb two $pf:literal, $bc:literal, $fma:literal, $ptr:literal, $esz:literal, $esz2:literal) => {
        concat!(
            "prefetcht1 [{pf}]\n prefetcht1 [{pf} + 64]\n prefetcht1 [{pf} + {ldb}]\n prefetcht1 [{pf} + {ldb} + 64]\n",
            "lea {pf}, [{pf} + {ldb} * 2]\n",
            $crate::gemm::avx512_full::inplace_step!($bc, $fma, $ptr, "0", "64", "0"),
            "vmovups [{bd}], zmm0\n vmovups [{bd} + 64], zmm1\n",
            $crate::gemm::avx512_full::inplace_step!($bc, $fma, $ptr, "{ldb}", "{ldb} + 64", $esz),
            "vmovups [{bd} + 128], zmm0\n vmovups [{bd} + 192], zmm1\n",
            "add {a0}, ", $esz2, "\n", "add {a3}, ", $esz2, "\n", "add {a6}, ", $esz2, "\n", "add {a9}, ", $esz2, "\n",
            "lea {b}, [{b} + {ldb} * 2]\n add {bd}, 256\n",
        )
    };
    // `inplace` and `inplace_l2` (A's rows in place; `a_rows_hint`).
    ($kind:ident one $pf:literal, $bc:literal, $fma:literal, $ptr:literal, $esz:literal, $esz2:literal) => {
        concat!(
            $pf, "\n",
            $crate::gemm::avx512_full::inplace_step!($bc, $fma, $ptr, "0", "64", "0"),
            "add {a0}, ", $esz, "\n", "add {a3}, ", $esz, "\n", "add {a6}, ", $esz, "\n", "add {a9}, ", $esz, "\n",
            "add {b}, 128\n",
        )
    };
    ($kind:ident two $pf:literal, $bc:literal, $fma:literal, $ptr:literal, $esz:literal, $esz2:literal) => {
        concat!(
            $pf, "\n",
            $crate::gemm::avx512_full::prefetch_a_rows!(first $kind),
            $crate::gemm::avx512_full::inplace_step!($bc, $fma, $ptr, "0", "64", "0"),
            $crate::gemm::avx512_full::inplace_step!($bc, $fma, $ptr, "128", "192", $esz),
            "add {a0}, ", $esz2, "\n", "add {a3}, ", $esz2, "\n", "add {a6}, ", $esz2, "\n", "add {a9}, ", $esz2, "\n",
            $pf, "\n",
            $crate::gemm::avx512_full::prefetch_a_rows!(second $kind),
            $crate::gemm::avx512_full::inplace_step!($bc, $fma, $ptr, "256", "320", "0"),
            $crate::gemm::avx512_full::inplace_step!($bc, $fma, $ptr, "384", "448", $esz),
            "add {a0}, ", $esz2, "\n", "add {a3}, ", $esz2, "\n", "add {a6}, ", $esz2, "\n", "add {a9}, ", $esz2, "\n",
            "add {b}, 512\n",
        )
    };
}

/// C's 12 rows from the accumulators: `add` reads each row and adds, `store` overwrites; `c`
/// ends 12 rows on.
#[rustfmt::skip]
macro_rules! c_rows {
    ($mode:ident $add:literal) => {
        concat!(
            $crate::gemm::avx512_full::c_rows!(@row $mode $add, "zmm8", "zmm9"),
            $crate::gemm::avx512_full::c_rows!(@row $mode $add, "zmm10", "zmm11"),
            $crate::gemm::avx512_full::c_rows!(@row $mode $add, "zmm12", "zmm13"),
            $crate::gemm::avx512_full::c_rows!(@row $mode $add, "zmm14", "zmm15"),
            $crate::gemm::avx512_full::c_rows!(@row $mode $add, "zmm16", "zmm17"),
            $crate::gemm::avx512_full::c_rows!(@row $mode $add, "zmm18", "zmm19"),
            $crate::gemm::avx512_full::c_rows!(@row $mode $add, "zmm20", "zmm21"),
            $crate::gemm::avx512_full::c_rows!(@row $mode $add, "zmm22", "zmm23"),
            $crate::gemm::avx512_full::c_rows!(@row $mode $add, "zmm24", "zmm25"),
            $crate::gemm::avx512_full::c_rows!(@row $mode $add, "zmm26", "zmm27"),
            $crate::gemm::avx512_full::c_rows!(@row $mode $add, "zmm28", "zmm29"),
            $crate::gemm::avx512_full::c_rows!(@row $mode $add, "zmm30", "zmm31"),
        )
    };
    (@row add $add:literal, $r0:literal, $r1:literal) => {
        concat!(
            $add, " ", $r0, ", ", $r0, ", [{c}]\n",
            $add, " ", $r1, ", ", $r1, ", [{c} + 64]\n",
            "vmovups [{c}], ", $r0, "\n",
            "vmovups [{c} + 64], ", $r1, "\n",
            "add {c}, {rs}\n",
        )
    };
    (@row store $add:literal, $r0:literal, $r1:literal) => {
        concat!("vmovups [{c}], ", $r0, "\n", "vmovups [{c} + 64], ", $r1, "\n", "add {c}, {rs}\n")
    };
}

/// C's 12 rows (128 bytes each, `rs` apart, not necessarily 64-byte aligned) towards L1; `c`
/// is moved along and back.
#[rustfmt::skip]
macro_rules! prefetch_c_rows {
    () => {
        concat!(
            "prefetcht0 [{c}]\n prefetcht0 [{c} + 64]\n prefetcht0 [{c} + 127]\n add {c}, {rs}\n",
            "prefetcht0 [{c}]\n prefetcht0 [{c} + 64]\n prefetcht0 [{c} + 127]\n add {c}, {rs}\n",
            "prefetcht0 [{c}]\n prefetcht0 [{c} + 64]\n prefetcht0 [{c} + 127]\n add {c}, {rs}\n",
            "prefetcht0 [{c}]\n prefetcht0 [{c} + 64]\n prefetcht0 [{c} + 127]\n add {c}, {rs}\n",
            "prefetcht0 [{c}]\n prefetcht0 [{c} + 64]\n prefetcht0 [{c} + 127]\n add {c}, {rs}\n",
            "prefetcht0 [{c}]\n prefetcht0 [{c} + 64]\n prefetcht0 [{c} + 127]\n add {c}, {rs}\n",
            "prefetcht0 [{c}]\n prefetcht0 [{c} + 64]\n prefetcht0 [{c} + 127]\n add {c}, {rs}\n",
            "prefetcht0 [{c}]\n prefetcht0 [{c} + 64]\n prefetcht0 [{c} + 127]\n add {c}, {rs}\n",
            "prefetcht0 [{c}]\n prefetcht0 [{c} + 64]\n prefetcht0 [{c} + 127]\n add {c}, {rs}\n",
            "prefetcht0 [{c}]\n prefetcht0 [{c} + 64]\n prefetcht0 [{c} + 127]\n add {c}, {rs}\n",
            "prefetcht0 [{c}]\n prefetcht0 [{c} + 64]\n prefetcht0 [{c} + 127]\n add {c}, {rs}\n",
            "prefetcht0 [{c}]\n prefetcht0 [{c} + 64]\n prefetcht0 [{c} + 127]\n",
            "sub {c}, {rs}\n sub {c}, {rs}\n sub {c}, {rs}\n sub {c}, {rs}\n sub {c}, {rs}\n sub {c}, {rs}\n",
            "sub {c}, {rs}\n sub {c}, {rs}\n sub {c}, {rs}\n sub {c}, {rs}\n sub {c}, {rs}\n",
        )
    };
}

/// The whole tile: `pairs` runs of the `two` body (two k steps, four for `inplace`), C's rows
/// prefetched into L1, `tail` single steps, then C's rows written (`$mode` add or store).
/// `$kind`/`$sa`: the A addressing (`steps`); `$pf1`/`$pf2`: the stream's prefetches for one and
/// two steps. `$aops`: A's operands.
macro_rules! zmm_12x2_tile {
    ($kind:ident, $mode:ident, $pf1:literal, $pf2:literal, $bc:literal, $fma:literal, $add:literal, $ptr:literal,
     [$($sa:tt),*]; $pairs:expr, $tail:expr, $b:expr, $c:expr, $rs:expr; $($aops:tt)*) => {
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
            $crate::gemm::avx512_full::steps!($kind two $pf2, $bc, $fma, $ptr, $($sa),*),
            "dec {pairs}",
            "jnz 2b",
            "3:",
            $crate::gemm::avx512_full::prefetch_c_rows!(),
            "test {tail}, {tail}",
            "jz 5f",
            "4:",
            $crate::gemm::avx512_full::steps!($kind one $pf1, $bc, $fma, $ptr, $($sa),*),
            "dec {tail}",
            "jnz 4b",
            "5:",
            $crate::gemm::avx512_full::c_rows!($mode $add),
            $($aops)*
            b = inout(reg) $b => _,
            c = inout(reg) $c => _,
            rs = in(reg) $rs,
            pairs = inout(reg) $pairs => _,
            tail = inout(reg) $tail => _,
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

/// `zmm_12x2_tile` for the four cases of (C added to or written, stream or none).
macro_rules! tile_cases {
    ($kind:ident, $acc:expr, $pf:expr, $pfs:expr, $bc:literal, $fma:literal, $add:literal, $ptr:literal, $sa:tt;
     $($args:tt)*) => {
        match ($acc, $pfs == 0) {
            (true, true) => zmm_12x2_tile!($kind, add, "/* {pf} {pfs} */", "", $bc, $fma, $add, $ptr, $sa; $($args)*
                pf = inout(reg) $pf => _, pfs = in(reg) $pfs,),
            (false, true) => zmm_12x2_tile!($kind, store, "/* {pf} {pfs} */", "", $bc, $fma, $add, $ptr, $sa; $($args)*
                pf = inout(reg) $pf => _, pfs = in(reg) $pfs,),
            (true, false) => zmm_12x2_tile!($kind, add, "prefetcht1 [{pf}]\n add {pf}, {pfs}",
                "prefetcht1 [{pf}]\n prefetcht1 [{pf} + {pfs}]\n lea {pf}, [{pf} + {pfs} * 2]",
                $bc, $fma, $add, $ptr, $sa; $($args)* pf = inout(reg) $pf => _, pfs = in(reg) $pfs,),
            (false, false) => zmm_12x2_tile!($kind, store, "prefetcht1 [{pf}]\n add {pf}, {pfs}",
                "prefetcht1 [{pf}]\n prefetcht1 [{pf} + {pfs}]\n lea {pf}, [{pf} + {pfs} * 2]",
                $bc, $fma, $add, $ptr, $sa; $($args)* pf = inout(reg) $pf => _, pfs = in(reg) $pfs,),
        }
    };
}

pub(crate) use {a_rows_hint, c_rows, inplace_step, packed_step, prefetch_a_rows, prefetch_c_rows, steps, zmm_step};

/// Defines the packed and in-place full tiles for one element type (see `f32_packed_full`).
macro_rules! full_tiles {
    ($packed:ident, $inplace:ident, $t:ty, $bc:literal, $fma:literal, $add:literal, $ptr:literal, $d:tt, $d2:tt,
     $astep:literal, $astep2:literal, $esz:literal, $esz2:literal) => {
        /// The full tile (12 rows, 2 zmm wide) over a packed A panel (`a`: 12 values a k step), B's
        /// packed panel `b`, C at `c` with rows `rs` elements apart (`acc`: added to): `head`
        /// steps, C's rows prefetched, `tail` steps; `pfs > 0`: a prefetch stream from `pf` (see
        /// `f32_tile_stream`).
        ///
        /// # Safety
        /// AVX-512F; A holds 12 values a step, B 2 zmm a step (head + tail steps), C 12 full rows.
        #[target_feature(enable = "avx512f")]
        #[allow(clippy::too_many_arguments)]
        pub(super) unsafe fn $packed(
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
            let rs = rs * std::mem::size_of::<$t>() as isize;
            // The head in pairs of steps; an odd one goes to the tail.
            let (pairs, tail) = (head / 2, tail + head % 2);
            // SAFETY: the caller's contract; the asm touches only the named memory.
            unsafe {
                tile_cases!(packed, acc, pf, pfs, $bc, $fma, $add, $ptr, [$d, $d2, $astep, $astep2];
                    pairs, tail, b, c, rs; a = inout(reg) a => _,)
            }
        }

        /// `$packed` with A read in place: row i at `a + i * lda` elements, a k step one element on.
        ///
        /// # Safety
        /// As `$packed`; A's 12 rows hold head + tail values each.
        #[target_feature(enable = "avx512f")]
        #[allow(clippy::too_many_arguments)]
        pub(super) unsafe fn $inplace(
            head: usize,
            tail: usize,
            a: *const $t,
            lda: isize,
            b: *const $t,
            c: *mut $t,
            rs: isize,
            acc: bool,
            pf: usize,
            pfs: usize,
        ) {
            let size = std::mem::size_of::<$t>() as isize;
            let (rs, lda) = (rs * size, lda * size);
            // The head in fours of steps (`steps!(inplace two ..)`); the rest goes to the tail.
            let (pairs, tail) = (head / 4, tail + head % 4);
            let a0 = a as *const u8;
            macro_rules! run {
                ($kind:ident) => {
                    tile_cases!($kind, acc, pf, pfs, $bc, $fma, $add, $ptr, [$esz, $esz2];
                        pairs, tail, b, c, rs;
                        a0 = inout(reg) a0 => _,
                        a3 = inout(reg) a0.wrapping_offset(3 * lda) => _,
                        a6 = inout(reg) a0.wrapping_offset(6 * lda) => _,
                        a9 = inout(reg) a0.wrapping_offset(9 * lda) => _,
                        lda = in(reg) lda,)
                };
            }
            // SAFETY: the caller's contract; the asm touches only the named memory.
            unsafe {
                if super::kernels::a_rows_non_temporal() { run!(inplace) } else { run!(inplace_l2) }
            }
        }
    };
}

full_tiles!(
    f32_packed_full,
    f32_inplace_full,
    f32,
    "vbroadcastss",
    "vfmadd231ps",
    "vaddps",
    "dword",
    ["0", "4", "8", "12", "16", "20", "24", "28", "32", "36", "40", "44"],
    ["48", "52", "56", "60", "64", "68", "72", "76", "80", "84", "88", "92"],
    "48",
    "96",
    "4",
    "8"
);

full_tiles!(
    f64_packed_full,
    f64_inplace_full,
    f64,
    "vbroadcastsd",
    "vfmadd231pd",
    "vaddpd",
    "qword",
    ["0", "8", "16", "24", "32", "40", "48", "56", "64", "72", "80", "88"],
    ["96", "104", "112", "120", "128", "136", "144", "152", "160", "168", "176", "184"],
    "96",
    "192",
    "8",
    "16"
);

/// The full f32 tile (12 x 32) for a row-major B: A in place (row i at `a + i * lda`), B's rows
/// `ldb` elements apart, C's rows `ldc` apart (`acc`: added to), over `k` steps; no stream. The
/// attention products (k = the head dimension, 64 or 128) lost a fifth of a tile to the trip of
/// the accumulators through the stack.
///
/// # Safety
/// AVX-512F; A's 12 rows hold `k` values, B `k` rows of 32, C 12 rows of 32.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn f32_strided_full(
    k: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    let (lda, ldb, rs) = (4 * lda as isize, 4 * ldb as isize, 4 * ldc as isize);
    let tail = k.min(super::avx512::PREFETCH_TAIL);
    let (pairs, tail) = ((k - tail) / 2, tail + (k - tail) % 2);
    let a0 = a as *const u8;
    // SAFETY: the caller's contract; the asm touches only the named memory.
    unsafe {
        macro_rules! strided {
            ($mode:ident) => {
                zmm_12x2_tile!(strided, $mode, "", "", "vbroadcastss", "vfmadd231ps", "vaddps", "dword", ["4", "8"];
                    pairs, tail, b, c, rs;
                    a0 = inout(reg) a0 => _,
                    a3 = inout(reg) a0.wrapping_offset(3 * lda) => _,
                    a6 = inout(reg) a0.wrapping_offset(6 * lda) => _,
                    a9 = inout(reg) a0.wrapping_offset(9 * lda) => _,
                    lda = in(reg) lda,
                    ldb = in(reg) ldb,)
            };
        }
        if acc { strided!(add) } else { strided!(store) }
    }
}

/// Rows of B ahead of the current k step that `f32_packb_full` prefetches into L2.
const PACKB_AHEAD: isize = 64;

/// The full f32 tile (12 x 32) that also packs its B panel: A in place (row i at `a + i * lda`),
/// B's source rows `ldb` elements apart (row-major, read once, prefetched into L2 a few rows
/// ahead), each k step's 32 values stored to `bd` as the packed panel (`k * 32` elements), C's
/// rows `ldc` apart (`acc`: added to). The B pack of a product thus rides on its first row tile.
///
/// # Safety
/// AVX-512F; A's 12 rows hold `k` values, B `k` rows of 32, `bd` room for `k * 32`, C 12 rows
/// of 32; `bd` does not overlap A, B or C.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn f32_packb_full(
    k: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    bd: *mut f32,
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    let (lda, ldb, rs) = (4 * lda as isize, 4 * ldb as isize, 4 * ldc as isize);
    let tail = k.min(super::avx512::PREFETCH_TAIL);
    let (pairs, tail) = ((k - tail) / 2, tail + (k - tail) % 2);
    let a0 = a as *const u8;
    let pf = (b as *const u8).wrapping_offset(PACKB_AHEAD * ldb);
    // SAFETY: the caller's contract; the asm touches only the named memory (prefetches never fault).
    unsafe {
        macro_rules! packb {
            ($mode:ident) => {
                zmm_12x2_tile!(packb, $mode, "", "", "vbroadcastss", "vfmadd231ps", "vaddps", "dword", ["4", "8"];
                    pairs, tail, b, c, rs;
                    a0 = inout(reg) a0 => _,
                    a3 = inout(reg) a0.wrapping_offset(3 * lda) => _,
                    a6 = inout(reg) a0.wrapping_offset(6 * lda) => _,
                    a9 = inout(reg) a0.wrapping_offset(9 * lda) => _,
                    lda = in(reg) lda,
                    ldb = in(reg) ldb,
                    bd = inout(reg) bd => _,
                    pf = inout(reg) pf => _,)
            };
        }
        if acc { packb!(add) } else { packb!(store) }
    }
}
