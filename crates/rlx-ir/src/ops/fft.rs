//! Discrete Fourier transforms with numpy's conventions: `fft` / `ifft` (complex to complex),
//! `rfft` (real to the half spectrum) and `irfft` (the half spectrum back to real), with the
//! `norm` modes `backward` (default), `ortho` and `forward`.
//!
//! Complex values are a trailing axis of 2 (real, imaginary) of a real float tensor: the IR's
//! complex dtype (`c64`) has no f64 form and the transforms do not differentiate it, while pairs
//! of f32 or f64 are differentiable and checked against numpy at either precision. The op
//! transforms the last axis (the one before the pair axis for complex values) and needs the
//! input to have the transform's length already; the builders (`Graph::fft`, ...) crop or
//! zero-pad to numpy's `n` first, so the op itself stays a pure linear map.
//!
//! Derivatives are JAX's: every transform is linear, so a tangent is transformed as the value
//! is; the transposes are the opposite-direction transform with the dual `norm` (the same
//! scale), with a 1-2-1 weight on the half spectrum for `rfft` / `irfft`.

use crate::ops::util::rand_f64;
use crate::{DType, Data, Dim, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// Which transform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FftKind {
    /// Complex to complex, `exp(-2 pi i jk / n)` (numpy.fft.fft).
    #[default]
    Fft,
    /// Complex to complex, `exp(+2 pi i jk / n)` (numpy.fft.ifft).
    Ifft,
    /// Real to the first `n / 2 + 1` complex coefficients (numpy.fft.rfft).
    Rfft,
    /// `n / 2 + 1` complex coefficients of a Hermitian spectrum to `n` reals (numpy.fft.irfft);
    /// the imaginary parts at DC and (for even `n`) Nyquist are ignored, as numpy does.
    Irfft,
}

impl FftKind {
    /// The op name of this transform.
    pub fn name(self) -> &'static str {
        match self {
            FftKind::Fft => "fft",
            FftKind::Ifft => "ifft",
            FftKind::Rfft => "rfft",
            FftKind::Irfft => "irfft",
        }
    }

    /// True for the transforms with `exp(+...)` (ifft, irfft), whose backward scale is `1 / n`.
    pub fn is_inverse(self) -> bool {
        matches!(self, FftKind::Ifft | FftKind::Irfft)
    }
}

/// numpy's `norm`: which direction carries the `1 / n` (or both `1 / sqrt(n)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FftNorm {
    /// Forward unscaled, inverse scaled by `1 / n` (numpy's default).
    #[default]
    Backward,
    /// Both scaled by `1 / sqrt(n)`: the transforms are unitary.
    Ortho,
    /// Forward scaled by `1 / n`, inverse unscaled.
    Forward,
}

impl FftNorm {
    /// Parses numpy's name (`backward`, `ortho`, `forward`).
    pub fn from_name(s: &str) -> Option<FftNorm> {
        match s {
            "backward" => Some(FftNorm::Backward),
            "ortho" => Some(FftNorm::Ortho),
            "forward" => Some(FftNorm::Forward),
            _ => None,
        }
    }

    /// The norm that gives the opposite-direction transform the same scale (backward and
    /// forward swap): the transpose of a transform is the other direction under the dual norm.
    pub fn dual(self) -> FftNorm {
        match self {
            FftNorm::Backward => FftNorm::Forward,
            FftNorm::Ortho => FftNorm::Ortho,
            FftNorm::Forward => FftNorm::Backward,
        }
    }

    /// The factor a transform of `kind` and length `n` multiplies its sum by.
    pub fn scale(self, kind: FftKind, n: usize) -> f64 {
        let n = n.max(1) as f64;
        match (self, kind.is_inverse()) {
            (FftNorm::Ortho, _) => 1.0 / n.sqrt(),
            (FftNorm::Backward, false) | (FftNorm::Forward, true) => 1.0,
            (FftNorm::Backward, true) | (FftNorm::Forward, false) => 1.0 / n,
        }
    }
}

fn is_backward(n: &FftNorm) -> bool {
    *n == FftNorm::Backward
}

/// A discrete Fourier transform of length `n` over the last axis (the axis before the pair
/// axis for complex values). Input and output, by kind (`m = n / 2 + 1`):
/// fft / ifft `[.., n, 2] -> [.., n, 2]`; rfft `[.., n] -> [.., m, 2]`; irfft `[.., m, 2] -> [.., n]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fft {
    /// The transform.
    #[serde(default)]
    pub kind: FftKind,
    /// The transform's length (numpy's `n`; for irfft the output length).
    pub n: usize,
    /// numpy's `norm`.
    #[serde(default, skip_serializing_if = "is_backward")]
    pub norm: FftNorm,
}

/// Largest DFT matrix (elements) the matmul decomposition builds; past it backends without an
/// FFT kernel get the `Unsupported` error naming the op (a dense DFT of 2^22 entries is already
/// 16 MiB of f32 constants and `n^2` work).
pub const MAX_DFT_MATRIX: usize = 1 << 22;

/// `(cos, sin)` of `2 pi r / n`, exact at multiples of a quarter turn, so the half-spectrum
/// weights at DC and Nyquist do not pick up rounding from the imaginary parts they ignore.
pub fn twiddle(r: usize, n: usize) -> (f64, f64) {
    let r = r % n;
    if r == 0 {
        return (1.0, 0.0);
    }
    if 2 * r == n {
        return (-1.0, 0.0);
    }
    if 4 * r == n {
        return (0.0, 1.0);
    }
    if 4 * r == 3 * n {
        return (0.0, -1.0);
    }
    let t = 2.0 * std::f64::consts::PI * r as f64 / n as f64;
    (t.cos(), t.sin())
}

/// The weight of half-spectrum bin `k` in the full Hermitian sum: 1 at DC and (even `n`) at
/// Nyquist, 2 elsewhere (JAX's 1-2-1 mask).
pub fn half_weight(k: usize, n: usize) -> f64 {
    if k == 0 || 2 * k == n { 1.0 } else { 2.0 }
}

impl Fft {
    /// Half-spectrum length `n / 2 + 1`.
    pub fn half(&self) -> usize {
        self.n / 2 + 1
    }

    /// Elements per lane of the input and of the output (pairs counted as two).
    pub fn lane_lens(&self) -> (usize, usize) {
        let (n, m) = (self.n, self.half());
        match self.kind {
            FftKind::Fft | FftKind::Ifft => (2 * n, 2 * n),
            FftKind::Rfft => (n, 2 * m),
            FftKind::Irfft => (2 * m, n),
        }
    }

    /// The naive DFT of one lane in f64 (twiddles indexed by `jk mod n`, so no angle grows):
    /// the reference, O(n^2) time and O(n) memory.
    pub fn lane(&self, x: &[f64], y: &mut [f64]) {
        let (n, m) = (self.n, self.half());
        let tw: Vec<(f64, f64)> = (0..n).map(|r| twiddle(r, n)).collect();
        let s = self.norm.scale(self.kind, n);
        match self.kind {
            FftKind::Fft | FftKind::Ifft => {
                let sg = if self.kind == FftKind::Fft { -1.0 } else { 1.0 };
                for k in 0..n {
                    let (mut re, mut im) = (0.0, 0.0);
                    for j in 0..n {
                        let (c, sn) = tw[j * k % n];
                        let (xr, xi) = (x[2 * j], x[2 * j + 1]);
                        re += xr * c - sg * xi * sn;
                        im += sg * xr * sn + xi * c;
                    }
                    y[2 * k] = s * re;
                    y[2 * k + 1] = s * im;
                }
            }
            FftKind::Rfft => {
                for k in 0..m {
                    let (mut re, mut im) = (0.0, 0.0);
                    for (j, &v) in x.iter().enumerate() {
                        let (c, sn) = tw[j * k % n];
                        re += v * c;
                        im -= v * sn;
                    }
                    y[2 * k] = s * re;
                    y[2 * k + 1] = s * im;
                }
            }
            FftKind::Irfft => {
                for (j, o) in y.iter_mut().enumerate() {
                    let mut v = 0.0;
                    for k in 0..m {
                        let (c, sn) = tw[j * k % n];
                        v += half_weight(k, n) * (x[2 * k] * c - x[2 * k + 1] * sn);
                    }
                    *o = s * v;
                }
            }
        }
    }

    /// The transform as a real matrix `[in lane, out lane]` (row-major, f64): `out = in @ M`
    /// per lane, with pairs interleaved as they are stored: the decomposition.
    pub fn matrix(&self) -> Vec<f64> {
        let (n, m) = (self.n, self.half());
        let (li, lo) = self.lane_lens();
        let s = self.norm.scale(self.kind, n);
        let mut a = vec![0.0; li * lo];
        match self.kind {
            FftKind::Fft | FftKind::Ifft => {
                let sg = if self.kind == FftKind::Fft { -1.0 } else { 1.0 };
                for j in 0..n {
                    for k in 0..n {
                        let (c, sn) = twiddle(j * k, n);
                        // (xr + i xi)(c + i sg sn) = xr c - sg xi sn + i (sg xr sn + xi c)
                        a[(2 * j) * lo + 2 * k] = s * c;
                        a[(2 * j + 1) * lo + 2 * k] = -s * sg * sn;
                        a[(2 * j) * lo + 2 * k + 1] = s * sg * sn;
                        a[(2 * j + 1) * lo + 2 * k + 1] = s * c;
                    }
                }
            }
            FftKind::Rfft => {
                for j in 0..n {
                    for k in 0..m {
                        let (c, sn) = twiddle(j * k, n);
                        a[j * lo + 2 * k] = s * c;
                        a[j * lo + 2 * k + 1] = -s * sn;
                    }
                }
            }
            FftKind::Irfft => {
                for k in 0..m {
                    let w = s * half_weight(k, n);
                    // DC and Nyquist: sin is 0 at every j, so their imaginary rows stay zero.
                    for j in 0..n {
                        let (c, sn) = twiddle(j * k, n);
                        a[(2 * k) * lo + j] = w * c;
                        a[(2 * k + 1) * lo + j] = -w * sn;
                    }
                }
            }
        }
        a
    }
}

/// The last `k` dims, which must be fixed.
fn tail(s: &Shape, k: usize, what: &str) -> std::result::Result<Vec<usize>, String> {
    if s.rank() < k {
        return Err(format!("{what} needs rank >= {k}, got rank {}", s.rank()));
    }
    s.dims[s.rank() - k..]
        .iter()
        .map(|d| d.fixed().ok_or_else(|| format!("the transformed axes of {what} must be static")))
        .collect()
}

impl OpDef for Fft {
    fn name(&self) -> &'static str {
        self.kind.name()
    }
    fn traits(&self) -> OpTraits {
        OpTraits::LINEAR | OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let x = ins[0];
        if !matches!(x.dtype, DType::F32 | DType::F64) {
            return Err(format!("needs f32 or f64 (complex values as a trailing axis of 2), got {}", x.dtype));
        }
        if self.n == 0 {
            return Err("n must be at least 1".into());
        }
        let (n, m) = (self.n, self.half());
        let keep = |k: usize| x.dims[..x.rank() - k].to_vec();
        let mut dims = match self.kind {
            FftKind::Fft | FftKind::Ifft | FftKind::Irfft => {
                let t = tail(x, 2, "a complex input [.., len, 2]")?;
                let want = if self.kind == FftKind::Irfft { m } else { n };
                if t[1] != 2 || t[0] != want {
                    return Err(format!(
                        "expects [.., {want}, 2] (complex pairs of length {want} for n = {n}), got [.., {}, {}]",
                        t[0], t[1]
                    ));
                }
                keep(2)
            }
            FftKind::Rfft => {
                let t = tail(x, 1, "a real input [.., n]")?;
                if t[0] != n {
                    return Err(format!("expects a last axis of n = {n}, got {}", t[0]));
                }
                keep(1)
            }
        };
        match self.kind {
            FftKind::Fft | FftKind::Ifft => dims.extend([Dim::Fixed(n), Dim::Fixed(2)]),
            FftKind::Rfft => dims.extend([Dim::Fixed(m), Dim::Fixed(2)]),
            FftKind::Irfft => dims.push(Dim::Fixed(n)),
        }
        Ok(Shape::with_dims(dims, x.dtype))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let Data::F(x) = &ins[0].data else {
            return Err(Error::eval(self.name(), "needs a float tensor"));
        };
        let (li, lo) = self.lane_lens();
        let mut y = vec![0.0; x.len() / li * lo];
        for (xl, yl) in x.chunks_exact(li).zip(y.chunks_exact_mut(lo)) {
            self.lane(xl, yl);
        }
        HostTensor::new(out.clone(), Data::F(y))
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        // Dense DFT as one matmul over the flattened lanes; other backends run it this way.
        let (li, lo) = self.lane_lens();
        if li * lo > MAX_DFT_MATRIX {
            return None;
        }
        let x = ins[0];
        let xs = g.shape(x)?.clone();
        let numel = xs.numel()?;
        let out = self.infer(&[&xs]).ok()?;
        let dt = xs.dtype;
        let w = g.constant(HostTensor::from_f64(&[li, lo], dt, &self.matrix()).ok()?);
        let flat = g.reshape(x, &[numel / li, li]);
        let y = g.matmul(flat, w);
        Some(g.reshape(y, &out.fixed_dims()?))
    }
    fn vjp(&self, g: &mut Graph, _ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let n = self.n;
        let norm = self.norm.dual();
        let back = |kind| Fft { kind, n, norm };
        let dx = match self.kind {
            // The DFT matrix is symmetric: its real transpose is the conjugate, the other direction.
            FftKind::Fft => g.add_node(back(FftKind::Ifft), &[ct]),
            FftKind::Ifft => g.add_node(back(FftKind::Fft), &[ct]),
            // rfft^T = irfft after halving the bins irfft doubles; irfft^T = the 1-2-1 weights after rfft.
            FftKind::Rfft => {
                let m = mask(g, n, ct, true)?;
                let h = g.mul(ct, m);
                g.add_node(back(FftKind::Irfft), &[h])
            }
            FftKind::Irfft => {
                let r = g.add_node(back(FftKind::Rfft), &[ct]);
                let m = mask(g, n, r, false)?;
                g.mul(r, m)
            }
        };
        Some(vec![Some(dx)])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], _batched: &[bool], _size: usize) -> Option<NodeId> {
        // The op reads only its trailing axes: a leading batch axis is one more lane axis.
        Some(g.add_node(self.clone(), &[ins[0]]))
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        let t = |dims: &[usize], dt, seed| {
            HostTensor::from_f64(dims, dt, &rand_f64(dims.iter().product(), -1.0, 1.0, seed)).expect("sample")
        };
        let op = |kind, n, norm| Fft { kind, n, norm };
        use FftKind::{Fft as F, Ifft, Irfft, Rfft};
        use FftNorm::{Backward, Forward, Ortho};
        for (dt, s) in [(DType::F32, 0), (DType::F64, 100)] {
            for (kind, n, norm, dims) in [
                (F, 8, Backward, vec![3, 8, 2]),
                (F, 5, Ortho, vec![2, 5, 2]),
                (Ifft, 8, Backward, vec![2, 8, 2]),
                (Ifft, 6, Forward, vec![2, 2, 6, 2]),
                (Rfft, 8, Backward, vec![3, 8]),
                (Rfft, 7, Forward, vec![2, 7]),
                (Irfft, 8, Backward, vec![3, 5, 2]),
                (Irfft, 7, Ortho, vec![2, 4, 2]),
                (F, 1, Backward, vec![1, 2]),
            ] {
                let label = format!("{}/{dt}/n{n}/{norm:?}{dims:?}", kind.name()).to_lowercase();
                out.push(Sample::new(
                    label,
                    op(kind, n, norm),
                    vec![t(&dims, dt, s + n as u64 * 7 + dims.len() as u64)],
                ));
            }
        }
        let e = HostTensor::from_f64(&[0, 4], DType::F32, &[]).expect("sample");
        out.push(Sample::new("rfft/f32/empty", op(Rfft, 4, Backward), vec![e]));
        out
    }
}

/// The half-spectrum weights `[m, 1]` (1-2-1, or their inverses) in `like`'s dtype.
fn mask(g: &mut Graph, n: usize, like: NodeId, inverse: bool) -> Option<NodeId> {
    let m = n / 2 + 1;
    let w: Vec<f64> = (0..m).map(|k| if inverse { 1.0 / half_weight(k, n) } else { half_weight(k, n) }).collect();
    let dt = g.dtype(like);
    Some(g.constant(HostTensor::from_f64(&[m, 1], dt, &w).ok()?))
}

impl Graph {
    /// Crops or zero-pads axis `axis` (negative from the end) of `x` to `len`, as numpy's `n`.
    fn fit_axis(&mut self, x: NodeId, axis: i64, len: usize) -> NodeId {
        let Some(s) = self.shape(x).cloned() else { return x };
        let r = s.rank() as i64;
        let a = axis + r;
        if a < 0 || a >= r {
            return x;
        }
        let Some(cur) = s.dims[a as usize].fixed() else { return x };
        if cur > len {
            self.slice_axis(x, a, 0, len)
        } else if cur < len {
            let mut d = s.dims.clone();
            d[a as usize] = Dim::Fixed(len - cur);
            let z = self.full(Shape::with_dims(d, s.dtype), 0.0);
            self.concat(&[x, z], a)
        } else {
            x
        }
    }

    /// Length of axis `axis` (negative from the end), if static.
    fn axis_len(&self, x: NodeId, axis: i64) -> Option<usize> {
        let s = self.shape(x)?;
        let a = usize::try_from(axis + s.rank() as i64).ok()?;
        s.dims.get(a)?.fixed()
    }

    /// numpy.fft.fft of complex pairs `[.., m, 2]` over the pair axis's neighbour: cropped or
    /// zero-padded to `n` (default `m`).
    pub fn fft(&mut self, x: NodeId, n: Option<usize>, norm: FftNorm) -> NodeId {
        self.complex_fft(FftKind::Fft, x, n, norm)
    }

    /// numpy.fft.ifft of complex pairs `[.., m, 2]` (see `fft`).
    pub fn ifft(&mut self, x: NodeId, n: Option<usize>, norm: FftNorm) -> NodeId {
        self.complex_fft(FftKind::Ifft, x, n, norm)
    }

    fn complex_fft(&mut self, kind: FftKind, x: NodeId, n: Option<usize>, norm: FftNorm) -> NodeId {
        let n = n.or_else(|| self.axis_len(x, -2)).unwrap_or(0);
        let x = if n > 0 { self.fit_axis(x, -2, n) } else { x };
        self.add_node(Fft { kind, n, norm }, &[x])
    }

    /// numpy.fft.rfft of reals `[.., m]`: cropped or zero-padded to `n` (default `m`); gives
    /// `[.., n / 2 + 1, 2]`.
    pub fn rfft(&mut self, x: NodeId, n: Option<usize>, norm: FftNorm) -> NodeId {
        let n = n.or_else(|| self.axis_len(x, -1)).unwrap_or(0);
        let x = if n > 0 { self.fit_axis(x, -1, n) } else { x };
        self.add_node(Fft { kind: FftKind::Rfft, n, norm }, &[x])
    }

    /// numpy.fft.irfft of a half spectrum `[.., m, 2]`: `n` reals (default `2 (m - 1)`; pass
    /// `n` for odd lengths), the spectrum cropped or zero-padded to `n / 2 + 1` bins.
    pub fn irfft(&mut self, x: NodeId, n: Option<usize>, norm: FftNorm) -> NodeId {
        let n = n.or_else(|| self.axis_len(x, -2).map(|m| 2 * m.saturating_sub(1))).unwrap_or(0);
        let x = if n > 0 { self.fit_axis(x, -2, n / 2 + 1) } else { x };
        self.add_node(Fft { kind: FftKind::Irfft, n, norm }, &[x])
    }

    /// numpy.fft.fft2 of complex pairs `[.., a, b, 2]` over the axes `a` and `b`, with numpy's
    /// `s` (default `(a, b)`).
    pub fn fft2(&mut self, x: NodeId, s: Option<[usize; 2]>, norm: FftNorm) -> NodeId {
        self.fft2_with(FftKind::Fft, x, s, norm)
    }

    /// numpy.fft.ifft2 of complex pairs `[.., a, b, 2]` (see `fft2`).
    pub fn ifft2(&mut self, x: NodeId, s: Option<[usize; 2]>, norm: FftNorm) -> NodeId {
        self.fft2_with(FftKind::Ifft, x, s, norm)
    }

    /// numpy.fft.fft with numpy's `axis`: over complex axis `axis` of `[.., 2]` pairs (negative
    /// from the end, the pair axis not counted).
    pub fn fft_axis(&mut self, x: NodeId, n: Option<usize>, axis: i64, norm: FftNorm) -> NodeId {
        self.along_axis("fft", x, axis, (true, true), |g, x| g.fft(x, n, norm))
    }

    /// numpy.fft.ifft with numpy's `axis` (see `fft_axis`).
    pub fn ifft_axis(&mut self, x: NodeId, n: Option<usize>, axis: i64, norm: FftNorm) -> NodeId {
        self.along_axis("ifft", x, axis, (true, true), |g, x| g.ifft(x, n, norm))
    }

    /// numpy.fft.rfft with numpy's `axis`: over axis `axis` of reals; the half spectrum takes
    /// that axis's place, with the pair axis last.
    pub fn rfft_axis(&mut self, x: NodeId, n: Option<usize>, axis: i64, norm: FftNorm) -> NodeId {
        self.along_axis("rfft", x, axis, (false, true), |g, x| g.rfft(x, n, norm))
    }

    /// numpy.fft.irfft with numpy's `axis`: over complex axis `axis` of a half spectrum (see
    /// `fft_axis`); the reals take that axis's place.
    pub fn irfft_axis(&mut self, x: NodeId, n: Option<usize>, axis: i64, norm: FftNorm) -> NodeId {
        self.along_axis("irfft", x, axis, (true, false), |g, x| g.irfft(x, n, norm))
    }

    /// numpy.fft.fft2 with numpy's `axes` (complex axes, as `fft_axis`): `s[i]` for `axes[i]`.
    pub fn fft2_axes(&mut self, x: NodeId, s: Option<[usize; 2]>, axes: [i64; 2], norm: FftNorm) -> NodeId {
        let y = self.fft_axis(x, s.map(|s| s[1]), axes[1], norm);
        self.fft_axis(y, s.map(|s| s[0]), axes[0], norm)
    }

    /// numpy.fft.ifft2 with numpy's `axes` (see `fft2_axes`).
    pub fn ifft2_axes(&mut self, x: NodeId, s: Option<[usize; 2]>, axes: [i64; 2], norm: FftNorm) -> NodeId {
        let y = self.ifft_axis(x, s.map(|s| s[1]), axes[1], norm);
        self.ifft_axis(y, s.map(|s| s[0]), axes[0], norm)
    }

    /// Runs the last-axis transform `f` over `axis` instead: that axis is moved next to the pair
    /// axis (`complex.0`: the input has one; `complex.1`: the output has one) and the result's
    /// moved back. An axis out of range is recorded as an inference error of `op`.
    fn along_axis(
        &mut self,
        op: &str,
        x: NodeId,
        axis: i64,
        complex: (bool, bool),
        f: impl FnOnce(&mut Self, NodeId) -> NodeId,
    ) -> NodeId {
        let Some(shape) = self.shape(x).cloned() else { return f(self, x) };
        let rank = shape.rank().saturating_sub(complex.0 as usize);
        let a = if axis < 0 { axis + rank as i64 } else { axis };
        if rank == 0 || a < 0 || a >= rank as i64 {
            self.record(Error::Infer {
                op: op.into(),
                node: self.nodes().len() as u32,
                inputs: vec![shape],
                reason: format!("axis {axis} is out of range for {rank} axes (the pair axis not counted)"),
            });
            return x;
        }
        let a = a as usize;
        if a + 1 == rank {
            return f(self, x);
        }
        // The axes but `a`, then `a`, then the pair axis where there is one.
        let pair = |c: bool| if c { vec![rank] } else { vec![] };
        let mut perm: Vec<usize> = (0..rank).filter(|&i| i != a).collect();
        perm.push(a);
        perm.extend(pair(complex.0));
        let t = self.transpose(x, &perm);
        let y = f(self, t);
        // Back: logical axis i comes from position i (i < a), rank - 1 (i == a) or i - 1.
        let mut back: Vec<usize> = (0..rank)
            .map(|i| {
                if i < a {
                    i
                } else if i == a {
                    rank - 1
                } else {
                    i - 1
                }
            })
            .collect();
        back.extend(pair(complex.1));
        self.transpose(y, &back)
    }

    fn fft2_with(&mut self, kind: FftKind, x: NodeId, s: Option<[usize; 2]>, norm: FftNorm) -> NodeId {
        let r = self.shape(x).map_or(0, Shape::rank);
        if r < 3 {
            // Let the op report the rank.
            return self.complex_fft(kind, x, s.map(|s| s[1]), norm);
        }
        // The inner axis, then the outer one moved next to the pair axis and back.
        let y = self.complex_fft(kind, x, s.map(|s| s[1]), norm);
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 3, r - 2);
        let t = self.transpose(y, &perm);
        let z = self.complex_fft(kind, t, s.map(|s| s[0]), norm);
        self.transpose(z, &perm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp;

    fn one(g: &Graph, x: HostTensor) -> Vec<f64> {
        interp::evaluate(g, &[("x", x)]).unwrap()[0].to_f64_vec().unwrap()
    }

    #[test]
    fn text_form_names_the_transform() {
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[2, 6], DType::F64));
        let y = g.rfft(x, Some(8), FftNorm::Ortho);
        let z = g.irfft(y, Some(8), FftNorm::Backward);
        let w = g.fft(y, None, FftNorm::Forward);
        g.set_outputs(vec![z, w]);
        let text = g.to_text();
        assert!(text.contains("%3 = rfft(%2) {\"n\":8,\"norm\":\"ortho\"} : f64[2,5,2]"), "{text}");
        assert!(text.contains("%4 = irfft(%3) {\"n\":8} : f64[2,8]"), "{text}");
        assert!(text.contains("%5 = fft(%3) {\"n\":5,\"norm\":\"forward\"}"), "{text}");
        assert_eq!(Graph::from_text(&text).unwrap(), g);
    }

    #[test]
    fn n_crops_and_pads_as_numpy() {
        // rfft of [1, 2, 3] with n = 4 pads a zero: [6, -2-2i, 2]; with n = 2 crops: [3, -1].
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[3], DType::F64));
        let y = g.rfft(x, Some(4), FftNorm::Backward);
        g.set_outputs(vec![y]);
        let x3 = HostTensor::from_f64(&[3], DType::F64, &[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(one(&g, x3.clone()), vec![6.0, 0.0, -2.0, -2.0, 2.0, 0.0]);
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[3], DType::F64));
        let y = g.rfft(x, Some(2), FftNorm::Backward);
        g.set_outputs(vec![y]);
        assert_eq!(one(&g, x3), vec![3.0, 0.0, -1.0, 0.0]);
        // irfft ignores the imaginary parts at DC and Nyquist: [1+5i, 0, 1-7i] -> n = 4.
        let mut g = Graph::new("t");
        let x = g.input("x", Shape::new(&[3, 2], DType::F64));
        let y = g.irfft(x, None, FftNorm::Backward);
        g.set_outputs(vec![y]);
        let h = HostTensor::from_f64(&[3, 2], DType::F64, &[1.0, 5.0, 0.0, 0.0, 1.0, -7.0]).unwrap();
        assert_eq!(one(&g, h), vec![0.5, 0.0, 0.5, 0.0]);
    }

    #[test]
    fn norms_and_their_duals() {
        for norm in [FftNorm::Backward, FftNorm::Ortho, FftNorm::Forward] {
            let name = serde_json::to_value(norm).unwrap();
            assert_eq!(FftNorm::from_name(name.as_str().unwrap()), Some(norm));
            // The dual norm gives the other direction the same scale: what the transposes use.
            assert_eq!(norm.scale(FftKind::Fft, 16), norm.dual().scale(FftKind::Ifft, 16));
        }
        assert_eq!(FftNorm::from_name("unitary"), None);
    }
}
