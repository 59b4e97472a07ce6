//! `CompileOptions` through `Session`: the dispatch policy and its report, the compile cache
//! (memory and disk layers), and inputs set ahead of `run`.

use rlx_driver::{Device, DispatchPolicy};
use rlx_ir::{DType, Error, Graph, OpKind, Shape};
use rlx_runtime::{CompileOptions, CompileSource, Session};

/// softmax(x @ w * 1) with a layer norm: composites the CPU runs natively, and a `mul` by one
/// that the rewrites fold away.
fn net(name: &str, dtype: DType) -> Graph {
    let mut g = Graph::new(name);
    let x = g.input("x", Shape::new(&[2, 4], dtype));
    let w = g.param("w", Shape::new(&[4, 4], dtype));
    let gamma = g.param("gamma", Shape::new(&[4], dtype));
    let beta = g.param("beta", Shape::new(&[4], dtype));
    let y = g.matmul(x, w);
    let one = g.scalar(1.0, dtype);
    let y = g.mul(y, one);
    let y = g.layer_norm(y, gamma, beta, 1e-5);
    let y = g.softmax(y, -1);
    g.set_outputs(vec![y]);
    g
}

const X: [f32; 8] = [0.5, -1.0, 2.0, 0.25, 1.5, 0.0, -0.5, 1.0];

fn run(session: &Session, g: Graph) -> (Vec<f32>, rlx_driver::DispatchReport, CompileSource) {
    let mut c = session.compile(g).unwrap();
    let w: Vec<f32> = (0..16).map(|i| ((i * 7) % 5) as f32 * 0.3 - 0.6).collect();
    c.set_param("w", &w).unwrap();
    c.set_param("gamma", &[1.0, 0.5, 2.0, 1.5]).unwrap();
    c.set_param("beta", &[0.0, 0.1, -0.1, 0.2]).unwrap();
    let out = c.run(&[("x", &X)]).unwrap().remove(0);
    (out, c.dispatch_report().clone(), c.compile_source())
}

#[test]
fn common_dispatch_decomposes_what_the_cpu_runs_natively_and_agrees() {
    let native = Session::new(Device::Cpu).with_options(CompileOptions::builtin());
    let (a, report, _) = run(&native, net("policy-native", DType::F32));
    assert_eq!((report.ops["softmax"].native, report.ops["softmax"].decomposed), (1, 0), "{report}");
    assert_eq!(report.ops["mul"].rewritten, 1, "the mul by one is folded:\n{report}");
    let common =
        Session::new(Device::Cpu).with_options(CompileOptions::builtin().with_dispatch(DispatchPolicy::Common));
    let (b, report, _) = run(&common, net("policy-common", DType::F32));
    for op in ["softmax", "layer_norm"] {
        assert_eq!((report.ops[op].native, report.ops[op].decomposed), (0, 1), "{op}:\n{report}");
    }
    let text = report.to_string();
    assert!(text.contains("common-ir") && text.contains("rewritten"), "{text}");
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
    }
    // One kind at a time.
    let mut opts = CompileOptions::builtin();
    opts.force_common.push(OpKind::Softmax);
    let (c, report, _) = run(&Session::new(Device::Cpu).with_options(opts), net("policy-force", DType::F32));
    assert_eq!(report.ops["softmax"].decomposed, 1, "{report}");
    assert_eq!(report.ops["layer_norm"].native, 1, "{report}");
    assert!(c.iter().zip(&a).all(|(x, y)| (x - y).abs() < 1e-5));
}

#[test]
fn force_native_reports_a_missing_kernel_instead_of_decomposing() {
    // fake_quant has no CPU kernel; kept native, it is missing and the compile says why.
    let mut g = Graph::new("forced");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let s = g.scalar(0.1, DType::F32);
    let z = g.scalar(0.0, DType::F32);
    let y = g.fake_quant(x, s, z, 8, true, None);
    g.set_outputs(vec![y]);
    let mut opts = CompileOptions::builtin();
    opts.force_native.push(OpKind::FakeQuant);
    match Session::new(Device::Cpu).with_options(opts).compile(g) {
        Err(Error::Unsupported { missing, report, .. }) => {
            assert!(missing.contains("fake_quant") && missing.contains("force_native"), "{missing}");
            assert!(report.contains("missing: fake_quant"), "{report}");
        }
        other => panic!("expected Unsupported, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn an_equal_graph_hits_the_cache_and_a_changed_option_or_dtype_misses() {
    let session = Session::new(Device::Cpu).with_options(CompileOptions::builtin());
    let (a, _, first) = run(&session, net("cache-equal", DType::F32));
    let (b, report, second) = run(&session, net("cache-equal", DType::F32));
    assert_eq!((first, second), (CompileSource::Pipeline, CompileSource::Memory));
    assert_eq!(a, b);
    assert_eq!(report.ops["softmax"].native, 1, "a hit keeps the report:\n{report}");
    assert!(rlx_runtime::cache_stats().memory_hits >= 1);
    // Another option, another dtype, another constant: misses.
    let no_fuse = Session::new(Device::Cpu).with_options(CompileOptions { fuse: false, ..CompileOptions::builtin() });
    assert_eq!(run(&no_fuse, net("cache-equal", DType::F32)).2, CompileSource::Pipeline);
    let f64_graph = net("cache-equal", DType::F64);
    assert_eq!(session.compile(f64_graph).unwrap().compile_source(), CompileSource::Pipeline);
    let mut other = net("cache-equal", DType::F32);
    let two = other.scalar(2.0, DType::F32);
    let out = other.outputs()[0];
    let scaled = other.mul(out, two);
    other.set_outputs(vec![scaled]);
    assert_eq!(session.compile(other).unwrap().compile_source(), CompileSource::Pipeline);
    // Reports and dumps do not change what is compiled: still a hit.
    let mut loud = CompileOptions::builtin();
    loud.reports.dispatch = true;
    assert_eq!(
        run(&Session::new(Device::Cpu).with_options(loud), net("cache-equal", DType::F32)).2,
        CompileSource::Memory
    );
    // Off is off.
    let off = Session::new(Device::Cpu).with_options(CompileOptions { cache: false, ..CompileOptions::builtin() });
    assert_eq!(run(&off, net("cache-equal", DType::F32)).2, CompileSource::Pipeline);
}

/// The disk layer: a child process (this test binary again) compiles into a fresh directory,
/// then a second child finds it there.
#[test]
fn the_disk_cache_survives_a_process_restart() {
    if let Ok(dir) = std::env::var("RLX_TEST_CACHE_CHILD") {
        let opts = CompileOptions { cache_dir: Some(dir.into()), ..CompileOptions::builtin() };
        let (out, report, source) = run(&Session::new(Device::Cpu).with_options(opts), net("cache-disk", DType::F32));
        println!("source={source:?} out={out:?} softmax_native={}", report.ops["softmax"].native);
        return;
    }
    let dir = std::env::temp_dir().join(format!("rlx-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let child = || {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "the_disk_cache_survives_a_process_restart", "--nocapture", "--test-threads=1"])
            .env("RLX_TEST_CACHE_CHILD", &dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        // libtest may print the test's name on the same line first.
        text.lines().find_map(|l| l.find("source=").map(|i| l[i..].to_string())).unwrap_or_default()
    };
    let first = child();
    let second = child();
    assert!(first.starts_with("source=Pipeline"), "{first}");
    assert!(second.starts_with("source=Disk"), "{second}");
    // The same numbers and the same report either way.
    assert_eq!(first.split_once(' ').unwrap().1, second.split_once(' ').unwrap().1);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn inputs_set_ahead_of_run_are_used_until_given() {
    let mut g = Graph::new("preset");
    let x = g.input("x", Shape::new(&[3], DType::F32));
    let mask = g.input("mask", Shape::new(&[3], DType::F32));
    let y = g.mul(x, mask);
    g.set_outputs(vec![y]);
    let mut c = Session::new(Device::Cpu).compile(g).unwrap();
    assert!(matches!(c.run(&[("x", &[1.0, 2.0, 3.0])]), Err(Error::MissingInput { .. })));
    c.set_input("mask", &[1.0, 0.0, 2.0]).unwrap();
    assert_eq!(c.run(&[("x", &[1.0, 2.0, 3.0])]).unwrap(), vec![vec![1.0, 0.0, 6.0]]);
    // Given to run, it wins for that run only.
    assert_eq!(c.run(&[("x", &[1.0, 2.0, 3.0]), ("mask", &[1.0, 1.0, 1.0])]).unwrap(), vec![vec![1.0, 2.0, 3.0]]);
    let bytes: Vec<u8> = [2.0f32, 2.0, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let typed = c.run_typed(&[("x", &bytes, DType::F32)]).unwrap();
    assert_eq!(typed[0].0.len(), 12);
    assert!(matches!(c.set_input("nope", &[1.0]), Err(Error::UnknownName { .. })));
    assert!(matches!(c.set_input("mask", &[1.0]), Err(Error::DataLength { .. })));
    c.clear_inputs();
    assert!(matches!(c.run(&[("x", &[1.0, 2.0, 3.0])]), Err(Error::MissingInput { .. })));
}

#[test]
fn auto_runs_on_an_available_device_and_names_the_others() {
    let session = Session::new(Device::Auto);
    let choice = session.choose_device(&net("auto", DType::F32)).unwrap();
    let text = choice.to_string();
    // This build has the CPU; a device without a backend here is listed with its reason.
    assert_eq!(choice.device, Device::Cpu, "{text}");
    assert!(text.contains("chose cpu") && text.contains("cuda not used"), "{text}");
    let (out, _, _) = run(&session, net("auto", DType::F32));
    let (want, _, _) = run(&Session::new(Device::Cpu), net("auto", DType::F32));
    assert_eq!(out, want);
    assert_eq!(session.compile(net("auto", DType::F32)).unwrap().device(), Device::Cpu);
}

#[test]
fn a_thread_cap_gives_the_same_results() {
    // Large enough for the CPU's parallel paths (GEMM grid, row-split softmax).
    let mut g = Graph::new("capped");
    let x = g.input("x", Shape::new(&[96, 256], DType::F32));
    let w = g.param("w", Shape::new(&[256, 192], DType::F32));
    let y = g.matmul(x, w);
    let y = g.softmax(y, -1);
    g.set_outputs(vec![y]);
    let xs: Vec<f32> = (0..96 * 256).map(|i| ((i * 13) % 17) as f32 * 0.05 - 0.4).collect();
    let ws: Vec<f32> = (0..256 * 192).map(|i| ((i * 7) % 11) as f32 * 0.02 - 0.1).collect();
    let run = |threads: Option<usize>| {
        let opts = CompileOptions { threads, ..CompileOptions::builtin() };
        let mut c = Session::new(Device::Cpu).with_options(opts).compile(g.clone()).unwrap();
        c.set_param("w", &ws).unwrap();
        c.run(&[("x", &xs)]).unwrap().remove(0)
    };
    let (all, one) = (run(None), run(Some(1)));
    for (a, b) in all.iter().zip(&one) {
        assert!((a - b).abs() < 1e-6, "{a} vs {b}");
    }
}
