//! `selective_scan` (Mamba): the recurrence run natively, rows `(b, d)` split across the pool.
//!
//! Per row the state entries `n` are independent chains. The forward runs `LANES` of them side
//! by side: their step factors `exp(dt * A[d, n])`, inputs `dt * u * B[b, n, :]` and `C` are laid
//! out step-major for the group first (the exps vectorize across the lanes), leaving one vector
//! multiply-add per step on the serial chain instead of one scalar multiply-add per chain and
//! step. Per-task scratch is reserved at build time.

use super::math::{Real, SharedMut, avx2_fma};
use super::{Kernel, KernelBuilder, KernelCtx, unsupported};
use crate::exec::Bufs;
use crate::threads::{num_threads, parallel_for};
use rlx_driver::KernelTable;
use rlx_ir::ops::SelectiveScan;
use rlx_ir::ops::selective_scan::ScanDims;
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

/// Chains run side by side (one AVX2 vector of f32): the forward's lanes are 8 rows `d` of one
/// batch item (they share `B` and `C`, which become broadcasts), the backward's 8 state entries
/// `n` of one row.
const LANES: usize = 8;
const _: () = assert!(LANES == 8, "lane_sum adds eight lanes");

/// One backward group's step-major tiles (`[L][LANES]`): step factors, inputs `dt * u * B`, `C`,
/// `B`, the states, and the `B` and `C` gradients.
struct Tiles<T> {
    da: Vec<[T; LANES]>,
    hb: Vec<[T; LANES]>,
    c: Vec<[T; LANES]>,
    b: Vec<[T; LANES]>,
    hs: Vec<[T; LANES]>,
    db: Vec<[T; LANES]>,
    dc: Vec<[T; LANES]>,
}

impl<T: Real> Tiles<T> {
    fn new(l: usize) -> Self {
        let tile = || vec![[T::ZERO; LANES]; l];
        Tiles { da: tile(), hb: tile(), c: tile(), b: tile(), hs: tile(), db: tile(), dc: tile() }
    }
}

/// Per-task scratch of the forward: one row's dt, and the lanes' dt, dt * u and output,
/// step-major.
struct Rows<T> {
    row: Vec<T>,
    dt: Vec<[T; LANES]>,
    dtu: Vec<[T; LANES]>,
    y: Vec<[T; LANES]>,
}

impl<T: Real> Rows<T> {
    fn new(l: usize) -> Self {
        let tile = || vec![[T::ZERO; LANES]; l];
        Rows { row: vec![T::ZERO; l], dt: tile(), dtu: tile(), y: tile() }
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
    let bias = x.bias.map_or(T::ZERO, |v| v[d]);
    for (o, &delta) in out.iter_mut().zip(&x.delta[row * l..(row + 1) * l]) {
        let v = delta + bias;
        *o = if op.delta_softplus { v.softplus() } else { v };
    }
}

fn forward<T: Real + bytemuck::Pod>(op: SelectiveScan, s: ScanDims) -> Kernel {
    let ScanDims { b: nb, d: nd, n: nn, l: nl } = s;
    let dgroups = nd.div_ceil(LANES);
    let groups = nb * dgroups;
    let tasks = if nb * nd * nn * nl < PAR_MIN { 1 } else { num_threads().min(groups).max(1) };
    let scratch: Vec<Mutex<Rows<T>>> = (0..tasks).map(|_| Mutex::new(Rows::new(nl))).collect();
    let simd = avx2_fma();
    Box::new(move |bufs: &Bufs<'_>| {
        let x = Operands::<T>::of(&op, bufs);
        let out = SharedMut(bufs.output::<T>().as_mut_ptr());
        parallel_for(tasks, &|task| {
            let mine = (task * groups / tasks)..((task + 1) * groups / tasks);
            let mut sc = scratch[task].lock().unwrap_or_else(|e| e.into_inner());
            let Rows { row: rt, dt, dtu, y } = &mut *sc;
            for gi in mine {
                let (b, d0) = (gi / dgroups, (gi % dgroups) * LANES);
                let w = LANES.min(nd - d0);
                // The lanes' dt and dt * u, step-major; lanes past the rows stay 0 (their
                // states stay 0 and their outputs are not written).
                for (dt, dtu) in dt.iter_mut().zip(dtu.iter_mut()) {
                    *dt = [T::ZERO; LANES];
                    *dtu = [T::ZERO; LANES];
                }
                for j in 0..w {
                    let row = b * nd + d0 + j;
                    row_dt(&op, &x, d0 + j, row, nl, rt);
                    let u = &x.u[row * nl..(row + 1) * nl];
                    for (((dt, dtu), &v), &ut) in dt.iter_mut().zip(dtu.iter_mut()).zip(rt.iter()).zip(u) {
                        dt[j] = v;
                        dtu[j] = v * ut;
                    }
                }
                y.iter_mut().for_each(|v| *v = [T::ZERO; LANES]);
                for k in 0..nn {
                    let mut a = [T::ZERO; LANES];
                    for (j, a) in a.iter_mut().enumerate().take(w) {
                        *a = x.a[(d0 + j) * nn + k];
                    }
                    let bc = (b * nn + k) * nl..(b * nn + k + 1) * nl;
                    lanes_scan(simd, &a, dt, dtu, &x.b[bc.clone()], &x.c[bc], y);
                }
                for j in 0..w {
                    let row = b * nd + d0 + j;
                    // SAFETY: each row of the output is written by the one task that owns its group.
                    let out = unsafe { out.slice(row * nl, nl) };
                    for (o, y) in out.iter_mut().zip(y.iter()) {
                        *o = y[j];
                    }
                    finish_row(&x, d0 + j, row, nl, out);
                }
            }
        });
        Ok(())
    })
}

/// One state entry `k` for every lane (row `d`): `h = exp(dt * A[d, k]) * h + dt * u * B[k, t]`
/// and `y += h * C[k, t]` per step, `B` and `C` shared by the lanes.
#[inline(always)]
fn lanes_scan_body<T: Real, const FMA: bool>(
    a: &[T; LANES],
    dt: &[[T; LANES]],
    dtu: &[[T; LANES]],
    bk: &[T],
    ck: &[T],
    y: &mut [[T; LANES]],
) {
    let mut h = [T::ZERO; LANES];
    for ((((dt, dtu), &bt), &ct), y) in dt.iter().zip(dtu).zip(bk).zip(ck).zip(y.iter_mut()) {
        for j in 0..LANES {
            let da = (dt[j] * a[j]).exp();
            h[j] = T::madd::<FMA>(da, h[j], dtu[j] * bt);
            y[j] = T::madd::<FMA>(h[j], ct, y[j]);
        }
    }
}

crate::simd_entry!(lanes_scan = lanes_scan_body<T: Real>(a: &[T; LANES], dt: &[[T; LANES]], dtu: &[[T; LANES]], bk: &[T], ck: &[T], y: &mut [[T; LANES]]));

/// One group of up to `LANES` state entries of a row: their `A[d, k]`, and their `B` and `C`
/// rows (`[w, L]`).
struct Group<'a, T> {
    a: &'a [T],
    b: &'a [T],
    c: &'a [T],
    l: usize,
}

/// Fills the group's step-major tiles `da`, `hb`, `c`, `b`; lanes past the group's width stay
/// zero (they decay to and add nothing).
#[inline(always)]
fn group_tiles_body<T: Real, const FMA: bool>(g: &Group<'_, T>, dt: &[T], dtu: &[T], tl: &mut Tiles<T>) {
    let w = g.a.len();
    let mut a = [T::ZERO; LANES];
    a[..w].copy_from_slice(g.a);
    let rows = tl.da.iter_mut().zip(tl.hb.iter_mut()).zip(tl.c.iter_mut()).zip(tl.b.iter_mut());
    for (t, (((da, hb), c), bt)) in rows.enumerate() {
        let (dtt, dtut) = (dt[t], dtu[t]);
        for j in 0..LANES {
            da[j] = (dtt * a[j]).exp();
        }
        for j in 0..LANES {
            let (bj, cj) = if j < w { (g.b[j * g.l + t], g.c[j * g.l + t]) } else { (T::ZERO, T::ZERO) };
            hb[j] = dtut * bj;
            c[j] = cj;
            bt[j] = bj;
        }
    }
}

/// The sum of a vector's lanes, pairwise.
#[inline(always)]
fn lane_sum<T: Real>(p: [T; LANES]) -> T {
    let mut q = [T::ZERO; LANES / 2];
    for j in 0..LANES / 2 {
        q[j] = p[j] + p[j + LANES / 2];
    }
    (q[0] + q[2]) + (q[1] + q[3])
}

crate::simd_entry!(group_tiles = group_tiles_body<T: Real>(g: &Group<'_, T>, dt: &[T], dtu: &[T], tl: &mut Tiles<T>));

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
/// cotangent, the scan's output (for the gate's derivative), and one group's tiles.
struct GradRows<T> {
    raw: Vec<T>,
    dt: Vec<T>,
    dtu: Vec<T>,
    gp: Vec<T>,
    ddt: Vec<T>,
    y: Vec<T>,
    tiles: Tiles<T>,
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
            let r = GradRows { raw: z(), dt: z(), dtu: z(), gp: z(), ddt: z(), y: z(), tiles: Tiles::new(nl) };
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
    let simd = avx2_fma();
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
                grad_row(simd, &op, s, &x, &dy[row * nl..(row + 1) * nl], row, r, sh, du, ddelta, dz);
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
    simd: bool,
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
    let bias = x.bias.map_or(T::ZERO, |v| v[d]);
    for ((raw, dt), &delta) in r.raw.iter_mut().zip(r.dt.iter_mut()).zip(&x.delta[row * nl..(row + 1) * nl]) {
        let v = delta + bias;
        *raw = v;
        *dt = if op.delta_softplus { v.softplus() } else { v };
    }
    let u = &x.u[row * nl..(row + 1) * nl];
    for ((o, &dt), &ut) in r.dtu.iter_mut().zip(&r.dt).zip(u) {
        *o = dt * ut;
    }
    // The scan output's cotangent, dy * silu(z): it does not depend on the output, so every
    // group's reverse pass can run right after its forward one.
    let zrow = x.z.map(|z| &z[row * nl..(row + 1) * nl]);
    match zrow {
        Some(z) => {
            for ((g, &dyt), &zt) in r.gp.iter_mut().zip(dy).zip(z) {
                *g = dyt * zt / (T::ONE + (T::ZERO - zt).exp());
            }
        }
        None => r.gp.copy_from_slice(dy),
    }
    let dv = x.d.map(|v| v[d]);
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
    r.y.iter_mut().for_each(|v| *v = T::ZERO);
    for k0 in (0..nn).step_by(LANES) {
        let w = LANES.min(nn - k0);
        let base = (b * nn + k0) * nl;
        let g = Group {
            a: &x.a[d * nn + k0..d * nn + k0 + w],
            b: &x.b[base..base + w * nl],
            c: &x.c[base..base + w * nl],
            l: nl,
        };
        group_tiles(simd, &g, &r.dt, &r.dtu, &mut r.tiles);
        let rows = GroupRows { dt: &r.dt, dtu: &r.dtu, u, gp: &r.gp };
        let mut da_acc = [T::ZERO; LANES];
        group_grad(simd, &g, &rows, &mut r.tiles, &mut r.y, &mut r.ddt, du, &mut da_acc);
        for j in 0..w {
            sh.a[d * nn + k0 + j] = sh.a[d * nn + k0 + j] + da_acc[j];
            let (dbk, dck) =
                (&mut sh.b[base + j * nl..base + (j + 1) * nl], &mut sh.c[base + j * nl..base + (j + 1) * nl]);
            for ((o, p), (oc, pc)) in dbk.iter_mut().zip(&r.tiles.db).zip(dck.iter_mut().zip(&r.tiles.dc)) {
                *o = *o + p[j];
                *oc = *oc + pc[j];
            }
        }
    }
    // The gate's derivative, from the scan's output (plus the skip).
    if let (Some(z), Some(dz)) = (zrow, dz) {
        for t in 0..nl {
            let ypre = r.y[t] + dv.map_or(T::ZERO, |dd| dd * u[t]);
            let sg = T::ONE / (T::ONE + (T::ZERO - z[t]).exp());
            dz[t] = dy[t] * ypre * sg * (T::ONE + z[t] * (T::ONE - sg));
        }
    }
    let mut bsum = T::ZERO;
    for ((o, &ddt), &raw) in ddelta.iter_mut().zip(&r.ddt).zip(&r.raw) {
        let g = if op.delta_softplus { ddt / (T::ONE + (T::ZERO - raw).exp()) } else { ddt };
        *o = g;
        bsum = bsum + g;
    }
    sh.bias[d] = sh.bias[d] + bsum;
}

/// A row's per-step values the group backward reads: dt, dt * u, u, the output's cotangent.
struct GroupRows<'a, T> {
    dt: &'a [T],
    dtu: &'a [T],
    u: &'a [T],
    gp: &'a [T],
}

/// One group's forward (its states kept in `tl.hs`, the output added to `y`) and reverse
/// recurrence `lam_t = gp_t C_t + exp(dt_{t+1} A) lam_{t+1}`, all lanes at once: adds to the
/// `dt` and `u` cotangents, leaves the `B` and `C` gradients step-major in `tl.db` / `tl.dc`,
/// and each lane's `A` gradient in `acc`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn group_grad_body<T: Real, const FMA: bool>(
    g: &Group<'_, T>,
    rw: &GroupRows<'_, T>,
    tl: &mut Tiles<T>,
    y: &mut [T],
    ddt: &mut [T],
    du: &mut [T],
    acc: &mut [T; LANES],
) {
    let nl = g.l;
    let mut h = [T::ZERO; LANES];
    for (((hs, (da, hb)), c), y) in tl.hs.iter_mut().zip(tl.da.iter().zip(&tl.hb)).zip(&tl.c).zip(y.iter_mut()) {
        let mut p = [T::ZERO; LANES];
        for j in 0..LANES {
            h[j] = T::madd::<FMA>(da[j], h[j], hb[j]);
            p[j] = h[j] * c[j];
        }
        *hs = h;
        *y = *y + lane_sum(p);
    }
    let mut a = [T::ZERO; LANES];
    a[..g.a.len()].copy_from_slice(g.a);
    let mut lam = [T::ZERO; LANES];
    for t in (0..nl).rev() {
        let (gp, dt) = (rw.gp[t], rw.dt[t]);
        let next = if t + 1 < nl { tl.da[t + 1] } else { [T::ZERO; LANES] };
        let hprev = if t > 0 { tl.hs[t - 1] } else { [T::ZERO; LANES] };
        let (da, c, b, hs) = (tl.da[t], tl.c[t], tl.b[t], tl.hs[t]);
        let (mut sdt, mut sdu) = ([T::ZERO; LANES], [T::ZERO; LANES]);
        let (mut db, mut dc) = ([T::ZERO; LANES], [T::ZERO; LANES]);
        for j in 0..LANES {
            lam[j] = T::madd::<FMA>(lam[j], next[j], gp * c[j]);
            let dda = lam[j] * hprev[j] * da[j];
            sdt[j] = dda * a[j] + lam[j] * b[j] * rw.u[t];
            acc[j] = T::madd::<FMA>(dda, dt, acc[j]);
            db[j] = lam[j] * rw.dtu[t];
            dc[j] = gp * hs[j];
            sdu[j] = lam[j] * b[j];
        }
        tl.db[t] = db;
        tl.dc[t] = dc;
        ddt[t] = ddt[t] + lane_sum(sdt);
        du[t] = du[t] + lane_sum(sdu) * dt;
    }
}

crate::simd_entry!(group_grad = group_grad_body<T: Real>(g: &Group<'_, T>, rw: &GroupRows<'_, T>, tl: &mut Tiles<T>, y: &mut [T], ddt: &mut [T], du: &mut [T], acc: &mut [T; LANES]));
