//! rlx-dist: collectives for data-parallel training.
//!
//! [`Collective`] is the interface a training step talks to (all-reduce, broadcast, barrier),
//! shaped after MPI's and NCCL's common subset so that a GPU implementation can follow. Three
//! implementations: [`Local`] (one process, every op a no-op), [`thread_group`] (ranks as threads
//! of one process, for tests without MPI) and [`Mpi`] (rsmpi, behind the cargo feature `mpi`; the
//! default build needs no MPI library and `Mpi::init` says how to get it).
//!
//! Every collective is bounded by a timeout ([`DEFAULT_TIMEOUT`] unless set): a rank that died or
//! stalled makes the others fail with [`DistError::Timeout`] naming the op and the rank (under MPI
//! the job is then aborted, since a pending MPI collective cannot be cancelled) instead of hanging.
#![warn(missing_docs)]

mod local;
#[cfg(feature = "mpi")]
mod mpi_impl;
mod threads;

pub use local::Local;
#[cfg(feature = "mpi")]
pub use mpi_impl::Mpi;
pub use threads::{ThreadCollective, thread_group};

use std::time::Duration;

/// The timeout of one collective unless configured: long enough for rank 0's checkpoint and
/// sample writing between steps, short enough that a dead peer is noticed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The exit code of a job aborted by the watchdog (a collective timed out).
pub const TIMEOUT_EXIT_CODE: i32 = 124;

/// Errors of a collective, naming the op, the rank and the sizes involved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DistError {
    /// MPI support was not compiled in.
    #[error(
        "this build has no MPI support: rebuild with --features mpi (rlx-cli: cargo build -p rlx-cli --features mpi; needs OpenMPI: apt-get install openmpi-bin libopenmpi-dev libclang-dev)"
    )]
    NotBuilt,
    /// MPI could not be initialized.
    #[error("MPI init: {0}")]
    Init(String),
    /// The op did not complete within the timeout: another rank died, stalled or called a
    /// different op.
    #[error(
        "{op} ({detail}) on rank {rank} of {size} did not complete within {secs:.1} s: a rank died, stalled or called another collective"
    )]
    Timeout {
        /// The collective.
        op: &'static str,
        /// What it was moving (element count, root).
        detail: String,
        /// This rank.
        rank: usize,
        /// Ranks in the group.
        size: usize,
        /// The timeout.
        secs: f64,
    },
    /// Ranks passed buffers of different lengths to one all-reduce.
    #[error("{op} on rank {rank}: {got} elements here but {expected} on rank {other}")]
    SizeMismatch {
        /// The collective.
        op: &'static str,
        /// The rank whose length differs.
        rank: usize,
        /// Its length.
        got: usize,
        /// The rank it was compared with.
        other: usize,
        /// That rank's length.
        expected: usize,
    },
    /// Ranks called different collectives at the same point.
    #[error(
        "rank {rank} called {op} while rank {other} called {other_op}: every rank must call the same collectives in the same order"
    )]
    OpMismatch {
        /// This rank.
        rank: usize,
        /// Its op.
        op: &'static str,
        /// Another rank.
        other: usize,
        /// That rank's op.
        other_op: &'static str,
    },
    /// A broadcast root that is not a rank.
    #[error("{op} on rank {rank}: root {root} is not a rank of a group of {size}")]
    BadRoot {
        /// The collective.
        op: &'static str,
        /// This rank.
        rank: usize,
        /// The root asked for.
        root: usize,
        /// Ranks in the group.
        size: usize,
    },
    /// The group can no longer complete collectives (a rank left or timed out).
    #[error("{op} on rank {rank} of {size}: the group is broken: {reason}")]
    Broken {
        /// The collective.
        op: &'static str,
        /// This rank.
        rank: usize,
        /// Ranks in the group.
        size: usize,
        /// What broke it.
        reason: String,
    },
}

/// Result of a collective.
pub type Result<T> = std::result::Result<T, DistError>;

/// Collective communication among `size()` ranks. Every rank calls the same ops in the same
/// order; each op returns once every rank has joined it, or fails (or, under MPI, aborts the job)
/// after the timeout.
pub trait Collective {
    /// This process's (or thread's) rank, `0..size()`.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// A short name of the implementation ("local", "threads", "mpi") for logs.
    fn kind(&self) -> &'static str;
    /// The timeout of each collective.
    fn timeout(&self) -> Duration;
    /// Replaces every element of `buf` by its sum over the ranks; every rank gets the same bits.
    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<()>;
    /// Replaces every element of `buf` by its mean over the ranks (the sum, then divided by the
    /// rank count on every rank alike).
    fn all_reduce_mean_f32(&self, buf: &mut [f32]) -> Result<()> {
        self.all_reduce_sum_f32(buf)?;
        let n = self.size() as f32;
        if n != 1.0 {
            buf.iter_mut().for_each(|x| *x /= n);
        }
        Ok(())
    }
    /// Makes `buf` on every rank a copy of `root`'s (its length included).
    fn broadcast_bytes(&self, root: usize, buf: &mut Vec<u8>) -> Result<()>;
    /// Returns once every rank has called it.
    fn barrier(&self) -> Result<()>;
    /// Ends the whole job with exit code `code` (MPI_Abort under MPI): for a rank that cannot
    /// go on, so that the others do not wait for it.
    fn abort(&self, code: i32) -> !;
}

/// Shared ownership passes every op through: a caller can keep a handle (to abort the job on its
/// own error) while a training step owns another.
impl<C: Collective + ?Sized> Collective for std::rc::Rc<C> {
    fn rank(&self) -> usize {
        (**self).rank()
    }
    fn size(&self) -> usize {
        (**self).size()
    }
    fn kind(&self) -> &'static str {
        (**self).kind()
    }
    fn timeout(&self) -> Duration {
        (**self).timeout()
    }
    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<()> {
        (**self).all_reduce_sum_f32(buf)
    }
    fn all_reduce_mean_f32(&self, buf: &mut [f32]) -> Result<()> {
        (**self).all_reduce_mean_f32(buf)
    }
    fn broadcast_bytes(&self, root: usize, buf: &mut Vec<u8>) -> Result<()> {
        (**self).broadcast_bytes(root, buf)
    }
    fn barrier(&self) -> Result<()> {
        (**self).barrier()
    }
    fn abort(&self, code: i32) -> ! {
        (**self).abort(code)
    }
}

/// A 64-bit FNV-1a hash of `bytes` (to compare params across ranks without moving them).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The MPI job's size from the launcher's environment (OpenMPI, MPICH/Hydra, Slurm), if the
/// process was started by one: to decide to run distributed without a flag.
pub fn launcher_world_size() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"]
        .iter()
        .find_map(|v| std::env::var(v).ok().and_then(|s| s.parse().ok()))
}

#[cfg(not(feature = "mpi"))]
/// MPI, absent from this build: `init` returns [`DistError::NotBuilt`].
#[derive(Debug)]
pub struct Mpi {
    _never: std::convert::Infallible,
}

#[cfg(not(feature = "mpi"))]
impl Mpi {
    /// Always [`DistError::NotBuilt`]: this build has no MPI (feature `mpi`).
    pub fn init(_timeout: Duration) -> Result<Mpi> {
        Err(DistError::NotBuilt)
    }
}

#[cfg(not(feature = "mpi"))]
impl Collective for Mpi {
    fn rank(&self) -> usize {
        match self._never {}
    }
    fn size(&self) -> usize {
        match self._never {}
    }
    fn kind(&self) -> &'static str {
        match self._never {}
    }
    fn timeout(&self) -> Duration {
        match self._never {}
    }
    fn all_reduce_sum_f32(&self, _: &mut [f32]) -> Result<()> {
        match self._never {}
    }
    fn broadcast_bytes(&self, _: usize, _: &mut Vec<u8>) -> Result<()> {
        match self._never {}
    }
    fn barrier(&self) -> Result<()> {
        match self._never {}
    }
    fn abort(&self, _: i32) -> ! {
        match self._never {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_differs_on_one_bit() {
        assert_ne!(fnv1a(&[0, 0, 0, 0]), fnv1a(&[0, 0, 0, 1]));
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    }

    #[cfg(not(feature = "mpi"))]
    #[test]
    fn mpi_without_the_feature_says_how_to_get_it() {
        let e = Mpi::init(DEFAULT_TIMEOUT).unwrap_err();
        assert_eq!(e, DistError::NotBuilt);
        assert!(e.to_string().contains("--features mpi"), "{e}");
    }
}
