//! Read bandwidth of weight-sized buffers on the heap (advised for huge pages, starting anywhere)
//! against the same bytes in 2 MiB-aligned mappings (`rlx_driver::huge_pages::HugeZeroed`), in
//! alternating rounds so that a noisy host weighs on both alike.
//! `cargo run --release -p rlx-cpu --example huge_read_probe -- [MIB_PER_BUFFER] [BUFFERS] [ROUNDS]`

use rlx_cpu::threads::{num_threads, parallel_for};
use rlx_driver::huge_pages::HugeZeroed;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// GB/s of one pass over every buffer, each split over the pool's threads.
fn pass(bufs: &[&[u64]]) -> f64 {
    let t = Instant::now();
    let sink = AtomicU64::new(0);
    let mut bytes = 0;
    for b in bufs {
        let chunks = num_threads() * 4;
        let per = b.len() / chunks;
        parallel_for(chunks, &|c| {
            let s = b[c * per..(c + 1) * per].iter().fold(0u64, |a, &x| a.wrapping_add(x));
            sink.fetch_add(s, Ordering::Relaxed);
        });
        bytes += per * chunks * 8;
    }
    std::hint::black_box(sink.load(Ordering::Relaxed));
    bytes as f64 / t.elapsed().as_secs_f64() / 1e9
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (mib, count, rounds) =
        (args.first().copied().unwrap_or(6), args.get(1).copied().unwrap_or(40), args.get(2).copied().unwrap_or(30));
    // An odd number of KiB past the MiB: sizes of real weights are not multiples of 2 MiB.
    let words = (mib << 20) / 8 + 4096 / 8 * 37;
    let heap: Vec<Vec<u64>> = (0..count).map(|i| rlx_driver::huge_pages::vec(words, i as u64 + 1)).collect();
    let mapped: Vec<HugeZeroed> = (0..count).map(|_| HugeZeroed::new(words * 8).expect("huge pages on")).collect();
    let mapped: Vec<&[u64]> = mapped
        .iter()
        .enumerate()
        .map(|(i, m)| {
            // SAFETY: `words * 8` zeroed bytes owned by `m`, 2 MiB aligned.
            let s = unsafe { std::slice::from_raw_parts_mut(m.as_ptr() as *mut u64, words) };
            s.fill(i as u64 + 1);
            &*s
        })
        .collect();
    let heap: Vec<&[u64]> = heap.iter().map(|v| v.as_slice()).collect();
    let (mut a, mut b) = (vec![], vec![]);
    for _ in 0..rounds {
        a.push(pass(&heap));
        b.push(pass(&mapped));
    }
    let huge_kb = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    let huge_kb = huge_kb.lines().find(|l| l.starts_with("AnonHugePages")).unwrap_or("").to_string();
    let (ma, mb) = (median(a), median(b));
    println!(
        "{count} buffers of {:.2} MiB, {} threads: heap {:.1} GB/s, 2 MiB-aligned {:.1} GB/s (median of {rounds}, alternating) = {:.3}x; {huge_kb}",
        words as f64 * 8.0 / 1048576.0,
        num_threads(),
        ma,
        mb,
        mb / ma,
    );
}
