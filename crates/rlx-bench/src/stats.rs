//! Timing helpers: medians of repeated runs.

use std::time::Instant;

/// Collects run times.
#[derive(Default, Clone)]
pub struct Timer {
    /// Each run's time in milliseconds.
    pub ms: Vec<f64>,
}

impl Timer {
    /// Times one call of `f`.
    pub fn time<E>(&mut self, f: impl FnOnce() -> Result<(), E>) -> Result<(), E> {
        let t = Instant::now();
        f()?;
        self.ms.push(t.elapsed().as_secs_f64() * 1e3);
        Ok(())
    }

    /// The median in milliseconds (NaN when empty).
    pub fn median_ms(&self) -> f64 {
        median(&self.ms)
    }
}

/// The median of `v` (NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 { s[n / 2] } else { 0.5 * (s[n / 2 - 1] + s[n / 2]) }
}
