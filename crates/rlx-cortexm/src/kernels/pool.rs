//! Average and max pooling: TFLite Micro's int8 `AveragePool` / `MaxPool` reference loops. Input
//! and output share one quantization; padding taps are left out of the window (and of the
//! average's count).

use super::{Nhwc, check_len};
use crate::Error;

/// A pooling layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolParams {
    /// Input shape.
    pub input: Nhwc,
    /// Output shape (same channels).
    pub output: Nhwc,
    /// Kernel height and width.
    pub kernel: [usize; 2],
    /// Stride.
    pub stride: [usize; 2],
    /// Padding before the first row and column.
    pub pad: [usize; 2],
    /// The smallest output value (the zero point for a fused ReLU, else -128).
    pub act_min: i32,
    /// The largest output value.
    pub act_max: i32,
}

fn pool(
    op: &'static str,
    p: &PoolParams,
    input: &[i8],
    output: &mut [i8],
    f: impl Fn(i32, usize) -> i32,
    init: i32,
    step: impl Fn(i32, i32) -> i32,
) -> Result<(), Error> {
    let (i, o) = (p.input, p.output);
    check_len(op, "input", i.len(), input.len())?;
    check_len(op, "output", o.len(), output.len())?;
    check_len(op, "channels", i.c, o.c)?;
    check_len(op, "batch", i.n, o.n)?;
    for n in 0..o.n {
        for oy in 0..o.h {
            // The window's rows inside the image: TFLite's filter_y_start / filter_y_end.
            let y0 = (oy * p.stride[0]) as isize - p.pad[0] as isize;
            let ky0 = (-y0).max(0) as usize;
            let ky1 = (i.h as isize - y0).clamp(0, p.kernel[0] as isize) as usize;
            for ox in 0..o.w {
                let x0 = (ox * p.stride[1]) as isize - p.pad[1] as isize;
                let kx0 = (-x0).max(0) as usize;
                let kx1 = (i.w as isize - x0).clamp(0, p.kernel[1] as isize) as usize;
                let count = ky1.saturating_sub(ky0) * kx1.saturating_sub(kx0);
                if count == 0 {
                    return Err(Error::Param { op, what: "a window lies wholly in the padding" });
                }
                for c in 0..o.c {
                    let mut acc = init;
                    for ky in ky0..ky1 {
                        let iy = (y0 + ky as isize) as usize;
                        for kx in kx0..kx1 {
                            let ix = (x0 + kx as isize) as usize;
                            acc = step(acc, input[i.at(n, iy, ix, c)] as i32);
                        }
                    }
                    output[o.at(n, oy, ox, c)] = f(acc, count).clamp(p.act_min, p.act_max) as i8;
                }
            }
        }
    }
    Ok(())
}

/// Average pooling: the in-bounds sum divided by the in-bounds count, rounded half away from zero.
pub fn avg_pool2d(p: &PoolParams, input: &[i8], output: &mut [i8]) -> Result<(), Error> {
    let avg = |acc: i32, count: usize| {
        let c = count as i32;
        // C's division truncates; the +-c/2 makes it round half away from zero, as TFLite does.
        if acc > 0 { (acc + c / 2) / c } else { (acc - c / 2) / c }
    };
    pool("avg_pool2d", p, input, output, avg, 0, |a, x| a + x)
}

/// Max pooling.
pub fn max_pool2d(p: &PoolParams, input: &[i8], output: &mut [i8]) -> Result<(), Error> {
    pool("max_pool2d", p, input, output, |acc, _| acc, i8::MIN as i32, |a, x| a.max(x))
}
