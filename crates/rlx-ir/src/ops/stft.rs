//! Short-time Fourier transforms, as builders over `gather`, `rfft` / `irfft` and `scatter_add`
//! (so they differentiate, batch and run wherever those do). The conventions are
//! `torch.stft(center=False, onesided=True)` with the frames axis first: frame `f` is
//! `x[f hop .. f hop + n_fft] * window`, and `F = 1 + (T - n_fft) / hop` frames are taken.
//! `istft` overlap-adds the windowed inverse frames and divides by the summed squared window
//! (positions no frame covers with a nonzero window are 0), which inverts `stft` wherever the
//! window's overlaps do not vanish.

use crate::ops::fft::FftNorm;
use crate::ops::rules::dims;
use crate::{DType, Error, Graph, HostTensor, NodeId};

impl Graph {
    /// The periodic Hann window of `n` points (`scipy.signal.get_window("hann", n)`,
    /// `torch.hann_window(n)`), as a constant.
    pub fn hann_window(&mut self, n: usize, dtype: DType) -> NodeId {
        let w: Vec<f64> =
            (0..n).map(|i| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / n.max(1) as f64).cos()).collect();
        match HostTensor::from_f64(&[n], dtype, &w) {
            Ok(t) => self.constant(t),
            Err(e) => {
                self.record(e);
                self.scalar(0.0, DType::F32)
            }
        }
    }

    fn stft_error(&mut self, op: &str, x: NodeId, reason: String) -> NodeId {
        let inputs = self.shape(x).cloned().into_iter().collect();
        self.record(Error::Infer { op: op.into(), node: self.len() as u32, inputs, reason });
        x
    }

    /// Frame start offsets `[frames, n_fft]` as an index constant.
    fn frame_indices(&mut self, frames: usize, n_fft: usize, hop: usize) -> NodeId {
        let idx: Vec<i64> = (0..frames).flat_map(|f| (0..n_fft).map(move |k| (f * hop + k) as i64)).collect();
        match HostTensor::from_i64(&[frames, n_fft], DType::I64, &idx) {
            Ok(t) => self.constant(t),
            Err(e) => {
                self.record(e);
                self.scalar(0.0, DType::I64)
            }
        }
    }

    /// STFT of real signals `[.., T]` with a window of `n_fft` points: `[.., F, n_fft / 2 + 1, 2]`.
    pub fn stft(&mut self, x: NodeId, n_fft: usize, hop: usize, window: NodeId, norm: FftNorm) -> NodeId {
        let d = dims(self, x);
        let t = d.last().copied().unwrap_or(0);
        if hop == 0 || n_fft == 0 || t < n_fft {
            return self.stft_error(
                "stft",
                x,
                format!("needs hop >= 1 and 1 <= n_fft <= T, got n_fft {n_fft}, hop {hop}, T {t}"),
            );
        }
        let frames = 1 + (t - n_fft) / hop;
        let idx = self.frame_indices(frames, n_fft, hop);
        let fr = self.gather(x, idx, -1);
        let w = self.mul(fr, window);
        self.rfft(w, Some(n_fft), norm)
    }

    /// The inverse of `stft` for spectra `[.., F, n_fft / 2 + 1, 2]`: signals of
    /// `T = n_fft + (F - 1) hop` samples.
    pub fn istft(&mut self, s: NodeId, n_fft: usize, hop: usize, window: NodeId, norm: FftNorm) -> NodeId {
        let d = dims(self, s);
        if hop == 0 || n_fft == 0 || d.len() < 3 || d[d.len() - 2] != n_fft / 2 + 1 {
            return self.stft_error(
                "istft",
                s,
                format!("needs [.., frames, {}, 2] spectra and hop >= 1", n_fft / 2 + 1),
            );
        }
        let frames = d[d.len() - 3];
        let t = n_fft + frames.saturating_sub(1) * hop;
        let fr = self.irfft(s, Some(n_fft), norm);
        let wf = self.mul(fr, window);
        let idx = self.frame_indices(frames, n_fft, hop);
        let mut od = d[..d.len() - 3].to_vec();
        od.push(t);
        let dt = self.dtype(s);
        let zeros = self.full(crate::Shape::new(&od, dt), 0.0);
        let ola = self.scatter_add(zeros, idx, wf, -1);
        // The summed squared window at each sample, known once the window is: a graph of it
        // keeps istft usable with any window node (and differentiable in it).
        let w2 = self.mul(window, window);
        let wz = self.full(crate::Shape::new(&[frames, n_fft], dt), 0.0);
        let w2f = self.add(wz, w2);
        let tz = self.full(crate::Shape::new(&[t], dt), 0.0);
        let env = self.scatter_add(tz, idx, w2f, -1);
        // 1 / env where it is not ~0, else 0 (no frame covers that sample).
        let tiny = self.scalar(1e-11, dt);
        let covered = self.gt(env, tiny);
        let one = self.scalar(1.0, dt);
        let safe = self.where_(covered, env, one);
        let inv = self.recip(safe);
        let zero = self.scalar(0.0, dt);
        let inv = self.where_(covered, inv, zero);
        self.mul(ola, inv)
    }
}
