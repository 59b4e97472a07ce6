//! `rlx train` under `mpirun -np 2` (feature `mpi`): the same params as one process on the same
//! global batch, a checkpoint that resumes, and a job that stops within a bounded time when a rank
//! dies or stalls. Skipped, with the reason printed, where mpirun is not installed.
#![cfg(feature = "mpi")]

use rlx::nn::ParamStore;
use rlx::nn::gpt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A tiny model and text: each rank compiles and trains it in a second or two.
const TINY: &[&str] = &[
    "--max-chars",
    "20000",
    "--ctx",
    "16",
    "--layers",
    "1",
    "--heads",
    "2",
    "--dim",
    "16",
    "--lr",
    "1e-2",
    "--warmup",
    "2",
    "--seed",
    "1",
    "--sample-chars",
    "10",
];

fn have_mpirun() -> bool {
    let ok = Command::new("mpirun").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        println!("skipped: mpirun not found (apt-get install openmpi-bin libopenmpi-dev; .ci/mpi.sh does)");
    }
    ok
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rlx-mpi-{}-{name}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    d
}

/// `rlx train` with the tiny model and `extra`, in one process.
fn one(extra: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rlx"));
    c.env("RLX_NUM_THREADS", "1").arg("train").args(TINY).args(extra);
    c.output().expect("rlx runs")
}

/// `mpirun -np 2 rlx train` with the tiny model and `extra`; `tag` marks the ranks' environment.
fn mpirun(extra: &[&str], tag: &str) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "RLX_NUM_THREADS=1", "-x", "TEST_RLX_MPI_TAG"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("TEST_RLX_MPI_TAG", tag)
        .arg(env!("CARGO_BIN_EXE_rlx"))
        .arg("train")
        .args(TINY)
        .args(extra);
    c
}

fn ok(o: &Output) -> String {
    let log = text(&o.stdout);
    assert!(o.status.success(), "{log}\n{}", text(&o.stderr));
    log
}

fn params(ckpt: &Path) -> ParamStore {
    let (_, store, _) = gpt::load(ckpt).unwrap();
    let mut p = ParamStore::new();
    for (n, t) in store.iter().filter(|(n, _)| !n.starts_with("opt.")) {
        p.insert(n, t.clone());
    }
    p
}

/// Per tensor, max |a - b| over max |b|.
fn max_rel(a: &ParamStore, b: &ParamStore) -> f64 {
    assert_eq!(a.len(), b.len());
    let mut m = 0f64;
    for (n, t) in b.iter() {
        let (u, v) = (a.get(n).unwrap().to_f64_vec().unwrap(), t.to_f64_vec().unwrap());
        let scale = v.iter().fold(0f64, |s, x| s.max(x.abs())).max(1e-30);
        m = u.iter().zip(&v).fold(m, |m, (p, q)| m.max((p - q).abs() / scale));
    }
    m
}

#[test]
fn two_ranks_train_like_one_process_and_resume() {
    if !have_mpirun() {
        return;
    }
    let (a, b, c) = (dir("a"), dir("b"), dir("c"));
    let steps = ["--steps", "20", "--sample-every", "10"];
    let t = Instant::now();
    let o = mpirun(&[&steps[..], &["--batch", "8", "--out", a.to_str().unwrap()]].concat(), "train").output().unwrap();
    let log = ok(&o);
    println!("mpirun -np 2: 20 steps in {:.1} s", t.elapsed().as_secs_f64());
    assert!(log.contains("data-parallel over 2 mpi ranks") && log.contains("ranks in sync"), "{log}");
    // Rank 0 alone logs: one header, not two.
    assert_eq!(log.matches("char-GPT:").count(), 1, "{log}");
    // One process on the same global batches, as two micro-batches of 4 (rank r's rows are
    // micro-batch r), and as one batch of 8.
    ok(&one(&[&steps[..], &["--batch", "4", "--accum", "2", "--out", b.to_str().unwrap()]].concat()));
    ok(&one(&[&steps[..], &["--batch", "8", "--out", c.to_str().unwrap()]].concat()));
    let (pa, pb, pc) = (
        params(&a.join("model.safetensors")),
        params(&b.join("model.safetensors")),
        params(&c.join("model.safetensors")),
    );
    let (rel, full) = (max_rel(&pa, &pb), max_rel(&pa, &pc));
    println!(
        "2 ranks vs 1 process: {rel:.3e} relative (2 micro-batches), {full:.3e} (one batch of 8: AdamW and f32 rounding)"
    );
    assert!(rel < 1e-6, "params differ by {rel:.3e} relative");
    assert!(full < 1e-2, "params differ by {full:.3e} relative from one batch of 8");

    // Resume under mpirun: from step 20 to 24, as one process resumes the same checkpoint.
    let (d, e) = (dir("d"), dir("e"));
    let ckpt = a.join("model.safetensors");
    let more = ["--steps", "24", "--sample-every", "0", "--resume", ckpt.to_str().unwrap()];
    let log =
        ok(&mpirun(&[&more[..], &["--batch", "8", "--out", d.to_str().unwrap()]].concat(), "resume").output().unwrap());
    assert!(log.contains("at step 20") && log.contains("ranks in sync"), "{log}");
    ok(&one(&[&more[..], &["--batch", "4", "--accum", "2", "--out", e.to_str().unwrap()]].concat()));
    let (_, store, meta) = gpt::load(&d.join("model.safetensors")).unwrap();
    assert_eq!(meta.get("rlx.step").map(String::as_str), Some("24"));
    assert_eq!(store.get(rlx::nn::train::COUNT).unwrap().to_f64_vec().unwrap(), vec![24.0]);
    let rel = max_rel(&params(&d.join("model.safetensors")), &params(&e.join("model.safetensors")));
    println!("resumed 20 -> 24: 2 ranks vs 1 process {rel:.3e} relative");
    assert!(rel < 1e-6, "resumed params differ by {rel:.3e} relative");
    for p in [a, b, c, d, e] {
        std::fs::remove_dir_all(p).ok();
    }
}

/// The pid of rank `rank` of the job whose ranks carry `tag` in their environment.
fn rank_pid(tag: &str, rank: usize) -> Option<u32> {
    let want = [format!("TEST_RLX_MPI_TAG={tag}"), format!("OMPI_COMM_WORLD_RANK={rank}")];
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let env = std::fs::read(e.path().join("environ")).ok()?;
        let vars: Vec<&[u8]> = env.split(|&b| b == 0).collect();
        want.iter().all(|w| vars.contains(&w.as_bytes())).then_some(pid)
    })
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

/// Starts a long job, waits for its first checkpoint, applies `sig` to rank 1, and returns the
/// job's output and how long it took to end after the signal.
fn disrupt(name: &str, sig: &str) -> (Output, Duration, PathBuf, u32) {
    let out = dir(name);
    let tag = format!("{}-{name}", std::process::id());
    let args = ["--steps", "100000", "--batch", "8", "--sample-every", "5", "--dist-timeout", "5"];
    let child: Child = mpirun(&[&args[..], &["--out", out.to_str().unwrap()]].concat(), &tag)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ckpt = out.join("model.safetensors");
    let t = Instant::now();
    while !ckpt.exists() && t.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(ckpt.exists(), "no checkpoint within 120 s");
    let pid = rank_pid(&tag, 1).expect("rank 1 is running");
    signal(pid, sig);
    let t = Instant::now();
    let mut child = child;
    // Bounded: a job that does not end is killed after 60 s, and the assertion below fails.
    while child.try_wait().unwrap().is_none() && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = t.elapsed();
    if child.try_wait().unwrap().is_none() {
        child.kill().ok();
    }
    let o = child.wait_with_output().unwrap();
    (o, took, out, pid)
}

#[test]
fn a_killed_rank_ends_the_job_within_30_s_and_the_checkpoint_loads() {
    if !have_mpirun() {
        return;
    }
    let (o, took, out, _) = disrupt("kill", "-KILL");
    let err = text(&o.stderr);
    println!("rank 1 killed: the job ended in {:.1} s with {:?}; stderr:\n{err}", took.as_secs_f64(), o.status);
    assert!(took < Duration::from_secs(30), "the job took {took:?} to end");
    assert!(!o.status.success());
    assert!(err.contains("rank 1"), "no message naming the rank: {err}");
    gpt::load(&out.join("model.safetensors")).expect("the last checkpoint loads");
    std::fs::remove_dir_all(out).ok();
}

#[test]
fn a_stalled_rank_makes_the_other_time_out_with_a_clear_error() {
    if !have_mpirun() {
        return;
    }
    // SIGSTOP: the process lives, so the launcher sees nothing; rank 0's watchdog must end the job.
    let (o, took, out, pid) = disrupt("stop", "-STOP");
    signal(pid, "-KILL");
    let err = text(&o.stderr);
    println!("rank 1 stopped: the job ended in {:.1} s with {:?}; stderr:\n{err}", took.as_secs_f64(), o.status);
    assert!(took < Duration::from_secs(30), "the job took {took:?} to end");
    assert!(!o.status.success());
    assert!(err.contains("on rank 0 of 2 did not complete within 5.0 s"), "{err}");
    gpt::load(&out.join("model.safetensors")).expect("the last checkpoint loads");
    std::fs::remove_dir_all(out).ok();
}

#[test]
fn a_batch_that_does_not_split_over_the_ranks_is_an_error() {
    if !have_mpirun() {
        return;
    }
    let out = dir("uneven");
    let o = mpirun(&["--steps", "2", "--batch", "5", "--out", out.to_str().unwrap()], "uneven").output().unwrap();
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("--batch 5 (the global batch) does not split evenly over 2 ranks"), "{err}");
}
