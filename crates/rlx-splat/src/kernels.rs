//! CPU kernels for f32 and f64: inputs widened to f64, the tiled rasterizer run over rlx-cpu's
//! pool (tiles are the tasks), the result narrowed back.

use crate::ops::{SplatRender, SplatRenderGrad, scene_of};
use crate::raster;
use rlx_cpu::exec::Bufs;
use rlx_cpu::kernels::{Kernel, KernelCtx, unsupported};
use rlx_ir::{DType, Error, Op, Result};

fn op_of<'a, T: 'static>(ctx: &'a KernelCtx<'_>) -> Result<&'a T> {
    match ctx.op {
        Op::Custom(c) => c.get::<T>().ok_or_else(|| unsupported(ctx)),
        _ => Err(unsupported(ctx)),
    }
}

/// The one float dtype every input and the output share.
fn dtype(ctx: &KernelCtx<'_>) -> Result<DType> {
    let dt = ctx.out.dtype;
    if !matches!(dt, DType::F32 | DType::F64) || ctx.ins.iter().any(|s| s.dtype != dt) {
        return Err(unsupported(ctx));
    }
    Ok(dt)
}

fn reals(b: &Bufs<'_>, i: usize, dt: DType) -> Vec<f64> {
    match dt {
        DType::F32 => b.input::<f32>(i).iter().map(|&v| v as f64).collect(),
        _ => b.input::<f64>(i).to_vec(),
    }
}

fn write(b: &Bufs<'_>, dt: DType, y: &[f64]) {
    match dt {
        DType::F32 => b.output::<f32>().iter_mut().zip(y).for_each(|(o, &v)| *o = v as f32),
        _ => b.output::<f64>().copy_from_slice(y),
    }
}

/// `splat_render`.
pub(crate) fn render(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let op: SplatRender = op_of::<SplatRender>(ctx)?.clone();
    let dt = dtype(ctx)?;
    Ok(Box::new(move |b: &Bufs<'_>| {
        let v: Vec<Vec<f64>> = (0..5).map(|i| reals(b, i, dt)).collect();
        let img = raster::render(&op, &scene_of(&v), true).map_err(Error::from)?;
        write(b, dt, &img);
        Ok(())
    }))
}

/// `splat_render_grad`.
pub(crate) fn render_grad(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let op: SplatRender = op_of::<SplatRenderGrad>(ctx)?.render.clone();
    let dt = dtype(ctx)?;
    Ok(Box::new(move |b: &Bufs<'_>| {
        let v: Vec<Vec<f64>> = (0..5).map(|i| reals(b, i, dt)).collect();
        let ct = reals(b, 5, dt);
        let g = raster::backward(&op, &scene_of(&v), &ct, true).map_err(Error::from)?;
        write(b, dt, &g);
        Ok(())
    }))
}
