//! Ranks as threads of one process: the collectives of a test that needs no MPI.
//!
//! Each op is a rendezvous: every rank leaves its contribution in its slot, and the last to
//! arrive combines them in rank order (so sums are reproducible bit for bit, and for two ranks
//! equal to MPI's `a + b`) and wakes the others.

use crate::{Collective, DistError, Result};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Debug)]
enum Payload {
    F32(Vec<f32>),
    Bytes(Vec<u8>),
    Unit,
}

#[derive(Debug)]
struct Arrival {
    op: &'static str,
    root: usize,
    payload: Payload,
}

#[derive(Debug, Default)]
struct State {
    /// Rounds completed so far.
    round: u64,
    slots: Vec<Option<Arrival>>,
    arrived: usize,
    /// The outcome of the last completed round: kept until the next completes, which needs
    /// every rank, so every rank has read it by then.
    result: Option<Arc<Result<Payload>>>,
    /// Set when a rank timed out, aborted or left: later ops fail at once.
    broken: Option<String>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A rank that panicked holding the lock leaves consistent state (it only sets fields).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One rank of a [`thread_group`]: `Send + Sync`, to be moved to its own thread.
#[derive(Debug)]
pub struct ThreadCollective {
    rank: usize,
    size: usize,
    timeout: Duration,
    shared: Arc<Shared>,
}

/// `n` ranks that communicate in process memory; give each to its own thread.
pub fn thread_group(n: usize) -> Vec<ThreadCollective> {
    let shared = Arc::new(Shared::default());
    shared.lock().slots = (0..n).map(|_| None).collect();
    (0..n)
        .map(|rank| ThreadCollective { rank, size: n, timeout: crate::DEFAULT_TIMEOUT, shared: shared.clone() })
        .collect()
}

impl ThreadCollective {
    /// The same rank with each collective bounded by `timeout` instead.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn broken(&self, op: &'static str, reason: &str) -> DistError {
        DistError::Broken { op, rank: self.rank, size: self.size, reason: reason.to_string() }
    }

    /// Joins one round with `payload`; returns the combined outcome once every rank has joined.
    fn join(&self, op: &'static str, detail: String, root: usize, payload: Payload) -> Result<Arc<Result<Payload>>> {
        let mut st = self.shared.lock();
        if let Some(reason) = &st.broken {
            return Err(self.broken(op, reason));
        }
        let round = st.round;
        st.slots[self.rank] = Some(Arrival { op, root, payload });
        st.arrived += 1;
        if st.arrived == self.size {
            let arrivals: Vec<Arrival> = st.slots.iter_mut().filter_map(Option::take).collect();
            let out = Arc::new(combine(arrivals));
            st.result = Some(out.clone());
            st.round += 1;
            st.arrived = 0;
            self.shared.cv.notify_all();
            return Ok(out);
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            // Completion first: a rank may have left right after the last round completed.
            if st.round != round {
                return st.result.clone().ok_or_else(|| self.broken(op, "a round completed without a result"));
            }
            if let Some(reason) = &st.broken {
                return Err(self.broken(op, reason));
            }
            let now = Instant::now();
            if now >= deadline {
                st.broken = Some(format!("rank {} timed out in {op}", self.rank));
                self.shared.cv.notify_all();
                let secs = self.timeout.as_secs_f64();
                return Err(DistError::Timeout { op, detail, rank: self.rank, size: self.size, secs });
            }
            st = self.shared.cv.wait_timeout(st, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

/// The outcome of one round from every rank's arrival, in rank order.
fn combine(arrivals: Vec<Arrival>) -> Result<Payload> {
    let first = &arrivals[0];
    for (i, a) in arrivals.iter().enumerate() {
        if a.op != first.op {
            return Err(DistError::OpMismatch { rank: i, op: a.op, other: 0, other_op: first.op });
        }
    }
    match first.payload {
        Payload::F32(_) => {
            let mut it = arrivals.into_iter().enumerate();
            let Some((_, Arrival { payload: Payload::F32(mut sum), .. })) = it.next() else {
                unreachable!("checked above")
            };
            for (i, a) in it {
                let Payload::F32(v) = a.payload else { unreachable!("one op, one payload kind") };
                if v.len() != sum.len() {
                    let (op, got, expected) = (a.op, v.len(), sum.len());
                    return Err(DistError::SizeMismatch { op, rank: i, got, other: 0, expected });
                }
                sum.iter_mut().zip(&v).for_each(|(s, x)| *s += x);
            }
            Ok(Payload::F32(sum))
        }
        Payload::Bytes(_) => {
            let root = first.root;
            if let Some((i, a)) = arrivals.iter().enumerate().find(|(_, a)| a.root != root) {
                let e = DistError::BadRoot { op: a.op, rank: i, root: a.root, size: arrivals.len() };
                return Err(e);
            }
            match arrivals.into_iter().nth(root) {
                Some(Arrival { payload: Payload::Bytes(b), .. }) => Ok(Payload::Bytes(b)),
                _ => unreachable!("roots are checked against the size before joining"),
            }
        }
        Payload::Unit => Ok(Payload::Unit),
    }
}

impl Collective for ThreadCollective {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn kind(&self) -> &'static str {
        "threads"
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<()> {
        let op = "all_reduce_sum_f32";
        let out = self.join(op, format!("{} f32", buf.len()), 0, Payload::F32(buf.to_vec()))?;
        match &*out {
            Ok(Payload::F32(sum)) => {
                buf.copy_from_slice(sum);
                Ok(())
            }
            Ok(_) => Err(self.broken(op, "another rank's op returned another payload")),
            Err(e) => Err(e.clone()),
        }
    }

    fn broadcast_bytes(&self, root: usize, buf: &mut Vec<u8>) -> Result<()> {
        let op = "broadcast_bytes";
        if root >= self.size {
            return Err(DistError::BadRoot { op, rank: self.rank, root, size: self.size });
        }
        let mine = if self.rank == root { buf.clone() } else { vec![] };
        let out = self.join(op, format!("root {root}"), root, Payload::Bytes(mine))?;
        match &*out {
            Ok(Payload::Bytes(b)) => {
                buf.clone_from(b);
                Ok(())
            }
            Ok(_) => Err(self.broken(op, "another rank's op returned another payload")),
            Err(e) => Err(e.clone()),
        }
    }

    fn barrier(&self) -> Result<()> {
        match &*self.join("barrier", String::new(), 0, Payload::Unit)? {
            Ok(_) => Ok(()),
            Err(e) => Err(e.clone()),
        }
    }

    /// Breaks the group (the other ranks' ops fail at once) and panics this thread: the
    /// in-process stand-in for MPI_Abort, which would end the test process.
    fn abort(&self, code: i32) -> ! {
        let mut st = self.shared.lock();
        st.broken = Some(format!("rank {} aborted with code {code}", self.rank));
        self.shared.cv.notify_all();
        drop(st);
        panic!("rank {} of {} aborted with code {code}", self.rank, self.size)
    }
}

impl Drop for ThreadCollective {
    /// A rank that goes away breaks the group, so that a rank waiting for it fails now rather
    /// than at its timeout.
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if st.broken.is_none() {
            st.broken = Some(format!("rank {} left the group", self.rank));
        }
        self.shared.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_threads<T: Send + 'static>(
        group: Vec<ThreadCollective>,
        f: impl Fn(&ThreadCollective) -> T + Send + Sync + 'static,
    ) -> Vec<T> {
        let f = Arc::new(f);
        let hs: Vec<_> = group
            .into_iter()
            .map(|c| {
                let f = f.clone();
                std::thread::spawn(move || f(&c))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn all_reduce_sums_in_rank_order_and_every_rank_gets_the_same_bits() {
        let outs = on_threads(thread_group(3), |c| {
            let r = c.rank() as f32;
            let mut v = vec![r, 0.1 * (r + 1.0), 1e8];
            let mut w = v.clone();
            c.all_reduce_sum_f32(&mut v).unwrap();
            c.all_reduce_mean_f32(&mut w).unwrap();
            (v, w)
        });
        let sum = ((0.1f32 + 0.2f32) + 0.3f32, 3e8f32);
        for (v, w) in &outs {
            assert_eq!(v, &vec![3.0, sum.0, sum.1]);
            assert_eq!(w, &vec![1.0, sum.0 / 3.0, 1e8]);
            assert_eq!(
                v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                outs[0].0.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn broadcast_copies_the_roots_bytes_and_length() {
        let outs = on_threads(thread_group(3), |c| {
            let mut b = if c.rank() == 1 { b"from one".to_vec() } else { vec![9; c.rank() * 20] };
            c.broadcast_bytes(1, &mut b).unwrap();
            c.barrier().unwrap();
            b
        });
        assert!(outs.iter().all(|b| b == b"from one"));
    }

    #[test]
    fn mismatched_sizes_and_ops_are_errors_on_every_rank() {
        let outs = on_threads(thread_group(2), |c| {
            let mut v = vec![0.0f32; 2 + c.rank()];
            let sizes = c.all_reduce_sum_f32(&mut v).unwrap_err();
            let ops = if c.rank() == 0 { c.barrier() } else { c.all_reduce_sum_f32(&mut v) }.unwrap_err();
            (sizes, ops)
        });
        for (sizes, ops) in outs {
            assert!(matches!(sizes, DistError::SizeMismatch { rank: 1, got: 3, expected: 2, .. }), "{sizes}");
            assert!(matches!(ops, DistError::OpMismatch { .. }), "{ops}");
            assert!(ops.to_string().contains("barrier") && ops.to_string().contains("all_reduce_sum_f32"), "{ops}");
        }
        let mut g = thread_group(2);
        let e = g[0].broadcast_bytes(2, &mut vec![]).unwrap_err();
        assert!(matches!(e, DistError::BadRoot { root: 2, size: 2, .. }), "{e}");
        g.clear();
    }

    #[test]
    fn a_rank_that_never_comes_times_out_and_one_that_leaves_breaks_the_group() {
        let g: Vec<_> = thread_group(2).into_iter().map(|c| c.with_timeout(Duration::from_millis(200))).collect();
        let t = Instant::now();
        let e = g[0].all_reduce_sum_f32(&mut [1.0]).unwrap_err();
        assert!(t.elapsed() >= Duration::from_millis(200) && t.elapsed() < Duration::from_secs(5));
        assert!(matches!(e, DistError::Timeout { rank: 0, size: 2, .. }), "{e}");
        assert!(e.to_string().contains("all_reduce_sum_f32 (1 f32) on rank 0 of 2"), "{e}");
        // The group stays broken: rank 1 fails at once rather than waiting for rank 0.
        let e = g[1].barrier().unwrap_err();
        assert!(e.to_string().contains("rank 0 timed out"), "{e}");

        let mut g = thread_group(2);
        let one = g.pop().unwrap();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(one);
        });
        let t = Instant::now();
        let e = g[0].barrier().unwrap_err();
        h.join().unwrap();
        assert!(t.elapsed() < Duration::from_secs(5), "waited for the timeout");
        assert!(e.to_string().contains("rank 1 left the group"), "{e}");
    }

    #[test]
    fn thread_collectives_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<ThreadCollective>();
        check::<crate::Local>();
    }
}
