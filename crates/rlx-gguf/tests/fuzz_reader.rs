//! Mutation fuzzing of the reader with a fixed number of executions: truncations, bit flips and
//! hostile counts/offsets written over the fixtures' length fields. Every input must parse or give an
//! error, never panic, and no parse may allocate more than a small multiple of the input size.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use rlx_gguf::{GgufFile, inspect};

/// Tracks live and peak heap bytes (this test binary has a single test, so one thread allocates).
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Parses, dequantizes every tensor and lists the header; returns whether parsing succeeded.
fn exercise(bytes: &[u8]) -> bool {
    match GgufFile::from_bytes(bytes.to_vec()) {
        Ok(file) => {
            for t in file.tensors() {
                let _ = t.to_f32();
            }
            let _ = inspect(file.gguf());
            true
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            false
        }
    }
}

/// Values that break naive readers when written over a length, count, dim, type or offset field.
const HOSTILE: [u64; 10] = [0, 1, 5, 13, 0xFFFF_FFFF, 0x8000_0000, u64::MAX, u64::MAX / 2, 1 << 40, 0x7FFF_FFFF_FFFF];

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 => b.truncate(rng.below(b.len() + 1)),
            1 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            2 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] = rng.next() as u8;
            }
            3 if b.len() >= 8 => {
                // A hostile 64-bit value at a random 4-byte-aligned position (the header's fields are).
                let i = rng.below(b.len() / 4 - 1) * 4;
                let v = HOSTILE[rng.below(HOSTILE.len())];
                b[i..i + 8].copy_from_slice(&v.to_le_bytes());
            }
            4 if b.len() >= 4 => {
                let i = rng.below(b.len() - 3);
                let v = HOSTILE[rng.below(HOSTILE.len())] as u32;
                b[i..i + 4].copy_from_slice(&v.to_le_bytes());
            }
            _ => {
                let i = rng.below(b.len() + 1);
                let extra: Vec<u8> = (0..rng.below(16)).map(|_| rng.next() as u8).collect();
                b.splice(i..i, extra);
            }
        }
    }
    b
}

#[test]
fn mutated_files_never_panic_or_overallocate() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let seeds: Vec<Vec<u8>> = ["meta_v1.gguf", "meta_v2.gguf", "meta_v3.gguf", "quant.gguf"]
        .iter()
        .map(|n| std::fs::read(dir.join(n)).unwrap())
        .collect();
    // Every prefix of the small files: all must fail cleanly except the complete file.
    let mut executions = 0usize;
    for seed in &seeds[..3] {
        for len in 0..seed.len() {
            exercise(&seed[..len]);
            executions += 1;
        }
        assert!(exercise(seed));
    }
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let (mut ok, mut peak_ratio, mut peak_bytes) = (0usize, 0f64, 0usize);
    const ITERATIONS: usize = 100_000;
    for i in 0..ITERATIONS {
        let seed = &seeds[i % seeds.len()];
        let input = mutate(&mut rng, seed);
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        ok += usize::from(exercise(&input));
        let used = PEAK.load(Ordering::Relaxed) - base;
        // Input copy + parsed tables + dequantized f32 (at most ~12 bytes per packed byte) + slack.
        let cap = 32 * input.len() + (1 << 20);
        assert!(used <= cap, "iteration {i}: allocated {used} bytes for a {}-byte input", input.len());
        peak_bytes = peak_bytes.max(used);
        if input.len() >= 1024 {
            peak_ratio = peak_ratio.max(used as f64 / input.len() as f64);
        }
        executions += 1;
    }
    println!(
        "fuzz_reader: {executions} executions, {ok} mutated inputs parsed, peak heap {peak_bytes} bytes, at most {peak_ratio:.1}x the input for inputs of 1 KiB or more"
    );
    assert!(ok > 0 && ok < ITERATIONS, "mutations should sometimes parse and sometimes fail");
}
