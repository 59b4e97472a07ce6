//! Every quantized path through compiled graphs, against the dequantized f64 reference: each
//! scheme x shapes on and off the group (8 rows), block and four-block boundaries x activation
//! rows from decode (1) through the micro-kernel tails, the AMX threshold (16) and past one block
//! of activation rows (64) x every path setting (`RLX_QUANT_REPACK`, `_GEMM`, `_AMX`, `_BLOCKS`)
//! x every instruction set this CPU can be capped to (`RLX_QUANT_ISA`). The same param feeds a
//! `qmatmul` and an embedding `gather` + `dequantize` (a tied LM head), so the gather is checked
//! after the repack too, also over a memory-mapped file whose pages the repack released.

use super::{Isa, with_settings};
use rlx_driver::{Executable, ParamShare};
use rlx_ir::ops::util::rand_f64;
use rlx_ir::{DType, Graph, QuantScheme, Shape};
use std::sync::Arc;

/// Path settings: the defaults, then each alternative a user can force.
const CONFIGS: [&[(&str, &str)]; 5] = [
    &[],
    &[("RLX_QUANT_REPACK", "0")],
    &[("RLX_QUANT_REPACK", "0"), ("RLX_QUANT_GEMM", "0"), ("RLX_QUANT_BLOCKS", "1")],
    &[("RLX_QUANT_REPACK", "0"), ("RLX_QUANT_GEMM", "0"), ("RLX_QUANT_BLOCKS", "4")],
    &[("RLX_QUANT_AMX", "0")],
];

/// Activation rows: decode, micro-kernel tails, the AMX threshold and past 64-row blocks.
const MS: [usize; 6] = [1, 3, 4, 16, 17, 65];

/// The `RLX_QUANT_ISA` value that caps the kernels at `isa`.
fn isa_setting(isa: Isa) -> &'static str {
    match isa {
        Isa::Scalar => "scalar",
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => "avx2",
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => "neon",
        _ => "best",
    }
}

/// Packed rows of `n` x `k` values: quantized random values where RLX quantizes `s`, else
/// random block bytes redrawn until every value is finite and moderate.
fn table(s: QuantScheme, n: usize, k: usize, seed: u64) -> Vec<u8> {
    let vals: Vec<f32> = rand_f64(n * k, -1.0, 1.0, seed).into_iter().map(|v| v as f32).collect();
    if let Ok(w) = s.quantize_rows(&vals, k) {
        return w;
    }
    let (bs, bb) = (s.block_size(), s.block_bytes());
    let mut w = vec![0u8; n * s.row_bytes(k).unwrap()];
    let mut out = vec![0f32; bs];
    for (i, blk) in w.chunks_exact_mut(bb).enumerate() {
        for attempt in 0.. {
            let bytes = rand_f64(bb, 0.0, 256.0, seed ^ ((i as u64) << 20) ^ attempt);
            blk.iter_mut().zip(bytes).for_each(|(b, v)| *b = v as u8);
            s.dequantize_rows(blk, bs, &mut out).unwrap();
            if out.iter().all(|v| v.is_finite() && v.abs() < 1e3) {
                break;
            }
        }
    }
    w
}

/// The graph: `y = qmatmul(x, w)` and `e = dequantize(gather(w, tokens))`, one param `w`.
fn graph(s: QuantScheme, m: usize, n: usize, k: usize, tokens: usize) -> Graph {
    let rb = s.row_bytes(k).unwrap();
    let mut g = Graph::new("quant_paths");
    let x = g.input("x", Shape::new(&[m, k], DType::F32));
    let t = g.input("tokens", Shape::new(&[tokens], DType::I64));
    let w = g.param("w", Shape::new(&[n, rb], DType::U8));
    let y = g.qmatmul(x, w, s, k);
    let rows = g.gather(w, t, 0);
    let e = g.dequantize(rows, s, k);
    g.set_outputs(vec![y, e]);
    g
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// What one case checks the outputs against.
struct Case<'a> {
    s: QuantScheme,
    m: usize,
    n: usize,
    k: usize,
    x: &'a [f32],
    deq: &'a [f32],
    tokens: &'a [i64],
}

impl Case<'_> {
    /// The largest error the path may make at output (i, j): exact f32 products for schemes
    /// without an int8 path; 8-bit activations (half a step of each block's largest value, and the
    /// scale rounded to f16) for the int8 paths; bf16 activations and weights on AMX.
    fn bound(&self, i: usize, j: usize, amx: bool) -> f64 {
        let (x, w) = (&self.x[i * self.k..(i + 1) * self.k], &self.deq[j * self.k..(j + 1) * self.k]);
        let abs: f64 = x.iter().zip(w).map(|(a, b)| (*a as f64 * *b as f64).abs()).sum();
        let int8 = super::row_dot_with(self.s, Isa::Scalar, false).is_some();
        let act_block = if self.s.block_size() == 256 { 256 } else { 32 };
        let step: f64 = x
            .chunks(act_block)
            .zip(w.chunks(act_block))
            .map(|(xb, wb)| {
                let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
                wb.iter().map(|v| v.abs() as f64).sum::<f64>() * amax / 254.0
            })
            .sum();
        let mut b = 1e-5 * abs + 1e-6;
        if int8 {
            b += step + abs / 1024.0;
        }
        if amx {
            b += abs / 128.0;
        }
        b
    }

    /// Checks `y` and the gathered rows `e` of one run; `what` names the configuration.
    fn check(&self, y: &[f32], e: &[f32], amx: bool, what: &str) {
        let k = self.k;
        for i in 0..self.m {
            for j in 0..self.n {
                let exact: f64 = self.x[i * k..(i + 1) * k]
                    .iter()
                    .zip(&self.deq[j * k..(j + 1) * k])
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum();
                let got = y[i * self.n + j] as f64;
                let bound = self.bound(i, j, amx);
                assert!(
                    (got - exact).abs() <= bound,
                    "{} m={} n={} k={k} {what}: y[{i},{j}] = {got}, dequantized f64 reference {exact} (bound {bound})",
                    self.s,
                    self.m,
                    self.n
                );
            }
        }
        for (r, &t) in self.tokens.iter().enumerate() {
            let want = &self.deq[t as usize * k..(t as usize + 1) * k];
            let got = &e[r * k..(r + 1) * k];
            let same = want.iter().zip(got).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "{} n={} k={k} {what}: the gathered row of token {t} differs from its dequantized row",
                self.s, self.n
            );
        }
    }
}

/// Compiles the case's graph (under the calling thread's settings) with `w` bound by `bind`,
/// runs it twice (the second run reads the repacked copy the first one made), and checks both.
fn run_case(c: &Case<'_>, bind: &dyn Fn(&mut dyn Executable), amx: bool, what: &str) {
    let cpu = crate::CpuBackend::new();
    let g = graph(c.s, c.m, c.n, c.k, c.tokens.len());
    let (legal, _) = rlx_driver::legalize(&g, &cpu).unwrap();
    let mut exe = rlx_driver::compile_graph(&cpu, &legal).unwrap();
    bind(exe.as_mut());
    let xb: Vec<u8> = c.x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let tb: Vec<u8> = c.tokens.iter().flat_map(|v| v.to_le_bytes()).collect();
    for run in 0..2 {
        let (mut y, mut e) = (vec![0u8; c.m * c.n * 4], vec![0u8; c.tokens.len() * c.k * 4]);
        exe.run(&[&xb, &tb], &mut [y.as_mut_slice(), e.as_mut_slice()]).unwrap();
        c.check(&f32s(&y), &f32s(&e), amx, &format!("{what} run {run}"));
    }
}

/// Whether the AMX prefill takes this case under these settings.
fn takes_amx(s: QuantScheme, m: usize, settings: &[(&str, &str)]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let off = |name: &str| settings.iter().any(|&(k, v)| k == name && v == "0");
        // The repacked kernels (which hand prefill to AMX) run on AVX2 and up.
        let capped = settings.iter().any(|&(k, v)| k == "RLX_QUANT_ISA" && v == "scalar");
        !off("RLX_QUANT_AMX")
            && !off("RLX_QUANT_REPACK")
            && !capped
            && m >= super::amx::MIN_ROWS
            && super::amx::supported(s)
            && super::amx::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (s, m, settings);
        false
    }
}

/// Every scheme RLX reads, in ggml id order: those with int8 kernels and those dequantized per block.
fn schemes() -> Vec<QuantScheme> {
    QuantScheme::ALL.to_vec()
}

/// (n, k): rows on and off the group of eight, k one block, odd block counts and multiples of
/// four blocks, and the tied LM head of the issue-34 model (512 x 128).
fn shapes(s: QuantScheme) -> Vec<(usize, usize)> {
    let bs = s.block_size();
    if bs == 256 {
        vec![(9, 256), (8, 768), (17, 1024), (64, 512)]
    } else {
        vec![(9, bs), (8, 3 * bs), (33, 4 * bs), (512, 4 * bs), (7, 12 * bs)]
    }
}

#[test]
fn every_quantized_path_matches_the_dequantized_f64_reference() {
    let isas = Isa::available();
    let mut cases = 0;
    for (si, s) in schemes().into_iter().enumerate() {
        let int8 = super::row_dot_with(s, Isa::Scalar, false).is_some();
        for (n, k) in shapes(s) {
            let w = table(s, n, k, 5000 + 31 * si as u64 + n as u64);
            let mut deq = vec![0f32; n * k];
            s.dequantize_rows(&w, k, &mut deq).unwrap();
            let tokens: Vec<i64> = [0, n - 1, n / 2, 0, n.saturating_sub(2)].iter().map(|&t| t as i64).collect();
            let bind = |exe: &mut dyn Executable| exe.set_param(0, &w).unwrap();
            for m in MS {
                let x: Vec<f32> = rand_f64(m * k, -1.0, 1.0, 77 + m as u64).into_iter().map(|v| v as f32).collect();
                let c = Case { s, m, n, k, x: &x, deq: &deq, tokens: &tokens };
                // Schemes without int8 kernels have one path whatever the settings.
                let (configs, isas) = if int8 { (&CONFIGS[..], &isas[..]) } else { (&CONFIGS[..1], &isas[..1]) };
                for &isa in isas {
                    for cfg in configs {
                        let mut settings = cfg.to_vec();
                        settings.push(("RLX_QUANT_ISA", isa_setting(isa)));
                        let amx = takes_amx(s, m, &settings);
                        with_settings(&settings, || run_case(&c, &bind, amx, &format!("{settings:?}")));
                        cases += 1;
                    }
                }
            }
        }
    }
    eprintln!("quantized path cases checked: {cases} (ISAs {isas:?})");
}

/// A read-only shared mapping of a temporary file (the way a GGUF model is read).
#[cfg(target_os = "linux")]
struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
    path: std::path::PathBuf,
}

// SAFETY: a read-only mapping, unmapped once on drop.
#[cfg(target_os = "linux")]
unsafe impl Send for Mapped {}
// SAFETY: as above.
#[cfg(target_os = "linux")]
unsafe impl Sync for Mapped {}

#[cfg(target_os = "linux")]
impl Mapped {
    fn new(bytes: &[u8], tag: &str) -> Mapped {
        let path = std::env::temp_dir().join(format!("rlx-quant-{tag}-{}.bin", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a read-only shared mapping of a file nobody else writes.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes.len(),
                libc::PROT_READ,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        Mapped { ptr, len: bytes.len(), path }
    }
}

#[cfg(target_os = "linux")]
impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `len` readable bytes until drop.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

#[cfg(target_os = "linux")]
impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: mapped in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr, self.len) };
        std::fs::remove_file(&self.path).ok();
    }
}

/// A tied embedding read from a memory-mapped file, as `rlx generate` reads a GGUF model: the
/// repack of the LM head's weights releases the file pages, and the embedding gather that reads
/// the same bytes afterwards must still see the file's values.
#[test]
#[cfg(target_os = "linux")]
fn a_tied_table_in_a_mapped_file_gathers_the_same_rows_after_its_repack() {
    let released = super::released_bytes();
    for (si, s) in [QuantScheme::Q8_0, QuantScheme::Q4_K, QuantScheme::Q6_K].into_iter().enumerate() {
        let (n, k) = if s == QuantScheme::Q8_0 { (512, 128) } else { (96, 512) };
        let w = table(s, n, k, 9000 + si as u64);
        let mut deq = vec![0f32; n * k];
        s.dequantize_rows(&w, k, &mut deq).unwrap();
        // The table starts 544 bytes into a page, as a tensor does inside a GGUF file.
        let at = 4096 + 544;
        let mut file = vec![0xA5u8; at];
        file.extend_from_slice(&w);
        file.resize(file.len() + 4096, 0x5A);
        let map: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(Mapped::new(&file, s.name()));
        let bind = |exe: &mut dyn Executable| {
            exe.bind_param(0, ParamShare::external(map.clone(), at..at + w.len()).unwrap()).unwrap()
        };
        let tokens: Vec<i64> = (0..n as i64).step_by(3).collect();
        for m in [1, 5, 17] {
            let x: Vec<f32> = rand_f64(m * k, -1.0, 1.0, 99 + m as u64).into_iter().map(|v| v as f32).collect();
            let c = Case { s, m, n, k, x: &x, deq: &deq, tokens: &tokens };
            run_case(&c, &bind, takes_amx(s, m, &[]), "mapped file");
        }
    }
    // Where the repacked kernels run, they released the file pages that were then read again.
    if super::repacked(QuantScheme::Q8_0, Isa::detect()) && rlx_driver::config().cpu.quant.release {
        assert!(super::released_bytes() > released, "no file page was released: the case did not happen");
    }
}
