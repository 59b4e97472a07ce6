//! `selective_scan` (Mamba): the recurrence run natively, rows `(b, d)` split across the pool.
//!
//! Per row the state entries `n` are independent chains, so each runs on its own over L: the
//! step factors `exp(dt * A[d, n])` and inputs `dt * u * B[b, n, :]` are computed for the whole
//! row first (independent, so they vectorize), leaving only one multiply-add per step on the
//! serial chain; B and C rows are contiguous in that order (`[B, N, L]`), and the state never
//! leaves registers. Per-task scratch (four rows of L) is reserved at build time.

use super::math::{Real, SharedMut};
use super::{Kernel, KernelBuilder, KernelCtx, unsupported};
use crate::exec::Bufs;
use crate::threads::{num_threads, parallel_for};
use rlx_driver::KernelTable;
use rlx_ir::ops::SelectiveScan;
use rlx_ir::ops::selective_scan::{ScanDims, softplus};
use rlx_ir::{DType, Op, OpKind, Result};
use std::sync::Mutex;

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register(OpKind::SelectiveScan, &[DType::F32, DType::F64], selective_scan);
    t.register(OpKind::SelectiveScanGrad, &[DType::F32, DType::F64], selective_scan_grad);
}

/// Below this many state updates (`B * D * N * L`) a scan runs on the calling thread only.
const PAR_MIN: usize = 1 << 14;

fn selective_scan(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::SelectiveScan(op) = ctx.op else { return Err(unsupported(ctx)) };
    let dims: Vec<Vec<usize>> = (0..ctx.ins.len()).map(|i| ctx.in_dims(i)).collect();
    let dref: Vec<&[usize]> = dims.iter().map(|v| v.as_slice()).collect();
    let s = op.dims_of(&dref).map_err(|e| rlx_ir::Error::eval("selective_scan", e))?;
    match ctx.out.dtype {
        DType::F32 => Ok(forward::<f32>(op.clone(), s)),
        DType::F64 => Ok(forward::<f64>(op.clone(), s)),
        _ => Err(unsupported(ctx)),
    }
}

/// Per-task rows of L: dt, dt * u, the step factors, the chain's states.
struct Rows<T> {
    dt: Vec<T>,
    dtu: Vec<T>,
    da: Vec<T>,
    h: Vec<T>,
}

impl<T: Real> Rows<T> {
    fn new(l: usize) -> Self {
        Rows { dt: vec![T::ZERO; l], dtu: vec![T::ZERO; l], da: vec![T::ZERO; l], h: vec![T::ZERO; l] }
    }
}

/// The operands of one run, as slices.
struct Operands<'a, T> {
    u: &'a [T],
    delta: &'a [T],
    a: &'a [T],
    b: &'a [T],
    c: &'a [T],
    d: Option<&'a [T]>,
    z: Option<&'a [T]>,
    bias: Option<&'a [T]>,
}

impl<'a, T: bytemuck::Pod> Operands<'a, T> {
    fn of(op: &SelectiveScan, bufs: &'a Bufs<'_>) -> Self {
        let (d, z, bias) = op.optional_slots();
        Operands {
            u: bufs.input::<T>(0),
            delta: bufs.input::<T>(1),
            a: bufs.input::<T>(2),
            b: bufs.input::<T>(3),
            c: bufs.input::<T>(4),
            d: d.map(|i| bufs.input::<T>(i)),
            z: z.map(|i| bufs.input::<T>(i)),
            bias: bias.map(|i| bufs.input::<T>(i)),
        }
    }
}

/// `dt` for row `(_, d)` at every step: delta plus the bias, softplus'd when asked.
fn row_dt<T: Real>(op: &SelectiveScan, x: &Operands<'_, T>, d: usize, row: usize, l: usize, out: &mut [T]) {
    let bias = x.bias.map_or(0.0, |v| v[d].to_f64());
    for (t, o) in out.iter_mut().enumerate() {
        let v = x.delta[row * l + t].to_f64() + bias;
        *o = T::from_f64(if op.delta_softplus { softplus(v) } else { v });
    }
}

fn forward<T: Real + bytemuck::Pod>(op: SelectiveScan, s: ScanDims) -> Kernel {
    let ScanDims { b: nb, d: nd, n: nn, l: nl } = s;
    let rows = nb * nd;
    let tasks = if rows * nn * nl < PAR_MIN { 1 } else { num_threads().min(rows).max(1) };
    let scratch: Vec<Mutex<Rows<T>>> = (0..tasks).map(|_| Mutex::new(Rows::new(nl))).collect();
    Box::new(move |bufs: &Bufs<'_>| {
        let x = Operands::<T>::of(&op, bufs);
        let out = SharedMut(bufs.output::<T>().as_mut_ptr());
        parallel_for(tasks, &|task| {
            let mine = (task * rows / tasks)..((task + 1) * rows / tasks);
            let mut sc = scratch[task].lock().unwrap_or_else(|e| e.into_inner());
            let Rows { dt, dtu, da, h } = &mut *sc;
            for row in mine {
                let (b, d) = (row / nd, row % nd);
                // SAFETY: each row of the output is written by the one task that owns the row.
                let y = unsafe { out.slice(row * nl, nl) };
                row_dt(&op, &x, d, row, nl, dt);
                let u = &x.u[row * nl..(row + 1) * nl];
                for t in 0..nl {
                    dtu[t] = dt[t] * u[t];
                }
                y.iter_mut().for_each(|v| *v = T::ZERO);
                for k in 0..nn {
                    let ak = x.a[d * nn + k];
                    let bk = &x.b[(b * nn + k) * nl..(b * nn + k + 1) * nl];
                    let ck = &x.c[(b * nn + k) * nl..(b * nn + k + 1) * nl];
                    for t in 0..nl {
                        da[t] = (dt[t] * ak).exp();
                        h[t] = dtu[t] * bk[t];
                    }
                    // The serial part: one multiply-add per step.
                    let mut state = T::ZERO;
                    for t in 0..nl {
                        state = da[t] * state + h[t];
                        h[t] = state;
                    }
                    for t in 0..nl {
                        y[t] = y[t] + h[t] * ck[t];
                    }
                }
                finish_row(&x, d, row, nl, y);
            }
        });
        Ok(())
    })
}

/// The skip (`+ D * u`) and gate (`* silu(z)`) on one output row.
fn finish_row<T: Real>(x: &Operands<'_, T>, d: usize, row: usize, l: usize, y: &mut [T]) {
    let u = &x.u[row * l..(row + 1) * l];
    if let Some(dv) = x.d {
        let dd = dv[d];
        for t in 0..l {
            y[t] = y[t] + dd * u[t];
        }
    }
    if let Some(z) = x.z {
        let z = &z[row * l..(row + 1) * l];
        for t in 0..l {
            let zt = z[t];
            y[t] = y[t] * (zt / (T::ONE + (T::ZERO - zt).exp()));
        }
    }
}

fn selective_scan_grad(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::SelectiveScanGrad(op) = ctx.op else { return Err(unsupported(ctx)) };
    let dims: Vec<Vec<usize>> = (0..ctx.ins.len()).map(|i| ctx.in_dims(i)).collect();
    let dref: Vec<&[usize]> = dims.iter().map(|v| v.as_slice()).collect();
    let s = op.dims_of(&dref).map_err(|e| rlx_ir::Error::eval("selective_scan_grad", e))?;
    let segs = op.segments(s);
    match ctx.out.dtype {
        DType::F32 => Ok(backward::<f32>(op.scan.clone(), s, segs)),
        DType::F64 => Ok(backward::<f64>(op.scan.clone(), s, segs)),
        _ => Err(unsupported(ctx)),
    }
}

/// Per-task rows of the backward: the raw and final dt, dt * u, the gated cotangent, the dt
/// cotangent, one chain's step factors, and every chain's states (`[N, L]`).
struct GradRows<T> {
    raw: Vec<T>,
    dt: Vec<T>,
    dtu: Vec<T>,
    gp: Vec<T>,
    ddt: Vec<T>,
    da: Vec<T>,
    h: Vec<T>,
}

/// Per-task sums of the gradients that several rows add to: A `[D, N]`, B and C `[B, N, L]`,
/// D and delta_bias `[D]` (summed over tasks at the end, so rows run without locks).
struct Shared<T> {
    a: Vec<T>,
    b: Vec<T>,
    c: Vec<T>,
    d: Vec<T>,
    bias: Vec<T>,
}

/// Shared gradient `which` (A, B, C, D, delta_bias in that order).
fn field<T>(s: &Shared<T>, which: usize) -> &[T] {
    match which {
        0 => &s.a,
        1 => &s.b,
        2 => &s.c,
        3 => &s.d,
        _ => &s.bias,
    }
}

/// The backward per row `(b, d)`: the forward again to get the states (kept for the row, `N x L`),
/// then each chain's reverse recurrence `lam_t = gp_t C_t + exp(dt_{t+1} A) lam_{t+1}`.
fn backward<T: Real + bytemuck::Pod>(op: SelectiveScan, s: ScanDims, segs: Vec<usize>) -> Kernel {
    let ScanDims { b: nb, d: nd, n: nn, l: nl } = s;
    let rows = nb * nd;
    let tasks = if rows * nn * nl < PAR_MIN { 1 } else { num_threads().min(rows).max(1) };
    let z = || vec![T::ZERO; nl];
    let scratch: Vec<Mutex<(GradRows<T>, Shared<T>)>> = (0..tasks)
        .map(|_| {
            let r = GradRows { raw: z(), dt: z(), dtu: z(), gp: z(), ddt: z(), da: z(), h: vec![T::ZERO; nn * nl] };
            let bnl = nb * nn * nl;
            let sh = Shared {
                a: vec![T::ZERO; nd * nn],
                b: vec![T::ZERO; bnl],
                c: vec![T::ZERO; bnl],
                d: vec![T::ZERO; nd],
                bias: vec![T::ZERO; nd],
            };
            Mutex::new((r, sh))
        })
        .collect();
    let mut offs = vec![0usize];
    for n in &segs {
        offs.push(offs.last().copied().unwrap_or(0) + n);
    }
    let (sd, sz, sb) = op.optional_slots();
    let seg_of = |slot: Option<usize>| slot.map(|i| offs[i]);
    let (off_d, off_z, off_bias) = (seg_of(sd), seg_of(sz), seg_of(sb));
    let bdl = nb * nd * nl;
    Box::new(move |bufs: &Bufs<'_>| {
        let x = Operands::<T>::of(&op, bufs);
        let dy = bufs.input::<T>(op.num_inputs());
        let out = bufs.output::<T>();
        let outp = SharedMut(out.as_mut_ptr());
        parallel_for(tasks, &|task| {
            let mine = (task * rows / tasks)..((task + 1) * rows / tasks);
            let mut sc = scratch[task].lock().unwrap_or_else(|e| e.into_inner());
            let (r, sh) = &mut *sc;
            for v in [&mut sh.a, &mut sh.b, &mut sh.c, &mut sh.d, &mut sh.bias] {
                v.iter_mut().for_each(|e| *e = T::ZERO);
            }
            for row in mine {
                // SAFETY: the per-row segments (du, ddelta, dz) of row `row` are written by the
                // one task that owns the row; the shared ones are summed after the loop.
                let du = unsafe { outp.slice(row * nl, nl) };
                let ddelta = unsafe { outp.slice(bdl + row * nl, nl) };
                let dz = off_z.map(|o| unsafe { outp.slice(o + row * nl, nl) });
                grad_row(&op, s, &x, &dy[row * nl..(row + 1) * nl], row, r, sh, du, ddelta, dz);
            }
        });
        // Sum the tasks' shared gradients into their segments.
        let shared = [(Some(offs[2]), 0), (Some(offs[3]), 1), (Some(offs[4]), 2), (off_d, 3), (off_bias, 4)];
        for (off, which) in shared {
            let Some(off) = off else { continue };
            let len = field(&scratch[0].lock().unwrap_or_else(|e| e.into_inner()).1, which).len();
            let dst = &mut out[off..off + len];
            dst.iter_mut().for_each(|e| *e = T::ZERO);
            for m in &scratch {
                let g = m.lock().unwrap_or_else(|e| e.into_inner());
                for (o, v) in dst.iter_mut().zip(field(&g.1, which)) {
                    *o = *o + *v;
                }
            }
        }
        Ok(())
    })
}

/// The backward of one row `(b, d)`; see `backward`.
#[allow(clippy::too_many_arguments)]
fn grad_row<T: Real>(
    op: &SelectiveScan,
    s: ScanDims,
    x: &Operands<'_, T>,
    dy: &[T],
    row: usize,
    r: &mut GradRows<T>,
    sh: &mut Shared<T>,
    du: &mut [T],
    ddelta: &mut [T],
    dz: Option<&mut [T]>,
) {
    let ScanDims { b: _, d: nd, n: nn, l: nl } = s;
    let (b, d) = (row / nd, row % nd);
    let bias = x.bias.map_or(0.0, |v| v[d].to_f64());
    for t in 0..nl {
        let v = x.delta[row * nl + t].to_f64() + bias;
        r.raw[t] = T::from_f64(v);
        r.dt[t] = T::from_f64(if op.delta_softplus { softplus(v) } else { v });
    }
    let u = &x.u[row * nl..(row + 1) * nl];
    for ((o, &dt), &ut) in r.dtu.iter_mut().zip(&r.dt).zip(u) {
        *o = dt * ut;
    }
    // Forward again: every chain's states, and the scan's output for the gate's derivative.
    r.gp.iter_mut().for_each(|v| *v = T::ZERO);
    for k in 0..nn {
        let ak = x.a[d * nn + k];
        let bk = &x.b[(b * nn + k) * nl..(b * nn + k + 1) * nl];
        let ck = &x.c[(b * nn + k) * nl..(b * nn + k + 1) * nl];
        let hk = &mut r.h[k * nl..(k + 1) * nl];
        for t in 0..nl {
            r.da[t] = (r.dt[t] * ak).exp();
            hk[t] = r.dtu[t] * bk[t];
        }
        let mut st = T::ZERO;
        for (h, &da) in hk.iter_mut().zip(&r.da) {
            st = da * st + *h;
            *h = st;
        }
        for t in 0..nl {
            r.gp[t] = r.gp[t] + hk[t] * ck[t];
        }
    }
    // r.gp holds the scan's output; turn it into the gated cotangent.
    let dv = x.d.map(|v| v[d]);
    match (x.z, dz) {
        (Some(z), Some(dz)) => {
            let z = &z[row * nl..(row + 1) * nl];
            for t in 0..nl {
                let ypre = r.gp[t] + dv.map_or(T::ZERO, |dd| dd * u[t]);
                let sg = T::ONE / (T::ONE + (T::ZERO - z[t]).exp());
                dz[t] = dy[t] * ypre * sg * (T::ONE + z[t] * (T::ONE - sg));
                r.gp[t] = dy[t] * z[t] * sg;
            }
        }
        _ => r.gp.copy_from_slice(dy),
    }
    match dv {
        Some(dd) => {
            let mut acc = T::ZERO;
            for t in 0..nl {
                acc = acc + r.gp[t] * u[t];
                du[t] = r.gp[t] * dd;
            }
            sh.d[d] = sh.d[d] + acc;
        }
        None => du.iter_mut().for_each(|v| *v = T::ZERO),
    }
    r.ddt.iter_mut().for_each(|v| *v = T::ZERO);
    for k in 0..nn {
        let ak = x.a[d * nn + k];
        let base = (b * nn + k) * nl;
        let (bk, ck) = (&x.b[base..base + nl], &x.c[base..base + nl]);
        let (dbk, dck) = (&mut sh.b[base..base + nl], &mut sh.c[base..base + nl]);
        let hk = &r.h[k * nl..(k + 1) * nl];
        for t in 0..nl {
            r.da[t] = (r.dt[t] * ak).exp();
        }
        let (mut lam, mut da_acc) = (T::ZERO, T::ZERO);
        for t in (0..nl).rev() {
            if t + 1 < nl {
                lam = lam * r.da[t + 1];
            }
            lam = lam + r.gp[t] * ck[t];
            let hprev = if t > 0 { hk[t - 1] } else { T::ZERO };
            let dda = lam * hprev * r.da[t];
            r.ddt[t] = r.ddt[t] + dda * ak + lam * bk[t] * u[t];
            da_acc = da_acc + dda * r.dt[t];
            dbk[t] = dbk[t] + lam * r.dtu[t];
            dck[t] = dck[t] + r.gp[t] * hk[t];
            du[t] = du[t] + lam * r.dt[t] * bk[t];
        }
        sh.a[d * nn + k] = sh.a[d * nn + k] + da_acc;
    }
    let mut bsum = T::ZERO;
    for ((o, &ddt), &raw) in ddelta.iter_mut().zip(&r.ddt).zip(&r.raw) {
        let g = if op.delta_softplus { ddt / (T::ONE + (T::ZERO - raw).exp()) } else { ddt };
        *o = g;
        bsum = bsum + g;
    }
    sh.bias[d] = sh.bias[d] + bsum;
}
