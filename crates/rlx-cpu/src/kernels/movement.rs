//! Data movement (reshape, transpose, broadcast, slice, concat, ...): one kernel for every op
//! with the DATA_MOVEMENT trait. Its index map comes from `rlx_driver::movement_index_map` (the
//! op's reference run on element ids), so a new movement op needs no CPU code.

use super::{ALL, Kernel, KernelBuilder, KernelCtx, unsupported};
use crate::exec::Bufs;
use rlx_driver::KernelTable;
use rlx_ir::{OpTraits, Result};

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register_trait(OpTraits::DATA_MOVEMENT, ALL, movement);
}

fn movement(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    if !ctx.op.def().traits().contains(OpTraits::DATA_MOVEMENT) {
        return Err(unsupported(ctx));
    }
    let wide = rlx_driver::movement_index_map(ctx.op, ctx.ins, ctx.out)?;
    let identity = rlx_driver::is_identity_map(&wide, ctx.ins);
    let size = ctx.out.dtype.size_bytes();
    // (input, element) per output element, narrowed to halve the map's memory.
    let map: Vec<(u32, u32)> = wide.into_iter().map(|(i, e)| (i as u32, e as u32)).collect();
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
