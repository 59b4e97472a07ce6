//! 2-D max and average pooling (NCHW): composites of strided slices folded with maximum or add.

use crate::ops::conv::{infers, pad2d, tap, window_out};
use crate::ops::util::{fixed, rand_f64, require_float};
use crate::{
    DType, Data, Dim, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Scalar, Shape, op::Arity,
};
use serde::{Deserialize, Serialize};

/// Window geometry shared by the pools.
fn pool_hw(
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    h: usize,
    w: usize,
) -> std::result::Result<[usize; 2], String> {
    for ax in 0..2 {
        if padding[ax] > kernel[ax] / 2 {
            return Err(format!("padding {padding:?} must be at most half the kernel {kernel:?}"));
        }
    }
    Ok([window_out(h, kernel[0], stride[0], padding[0], 1)?, window_out(w, kernel[1], stride[1], padding[1], 1)?])
}

fn pool_infer(
    x: &Shape,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
) -> std::result::Result<Shape, String> {
    require_float(x.dtype)?;
    if x.rank() != 4 {
        return Err(format!("x must be NCHW (rank 4), got {x}"));
    }
    let Some(hw) = fixed(&x.dims[2..]) else {
        return Err(format!("x's spatial dims must be static, got {x}"));
    };
    let [oh, ow] = pool_hw(kernel, stride, padding, hw[0], hw[1])?;
    let dims = vec![x.dims[0].clone(), x.dims[1].clone(), Dim::Fixed(oh), Dim::Fixed(ow)];
    Ok(Shape::with_dims(dims, x.dtype))
}

/// Folds every in-bounds window of a float NCHW tensor with `f(values) -> value`.
fn pool_ref(
    x: &HostTensor,
    out: &Shape,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    f: impl Fn(&[f64]) -> f64,
) -> Result<HostTensor> {
    let Data::F(v) = &x.data else {
        return Err(Error::eval("pool", "needs a float tensor"));
    };
    let d = x.dims();
    let (nc, h, w) = (d[0] * d[1], d[2], d[3]);
    let [oh, ow] = pool_hw(kernel, stride, padding, h, w).map_err(|e| Error::eval("pool", e))?;
    // In-bounds input indices of window `y` along one axis.
    let span = |ax: usize, y: usize, len: usize| {
        (0..kernel[ax]).filter_map(move |a| (y * stride[ax] + a).checked_sub(padding[ax])).filter(move |&i| i < len)
    };
    let mut y = Vec::with_capacity(nc * oh * ow);
    let mut win = vec![];
    for p in 0..nc {
        for r in 0..oh {
            for c in 0..ow {
                win.clear();
                for iy in span(0, r, h) {
                    win.extend(span(1, c, w).map(|ix| v[(p * h + iy) * w + ix]));
                }
                y.push(f(&win));
            }
        }
    }
    HostTensor::new(out.clone(), Data::F(y))
}

/// Pads, then returns every strided tap of the window, each `[n, c, oh, ow]`.
fn pool_taps(
    g: &mut Graph,
    x: NodeId,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    fill: f64,
) -> Option<(Vec<NodeId>, [usize; 4])> {
    let d = g.shape(x)?.fixed_dims()?;
    let [oh, ow] = pool_hw(kernel, stride, padding, d[2], d[3]).ok()?;
    let xp = pad2d(g, x, [d[0], d[1], d[2], d[3]], padding, fill);
    let mut taps = vec![];
    for a in 0..kernel[0] {
        for b in 0..kernel[1] {
            taps.push(tap(g, xp, [d[0], d[1]], [a, b], [oh, ow], stride));
        }
    }
    Some((taps, [d[0], d[1], oh, ow]))
}

macro_rules! pool_op {
    ($t:ident, $name:literal, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        pub struct $t {
            /// Window size (rows, cols); >= 1.
            pub kernel: [usize; 2],
            /// Step between windows (rows, cols); >= 1.
            pub stride: [usize; 2],
            /// Padding on each side (rows, cols); at most half the kernel, as in PyTorch.
            pub padding: [usize; 2],
        }

        impl OpDef for $t {
            fn name(&self) -> &'static str {
                $name
            }
            fn traits(&self) -> OpTraits {
                $t::TRAITS
            }
            fn arity(&self) -> Arity {
                Arity::Exact(1)
            }
            fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
                pool_infer(ins[0], self.kernel, self.stride, self.padding)
            }
            fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
                pool_ref(ins[0], out, self.kernel, self.stride, self.padding, $t::fold)
            }
            fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
                crate::ops::rules::batch_first_input(self.clone(), g, ins, batched)
            }
            fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
                if !infers(self, g, ins) {
                    return None;
                }
                self.lower(g, ins[0])
            }
            fn samples() -> Vec<Sample> {
                pool_samples($name, |kernel, stride, padding| $t { kernel, stride, padding }.into())
            }
        }
    };
}

pool_op!(MaxPool2d, "max_pool2d", "Max over each window of x `[N, C, H, W]`; padding counts as -inf (NaN propagates).");
pool_op!(
    AvgPool2d,
    "avg_pool2d",
    "Mean over each window of x `[N, C, H, W]`, dividing by the number of in-bounds elements \
     (PyTorch's count_include_pad = false)."
);

impl MaxPool2d {
    const TRAITS: OpTraits = OpTraits::COMPOSITE;
    fn fold(w: &[f64]) -> f64 {
        w.iter().fold(f64::NEG_INFINITY, |a, &b| Scalar::max(a, b))
    }
    fn lower(&self, g: &mut Graph, x: NodeId) -> Option<NodeId> {
        let (taps, _) = pool_taps(g, x, self.kernel, self.stride, self.padding, f64::NEG_INFINITY)?;
        let mut acc = taps[0];
        for &t in &taps[1..] {
            acc = g.maximum(acc, t);
        }
        Some(acc)
    }
}

impl AvgPool2d {
    const TRAITS: OpTraits = OpTraits::COMPOSITE.union(OpTraits::LINEAR);
    fn fold(w: &[f64]) -> f64 {
        w.iter().sum::<f64>() / w.len() as f64
    }
    fn lower(&self, g: &mut Graph, x: NodeId) -> Option<NodeId> {
        let (taps, d) = pool_taps(g, x, self.kernel, self.stride, self.padding, 0.0)?;
        let mut acc = taps[0];
        for &t in &taps[1..] {
            acc = g.add(acc, t);
        }
        // Divide by the in-bounds count of each window: a static [oh, ow] table.
        let hw = g.shape(x)?.fixed_dims()?;
        let count = |ax: usize, y: usize, len: usize| {
            (0..self.kernel[ax])
                .filter_map(|a| (y * self.stride[ax] + a).checked_sub(self.padding[ax]))
                .filter(|&i| i < len)
                .count() as f64
        };
        let mut table = vec![];
        for r in 0..d[2] {
            for c in 0..d[3] {
                table.push(count(0, r, hw[2]) * count(1, c, hw[3]));
            }
        }
        let table = HostTensor::from_f64(&[d[2], d[3]], g.dtype(x), &table).ok()?;
        let table = g.constant(table);
        Some(g.div(acc, table))
    }
}

/// Samples shared by both pools; `mk(kernel, stride, padding)` builds the op.
fn pool_samples(name: &str, mk: impl Fn([usize; 2], [usize; 2], [usize; 2]) -> crate::Op) -> Vec<Sample> {
    type Case = ([usize; 4], [usize; 2], [usize; 2], [usize; 2], DType);
    let cases: [Case; 6] = [
        ([1, 1, 4, 4], [2, 2], [2, 2], [0, 0], DType::F32),
        ([2, 3, 5, 5], [3, 3], [2, 2], [1, 1], DType::F64),
        ([1, 2, 5, 7], [2, 3], [1, 2], [1, 1], DType::F32),
        ([2, 2, 5, 5], [3, 3], [1, 1], [1, 1], DType::F64),
        ([1, 3, 6, 5], [3, 2], [2, 1], [1, 0], DType::F32),
        ([1, 1, 3, 3], [1, 1], [1, 1], [0, 0], DType::F32),
    ];
    let mut out = vec![];
    for (i, (xd, k, s, p, dt)) in cases.into_iter().enumerate() {
        let n = xd.iter().product();
        let x = HostTensor::from_f64(&xd, dt, &rand_f64(n, -3.0, 3.0, 170 + i as u64)).expect("sample");
        out.push(Sample::new(format!("{name}/{dt}{xd:?}/k{k:?}s{s:?}p{p:?}"), mk(k, s, p), vec![x]));
    }
    // All-negative input with padding: max must not pick the padding.
    let x = HostTensor::from_f32(&[1, 1, 2, 2], &[-4.0, -3.0, -2.0, -1.0]).expect("sample");
    out.push(Sample::new(format!("{name}/negative_padded"), mk([2, 2], [1, 1], [1, 1]), vec![x]));
    out
}

impl Graph {
    /// 2-D max pooling of x `[N, C, H, W]` (padding counts as -inf).
    pub fn max_pool2d(&mut self, x: NodeId, kernel: [usize; 2], stride: [usize; 2], padding: [usize; 2]) -> NodeId {
        let op = MaxPool2d { kernel, stride, padding };
        self.add_node(op, &[x])
    }
    /// 2-D average pooling of x `[N, C, H, W]`, over in-bounds elements only.
    pub fn avg_pool2d(&mut self, x: NodeId, kernel: [usize; 2], stride: [usize; 2], padding: [usize; 2]) -> NodeId {
        let op = AvgPool2d { kernel, stride, padding };
        self.add_node(op, &[x])
    }
}
