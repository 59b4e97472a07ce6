//! Prometheus metrics, kept by hand (counters and fixed-bucket histograms) rather than through a
//! metrics crate: a handful of series does not justify another dependency tree.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the latency histograms: 1 ms to 10 s.
const BUCKETS: [f64; 14] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, f64::INFINITY];

/// A cumulative histogram with `BUCKETS`.
#[derive(Debug, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        if let Some(i) = BUCKETS.iter().position(|&b| secs <= b) {
            self.counts[i] += 1;
        }
        self.sum += secs;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut acc = 0;
        for (b, c) in BUCKETS.iter().zip(self.counts) {
            acc += c;
            let le = if b.is_infinite() { "+Inf".to_string() } else { b.to_string() };
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {acc}");
        }
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", self.sum, self.count);
    }
}

/// The server's counters, shared by the router and the engine.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    prompt_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    cancelled: AtomicU64,
    queued: AtomicU64,
    running: AtomicU64,
    pages_used: AtomicU64,
    pages_total: AtomicU64,
    preemptions: AtomicU64,
    steps: AtomicU64,
    ttft: Mutex<Histogram>,
    itl: Mutex<Histogram>,
}

impl Metrics {
    /// Counts a finished HTTP request by endpoint and status.
    pub fn request(&self, endpoint: &str, status: u16) {
        let mut m = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((endpoint.to_string(), status)).or_default() += 1;
    }

    /// Counts the prompt tokens of a request that started.
    pub fn prompt_tokens(&self, n: usize) {
        self.prompt_tokens.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts one generated token.
    pub fn token(&self) {
        self.generated_tokens.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request cancelled because its client went away or the server stopped.
    pub fn cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests waiting in the queue: +1 on submit, -1 when the engine takes one.
    pub fn queued(&self, delta: i64) {
        add_signed(&self.queued, delta);
    }

    /// Requests the engine is running.
    pub fn running(&self, delta: i64) {
        add_signed(&self.running, delta);
    }

    /// Sets the requests the engine is running.
    pub fn set_running(&self, n: usize) {
        self.running.store(n as u64, Ordering::Relaxed);
    }

    /// Sets the KV-cache pages in use and in the pool.
    pub fn kv_pages(&self, used: usize, total: usize) {
        self.pages_used.store(used as u64, Ordering::Relaxed);
        self.pages_total.store(total as u64, Ordering::Relaxed);
    }

    /// Sets the preemptions (sequences whose pages were taken back, recomputed later) and the
    /// forward steps run so far.
    pub fn set_engine_counts(&self, preemptions: u64, steps: u64) {
        self.preemptions.store(preemptions, Ordering::Relaxed);
        self.steps.store(steps, Ordering::Relaxed);
    }

    /// The queue depth now.
    pub fn queue_depth(&self) -> u64 {
        self.queued.load(Ordering::Relaxed)
    }

    /// Time from submit to the first token.
    pub fn time_to_first_token(&self, d: Duration) {
        self.ttft.lock().unwrap_or_else(|e| e.into_inner()).observe(d.as_secs_f64());
    }

    /// Time between two tokens of one request.
    pub fn inter_token(&self, d: Duration) {
        self.itl.lock().unwrap_or_else(|e| e.into_inner()).observe(d.as_secs_f64());
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out += "# HELP rlx_requests_total HTTP requests by endpoint and status.\n# TYPE rlx_requests_total counter\n";
        for ((ep, st), n) in self.requests.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = writeln!(out, "rlx_requests_total{{endpoint=\"{ep}\",status=\"{st}\"}} {n}");
        }
        let counters = [
            ("rlx_prompt_tokens_total", "Prompt tokens prefilled.", &self.prompt_tokens),
            ("rlx_generated_tokens_total", "Tokens generated.", &self.generated_tokens),
            ("rlx_requests_cancelled_total", "Requests cancelled (client gone or shutdown).", &self.cancelled),
            (
                "rlx_preemptions_total",
                "Sequences preempted for lack of KV pages (recomputed later).",
                &self.preemptions,
            ),
            ("rlx_engine_steps_total", "Forward steps run (each covers every running request).", &self.steps),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", v.load(Ordering::Relaxed));
        }
        let gauges = [
            ("rlx_queue_depth", "Requests waiting for the engine.", &self.queued),
            ("rlx_requests_running", "Requests the engine is running.", &self.running),
            ("rlx_kv_pages_used", "KV-cache pages held by running sequences.", &self.pages_used),
            ("rlx_kv_pages_total", "KV-cache pages in the pool.", &self.pages_total),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}", v.load(Ordering::Relaxed));
        }
        self.ttft.lock().unwrap_or_else(|e| e.into_inner()).write(
            &mut out,
            "rlx_time_to_first_token_seconds",
            "Seconds from submit to the first generated token.",
        );
        self.itl.lock().unwrap_or_else(|e| e.into_inner()).write(
            &mut out,
            "rlx_inter_token_latency_seconds",
            "Seconds between consecutive tokens of a request.",
        );
        out
    }
}

fn add_signed(a: &AtomicU64, delta: i64) {
    if delta >= 0 {
        a.fetch_add(delta as u64, Ordering::Relaxed);
    } else {
        // Saturating: a gauge never wraps below zero.
        let _ = a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(delta.unsigned_abs())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_has_every_series() {
        let m = Metrics::default();
        m.request("/v1/completions", 200);
        m.queued(1);
        m.queued(-2);
        m.time_to_first_token(Duration::from_millis(3));
        let t = m.render();
        assert!(t.contains("rlx_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 1"), "{t}");
        assert!(t.contains("rlx_queue_depth 0"));
        assert!(t.contains("rlx_time_to_first_token_seconds_bucket{le=\"0.005\"} 1"));
        assert!(t.contains("rlx_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1"));
        assert!(t.contains("rlx_inter_token_latency_seconds_count 0"));
    }
}
