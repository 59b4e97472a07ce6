//! A per-kernel timer, on when `RLX_PROFILE=1`: each kernel's time is summed by op name, and
//! `report()` prints the table (the bench calls it). Off, kernels are returned unwrapped.

use super::{Kernel, KernelCtx};
use crate::exec::Bufs;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// Totals per op name: (calls, seconds).
static TOTALS: Mutex<Option<HashMap<String, (u64, f64)>>> = Mutex::new(None);

/// Whether `RLX_PROFILE` is set to a non-empty value other than 0 (read once).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| rlx_driver::config().cpu.profile)
}

/// Wraps `k` with a timer keyed by the op name and output shape when profiling is on.
pub fn wrap(ctx: &KernelCtx<'_>, mut k: Kernel) -> Kernel {
    if !enabled() {
        return k;
    }
    let key = format!("{} {}", ctx.op.def().name(), ctx.out);
    Box::new(move |b: &Bufs<'_>| {
        let t = Instant::now();
        let r = k(b);
        let dt = t.elapsed().as_secs_f64();
        let mut g = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
        let e = g.get_or_insert_with(HashMap::new).entry(key.clone()).or_insert((0, 0.0));
        e.0 += 1;
        e.1 += dt;
        r
    })
}

/// Clears the totals.
pub fn reset() {
    *TOTALS.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// The totals as a table sorted by time, with each line's share; empty when profiling is off.
pub fn report() -> String {
    let g = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(m) = g.as_ref() else { return String::new() };
    let mut rows: Vec<_> = m.iter().collect();
    rows.sort_by(|a, b| b.1.1.total_cmp(&a.1.1));
    let total: f64 = rows.iter().map(|r| r.1.1).sum();
    let mut s = format!("kernel profile: {:.2} ms in all\n", total * 1e3);
    for (k, (n, t)) in rows {
        s += &format!("  {:>9.3} ms {:>5.1}% {:>6} calls  {k}\n", t * 1e3, 100.0 * t / total.max(1e-12), n);
    }
    s
}
