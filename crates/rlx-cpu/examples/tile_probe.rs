//! Where the f32 GEMM loses time against the FMA peak, measured in the same rounds as the peak
//! (the clocks of a shared host move by 10% or more): the micro-kernel on one tile in L1, with A
//! streaming from L2, inside a 1024-wide blocked pass (C in L2, then C out of cache), the same
//! pass in the other loop order (each A tile held in L1 while the B panels stream from L2), and
//! the whole 1024^3 product. x86-64 with AVX-512 only.
//!
//! `cargo run --release -p rlx-cpu --example tile_probe -- [kc] [rounds]`, or with `HUGE_AB=n`:
//! the n^3 product with its operands on 4 KiB pages against 2 MiB pages, paired call by call.

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn main() {
    probe::main()
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn main() {
    println!("tile_probe measures the x86-64 AVX-512 kernels on Linux");
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod probe {
    use rlx_cpu::gemm::{GemmElem, MatMut, MatRef, gemm};
    use rlx_cpu::peak::fma_peak_gflops;
    use std::time::Instant;

    fn gflops(flops: f64, f: impl FnOnce()) -> f64 {
        let t = Instant::now();
        f();
        flops / t.elapsed().as_secs_f64() / 1e9
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    /// A zeroed f32 buffer on 2 MiB pages where the kernel gives them, or on 4 KiB pages (leaked).
    fn buffer(len: usize, huge: bool) -> &'static mut [f32] {
        let bytes = len * 4 + (2 << 20);
        // SAFETY: a fresh private anonymous mapping, used only through the returned slice.
        unsafe {
            let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
            let p = libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0);
            assert!(p != libc::MAP_FAILED, "mmap of {bytes} bytes failed");
            let a = (p as usize).next_multiple_of(2 << 20);
            let advice = if huge { libc::MADV_HUGEPAGE } else { libc::MADV_NOHUGEPAGE };
            libc::madvise(a as *mut libc::c_void, len * 4, advice);
            std::slice::from_raw_parts_mut(a as *mut f32, len)
        }
    }

    /// One n^3 product from `a`, `b` into `c` (row-major, n x n), in GFLOP/s.
    fn product(n: usize, a: &[f32], b: &[f32], c: &mut [f32]) -> f64 {
        let view = |x: &[f32]| MatRef { ptr: x.as_ptr(), rs: n as isize, cs: 1 };
        // SAFETY: the buffers hold n * n elements each and do not alias.
        gflops(2.0 * (n * n * n) as f64, || unsafe {
            gemm(n, n, n, view(a), view(b), MatMut { ptr: c.as_mut_ptr(), rs: n as isize })
        })
    }

    /// The n^3 product on 4 KiB pages against 2 MiB pages, alternating call by call.
    fn huge_ab(n: usize, rounds: usize) {
        let [a4, b4, c4, a2, b2, c2] = [false, false, false, true, true, true].map(|h| buffer(n * n, h));
        for (i, x) in a4.iter_mut().enumerate() {
            *x = (i % 11) as f32 * 0.01;
        }
        for (i, x) in b4.iter_mut().enumerate() {
            *x = (i % 13) as f32 * 0.01;
        }
        a2.copy_from_slice(a4);
        b2.copy_from_slice(b4);
        let (mut small, mut ratio) = (Vec::new(), Vec::new());
        for r in 0..rounds {
            let (x, y) = if r % 2 == 0 {
                (product(n, a4, b4, c4), product(n, a2, b2, c2))
            } else {
                let y = product(n, a2, b2, c2);
                (product(n, a4, b4, c4), y)
            };
            small.push(x);
            ratio.push(y / x);
        }
        ratio.sort_by(f64::total_cmp);
        let q = |f: f64| ratio[((ratio.len() - 1) as f64 * f) as usize];
        println!(
            "{n}^3 on {} threads: 4 KiB pages {:.1} GFLOP/s; 2 MiB / 4 KiB pages: median {:.4} (quartiles {:.4} {:.4})",
            rlx_cpu::threads::num_threads(),
            median(small),
            q(0.5),
            q(0.25),
            q(0.75)
        );
    }

    pub fn main() {
        assert!(is_x86_feature_detected!("avx512f"), "tile_probe needs AVX-512F");
        let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
        let kc = args.first().copied().unwrap_or(256);
        let rounds = args.get(1).copied().unwrap_or(5);
        if let Some(n) = std::env::var("HUGE_AB").ok().and_then(|v| v.parse().ok()) {
            return huge_ab(n, rounds.max(10));
        }
        let kern = f32::kernel();
        let (mr, nr) = (kern.mr, kern.nr);
        println!("kernel {} kc {kc}, one thread (the product: {} threads)", kern.name, rlx_cpu::threads::num_threads());
        // A block: packed panels of mc rows; B block: n / nr packed panels; C: mc x n, in L2.
        let (mc, n, big) = (96usize, 1024usize, 1024usize);
        let tiles = mc / mr;
        let a: Vec<f32> = (0..mc * kc).map(|i| (i % 7) as f32 * 0.01).collect();
        let b: Vec<f32> = (0..n * kc).map(|i| (i % 5) as f32 * 0.01).collect();
        let mut c = vec![0f32; mc * n];
        let mut one = vec![0f32; mr * nr];
        let (ga, gb) = (buffer(big * big, true), buffer(big * big, true));
        let gc = buffer(big * big, true);
        ga.iter_mut().enumerate().for_each(|(i, x)| *x = (i % 11) as f32 * 0.01);
        gb.iter_mut().enumerate().for_each(|(i, x)| *x = (i % 13) as f32 * 0.01);
        let tile_flops = (2 * mr * nr * kc) as f64;
        let panel = |t: usize| MatRef { ptr: a[t * mr * kc..].as_ptr(), rs: 1, cs: mr as isize };
        let names = ["L1", "A from L2", "blocked", "blocked, C far", "A in L1", "product"];
        let mut rows: Vec<[f64; 6]> = Vec::new();
        let mut peaks = Vec::new();
        for round in 0..rounds {
            let p1 = fma_peak_gflops(1);
            let reps = 20_000;
            // SAFETY (all kernel calls): A panels hold mr * kc values, B panels nr * kc, and every
            // C tile lies inside its buffer.
            let l1 = gflops(tile_flops * reps as f64, || {
                for _ in 0..reps {
                    unsafe { (kern.micro)(kc, panel(0), b.as_ptr(), one.as_mut_ptr(), nr as isize, mr, nr, true) };
                }
            });
            let a_l2 = gflops(tile_flops * (reps / tiles * tiles) as f64, || {
                for r in 0..reps / tiles {
                    for t in 0..tiles {
                        let cp = c[t * mr * n + (r % 4) * nr..].as_mut_ptr();
                        unsafe { (kern.micro)(kc, panel(t), b.as_ptr(), cp, n as isize, mr, nr, true) };
                    }
                }
            });
            // Each B panel against every A tile, as the blocked loops run them; C in L2, or the
            // next 96 rows of a 4 MiB C each pass (prefetched towards L2 per tile, as they do).
            let passes = 6;
            let mut blocked = |far: bool| {
                let gc = &mut *gc;
                gflops(tile_flops * (tiles * n / nr * passes) as f64, || {
                    for pass in 0..passes {
                        let (cbuf, c0) = if far {
                            (&mut gc[..], (pass + round * passes) % (big / mc) * mc * n)
                        } else {
                            (&mut c[..], 0)
                        };
                        for jr in (0..n).step_by(nr) {
                            for t in 0..tiles {
                                let cp = cbuf[c0 + t * mr * n + jr..].as_mut_ptr();
                                if far {
                                    for i in 0..mr {
                                        let row = cp.wrapping_add(i * n) as *const i8;
                                        for off in [0, 64, 127] {
                                            // SAFETY: prefetches never fault.
                                            unsafe { std::arch::x86_64::_mm_prefetch::<2>(row.wrapping_add(off)) };
                                        }
                                    }
                                }
                                let bp = b[jr * kc..].as_ptr();
                                unsafe { (kern.micro)(kc, panel(t), bp, cp, n as isize, mr, nr, true) };
                            }
                        }
                    }
                })
            };
            let (blk, far) = (blocked(false), blocked(true));
            let a_in_l1 = gflops(tile_flops * (tiles * n / nr * passes) as f64, || {
                for _ in 0..passes {
                    for t in 0..tiles {
                        for jr in (0..n).step_by(nr) {
                            let cp = c[t * mr * n + jr..].as_mut_ptr();
                            let bp = b[jr * kc..].as_ptr();
                            unsafe { (kern.micro)(kc, panel(t), bp, cp, n as isize, mr, nr, true) };
                        }
                    }
                }
            });
            let threads = rlx_cpu::threads::num_threads();
            let pn = if threads == 1 { p1 } else { fma_peak_gflops(threads) };
            let full = product(big, ga, gb, gc);
            let row = [l1 / p1, a_l2 / p1, blk / p1, far / p1, a_in_l1 / p1, full / pn];
            let cells: Vec<String> = names.iter().zip(row).map(|(k, v)| format!("{k} {:.1}%", 100.0 * v)).collect();
            println!("peak {p1:6.1}  {}", cells.join("  "));
            rows.push(row);
            peaks.push(p1);
        }
        let cells: Vec<String> = (0..names.len())
            .map(|i| format!("{} {:.1}%", names[i], 100.0 * median(rows.iter().map(|r| r[i]).collect())))
            .collect();
        println!("median: peak {:.1}  {}", median(peaks), cells.join("  "));
        std::hint::black_box((&c, &one));
    }
}
