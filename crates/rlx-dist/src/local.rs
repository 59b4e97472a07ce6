//! One process alone: every collective is the identity.

use crate::{Collective, DistError, Result};
use std::time::Duration;

/// A group of one rank: all-reduce and broadcast leave buffers as they are.
#[derive(Debug, Clone, Copy, Default)]
pub struct Local;

impl Collective for Local {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        1
    }

    fn kind(&self) -> &'static str {
        "local"
    }

    fn timeout(&self) -> Duration {
        crate::DEFAULT_TIMEOUT
    }

    fn all_reduce_sum_f32(&self, _buf: &mut [f32]) -> Result<()> {
        Ok(())
    }

    fn broadcast_bytes(&self, root: usize, _buf: &mut Vec<u8>) -> Result<()> {
        if root != 0 {
            return Err(DistError::BadRoot { op: "broadcast_bytes", rank: 0, root, size: 1 });
        }
        Ok(())
    }

    fn barrier(&self) -> Result<()> {
        Ok(())
    }

    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_ops_leave_buffers_alone() {
        let c = Local;
        assert_eq!((c.rank(), c.size()), (0, 1));
        let mut v = vec![1.5f32, -2.0];
        c.all_reduce_sum_f32(&mut v).unwrap();
        c.all_reduce_mean_f32(&mut v).unwrap();
        assert_eq!(v, vec![1.5, -2.0]);
        let mut b = b"abc".to_vec();
        c.broadcast_bytes(0, &mut b).unwrap();
        assert_eq!(b, b"abc");
        assert!(matches!(c.broadcast_bytes(1, &mut b), Err(DistError::BadRoot { root: 1, .. })));
        c.barrier().unwrap();
    }
}
