//! `Device::Auto`: run a graph on the available device with the lowest modelled time.
//!
//! The model is three numbers per device, measured once per process by a short probe on first
//! use (`DeviceProfile::measure`): f32 matmul throughput, elementwise bandwidth, and the fixed
//! cost of one run (dispatch, submit, copies in and out). A graph's time on a device is its
//! work (`GraphWork`: flops, bytes, kernels) through those three; the cheapest device wins, and
//! the choice says why with every device's estimate.

use crate::Session;
use rlx_driver::Device;
use rlx_ir::{DType, Graph, Op, Result, Shape};
use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Instant;

/// The work of a graph, as the device model counts it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GraphWork {
    /// Floating-point operations (2 per multiply-add in contractions, 1 per element elsewhere).
    pub flops: f64,
    /// Bytes moved: every node's output once, params and inputs read once.
    pub bytes: f64,
    /// Nodes that are not inputs, params or constants (kernels to launch).
    pub kernels: usize,
}

impl GraphWork {
    /// The work of `g` (static shapes; dynamic dims count as 1).
    pub fn of(g: &Graph) -> GraphWork {
        let mut w = GraphWork::default();
        let numel = |s: &Shape| s.fixed_dims().map_or(1.0, |d| d.iter().product::<usize>() as f64);
        let dim = |s: &Shape, from_end: usize| {
            s.fixed_dims().and_then(|d| d.len().checked_sub(from_end).map(|i| d[i])).unwrap_or(1) as f64
        };
        for n in g.nodes() {
            let ins: Vec<&Shape> = n.inputs.iter().map(|x| &g.nodes()[x.index()].ty).collect();
            let out = numel(&n.ty);
            w.bytes += n.ty.size_bytes().unwrap_or(0) as f64;
            if n.inputs.is_empty() {
                continue;
            }
            w.kernels += 1;
            w.flops += match &n.op {
                Op::MatMul(m) => 2.0 * out * dim(ins[0], if m.transpose_a { 2 } else { 1 }),
                Op::FusedMatMul(_) | Op::QMatMul(_) | Op::StackedMatMul(_) => 2.0 * out * dim(ins[0], 1),
                // Scores and the weighted sum: 2 products of s x t x d per head.
                Op::Attention(_) => 4.0 * out * ins.get(1).map_or(1.0, |k| dim(k, 2)),
                Op::Conv2d(_) => 2.0 * out * ins.get(1).map_or(1.0, |k| numel(k) / dim(k, 4).max(1.0)),
                _ => out,
            };
        }
        w
    }
}

/// What the model knows of one device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceProfile {
    /// f32 matmul throughput, FLOP/s.
    pub flops_per_s: f64,
    /// Elementwise bandwidth, bytes/s.
    pub bytes_per_s: f64,
    /// The fixed cost of one run, seconds.
    pub run_overhead_s: f64,
}

impl DeviceProfile {
    /// The modelled seconds of one run of `w`.
    pub fn seconds(&self, w: &GraphWork) -> f64 {
        self.run_overhead_s + w.flops / self.flops_per_s + w.bytes / self.bytes_per_s
    }

    /// Measures `device` with three small graphs (best of a few runs each, after a warm-up):
    /// a 256^3 matmul, an add of two 2^20-element vectors, and an add of 8 elements.
    pub fn measure(device: Device) -> Result<DeviceProfile> {
        let session = Session::new(device).with_options(crate::CompileOptions::builtin());
        let time = |g: Graph, feeds: &[(&str, Vec<f32>)]| -> Result<f64> {
            let mut c = session.compile(g)?;
            let named: Vec<(&str, &[f32])> = feeds.iter().map(|(n, v)| (*n, v.as_slice())).collect();
            c.run(&named)?;
            let mut best = f64::INFINITY;
            for _ in 0..5 {
                let t = Instant::now();
                c.run(&named)?;
                best = best.min(t.elapsed().as_secs_f64());
            }
            Ok(best.max(1e-9))
        };
        let binary = |name: &str, dims: &[usize], matmul: bool| {
            let mut g = Graph::new(name);
            let a = g.input("a", Shape::new(dims, DType::F32));
            let b = g.input("b", Shape::new(dims, DType::F32));
            let y = if matmul { g.matmul(a, b) } else { g.add(a, b) };
            g.set_outputs(vec![y]);
            g
        };
        let feeds = |n: usize| vec![("a", vec![0.5f32; n]), ("b", vec![0.25f32; n])];
        let overhead = time(binary("probe-overhead", &[8], false), &feeds(8))?;
        let (m, v) = (256usize, 1usize << 20);
        let matmul = time(binary("probe-matmul", &[m, m], true), &feeds(m * m))?;
        let add = time(binary("probe-add", &[v], false), &feeds(v))?;
        Ok(DeviceProfile {
            flops_per_s: 2.0 * (m * m * m) as f64 / (matmul - overhead).max(matmul * 0.1),
            bytes_per_s: (3 * 4 * v) as f64 / (add - overhead).max(add * 0.1),
            run_overhead_s: overhead,
        })
    }
}

/// The device `Device::Auto` chose for a graph, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoChoice {
    /// The device.
    pub device: Device,
    /// The graph's work.
    pub work: GraphWork,
    /// Each candidate: its modelled seconds, or why it was not a candidate.
    pub candidates: Vec<(Device, std::result::Result<f64, String>)>,
}

impl fmt::Display for AutoChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Device::Auto chose {} for {:.3} GFLOP, {:.1} MB, {} kernels:",
            self.device,
            self.work.flops / 1e9,
            self.work.bytes / 1e6,
            self.work.kernels
        )?;
        for (d, c) in &self.candidates {
            match c {
                Ok(s) => write!(f, " {d} {:.3} ms;", s * 1e3)?,
                Err(why) => write!(f, " {d} not used ({why});")?,
            }
        }
        Ok(())
    }
}

/// Picks the device with the lowest modelled time for `work` among `profiles` (an error per
/// device that could not be profiled is carried into the choice's explanation). None when no
/// device has a profile.
pub fn choose(
    work: GraphWork,
    profiles: &[(Device, std::result::Result<DeviceProfile, String>)],
) -> Option<AutoChoice> {
    let candidates: Vec<(Device, std::result::Result<f64, String>)> =
        profiles.iter().map(|(d, p)| (*d, p.as_ref().map(|p| p.seconds(&work)).map_err(|e| e.clone()))).collect();
    let device =
        candidates.iter().filter_map(|(d, s)| s.as_ref().ok().map(|s| (*d, *s))).min_by(|a, b| a.1.total_cmp(&b.1))?.0;
    Some(AutoChoice { device, work, candidates })
}

/// Devices `Device::Auto` considers: every concrete device, available ones measured (once per
/// process), the others with their reason.
pub(crate) fn profiles() -> Vec<(Device, std::result::Result<DeviceProfile, String>)> {
    static MEASURED: Mutex<Option<HashMap<Device, std::result::Result<DeviceProfile, String>>>> = Mutex::new(None);
    Device::ALL
        .iter()
        .map(|&d| {
            if let Some(why) = d.unavailable_reason() {
                return (d, Err(why.to_string()));
            }
            let cached = MEASURED.lock().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(|m| m.get(&d).cloned());
            let p = cached.unwrap_or_else(|| {
                let p = DeviceProfile::measure(d).map_err(|e| format!("its probe failed: {e}"));
                MEASURED.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_default().insert(d, p.clone());
                p
            });
            (d, p)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(flops: f64, bytes: f64) -> GraphWork {
        GraphWork { flops, bytes, kernels: 10 }
    }

    #[test]
    fn the_faster_device_for_the_work_wins_and_says_why() {
        // A device with a fast matmul but a costly launch (a GPU) against one with a cheap
        // launch (a CPU): small graphs go to the CPU, large contractions to the GPU.
        let cpu = DeviceProfile { flops_per_s: 1e11, bytes_per_s: 2e10, run_overhead_s: 1e-6 };
        let gpu = DeviceProfile { flops_per_s: 1e13, bytes_per_s: 5e11, run_overhead_s: 1e-3 };
        let profiles =
            vec![(Device::Cpu, Ok(cpu)), (Device::Wgpu, Ok(gpu)), (Device::Tpu, Err("no PJRT plugin".to_string()))];
        let small = choose(work(1e6, 1e5), &profiles).unwrap();
        assert_eq!(small.device, Device::Cpu);
        let big = choose(work(1e12, 1e9), &profiles).unwrap();
        assert_eq!(big.device, Device::Wgpu);
        let text = big.to_string();
        assert!(
            text.contains("chose wgpu") && text.contains("cpu ") && text.contains("tpu not used (no PJRT plugin)"),
            "{text}"
        );
        assert!(choose(work(1.0, 1.0), &[(Device::Cuda, Err("absent".into()))]).is_none());
    }

    #[test]
    fn work_counts_contractions() {
        let mut g = Graph::new("w");
        let a = g.input("a", Shape::new(&[4, 8], DType::F32));
        let b = g.param("b", Shape::new(&[8, 16], DType::F32));
        let y = g.matmul(a, b);
        let z = g.exp(y);
        g.set_outputs(vec![z]);
        let w = GraphWork::of(&g);
        assert_eq!(w.flops, 2.0 * 4.0 * 16.0 * 8.0 + 64.0);
        assert_eq!(w.kernels, 2);
        assert_eq!(w.bytes, ((32 + 128 + 64 + 64) * 4) as f64);
    }
}
