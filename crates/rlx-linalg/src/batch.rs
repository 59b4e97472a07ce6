//! Leading batch dims, numpy's rule: each input has a core (its trailing matrix or vector axes)
//! and batch dims in front that broadcast against each other; the op runs once per batch item of
//! the output. The reference and the CPU kernel share this loop over one per-item function, in
//! f64 (f32 tensors are widened per item).

use rlx_cpu::exec::Bufs;
use rlx_cpu::kernels::{Kernel, KernelCtx};
use rlx_ir::ops::util::broadcast_index_map;
use rlx_ir::{DType, Data, Error, HostTensor, Result, Shape};
use std::borrow::Cow;
use std::sync::{Arc, Mutex};

/// One batch item: the inputs' cores in, the output's core out; Err(reason) for a value the op
/// has no answer for (a singular matrix), reported with the item's index.
pub(crate) type ItemFn = Arc<dyn Fn(&[&[f64]], &mut [f64]) -> std::result::Result<(), String> + Send + Sync>;

/// Where each batch item's inputs and output lie.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    /// Batch items of the output.
    items: usize,
    /// Per input, the input batch item each output item reads (broadcasting).
    maps: Vec<Vec<usize>>,
    /// Elements in each input's core.
    sizes: Vec<usize>,
    /// Elements in the output's core.
    out_size: usize,
}

impl Layout {
    /// `ins[i]` has `core[i]` trailing core axes; the output has `out_core`.
    pub(crate) fn new(ins: &[Vec<usize>], core: &[usize], out: &[usize], out_core: usize) -> Layout {
        let split = |d: &[usize], c: usize| {
            let c = c.min(d.len());
            (d[..d.len() - c].to_vec(), d[d.len() - c..].iter().product::<usize>())
        };
        let (ob, out_size) = split(out, out_core);
        let (mut maps, mut sizes) = (vec![], vec![]);
        for (d, &c) in ins.iter().zip(core) {
            let (b, s) = split(d, c);
            maps.push(broadcast_index_map(&ob, &b));
            sizes.push(s);
        }
        Layout { items: ob.iter().product(), maps, sizes, out_size }
    }
}

fn item_error(op: &str, item: usize, reason: String) -> Error {
    Error::eval(op, format!("batch item {item}: {reason}"))
}

/// The reference evaluation: `f` on every batch item, in f64.
pub(crate) fn reference(
    op: &str,
    ins: &[&HostTensor],
    out: &Shape,
    core: &[usize],
    out_core: usize,
    f: &ItemFn,
) -> Result<HostTensor> {
    let dims: Vec<Vec<usize>> = ins.iter().map(|t| t.dims()).collect();
    let od = out.dims_fixed().map_err(|e| Error::eval(op, e))?;
    let l = Layout::new(&dims, core, &od, out_core);
    let data: Vec<Vec<f64>> = ins.iter().map(|t| t.to_f64_vec()).collect::<Result<_>>()?;
    let mut o = vec![0.0; l.items * l.out_size];
    for i in 0..l.items {
        let xs: Vec<&[f64]> = (0..ins.len()).map(|j| &data[j][l.maps[j][i] * l.sizes[j]..][..l.sizes[j]]).collect();
        f(&xs, &mut o[i * l.out_size..][..l.out_size]).map_err(|r| item_error(op, i, r))?;
    }
    let mut t = HostTensor::new(out.clone(), Data::F(o))?;
    t.round_in_place();
    Ok(t)
}

/// The output buffer, shared by the pool's threads: each item writes only its own core.
struct OutPtr(*mut u8);
// SAFETY: items write disjoint ranges of one buffer that outlives the parallel loop.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The base pointer (a method, so closures capture the Sync wrapper, not the raw field).
    fn base(&self) -> *mut u8 {
        self.0
    }
}

/// The CPU kernel: `f` on every batch item, items spread over rlx-cpu's pool (each item runs
/// single-threaded, so the pool is never oversubscribed).
pub(crate) fn kernel(
    op: &'static str,
    ctx: &KernelCtx<'_>,
    core: &[usize],
    out_core: usize,
    f: ItemFn,
) -> Result<Kernel> {
    let dims: Vec<Vec<usize>> = (0..ctx.ins.len()).map(|i| ctx.in_dims(i)).collect();
    let l = Layout::new(&dims, core, &ctx.out_dims(), out_core);
    let dt = ctx.out.dtype;
    if !matches!(dt, DType::F32 | DType::F64) || ctx.ins.iter().any(|s| s.dtype != dt) {
        return Err(rlx_cpu::kernels::unsupported(ctx));
    }
    Ok(Box::new(move |b: &Bufs<'_>| {
        let ins: Vec<Cow<'_, [f64]>> = (0..l.maps.len())
            .map(|j| match dt {
                DType::F64 => Cow::Borrowed(b.input::<f64>(j)),
                _ => Cow::Owned(b.input::<f32>(j).iter().map(|&v| v as f64).collect()),
            })
            .collect();
        let out = OutPtr(b.output_bytes().as_mut_ptr());
        let failed: Mutex<Option<(usize, String)>> = Mutex::new(None);
        rlx_cpu::threads::parallel_for(l.items, &|i| {
            let xs: Vec<&[f64]> = (0..ins.len()).map(|j| &ins[j][l.maps[j][i] * l.sizes[j]..][..l.sizes[j]]).collect();
            let n = l.out_size;
            let r = match dt {
                DType::F64 => {
                    // SAFETY: item i owns elements [i n, (i + 1) n) of the f64 output.
                    let o = unsafe { std::slice::from_raw_parts_mut((out.base() as *mut f64).add(i * n), n) };
                    f(&xs, o)
                }
                _ => {
                    let mut tmp = vec![0.0; n];
                    let r = f(&xs, &mut tmp);
                    // SAFETY: as above, for the f32 output.
                    let o = unsafe { std::slice::from_raw_parts_mut((out.base() as *mut f32).add(i * n), n) };
                    o.iter_mut().zip(&tmp).for_each(|(o, &v)| *o = v as f32);
                    r
                }
            };
            if let Err(reason) = r {
                let mut g = failed.lock().unwrap_or_else(|p| p.into_inner());
                if g.as_ref().is_none_or(|(j, _)| i < *j) {
                    *g = Some((i, reason));
                }
            }
        });
        match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some((i, reason)) => Err(item_error(op, i, reason)),
            None => Ok(()),
        }
    }))
}
