//! Data movement (reshape, transpose, broadcast, slice, concat, ...): one kernel for every op
//! with the DATA_MOVEMENT trait. Its index map is derived at compile time by running the op's
//! reference on tensors of element ids, so a new movement op needs no CPU code.

use super::{ALL, Kernel, KernelBuilder, KernelCtx, unsupported};
use crate::exec::Bufs;
use rlx_driver::KernelTable;
use rlx_ir::{DType, Data, Error, HostTensor, OpTraits, Result, Shape};

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register_trait(OpTraits::DATA_MOVEMENT, ALL, movement);
}

fn movement(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    if !ctx.op.def().traits().contains(OpTraits::DATA_MOVEMENT) {
        return Err(unsupported(ctx));
    }
    // Element ids: input i's elements are numbered after those of inputs 0..i.
    let mut ids = vec![];
    let mut starts = vec![];
    let mut next = 0i64;
    for s in ctx.ins {
        let n = s.numel().unwrap_or(0) as i64;
        starts.push(next);
        ids.push(HostTensor::new(s.with_dtype(DType::I64), Data::I((next..next + n).collect()))?);
        next += n;
    }
    let refs: Vec<&HostTensor> = ids.iter().collect();
    let out_ty: Shape = ctx.out.with_dtype(DType::I64);
    let mapped = ctx.op.def().reference(&refs, &out_ty)?;
    let Data::I(src) = mapped.data else { return Err(Error::eval(ctx.op.def().name(), "index map is not integer")) };
    let size = ctx.out.dtype.size_bytes();
    // (input, element) per output element.
    let map: Vec<(u32, u32)> = src
        .iter()
        .map(|&id| {
            let i = starts.partition_point(|&s| s <= id) - 1;
            (i as u32, (id - starts[i]) as u32)
        })
        .collect();
    let identity = ctx.ins.len() == 1
        && map.len() == ctx.ins[0].numel().unwrap_or(0)
        && map.iter().enumerate().all(|(j, &(_, e))| e as usize == j);
    if identity {
        return Ok(Box::new(move |b: &Bufs<'_>| {
            b.output_bytes().copy_from_slice(b.input_bytes(0));
            Ok(())
        }));
    }
    Ok(Box::new(move |b: &Bufs<'_>| {
        let out = b.output_bytes();
        for (dst, &(i, e)) in out.chunks_exact_mut(size).zip(&map) {
            let src = b.input_bytes(i as usize);
            let e = e as usize * size;
            dst.copy_from_slice(&src[e..e + size]);
        }
        Ok(())
    }))
}
