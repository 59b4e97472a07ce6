//! `Mpi` over two ranks: this test starts `mpirun -np 2` on its own binary, whose two copies run
//! [`two_ranks`] and check the collectives against what the in-process thread group computes.
//! Skipped, with the reason printed, where mpirun is not installed.
#![cfg(feature = "mpi")]

use rlx_dist::{Collective, Mpi};
use std::process::Command;
use std::time::Duration;

/// Set in the environment of the copies mpirun starts.
const CHILD: &str = "TEST_RLX_DIST_MPI_CHILD";

/// Rank `r`'s contribution: magnitudes that differ by powers of ten, so that the sum rounds.
fn values(r: usize) -> Vec<f32> {
    (0..5000).map(|i| ((i * 7 + r * 13) as f32).sin() * 10f32.powi((i % 7) as i32 - 3 + r as i32)).collect()
}

/// What each rank checks; it prints "rank R: ok" at the end.
fn two_ranks() {
    let c = Mpi::init(Duration::from_secs(20)).unwrap();
    let r = c.rank();
    assert_eq!((c.size(), c.kind()), (2, "mpi"));
    // The sum has the bits of the thread group's, rank 0's value plus rank 1's.
    let want: Vec<u32> = values(0).iter().zip(values(1)).map(|(a, b)| (a + b).to_bits()).collect();
    let mut v = values(r);
    c.all_reduce_sum_f32(&mut v).unwrap();
    assert_eq!(v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want);
    let mut m = values(r);
    c.all_reduce_mean_f32(&mut m).unwrap();
    assert!(m.iter().zip(&v).all(|(a, s)| *a == s / 2.0));
    // The root's bytes and length, from another root than 0.
    let sent: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mut b = if r == 1 { sent.clone() } else { vec![7; 10] };
    c.broadcast_bytes(1, &mut b).unwrap();
    assert_eq!(b, sent);
    let e = c.broadcast_bytes(2, &mut b).unwrap_err();
    assert!(e.to_string().contains("root 2 is not a rank of a group of 2"), "{e}");
    c.barrier().unwrap();
    println!("rank {r}: ok");
}

#[test]
fn collectives_over_two_mpi_ranks_match_the_thread_group() {
    if std::env::var_os(CHILD).is_some() {
        return two_ranks();
    }
    if !Command::new("mpirun").arg("--version").output().is_ok_and(|o| o.status.success()) {
        println!("skipped: mpirun not found (apt-get install openmpi-bin libopenmpi-dev; .ci/mpi.sh does)");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let o = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", CHILD])
        .env(CHILD, "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .arg(exe)
        .args([
            "--exact",
            "collectives_over_two_mpi_ranks_match_the_thread_group",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .output()
        .unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("rank 0: ok") && out.contains("rank 1: ok"), "{out}\n{err}");
}
