//! The conformance suite: every op's samples, run on a backend and compared with the reference
//! interpreter. A backend opts in with one line: `rlx_ir::conformance_suite!(runner);`.

use crate::{DType, Data, Graph, HostTensor, Op, Result, Sample, interp};

/// Absolute and relative tolerance for comparing values of `dtype` against the reference.
pub fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F64 => (1e-10, 1e-9),
        DType::F32 | DType::C64 => (2e-5, 2e-4),
        DType::F16 => (4e-3, 4e-3),
        DType::BF16 => (3e-2, 2e-2),
        _ => (0.0, 0.0),
    }
}

/// Checks `got` against `want`: same type, values within the dtype's tolerance (NaN matches NaN).
pub fn compare(got: &HostTensor, want: &HostTensor) -> std::result::Result<(), String> {
    compare_within(got, want, None)
}

/// As `compare`, with the op's own (atol, rtol) when given (`OpDef::tolerance`), else the dtype's.
pub fn compare_within(got: &HostTensor, want: &HostTensor, tol: Option<(f64, f64)>) -> std::result::Result<(), String> {
    if got.shape != want.shape {
        return Err(format!("type {} but the reference gives {}", got.shape, want.shape));
    }
    let (atol, rtol) = tol.unwrap_or_else(|| tolerance(want.shape.dtype));
    let close = |a: f64, b: f64| (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= atol + rtol * b.abs();
    let bad = match (&got.data, &want.data) {
        (Data::F(a), Data::F(b)) => {
            a.iter().zip(b).position(|(x, y)| !close(*x, *y)).map(|i| format!("element {i}: {} vs {}", a[i], b[i]))
        }
        (Data::I(a), Data::I(b)) => {
            a.iter().zip(b).position(|(x, y)| x != y).map(|i| format!("element {i}: {} vs {}", a[i], b[i]))
        }
        (Data::B(a), Data::B(b)) => {
            a.iter().zip(b).position(|(x, y)| x != y).map(|i| format!("element {i}: {} vs {}", a[i], b[i]))
        }
        (Data::C(a), Data::C(b)) => a
            .iter()
            .zip(b)
            .position(|(x, y)| !close(x[0], y[0]) || !close(x[1], y[1]))
            .map(|i| format!("element {i}: {:?} vs {:?}", a[i], b[i])),
        _ => Some("data classes differ".into()),
    };
    match bad {
        Some(b) => Err(format!("{b} (got vs reference; atol {atol}, rtol {rtol})")),
        None => Ok(()),
    }
}

/// A graph applying the sample's op to inputs named `in0`, `in1`, ...; returns it with the feeds.
pub fn sample_graph(s: &Sample) -> Result<(Graph, Vec<(String, HostTensor)>)> {
    let mut g = Graph::new(s.label.clone());
    let mut ids = vec![];
    let mut feeds = vec![];
    for (i, t) in s.inputs.iter().enumerate() {
        let name = format!("in{i}");
        ids.push(g.input(&name, t.shape.clone()));
        feeds.push((name, t.clone()));
    }
    let y = g.try_add(s.op.clone(), &ids)?;
    g.set_outputs(vec![y]);
    Ok((g, feeds))
}

/// Outcome of running the suite on one backend.
#[derive(Debug, Default)]
pub struct ConformanceReport {
    /// Samples that matched the reference.
    pub passed: Vec<String>,
    /// Samples that failed, with why.
    pub failed: Vec<(String, String)>,
}

impl ConformanceReport {
    /// Panics with every failure listed (for use in tests).
    pub fn assert_all_pass(&self) {
        if !self.failed.is_empty() {
            let lines: Vec<String> = self.failed.iter().map(|(l, w)| format!("  {l}: {w}")).collect();
            panic!(
                "{} of {} samples failed:\n{}",
                self.failed.len(),
                self.failed.len() + self.passed.len(),
                lines.join("\n")
            );
        }
    }
}

/// Runs every op's samples through `run` (a backend) and compares with the reference.
pub fn run_conformance(run: impl Fn(&Graph, &[(&str, HostTensor)]) -> Result<Vec<HostTensor>>) -> ConformanceReport {
    run_samples(Op::all_samples(), run)
}

/// Runs the given samples through `run` and compares with the reference.
pub fn run_samples(
    samples: Vec<Sample>,
    run: impl Fn(&Graph, &[(&str, HostTensor)]) -> Result<Vec<HostTensor>>,
) -> ConformanceReport {
    let mut rep = ConformanceReport::default();
    for s in samples {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> std::result::Result<(), String> {
            let (g, feeds) = sample_graph(&s).map_err(|e| format!("building: {e}"))?;
            let feeds: Vec<(&str, HostTensor)> = feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
            let want = interp::evaluate(&g, &feeds).map_err(|e| format!("reference: {e}"))?;
            let got = run(&g, &feeds).map_err(|e| format!("backend: {e}"))?;
            compare_within(&got[0], &want[0], s.op.def().tolerance())
        }))
        .unwrap_or_else(|p| {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            Err(format!("panicked: {}", msg.unwrap_or_default()))
        });
        match outcome {
            Ok(()) => rep.passed.push(s.label),
            Err(e) => rep.failed.push((s.label, e)),
        }
    }
    rep
}

/// Declares a `#[test]` running the conformance suite on a backend, given a runner
/// `fn(&Graph, &[(&str, HostTensor)]) -> Result<Vec<HostTensor>>`.
#[macro_export]
macro_rules! conformance_suite {
    ($runner:expr) => {
        #[test]
        fn conformance_every_op_sample() {
            let report = $crate::testkit::run_conformance($runner);
            eprintln!("conformance: {} samples passed", report.passed.len());
            report.assert_all_pass();
        }
    };
}

/// Dims of a factorization of `numel` into `rank` factors, the prime factors dealt to axes by
/// `deal` (for property tests that need a random valid reshape target). `deal` must not be empty.
pub fn factorize(numel: usize, rank: usize, deal: &[usize]) -> Vec<usize> {
    let rank = if rank == 0 && numel != 1 { 1 } else { rank };
    let mut out = vec![1; rank];
    let (mut n, mut p, mut k) = (numel, 2, 0);
    while n > 1 {
        if n % p == 0 {
            out[deal[k % deal.len()] % rank] *= p;
            n /= p;
            k += 1;
        } else {
            p += 1;
        }
    }
    out
}

/// The last `len` dims of `base`, with axis i set to 1 where bit i of `ones` is set: shapes that
/// broadcast against each other, for property tests.
pub fn broadcastable_suffix(base: &[usize], len: usize, ones: u64) -> Vec<usize> {
    let len = len.min(base.len());
    base[base.len() - len..].iter().enumerate().map(|(i, &d)| if ones >> i & 1 == 1 { 1 } else { d }).collect()
}
