//! GEMM against a naive product: every kernel, layout, blocking and threading path.

use super::*;
use std::sync::atomic::{AtomicU32, Ordering};

fn naive(m: usize, n: usize, k: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    c
}

/// Row-major A (m x k) and B (k x n) of small exact values, and their product.
fn operands(m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let a: Vec<f64> = (0..m * k).map(|i| ((i * 7 % 13) as f64 - 6.0) / 5.0).collect();
    let b: Vec<f64> = (0..k * n).map(|i| ((i * 5 % 11) as f64 - 5.0) / 3.0).collect();
    let want = naive(m, n, k, &a, &b);
    (a, b, want)
}

/// Runs f64 and f32 products in every operand layout against the naive product, and checks
/// that the epilogue sees each element of C exactly once, after it is final.
fn check(m: usize, n: usize, k: usize) {
    let (a, b, want) = operands(m, n, k);
    let seen: Vec<AtomicU32> = (0..m * n).map(|_| AtomicU32::new(0)).collect();
    let mut c = vec![f64::NAN; m * n];
    let cp = c.as_mut_ptr() as usize;
    // The epilogue doubles each element: a block seen twice or too early shows up below.
    let epi = |i0: usize, r: usize, j0: usize, w: usize| {
        for i in i0..i0 + r {
            for j in j0..j0 + w {
                seen[i * n + j].fetch_add(1, Ordering::Relaxed);
                // SAFETY: blocks are disjoint, so this element is ours.
                unsafe { *(cp as *mut f64).add(i * n + j) *= 2.0 };
            }
        }
    };
    let (av, bv) =
        (MatRef { ptr: a.as_ptr(), rs: k as isize, cs: 1 }, MatRef { ptr: b.as_ptr(), rs: n as isize, cs: 1 });
    unsafe { gemm_epi(m, n, k, av, bv, MatMut { ptr: c.as_mut_ptr(), rs: n as isize }, Some(&epi)) };
    for (x, y) in c.iter().zip(&want) {
        assert!((x - 2.0 * y).abs() < 1e-9, "f64 {m}x{n}x{k}: {x} vs {}", 2.0 * y);
    }
    assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1), "epilogue coverage {m}x{n}x{k}");
    // Every kernel this CPU runs (AVX-512, AVX2, portable), on one thread and on two.
    for threads in [1, 2] {
        for kern in f64::kernels() {
            check_kernel(&kern, threads, m, n, k, &a, &b, &want, 1e-9);
        }
        for kern in f32::kernels() {
            check_kernel(&kern, threads, m, n, k, &a, &b, &want, 1e-3);
        }
        // A tile no shipped x86 kernel has (12 columns do not divide the 2048-column block,
        // as NEON's 8 x 12) and a shallow k block.
        let odd = Kernel::plain("portable-5x12", 5, 12, 100, kernels::generic::<f32, 5, 12>);
        check_kernel(&odd, threads, m, n, k, &a, &b, &want, 1e-3);
        // A tile of more than 8 rows (as the AVX-512 12-row tiles), on a portable kernel.
        let tall = Kernel::plain("portable-13x8", 13, 8, 64, kernels::generic::<f32, 13, 8>);
        check_kernel(&tall, threads, m, n, k, &a, &b, &want, 1e-3);
    }
}

/// The element types under test, made from and compared as f64.
trait Elem: Into<f64> + std::ops::MulAssign {
    fn of(x: f64) -> Self;
}
impl Elem for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
}
impl Elem for f64 {
    fn of(x: f64) -> Self {
        x
    }
}

/// Kernel `kern` on `threads` threads: all four layouts (A and B each row- or column-major), B
/// as a view and packed ahead of time, and the epilogue's coverage; results within `tol`
/// (relative) of the f64 product `want`.
#[allow(clippy::too_many_arguments)]
fn check_kernel<T: GemmElem + Elem>(
    kern: &Kernel<T>,
    threads: usize,
    m: usize,
    n: usize,
    k: usize,
    a: &[f64],
    b: &[f64],
    want: &[f64],
    tol: f64,
) {
    let name = kern.name;
    let t = T::of;
    let at: Vec<T> = (0..m * k).map(|i| t(a[(i % m) * k + i / m])).collect();
    let bt: Vec<T> = (0..k * n).map(|i| t(b[(i % k) * n + i / k])).collect();
    let a32: Vec<T> = a.iter().map(|&x| t(x)).collect();
    let b32: Vec<T> = b.iter().map(|&x| t(x)).collect();
    let close = |x: T, y: f64| (x.into() - y).abs() < tol * (1.0 + y.abs());
    let nan = T::of(f64::NAN);
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let av = if ta {
            MatRef { ptr: at.as_ptr(), rs: 1, cs: m as isize }
        } else {
            MatRef { ptr: a32.as_ptr(), rs: k as isize, cs: 1 }
        };
        let bv = if tb {
            MatRef { ptr: bt.as_ptr(), rs: 1, cs: k as isize }
        } else {
            MatRef { ptr: b32.as_ptr(), rs: n as isize, cs: 1 }
        };
        // B as a view, then packed ahead of time for this kernel.
        let mut packed = vec![nan; n.div_ceil(kern.nr) * kern.nr * k];
        unsafe { pack_b_with(kern, k, n, bv, &mut packed) };
        for src in [BSrc::View(bv), BSrc::Packed(bv, packed.as_ptr())] {
            let mut c32 = vec![nan; m * n];
            let cv = MatMut { ptr: c32.as_mut_ptr(), rs: n as isize };
            unsafe { gemm_with(kern, threads, m, n, k, av, src, cv, None) };
            for (x, y) in c32.iter().zip(want) {
                assert!(
                    close(*x, *y),
                    "{name} t{threads} {m}x{n}x{k} t{ta}{tb} packed {}: {} vs {y}",
                    src.prepacked(),
                    (*x).into()
                );
            }
        }
    }
    // The epilogue doubles each element once it is final: a block seen twice or early shows.
    let seen: Vec<AtomicU32> = (0..m * n).map(|_| AtomicU32::new(0)).collect();
    let mut c32 = vec![nan; m * n];
    let cp = c32.as_mut_ptr() as usize;
    let epi = |i0: usize, r: usize, j0: usize, w: usize| {
        for i in i0..i0 + r {
            for j in j0..j0 + w {
                seen[i * n + j].fetch_add(1, Ordering::Relaxed);
                // SAFETY: blocks are disjoint, so this element is ours.
                unsafe { *(cp as *mut T).add(i * n + j) *= T::of(2.0) };
            }
        }
    };
    let av = MatRef { ptr: a32.as_ptr(), rs: k as isize, cs: 1 };
    let bv = MatRef { ptr: b32.as_ptr(), rs: n as isize, cs: 1 };
    unsafe {
        gemm_with(kern, threads, m, n, k, av, BSrc::View(bv), MatMut { ptr: cp as *mut T, rs: n as isize }, Some(&epi))
    };
    for (x, y) in c32.iter().zip(want) {
        assert!(close(*x, 2.0 * y), "{name} t{threads} epilogue {m}x{n}x{k}: {} vs {}", (*x).into(), 2.0 * y);
    }
    assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1), "{name} t{threads} epilogue coverage {m}x{n}x{k}");
}

#[test]
fn matches_naive_on_awkward_sizes_and_transposes() {
    for &(m, n, k) in &[
        (1, 1, 1),
        (1, 700, 300),
        (3, 40, 9),
        (7, 17, 5),
        (13, 33, 300),
        (100, 70, 257),
        (1, 300, 40),
        (97, 2100, 3),
        (6, 16, 0),
        (5, 1, 1),
        (4, 1, 900),
    ] {
        check(m, n, k);
    }
}

#[test]
fn every_split_and_blocking_path_matches_naive() {
    // Direct A with several k blocks; packed A (past DIRECT_A_BYTES) with partial panels;
    // the row split (few columns); k past one block with a ragged tail; row-block grids; many
    // rows (m >= 2 * MC * threads): B packed whole (A row-major, one thread too) or block by block
    // and shared (A transposed), with ragged row tasks, columns and k blocks.
    for &(m, n, k) in &[
        (128, 200, 1000),
        (301, 77, 600),
        (200, 20, 50),
        (37, 2100, 390),
        (130, 35, 1200),
        (700, 50, 400),
        (419, 45, 1031),
        (397, 2101, 20),
        // Past the deepest k block of every kernel (1024 x 1.5): several blocks, ragged.
        (100, 70, 1700),
        (419, 45, 3100),
        // Rows 4 KiB apart (f32): A is copied with padded rows first (`restride_a`).
        (64, 96, 1024),
        (130, 70, 2048),
        // ... and B packed whole first (many rows).
        (400, 70, 1024),
    ] {
        check(m, n, k);
    }
}

#[test]
fn a_busy_whole_b_buffer_falls_back_to_packing_b_block_by_block() {
    // Another product holds the whole-B buffer: a row-major A takes the shared-block path on two
    // threads, the blocked loop on one. Other tests hold it only for the length of a product.
    let _held = loop {
        if let Some(guard) = f32::whole_b() {
            break guard;
        }
        std::thread::yield_now();
    };
    let (m, n, k) = (419, 45, 1031);
    let (a, b, want) = operands(m, n, k);
    for kern in f32::kernels() {
        for threads in [1, 2] {
            check_kernel(&kern, threads, m, n, k, &a, &b, &want, 1e-3);
        }
    }
}

#[test]
fn aliased_rows_of_a_are_copied_with_a_padded_stride() {
    let (m, k) = (9, 1024);
    let a: Vec<f32> = (0..m * k).map(|i| i as f32).collect();
    let view = MatRef { ptr: a.as_ptr(), rs: k as isize, cs: 1 };
    // Another test's product may hold the shared buffer for a moment.
    let (guard, v) = loop {
        if let Some(got) = restride_a(m, 64, k, view, 2) {
            break got;
        }
        std::thread::yield_now();
    };
    assert_eq!(v.rs as usize, k + A_ROW_PAD / 4);
    for i in 0..m {
        for p in [0, 1, k - 1] {
            assert_eq!(unsafe { *v.ptr.add(i * v.rs as usize + p) }, a[i * k + p]);
        }
    }
    drop(guard);
    // Rows not 4 KiB apart, or a product too narrow to repay the copy: A stays in place.
    let plain = MatRef { ptr: a.as_ptr(), rs: 1000, cs: 1 };
    assert!(restride_a(m, 64, 1000, plain, 2).is_none());
    assert!(restride_a(m, 16, k, view, 2).is_none());
}

#[test]
fn guided_row_split_covers_every_tile_once_and_ends_small() {
    for threads in [1, 2, 3, 8] {
        for tiles in [0, 1, 5, 86, 171, 342, 1000, 100_000] {
            let s = blocked::RowSplit::guided(tiles, threads, 8);
            let mut next = 0;
            for t in 0..s.tasks {
                let (t0, t1) = s.tiles(t);
                assert_eq!(t0, next, "tiles {tiles} threads {threads}: task {t} starts where the last ended");
                assert!(t1 > t0 && t1 - t0 <= s.largest, "tiles {tiles} threads {threads}: task {t} is {t0}..{t1}");
                next = t1;
            }
            assert_eq!(next, tiles, "tiles {tiles} threads {threads}: all tiles covered");
            if (2..=1000).contains(&tiles) {
                let (t0, t1) = s.tiles(s.tasks - 1);
                assert!(t1 - t0 <= 1.max(s.largest / 4), "tiles {tiles} threads {threads}: last task {t0}..{t1}");
                assert!(s.largest <= 8);
            }
        }
    }
}

#[test]
fn packing_buffers_start_on_a_cache_line_and_grow_once() {
    // An empty buffer (B packed ahead of time) allocates nothing, not even the alignment slack.
    let mut none = Vec::<f32>::new();
    assert!(super::aligned_buf(&mut none, 0).is_empty());
    assert_eq!(none.capacity(), 0);
    for len in [1, 17, 1000, 4099] {
        let (mut a, mut b) = (Vec::<f32>::new(), Vec::<f64>::new());
        let (pa, pb) = (super::aligned_buf(&mut a, len), super::aligned_buf(&mut b, len));
        assert_eq!((pa.len(), pb.len()), (len, len));
        assert_eq!((pa.as_ptr() as usize % 64, pb.as_ptr() as usize % 64), (0, 0), "len {len}");
        // A warm call with the same or a smaller length reuses the buffer.
        let (ca, cb) = (a.as_ptr(), b.as_ptr());
        super::aligned_buf(&mut a, len);
        super::aligned_buf(&mut b, len / 2);
        assert_eq!((a.as_ptr(), b.as_ptr()), (ca, cb));
    }
}

#[test]
fn row_bands_cover_every_task_once_and_give_each_thread_one_band() {
    for (row_blocks, tiles_m, threads, inner) in
        [(13, 86, 2, 2), (9, 86, 2, 2), (13, 86, 3, 1), (1, 7, 2, 4), (5, 5, 4, 3)]
    {
        let bands = super::RowBands::new(row_blocks, tiles_m, threads);
        let rb = bands.row_blocks;
        assert!(rb >= row_blocks && rb <= tiles_m.max(row_blocks), "{bands:?}");
        let tasks = rb * inner;
        let mut seen = vec![false; tasks];
        for t in 0..tasks {
            let (r, i) = bands.coords(t, inner);
            assert!(r < rb && i < inner && !seen[r * inner + i], "task {t} of {bands:?}");
            seen[r * inner + i] = true;
        }
        // Banded: thread s's contiguous share (`parallel_for`) is row blocks s * rb / threads ..
        if rb.is_multiple_of(threads) && rb <= tiles_m {
            for s in 0..threads {
                let rows: std::collections::BTreeSet<usize> =
                    (s * tasks / threads..(s + 1) * tasks / threads).map(|t| bands.coords(t, inner).0).collect();
                assert_eq!(rows, (s * rb / threads..(s + 1) * rb / threads).collect(), "share {s} of {bands:?}");
            }
        }
    }
    // All rows in one block (m = 128): not split into bands, the threads split the columns.
    let one = super::RowBands::new(1, 11, 2);
    assert_eq!(one.row_blocks, 1, "{one:?}");
    assert_eq!((0..4).map(|t| one.coords(t, 4)).collect::<Vec<_>>(), [(0, 0), (0, 1), (0, 2), (0, 3)]);
}

/// A kernel's prefetch-stream form computes the same tile as its plain form (full tiles in asm,
/// A packed or read in place, short and narrow edge tiles through the other paths), with the
/// stream pointing anywhere.
#[test]
fn stream_kernels_match_their_plain_form() {
    fn each<T: GemmElem + Elem + Copy + PartialEq + std::fmt::Debug>() {
        let kc = 40;
        for kern in T::kernels().into_iter().filter(|k| k.stream.is_some()) {
            let (mr, nr) = (kern.mr, kern.nr);
            let a: Vec<T> = (0..mr * kc).map(|i| T::of(((i * 7 % 13) as f64 - 6.0) / 5.0)).collect();
            let b: Vec<T> = (0..nr * kc).map(|i| T::of(((i * 5 % 11) as f64 - 5.0) / 3.0)).collect();
            let packed = MatRef { ptr: a.as_ptr(), rs: 1, cs: mr as isize };
            let in_place = MatRef { ptr: a.as_ptr(), rs: kc as isize, cs: 1 };
            let stream = kern.stream.expect("filtered");
            for ap in [packed, in_place] {
                for (m, n) in [(mr, nr), (mr - 1, nr), (3, nr - 5), (mr, 1)] {
                    for acc in [false, true] {
                        let (mut plain, mut streamed) = (vec![T::of(1.5); mr * nr], vec![T::of(1.5); mr * nr]);
                        let pf = b.as_ptr() as usize;
                        // SAFETY: A holds mr x kc elements in either layout, B kc x nr, C the tile.
                        unsafe {
                            (kern.micro)(kc, ap, b.as_ptr(), plain.as_mut_ptr(), nr as isize, m, n, acc);
                            stream(kc, ap, b.as_ptr(), streamed.as_mut_ptr(), nr as isize, m, n, acc, pf, 24);
                        }
                        assert_eq!(plain, streamed, "{} m {m} n {n} acc {acc} a.cs {}", kern.name, ap.cs);
                    }
                }
            }
        }
    }
    each::<f32>();
    each::<f64>();
}

/// A kernel's packing tile (`Kernel::pack_tile`) computes the plain tile over B's rows read in
/// place and leaves B's packed panel behind, for odd depths (the tail steps) and both C modes.
#[test]
fn pack_tiles_match_the_plain_tile_and_store_the_packed_panel() {
    for kern in f32::kernels().into_iter().filter(|k| k.pack_tile.is_some()) {
        let (mr, nr) = (kern.mr, kern.nr);
        let (lda, ldb) = (300, nr + 40);
        for kc in [1, 2, 5, 37, 256] {
            let a: Vec<f32> = (0..mr * lda).map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0).collect();
            let b: Vec<f32> = (0..kc * ldb).map(|i| ((i * 5 % 11) as f32 - 5.0) / 3.0).collect();
            let (av, bv) = (
                MatRef { ptr: a.as_ptr(), rs: lda as isize, cs: 1 },
                MatRef { ptr: b.as_ptr(), rs: ldb as isize, cs: 1 },
            );
            let mut want_panel = vec![0f32; kc * nr];
            // SAFETY: B holds kc rows of nr columns; the panel kc * nr.
            unsafe { pack::pack_b(bv, 0, kc, 0, nr, nr, &mut want_panel) };
            for acc in [false, true] {
                let (mut plain, mut packing) = (vec![1.5f32; mr * nr], vec![1.5f32; mr * nr]);
                let mut panel = vec![f32::NAN; kc * nr];
                // SAFETY: A holds mr rows of kc values, B kc rows of nr, C and the panel their tiles.
                unsafe {
                    (kern.micro)(kc, av, want_panel.as_ptr(), plain.as_mut_ptr(), nr as isize, mr, nr, acc);
                    (kern.pack_tile.expect("filtered"))(
                        kc,
                        av,
                        bv,
                        panel.as_mut_ptr(),
                        packing.as_mut_ptr(),
                        nr as isize,
                        acc,
                    );
                }
                assert_eq!(panel, want_panel, "{} kc {kc}: packed panel", kern.name);
                assert_eq!(plain, packing, "{} kc {kc} acc {acc}: tile", kern.name);
            }
        }
    }
}

/// A B packed by the grid's tasks where some chunks read as being packed by another task: those
/// go through private copies, and the product still matches (the flag marks every third chunk
/// busy for one product; `grid::tests` checks the claims themselves).
#[test]
fn chunks_another_task_is_packing_are_copied_privately() {
    let (m, n, k) = (419, 70, 1031);
    let (a, b, want) = operands(m, n, k);
    for kern in f32::kernels().into_iter().filter(|k| k.pack_tile.is_some()) {
        for threads in [1, 2] {
            grid::BUSY_EVERY.store(3, Ordering::Relaxed);
            check_kernel(&kern, threads, m, n, k, &a, &b, &want, 1e-3);
            grid::BUSY_EVERY.store(0, Ordering::Relaxed);
        }
    }
}

/// Two threads outside the pool multiply at the same time, each on its own packing buffers:
/// each product's epilogue waits (up to 20 s) for the other product to reach its epilogue too,
/// which two products serialized on one buffer never do.
#[test]
fn callers_outside_the_pool_do_not_wait_on_each_other() {
    use std::sync::atomic::AtomicUsize;
    use std::time::{Duration, Instant};
    // Tall enough that A is packed (not read in place): the packing buffers are in use.
    let (m, n, k) = (300, 64, 256);
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 - 2.0).collect();
    let want = naive(
        m,
        n,
        k,
        &a.iter().map(|&x| x as f64).collect::<Vec<_>>(),
        &b.iter().map(|&x| x as f64).collect::<Vec<_>>(),
    );
    let arrived = AtomicUsize::new(0);
    let met = std::thread::scope(|s| {
        let runs: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut c = vec![0f32; m * n];
                    let met = AtomicU32::new(0);
                    let epi = |i0: usize, _: usize, j0: usize, _: usize| {
                        if i0 + j0 > 0 || met.load(Ordering::Relaxed) > 0 {
                            return;
                        }
                        // The first block of C: wait here for the other caller to arrive too.
                        arrived.fetch_add(1, Ordering::SeqCst);
                        let deadline = Instant::now() + Duration::from_secs(20);
                        while arrived.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
                            std::thread::yield_now();
                        }
                        met.store(1 + u32::from(arrived.load(Ordering::SeqCst) >= 2), Ordering::Relaxed);
                    };
                    let (av, bv) = (
                        MatRef { ptr: a.as_ptr(), rs: k as isize, cs: 1 },
                        MatRef { ptr: b.as_ptr(), rs: n as isize, cs: 1 },
                    );
                    let cv = MatMut { ptr: c.as_mut_ptr(), rs: n as isize };
                    // SAFETY: the views cover m x k, k x n and m x n; one thread, this caller's.
                    unsafe { gemm_with(f32::kernel(), 1, m, n, k, av, BSrc::View(bv), cv, Some(&epi)) };
                    for (x, y) in c.iter().zip(&want) {
                        assert_eq!(*x as f64, *y);
                    }
                    met.load(Ordering::Relaxed) == 2
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().expect("no panic")).collect::<Vec<_>>()
    });
    assert_eq!(met, [true, true], "the two products ran one after the other");
}
