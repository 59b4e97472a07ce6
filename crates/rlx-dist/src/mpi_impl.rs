//! MPI through rsmpi: the process's `MPI_COMM_WORLD`.
//!
//! Each collective is started non-blocking and polled until done or the timeout: a blocking
//! MPI call waiting for a dead rank could hang for good, and a started collective cannot be
//! cancelled, so on expiry the error is printed and the job aborted (`MPI_Abort`).

use crate::{Collective, DistError, Result, TIMEOUT_EXIT_CODE};
use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::request::{Request, Scope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::time::{Duration, Instant};

/// Elements per MPI call: counts are C ints, so longer buffers go in chunks.
const CHUNK: usize = 1 << 28;

/// The ranks of `MPI_COMM_WORLD` (one per process started by `mpirun`).
pub struct Mpi {
    world: SimpleCommunicator,
    rank: usize,
    size: usize,
    timeout: Duration,
    /// Finalizes MPI when dropped: declared last so that it is dropped last.
    _universe: Universe,
}

impl std::fmt::Debug for Mpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mpi")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Mpi {
    /// Initializes MPI (once per process) with each collective bounded by `timeout`.
    pub fn init(timeout: Duration) -> Result<Mpi> {
        let universe =
            mpi::initialize().ok_or_else(|| DistError::Init("MPI is already initialized in this process".into()))?;
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        Ok(Mpi { world, rank, size, timeout, _universe: universe })
    }

    /// Polls `req` until it completes; past the timeout, prints why and aborts the job.
    fn wait<'a, D: ?Sized, S: Scope<'a>>(&self, op: &'static str, detail: &dyn Fn() -> String, req: Request<'a, D, S>) {
        let start = Instant::now();
        let mut req = req;
        let mut polls = 0u32;
        loop {
            req = match req.test() {
                Ok(_) => return,
                Err(r) => r,
            };
            if start.elapsed() >= self.timeout {
                let secs = self.timeout.as_secs_f64();
                let e = DistError::Timeout { op, detail: detail(), rank: self.rank, size: self.size, secs };
                eprintln!("error: {e}; aborting the MPI job");
                self.world.abort(TIMEOUT_EXIT_CODE)
            }
            // Spin briefly (steps are fast), then sleep so that a rank waiting on a slow peer
            // leaves it the core.
            polls += 1;
            if polls < 2000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }
}

impl Collective for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn kind(&self) -> &'static str {
        "mpi"
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<()> {
        if self.size == 1 {
            return Ok(());
        }
        let total = buf.len();
        for chunk in buf.chunks_mut(CHUNK) {
            let send = chunk.to_vec();
            mpi::request::scope(|scope| {
                let req = self.world.immediate_all_reduce_into(scope, &send[..], chunk, SystemOperation::sum());
                self.wait("all_reduce_sum_f32", &|| format!("{total} f32"), req);
            });
        }
        Ok(())
    }

    fn broadcast_bytes(&self, root: usize, buf: &mut Vec<u8>) -> Result<()> {
        let op = "broadcast_bytes";
        if root >= self.size {
            return Err(DistError::BadRoot { op, rank: self.rank, root, size: self.size });
        }
        let root_proc = self.world.process_at_rank(root as i32);
        let mut len = [buf.len() as u64];
        mpi::request::scope(|scope| {
            let req = root_proc.immediate_broadcast_into(scope, &mut len[..]);
            self.wait(op, &|| format!("length, root {root}"), req);
        });
        let Ok(n) = usize::try_from(len[0]) else {
            return Err(DistError::Init(format!("{op}: root {root} sent a length of {} bytes", len[0])));
        };
        buf.resize(n, 0);
        for chunk in buf.chunks_mut(CHUNK) {
            mpi::request::scope(|scope| {
                let req = root_proc.immediate_broadcast_into(scope, chunk);
                self.wait(op, &|| format!("{n} bytes, root {root}"), req);
            });
        }
        Ok(())
    }

    fn barrier(&self) -> Result<()> {
        let req = self.world.immediate_barrier();
        self.wait("barrier", &String::new, req);
        Ok(())
    }

    fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }
}
