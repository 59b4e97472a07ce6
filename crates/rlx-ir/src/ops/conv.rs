//! 2-D convolution (NCHW) with stride, zero padding, dilation and groups: a composite lowered
//! to im2col (strided slices of the padded input) and one matmul per group.

use crate::ops::util::{fixed, rand_f64, require_float, same_dtype};
use crate::{DType, Data, Dim, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// Cross-correlation of x `[N, C, H, W]` with w `[O, C/groups, KH, KW]`, giving
/// `[N, O, OH, OW]` with `OH = (H + 2 pad - dil (KH - 1) - 1) / stride + 1` (rounded down).
/// Padding is with zeros. Channel and spatial dims must be static; N may be dynamic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conv2d {
    /// Step between windows (rows, cols); >= 1.
    pub stride: [usize; 2],
    /// Zeros added on each side (rows, cols).
    pub padding: [usize; 2],
    /// Spacing of kernel taps (rows, cols); >= 1.
    pub dilation: [usize; 2],
    /// Channel groups; C and O must be divisible by it.
    pub groups: usize,
}

/// Output length of a window sweep over `n` elements: `(n + 2 pad - dil (k - 1) - 1) / stride + 1`.
pub fn window_out(n: usize, k: usize, stride: usize, pad: usize, dil: usize) -> std::result::Result<usize, String> {
    if k == 0 || stride == 0 || dil == 0 {
        return Err(format!("kernel ({k}), stride ({stride}) and dilation ({dil}) must be >= 1"));
    }
    let span = (k - 1).checked_mul(dil).and_then(|v| v.checked_add(1)).ok_or("the kernel span overflows")?;
    let padded = pad.checked_mul(2).and_then(|v| v.checked_add(n)).ok_or("the padded size overflows")?;
    if padded < span {
        return Err(format!("the kernel spans {span} but the padded input has only {padded}"));
    }
    Ok((padded - span) / stride + 1)
}

/// Pads the spatial dims of a static NCHW node with `value` on both sides.
pub(crate) fn pad2d(g: &mut Graph, x: NodeId, dims: [usize; 4], pad: [usize; 2], value: f64) -> NodeId {
    let [n, c, h, w] = dims;
    let dt = g.dtype(x);
    let mut x = x;
    if pad[0] > 0 {
        let z = g.full(Shape::new(&[n, c, pad[0], w], dt), value);
        x = g.concat(&[z, x, z], 2);
    }
    if pad[1] > 0 {
        let z = g.full(Shape::new(&[n, c, h + 2 * pad[0], pad[1]], dt), value);
        x = g.concat(&[z, x, z], 3);
    }
    x
}

/// The strided window tap starting at `start` of a padded NCHW node: `[n, c, out[0], out[1]]`.
pub(crate) fn tap(
    g: &mut Graph,
    xp: NodeId,
    nc: [usize; 2],
    start: [usize; 2],
    out: [usize; 2],
    stride: [usize; 2],
) -> NodeId {
    let end = |i: usize| start[i] + (out[i] - 1) * stride[i] + 1;
    g.slice(xp, &[0, 0, start[0], start[1]], &[nc[0], nc[1], end(0), end(1)], &[1, 1, stride[0], stride[1]])
}

impl Conv2d {
    fn out_hw(&self, h: usize, w: usize, kh: usize, kw: usize) -> std::result::Result<[usize; 2], String> {
        Ok([
            window_out(h, kh, self.stride[0], self.padding[0], self.dilation[0])?,
            window_out(w, kw, self.stride[1], self.padding[1], self.dilation[1])?,
        ])
    }
}

impl OpDef for Conv2d {
    fn name(&self) -> &'static str {
        "conv2d"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE | OpTraits::CONTRACTION
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let (x, w) = (ins[0], ins[1]);
        require_float(x.dtype)?;
        same_dtype(ins)?;
        if x.rank() != 4 {
            return Err(format!("x must be NCHW (rank 4), got {x}"));
        }
        let Some(xd) = fixed(&x.dims[1..]) else {
            return Err(format!("x's channel and spatial dims must be static, got {x}"));
        };
        let wd = match w.fixed_dims() {
            Some(d) if d.len() == 4 => d,
            _ => {
                return Err(format!("w must be static [out, in/groups, kh, kw], got {w}"));
            }
        };
        let (c, o, gr) = (xd[0], wd[0], self.groups);
        if gr == 0 || c % gr != 0 || o % gr != 0 {
            return Err(format!("in channels ({c}) and out channels ({o}) must be divisible by groups ({gr})"));
        }
        if wd[1] != c / gr {
            return Err(format!("w's dim 1 must be in channels / groups = {}, got {}", c / gr, wd[1]));
        }
        let [oh, ow] = self.out_hw(xd[1], xd[2], wd[2], wd[3])?;
        let dims = vec![x.dims[0].clone(), Dim::Fixed(o), Dim::Fixed(oh), Dim::Fixed(ow)];
        Ok(Shape::with_dims(dims, x.dtype))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let (Data::F(x), Data::F(w)) = (&ins[0].data, &ins[1].data) else {
            return Err(Error::eval("conv2d", "needs float tensors"));
        };
        let (xd, wd) = (ins[0].dims(), ins[1].dims());
        let (n, c, h, wi) = (xd[0], xd[1], xd[2], xd[3]);
        let (o, cg, kh, kw) = (wd[0], wd[1], wd[2], wd[3]);
        let [oh, ow] = self.out_hw(h, wi, kh, kw).map_err(|e| Error::eval("conv2d", e))?;
        let og = o / self.groups.max(1);
        let (s, p, d) = (self.stride, self.padding, self.dilation);
        // Input index of output position `y`, tap `a` along axis `ax`, if in bounds.
        let src =
            |ax: usize, y: usize, a: usize, len: usize| (y * s[ax] + a * d[ax]).checked_sub(p[ax]).filter(|&i| i < len);
        let mut out_v = vec![0.0; n * o * oh * ow];
        for ni in 0..n {
            for oi in 0..o {
                let g0 = (oi / og) * cg;
                for y in 0..oh {
                    for xo in 0..ow {
                        let mut acc = 0.0;
                        for ci in 0..cg {
                            for a in 0..kh {
                                let Some(iy) = src(0, y, a, h) else { continue };
                                for b in 0..kw {
                                    let Some(ix) = src(1, xo, b, wi) else {
                                        continue;
                                    };
                                    acc += x[((ni * c + g0 + ci) * h + iy) * wi + ix]
                                        * w[((oi * cg + ci) * kh + a) * kw + b];
                                }
                            }
                        }
                        out_v[((ni * o + oi) * oh + y) * ow + xo] = acc;
                    }
                }
            }
        }
        HostTensor::new(out.clone(), Data::F(out_v))
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        crate::ops::rules::batch_first_input(self.clone(), g, ins, batched)
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        if !infers(self, g, ins) {
            return None;
        }
        let (x, w) = (ins[0], ins[1]);
        let xd = g.shape(x)?.fixed_dims()?;
        let wd = g.shape(w)?.fixed_dims()?;
        let (n, c, h, wi) = (xd[0], xd[1], xd[2], xd[3]);
        let (o, cg, kh, kw) = (wd[0], wd[1], wd[2], wd[3]);
        let [oh, ow] = self.out_hw(h, wi, kh, kw).ok()?;
        let (gr, l, kk) = (self.groups, oh * ow, kh * kw);
        let og = o.checked_div(gr)?;
        let xp = pad2d(g, x, [n, c, h, wi], self.padding, 0.0);
        // im2col: one strided slice per tap, stacked as [n, c, kh*kw, oh*ow].
        let mut taps = vec![];
        for a in 0..kh {
            for b in 0..kw {
                let start = [a * self.dilation[0], b * self.dilation[1]];
                let t = tap(g, xp, [n, c], start, [oh, ow], self.stride);
                taps.push(g.reshape(t, &[n, c, 1, l]));
            }
        }
        let cols = cat(g, &taps, 2);
        let mut outs = vec![];
        for gi in 0..gr {
            let (cs, os) = (gi * cg, gi * og);
            let cols_g = if gr == 1 { cols } else { g.slice(cols, &[0, cs, 0, 0], &[n, cs + cg, kk, l], &[1; 4]) };
            let cols_g = g.reshape(cols_g, &[n, cg * kk, l]);
            let w_g = if gr == 1 { w } else { g.slice(w, &[os, 0, 0, 0], &[os + og, cg, kh, kw], &[1; 4]) };
            let w_g = g.reshape(w_g, &[og, cg * kk]);
            outs.push(g.matmul(w_g, cols_g));
        }
        let y = cat(g, &outs, 1);
        Some(g.reshape(y, &[n, o, oh, ow]))
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        // (x dims, w dims, stride, padding, dilation, groups, dtype)
        type Case = ([usize; 4], [usize; 4], [usize; 2], [usize; 2], [usize; 2], usize, DType);
        let cases: [Case; 7] = [
            ([1, 1, 5, 5], [1, 1, 3, 3], [1, 1], [0, 0], [1, 1], 1, DType::F32),
            ([2, 3, 6, 6], [4, 3, 3, 3], [2, 2], [1, 1], [1, 1], 1, DType::F32),
            ([1, 4, 7, 7], [6, 2, 3, 3], [1, 1], [2, 2], [2, 2], 2, DType::F64),
            ([1, 3, 5, 4], [3, 1, 2, 2], [1, 2], [0, 1], [1, 1], 3, DType::F32),
            ([2, 5, 3, 3], [2, 5, 1, 1], [1, 1], [0, 0], [1, 1], 1, DType::F64),
            ([1, 2, 4, 4], [2, 2, 4, 4], [1, 1], [0, 0], [1, 1], 1, DType::F32),
            ([1, 2, 6, 5], [4, 2, 3, 2], [3, 2], [1, 2], [2, 1], 1, DType::F64),
        ];
        for (i, (xd, wd, stride, padding, dilation, groups, dt)) in cases.into_iter().enumerate() {
            let t = |d: &[usize], seed| {
                let n = d.iter().product();
                HostTensor::from_f64(d, dt, &rand_f64(n, -1.0, 1.0, seed)).expect("sample")
            };
            let op = Conv2d { stride, padding, dilation, groups };
            out.push(Sample::new(
                format!("conv2d/{dt}{xd:?}*{wd:?}/s{stride:?}p{padding:?}d{dilation:?}g{groups}"),
                op,
                vec![t(&xd, 130 + i as u64), t(&wd, 150 + i as u64)],
            ));
        }
        out
    }
}

/// True when `op` accepts the types of `ins` in `g` (decompositions check this before indexing dims).
pub(crate) fn infers(op: &dyn OpDef, g: &Graph, ins: &[NodeId]) -> bool {
    let shapes: Option<Vec<&Shape>> = ins.iter().map(|&i| g.shape(i)).collect();
    shapes.is_some_and(|s| op.arity().accepts(s.len()) && op.infer(&s).is_ok())
}

/// Concatenates along `axis`, skipping the op for a single part.
pub(crate) fn cat(g: &mut Graph, parts: &[NodeId], axis: i64) -> NodeId {
    match parts {
        [one] => *one,
        _ => g.concat(parts, axis),
    }
}

impl Graph {
    /// 2-D convolution of x `[N, C, H, W]` with w `[O, C/groups, KH, KW]` (NCHW, zero padding).
    pub fn conv2d(
        &mut self,
        x: NodeId,
        w: NodeId,
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
    ) -> NodeId {
        let op = Conv2d { stride, padding, dilation, groups };
        self.add_node(op, &[x, w])
    }
}
