//! Golden text tests: each file under `tests/golden/` holds an input graph, the rule set to run
//! (`// set: NAME`), and after `// expect` the exact output text. `BLESS=1` rewrites the
//! expected part (review the diff). Every case is also checked against the reference.

use rlx_ir::ops::util::rand_f64;
use rlx_ir::{Graph, HostTensor, Op, interp};
use std::path::Path;

fn run_set(set: &str, g: &Graph) -> Graph {
    if set == "fuse" {
        let cpu = cpu_backend();
        return rlx_opt::fuse_elementwise(g, &|n, ins| rlx_driver::Backend::supports(cpu, n, ins)).unwrap().0;
    }
    if set == "pipeline-cpu" {
        let cpu = cpu_backend();
        return rlx_opt::compile_pipeline(g.clone(), cpu, rlx_opt::PrecisionPolicy::F32).unwrap().0;
    }
    let sets = rlx_opt::rules::set_by_name(set).unwrap_or_else(|| panic!("unknown set `{set}`"));
    rlx_opt::rewrite(g, sets).unwrap().0
}

/// Random feeds for every input and param of `g`.
fn feeds(g: &Graph) -> Vec<(String, HostTensor)> {
    g.nodes()
        .iter()
        .enumerate()
        .filter_map(|(i, n)| match &n.op {
            Op::Input(x) => Some((x.name.clone(), &x.shape, i)),
            Op::Param(x) => Some((x.name.clone(), &x.shape, i)),
            _ => None,
        })
        .map(|(name, s, i)| {
            let d = s.fixed_dims().unwrap();
            let v = rand_f64(d.iter().product(), -2.0, 2.0, 100 + i as u64);
            (name, HostTensor::from_f64(&d, s.dtype, &v).unwrap())
        })
        .collect()
}

#[test]
fn golden_rule_sets() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 8, "golden files missing");
    let bless = std::env::var_os("BLESS").is_some();
    let mut failures = vec![];
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let (input, expected) = text.split_once("// expect\n").expect("`// expect` line");
        let set = input.lines().next().and_then(|l| l.strip_prefix("// set: ")).expect("first line `// set: NAME`");
        let g = Graph::from_text(input).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let out = run_set(set, &g);
        let got = out.to_text();
        // The output must compute what the input does.
        let f = feeds(&g);
        let fr: Vec<(&str, HostTensor)> = f.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        let (want, have) = (interp::evaluate(&g, &fr).unwrap(), interp::evaluate(&out, &fr).unwrap());
        for (w, h) in want.iter().zip(&have) {
            rlx_ir::testkit::compare(h, w).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        if bless {
            std::fs::write(&path, format!("{input}// expect\n{got}")).unwrap();
        } else if got.trim() != expected.trim() {
            failures.push(format!("{}:\n--- expected\n{expected}\n--- got\n{got}", path.display()));
        }
        // The expected text parses back to the same graph.
        assert_eq!(Graph::from_text(&got).unwrap(), out);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One CPU backend for the whole test binary.
fn cpu_backend() -> &'static rlx_cpu::CpuBackend {
    static B: std::sync::OnceLock<rlx_cpu::CpuBackend> = std::sync::OnceLock::new();
    B.get_or_init(rlx_cpu::CpuBackend::new)
}
