//! `RLX_DUMP=dir` writes the graph text after every pipeline stage and the fusion report (its own test binary: it sets
//! an environment variable).

#[test]
fn dump_writes_every_stage_as_parseable_text() {
    let dir = std::env::temp_dir().join(format!("rlx-dump-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // SAFETY: this binary runs this one test; no other thread reads the environment.
    unsafe { std::env::set_var("RLX_DUMP", &dir) };
    let g = rlx_opt::zoo::mlp(2, &[4, 8, 3]);
    let cpu = rlx_cpu::CpuBackend::new();
    let (opt, report) = rlx_opt::compile_pipeline(g, &cpu, rlx_opt::PrecisionPolicy::F32).unwrap();
    unsafe { std::env::remove_var("RLX_DUMP") };
    let mut files: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    // The fusion report is written beside the stage graphs.
    assert_eq!(files.pop().as_deref(), Some("mlp.fusion.txt"), "{files:?}");
    let fusion = std::fs::read_to_string(dir.join("mlp.fusion.txt")).unwrap();
    assert_eq!(fusion, report.fusion.to_string());
    assert!(fusion.contains("matmul epilogue"), "{fusion}");
    let stages: Vec<&str> = files.iter().map(|f| f.split('.').nth(2).unwrap()).collect();
    assert_eq!(stages, ["input", "simplify", "legalize", "simplify-2", "fuse", "final"], "{files:?}");
    assert_eq!(report.stages.len(), 4);
    let last = std::fs::read_to_string(dir.join(files.last().unwrap())).unwrap();
    assert_eq!(rlx_ir::Graph::from_text(&last).unwrap(), opt);
    std::fs::remove_dir_all(&dir).unwrap();
}
