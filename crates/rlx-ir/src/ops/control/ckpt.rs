//! Checkpointed reverse mode of `scan` (`Scan::checkpoint = Some(k)`): the classic sqrt(T)
//! scheme, written with scans only. A forward scan over `T / k` segments keeps the carry
//! entering each segment (its body runs the step `k` times); the reverse scan over segments
//! recomputes each segment's carries and residuals from its checkpoint (the plain VJP of a
//! `k`-step scan, inside its body) before reversing through it. The `T mod k` steps that run
//! last form a remainder scan differentiated the plain way, first in the reverse pass. Memory:
//! `T / k` carries in the outer graph and `k` steps of residuals in the loop body, instead of
//! `T` of each; cost: one more forward pass.

use super::ad::{Transforms, add, float_at, given, given_ys, hoist_invariants, transform_err, trips_of};
use super::{Scan, ScanOutput};
use crate::ops::rules::{dims, zeros_like};
use crate::{Graph, NodeId, Op, Result, Shape};

/// `s` with `lead` prepended to its dims (the type of `lead` stacked steps of `s`).
fn stacked(s: &Shape, lead: &[usize]) -> Shape {
    let mut d = lead.to_vec();
    d.extend(s.fixed_dims().unwrap_or_default());
    Shape::new(&d, s.dtype)
}

/// Steps `at..at + n` of `x` along its leading axis.
fn steps(g: &mut Graph, x: NodeId, at: usize, n: usize) -> NodeId {
    g.slice_axis(x, 0, at, at + n)
}

/// `x` (leading axis `segs * k`) viewed as `[segs, k, ..]`.
fn segments(g: &mut Graph, x: NodeId, segs: usize, k: usize) -> NodeId {
    let d = dims(g, x);
    let mut nd = vec![segs, k];
    nd.extend_from_slice(&d[1..]);
    g.reshape(x, &nd)
}

impl Scan {
    /// Reverse mode of this loop for the results `cts`: checkpointed when `checkpoint` asks for
    /// it and the loop has at least two whole segments, the plain rule otherwise.
    pub(super) fn vjp_any(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        out: NodeId,
        cts: &[(ScanOutput, usize, NodeId)],
        tx: &dyn Transforms,
    ) -> Result<Vec<Option<NodeId>>> {
        let len = trips_of(self, g, ins).map_err(|e| transform_err("vjp", out, e))?;
        match self.checkpoint {
            Some(k) if k >= 1 && len / k >= 2 => self.vjp_checkpointed(g, ins, out, cts, tx, len, k),
            _ => self.vjp_rule(g, ins, out, cts, tx),
        }
    }

    /// The checkpointed VJP (module doc) for a loop of `len` steps in segments of `k`.
    #[allow(clippy::too_many_arguments)]
    fn vjp_checkpointed(
        &self,
        g: &mut Graph,
        ins: &[NodeId],
        out: NodeId,
        cts: &[(ScanOutput, usize, NodeId)],
        tx: &dyn Transforms,
        len: usize,
        k: usize,
    ) -> Result<Vec<Option<NodeId>>> {
        let (nc, nx) = (self.num_carry, self.num_xs);
        let nb = self.body.inputs().len();
        let np = nb - nc - nx;
        let (bins, bouts) = self.body_shapes();
        let cf: Vec<usize> = (0..nc).filter(|&i| float_at(&bins[i])).collect();
        let xf: Vec<usize> = (0..nx).filter(|&j| float_at(&bins[nc + j])).collect();
        let kf: Vec<usize> = (0..np).filter(|&c| float_at(&bins[nc + nx + c])).collect();
        let yf = given_ys(&bouts[nc..], cts);
        let mut result = vec![None; ins.len()];
        if cf.is_empty() && xf.is_empty() && kf.is_empty() {
            return Ok(result);
        }
        let plain = Scan { checkpoint: None, output: ScanOutput::Carry, index: 0, ..self.clone() };
        let (segs, rem) = (len / k, len % k);
        let main_len = segs * k;
        // The remainder runs last: the high steps forward, the low steps when reversed.
        let (main_at, rem_at) = if self.reverse { (rem, 0) } else { (0, main_len) };
        let consts = &ins[nc + nx..];
        let xs_main: Vec<NodeId> = ins[nc..nc + nx]
            .iter()
            .map(|&x| {
                let m = steps(g, x, main_at, main_len);
                segments(g, m, segs, k)
            })
            .collect();

        // 1. The forward over segments, stacking the carry entering each.
        let inner = Scan { length: Some(k), ..plain.clone() };
        let mut fb = Graph::new(format!("{}_segment", self.body.name()));
        let mut fins: Vec<NodeId> = (0..nc).map(|i| fb.input(&format!("c{i}"), bins[i].clone())).collect();
        fins.extend((0..nx).map(|j| fb.input(&format!("x{j}"), stacked(&bins[nc + j], &[k]))));
        fins.extend((0..np).map(|c| fb.input(&format!("k{c}"), bins[nc + nx + c].clone())));
        let mut fouts: Vec<NodeId> =
            (0..nc).map(|i| add(&mut fb, &inner, ScanOutput::Carry, i, &fins)).collect::<Result<_>>()?;
        fouts.extend_from_slice(&fins[..nc]);
        fb.set_outputs(fouts);
        fb.check()?;
        let fwd = Scan {
            body: Box::new(fb),
            output: ScanOutput::Carry,
            index: 0,
            num_carry: nc,
            num_xs: nx,
            reverse: self.reverse,
            length: Some(segs),
            checkpoint: None,
        };
        let mut fargs: Vec<NodeId> = ins[..nc].to_vec();
        fargs.extend_from_slice(&xs_main);
        fargs.extend_from_slice(consts);
        let mid: Vec<NodeId> = (0..nc).map(|i| add(g, &fwd, ScanOutput::Carry, i, &fargs)).collect::<Result<_>>()?;
        let ckpts: Vec<NodeId> = (0..nc).map(|i| add(g, &fwd, ScanOutput::Ys, i, &fargs)).collect::<Result<_>>()?;

        // 2. The remainder, from the carry the segments end with: the plain rule.
        let mut ct_mid: Vec<Option<NodeId>> = (0..nc).map(|i| given(g, cts, ScanOutput::Carry, i)).collect();
        let mut acc0: Vec<Option<NodeId>> = vec![None; np];
        let mut dx_rem: Vec<Option<NodeId>> = vec![None; nx];
        if rem > 0 {
            let rs = Scan { length: Some(rem), ..plain.clone() };
            let mut rargs = mid.clone();
            for &x in &ins[nc..nc + nx] {
                rargs.push(steps(g, x, rem_at, rem));
            }
            rargs.extend_from_slice(consts);
            let mut rcts = vec![];
            for &(o, i, c) in cts {
                rcts.push(match o {
                    ScanOutput::Carry => (o, i, c),
                    ScanOutput::Ys => (o, i, steps(g, c, rem_at, rem)),
                });
            }
            let r = rs.vjp_rule(g, &rargs, out, &rcts, tx)?;
            ct_mid.copy_from_slice(&r[..nc]);
            dx_rem.copy_from_slice(&r[nc..nc + nx]);
            acc0.copy_from_slice(&r[nc + nx..]);
        }

        // 3. The reverse loop over segments: carries (ct of float carries, accumulated ct of
        //    float consts), sequences (checkpoints, segments of xs, segments of the float ys'
        //    cts), consts; its body recomputes its segment and reverses through it.
        let mut rb = Graph::new(format!("{}_segment_vjp", self.body.name()));
        let ct_c: Vec<NodeId> = cf.iter().map(|&i| rb.input(&format!("ct_c{i}"), bins[i].clone())).collect();
        let acc: Vec<NodeId> = kf.iter().map(|&c| rb.input(&format!("acc_k{c}"), bins[nc + nx + c].clone())).collect();
        let mut iins: Vec<NodeId> = (0..nc).map(|i| rb.input(&format!("c{i}"), bins[i].clone())).collect();
        iins.extend((0..nx).map(|j| rb.input(&format!("x{j}"), stacked(&bins[nc + j], &[k]))));
        let ct_y: Vec<NodeId> =
            yf.iter().map(|&j| rb.input(&format!("ct_y{j}"), stacked(&bouts[nc + j], &[k]))).collect();
        iins.extend((0..np).map(|c| rb.input(&format!("k{c}"), bins[nc + nx + c].clone())));
        let mut icts: Vec<(ScanOutput, usize, NodeId)> =
            cf.iter().zip(&ct_c).map(|(&i, &c)| (ScanOutput::Carry, i, c)).collect();
        icts.extend(yf.iter().zip(&ct_y).map(|(&j, &c)| (ScanOutput::Ys, j, c)));
        let r = inner.vjp_rule(&mut rb, &iins, out, &icts, tx)?;
        let mut routs = vec![];
        for (p, &i) in cf.iter().enumerate() {
            routs.push(r[i].unwrap_or_else(|| zeros_like(&mut rb, ct_c[p])));
        }
        for (p, &c) in kf.iter().enumerate() {
            routs.push(match r[nc + nx + c] {
                Some(d) => rb.add(acc[p], d),
                None => acc[p],
            });
        }
        for &j in &xf {
            routs.push(r[nc + j].unwrap_or_else(|| rb.full(stacked(&bins[nc + j], &[k]), 0.0)));
        }
        rb.set_outputs(routs);
        rb.check()?;
        let first_const = cf.len() + kf.len() + nc + nx + yf.len();
        let (rb, hoisted) = hoist_invariants(&rb, first_const, g, consts)?;
        let rev = Scan {
            body: Box::new(rb),
            output: ScanOutput::Carry,
            index: 0,
            num_carry: cf.len() + kf.len(),
            num_xs: nc + nx + yf.len(),
            reverse: !self.reverse,
            length: Some(segs),
            checkpoint: None,
        };
        let mut rins = vec![];
        for &i in &cf {
            rins.push(ct_mid[i].unwrap_or_else(|| zeros_like(g, ins[i])));
        }
        for &c in &kf {
            rins.push(acc0[c].unwrap_or_else(|| zeros_like(g, consts[c])));
        }
        rins.extend_from_slice(&ckpts);
        rins.extend_from_slice(&xs_main);
        for &j in &yf {
            // `yf` holds the ys given a cotangent only.
            if let Some(c) = given(g, cts, ScanOutput::Ys, j) {
                let m = steps(g, c, main_at, main_len);
                rins.push(segments(g, m, segs, k));
            }
        }
        rins.extend_from_slice(consts);
        rins.extend_from_slice(&hoisted);
        for (p, &i) in cf.iter().enumerate() {
            result[i] = Some(add(g, &rev, ScanOutput::Carry, p, &rins)?);
        }
        for (p, &c) in kf.iter().enumerate() {
            result[nc + nx + c] = Some(add(g, &rev, ScanOutput::Carry, cf.len() + p, &rins)?);
        }
        for (p, &j) in xf.iter().enumerate() {
            let dm = add(g, &rev, ScanOutput::Ys, p, &rins)?;
            let d = dims(g, dm);
            let mut flat = vec![main_len];
            flat.extend_from_slice(&d[2..]);
            let dm = g.reshape(dm, &flat);
            result[nc + j] = Some(match (rem, dx_rem[j]) {
                (0, _) => dm,
                (_, dr) => {
                    let dr = dr.unwrap_or_else(|| g.full(stacked(&bins[nc + j], &[rem]), 0.0));
                    let parts = if self.reverse { [dr, dm] } else { [dm, dr] };
                    g.concat(&parts, 0)
                }
            });
        }
        Ok(result)
    }
}

/// `g` with every top-level `scan`'s `checkpoint` set to `every(trips)` (see `Scan::checkpoint`),
/// before differentiating it: `sqrt_segments` for the sqrt(T) scheme, `|_| None` to save every
/// step. Scans inside bodies keep theirs.
pub fn checkpoint_scans(g: &Graph, every: impl Fn(usize) -> Option<usize>) -> Graph {
    let mut out = g.clone();
    out.map_ops(|op, shapes| {
        if let Op::Scan(s) = op
            && let Ok(len) = s.trips(shapes)
        {
            s.checkpoint = every(len);
        }
    });
    out
}

/// Segments of about `sqrt(trips)` steps: the checkpoint length that minimizes the saved
/// carries (`trips / k`) plus one segment's residuals (`k`).
pub fn sqrt_segments(trips: usize) -> Option<usize> {
    Some((trips as f64).sqrt().ceil().max(1.0) as usize)
}
