//! `selective_scan_grad`: the reverse-mode derivative of `selective_scan`, as one op so a
//! backend can run it natively (the reverse recurrence of mamba's CUDA backward); the VJP rule
//! of `selective_scan` emits it.
//!
//! Operands: the scan's operands, then the output cotangent `dy` `[B, D, L]`. The output is
//! every operand's gradient flattened and concatenated in operand order (one node, one pass;
//! the VJP slices it apart). With `lam_t` the state cotangent
//! (`lam_t = gp_t * C_t + exp(dt_{t+1} A) * lam_{t+1}`, `gp = dy * silu(z)`), and `h_t` the
//! states: `dB_t = sum_d lam_t dt_t u_t`, `dC_t = sum_d gp_t h_t`,
//! `ddt_t = sum_n lam_t (h_{t-1} exp(dt_t A) A + B_t u_t)`, `dA = sum_{b,t} lam_t h_{t-1} exp(dt_t A) dt_t`.

use crate::ops::SelectiveScan;
use crate::ops::rules::dims;
use crate::ops::selective_scan::{ScanDims, fixed_dims, sample_inputs, softplus};
use crate::ops::util::{rand_f64, require_float, same_dtype};
use crate::{DType, Data, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// The gradients of a `selective_scan` (see the module docs), flattened and concatenated.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SelectiveScanGrad {
    /// The forward op (its flags say which operands there are).
    pub scan: SelectiveScan,
}

impl SelectiveScanGrad {
    /// Sizes of the forward operands and checks `dy`: `ins` are the scan's operands and `dy`.
    pub fn dims_of(&self, ins: &[&[usize]]) -> std::result::Result<ScanDims, String> {
        let k = self.scan.num_inputs();
        if ins.len() != k + 1 {
            return Err(format!("needs {} operands (the scan's {k} and dy), got {}", k + 1, ins.len()));
        }
        let s = self.scan.dims_of(&ins[..k])?;
        if ins[k] != [s.b, s.d, s.l] {
            return Err(format!("dy must be {:?}, got {:?}", [s.b, s.d, s.l], ins[k]));
        }
        Ok(s)
    }

    /// Element counts of the forward operands, in operand order (the output's segments).
    pub fn segments(&self, s: ScanDims) -> Vec<usize> {
        let (bdl, bnl) = (s.b * s.d * s.l, s.b * s.n * s.l);
        let mut v = vec![bdl, bdl, s.d * s.n, bnl, bnl];
        let (d, z, bias) = (self.scan.has_d, self.scan.has_z, self.scan.has_bias);
        v.extend(d.then_some(s.d));
        v.extend(z.then_some(bdl));
        v.extend(bias.then_some(s.d));
        v
    }
}

/// The backward on f64 slices, naive (every state stored): the oracle of the kernels.
/// `x` are the forward operands and then `dy`; returns the gradients concatenated.
pub fn selective_scan_grad_f64(op: &SelectiveScan, s: ScanDims, x: &[Vec<f64>]) -> Vec<f64> {
    let ScanDims { b: nb, d: nd, n: nn, l: nl } = s;
    let (u, delta, a, bm, cm) = (&x[0], &x[1], &x[2], &x[3], &x[4]);
    let (sd, sz, sb) = op.optional_slots();
    let dy = &x[op.num_inputs()];
    let (bdl, bnl) = (nb * nd * nl, nb * nn * nl);
    let (mut du, mut ddelta, mut da) = (vec![0.0; bdl], vec![0.0; bdl], vec![0.0; nd * nn]);
    let (mut db, mut dc, mut dd, mut dz, mut dbias) =
        (vec![0.0; bnl], vec![0.0; bnl], vec![0.0; nd], vec![0.0; bdl], vec![0.0; nd]);
    let mut h = vec![0.0; nn * nl];
    for b in 0..nb {
        for d in 0..nd {
            let row = (b * nd + d) * nl;
            let raw: Vec<f64> = (0..nl).map(|t| delta[row + t] + sb.map_or(0.0, |i| x[i][d])).collect();
            let dt: Vec<f64> = raw.iter().map(|&r| if op.delta_softplus { softplus(r) } else { r }).collect();
            let bc = |k: usize, t: usize| (b * nn + k) * nl + t;
            let mut yssm = vec![0.0; nl];
            for k in 0..nn {
                let mut st = 0.0;
                for t in 0..nl {
                    st = (dt[t] * a[d * nn + k]).exp() * st + dt[t] * bm[bc(k, t)] * u[row + t];
                    h[k * nl + t] = st;
                    yssm[t] += st * cm[bc(k, t)];
                }
            }
            let mut gp = vec![0.0; nl];
            for t in 0..nl {
                let ypre = yssm[t] + sd.map_or(0.0, |i| x[i][d] * u[row + t]);
                gp[t] = dy[row + t];
                if let Some(i) = sz {
                    let zt = x[i][row + t];
                    let sg = 1.0 / (1.0 + (-zt).exp());
                    gp[t] = dy[row + t] * zt * sg;
                    dz[row + t] = dy[row + t] * ypre * sg * (1.0 + zt * (1.0 - sg));
                }
                if let Some(i) = sd {
                    dd[d] += gp[t] * u[row + t];
                    du[row + t] += gp[t] * x[i][d];
                }
            }
            let mut ddt = vec![0.0; nl];
            for k in 0..nn {
                let ak = a[d * nn + k];
                let mut lam = 0.0;
                for t in (0..nl).rev() {
                    if t + 1 < nl {
                        lam *= (dt[t + 1] * ak).exp();
                    }
                    lam += gp[t] * cm[bc(k, t)];
                    let hprev = if t > 0 { h[k * nl + t - 1] } else { 0.0 };
                    let dda = lam * hprev * (dt[t] * ak).exp();
                    ddt[t] += dda * ak + lam * bm[bc(k, t)] * u[row + t];
                    da[d * nn + k] += dda * dt[t];
                    db[bc(k, t)] += lam * dt[t] * u[row + t];
                    dc[bc(k, t)] += gp[t] * h[k * nl + t];
                    du[row + t] += lam * dt[t] * bm[bc(k, t)];
                }
            }
            for t in 0..nl {
                let g = if op.delta_softplus { ddt[t] / (1.0 + (-raw[t]).exp()) } else { ddt[t] };
                ddelta[row + t] = g;
                dbias[d] += g;
            }
        }
    }
    let mut out = [du, ddelta, da, db, dc].concat();
    if sd.is_some() {
        out.extend(dd);
    }
    if sz.is_some() {
        out.extend(dz);
    }
    if sb.is_some() {
        out.extend(dbias);
    }
    out
}

impl OpDef for SelectiveScanGrad {
    fn name(&self) -> &'static str {
        "selective_scan_grad"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::Range(6, 9)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let dt = same_dtype(ins)?;
        require_float(dt)?;
        let d = fixed_dims(ins)?;
        let s = self.dims_of(&d.iter().map(Vec::as_slice).collect::<Vec<_>>())?;
        Ok(Shape::new(&[self.segments(s).iter().sum()], dt))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let dims: Vec<Vec<usize>> = ins.iter().map(|t| t.dims()).collect();
        let dref: Vec<&[usize]> = dims.iter().map(|v| v.as_slice()).collect();
        let s = self.dims_of(&dref).map_err(|e| Error::eval("selective_scan_grad", e))?;
        let v: Vec<Vec<f64>> = ins.iter().map(|t| t.to_f64_vec()).collect::<Result<_>>()?;
        HostTensor::new(out.clone(), Data::F(selective_scan_grad_f64(&self.scan, s, &v)))
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        let shapes: Vec<Vec<usize>> = ins.iter().map(|&x| dims(g, x)).collect();
        let dref: Vec<&[usize]> = shapes.iter().map(|v| v.as_slice()).collect();
        let s = self.dims_of(&dref).ok()?;
        let dt = g.shape(ins[0])?.dtype;
        if s.l == 0 {
            // No steps: every gradient is zero.
            return Some(g.full(Shape::new(&[self.segments(s).iter().sum()], dt), 0.0));
        }
        if s.n == 0 {
            return None;
        }
        Some(decompose_grad(&self.scan, g, ins, s, dt))
    }
    fn samples() -> Vec<Sample> {
        let full = SelectiveScan { delta_softplus: true, has_d: true, has_z: true, has_bias: true };
        let cases =
            [("full", full, DType::F64, [2, 3, 2, 4]), ("plain", SelectiveScan::default(), DType::F32, [1, 2, 3, 5])];
        let mut out = vec![];
        for (k, (name, op, dt, [b, d, n, l])) in cases.into_iter().enumerate() {
            let mut ins = sample_inputs(&op, dt, ScanDims { b, d, n, l }, 400 + 10 * k as u64);
            let dy = HostTensor::from_f64(&[b, d, l], dt, &rand_f64(b * d * l, -1.0, 1.0, 499 + k as u64));
            ins.push(dy.expect("sample"));
            out.push(Sample::new(format!("selective_scan_grad/{name}/{dt}"), SelectiveScanGrad { scan: op }, ins));
        }
        out
    }
}

/// `[B, X, L]` to time-leading `[L, B, X]` with a new axis at `at`.
fn time_first(g: &mut Graph, x: NodeId, at: i64) -> NodeId {
    let t = g.transpose(x, &[2, 0, 1]);
    g.expand_dims(t, at)
}

/// The backward as graph ops: a forward scan keeping the states, a reverse scan for the state
/// cotangents, then sums.
fn decompose_grad(op: &SelectiveScan, g: &mut Graph, ins: &[NodeId], s: ScanDims, dt: DType) -> NodeId {
    let (sd, sz, sb) = op.optional_slots();
    let (u, a, bm, cm, dy) = (ins[0], ins[2], ins[3], ins[4], ins[op.num_inputs()]);
    let mut raw = ins[1];
    if let Some(i) = sb {
        let bv = g.reshape(ins[i], &[1, s.d, 1]);
        raw = g.add(raw, bv);
    }
    let delta = if op.delta_softplus { g.softplus(raw) } else { raw };
    let st = Shape::new(&[s.b, s.d, s.n], dt);
    let dtl = time_first(g, delta, -1);
    let ul = time_first(g, u, -1);
    let bt = time_first(g, bm, 2);
    let ct = time_first(g, cm, 2);
    let dtu = g.mul(dtl, ul);
    let da = g.mul(dtl, a);
    let da = g.exp(da);
    let dbu = g.mul(dtu, bt);
    // Forward: the states h_t as the stacked outputs.
    let mut body = Graph::new("selective_scan_states");
    let (h, da_t, dbu_t) = (body.input("h", st.clone()), body.input("dA", st.clone()), body.input("dBu", st.clone()));
    let hn = body.mul(da_t, h);
    let hn = body.add(hn, dbu_t);
    body.set_outputs(vec![hn, hn]);
    let h0 = g.full(st.clone(), 0.0);
    let (_, hs) = g.scan_n(body, &[h0], &[da, dbu], &[], false);
    let hs = hs[0];
    let yc = g.mul(hs, ct);
    let yssm = g.sum(yc, &[-1], false);
    let yssm = g.transpose(yssm, &[1, 2, 0]);
    let mut grads_tail = vec![];
    let mut du_skip = None;
    let mut gp = dy;
    let mut dd = None;
    if let Some(i) = sz {
        let mut ypre = yssm;
        if let Some(j) = sd {
            let dv = g.reshape(ins[j], &[1, s.d, 1]);
            let du = g.mul(dv, u);
            ypre = g.add(ypre, du);
        }
        let z = ins[i];
        let sg = g.sigmoid(z);
        let one = g.scalar(1.0, dt);
        let oms = g.sub(one, sg);
        let zo = g.mul(z, oms);
        let zo = g.add(one, zo);
        let dsilu = g.mul(sg, zo);
        let t = g.mul(dy, ypre);
        grads_tail.push(g.mul(t, dsilu));
        let gate = g.silu(z);
        gp = g.mul(dy, gate);
    }
    if let Some(j) = sd {
        let gu = g.mul(gp, u);
        dd = Some(g.sum(gu, &[0, 2], false));
        let dv = g.reshape(ins[j], &[1, s.d, 1]);
        du_skip = Some(g.mul(gp, dv));
    }
    // Reverse: lam_t = gp_t C_t + dA_{t+1} lam_{t+1}, with dA shifted one step back.
    let gpl = time_first(g, gp, -1);
    let e = g.mul(gpl, ct);
    let zero1 = g.full(Shape::new(&[1, s.b, s.d, s.n], dt), 0.0);
    let da_next = g.slice_axis(da, 0, 1, s.l);
    let da_next = g.concat(&[da_next, zero1], 0);
    let mut body = Graph::new("selective_scan_adjoint");
    let (lam, e_t, dn_t) = (body.input("lam", st.clone()), body.input("e", st.clone()), body.input("dA_next", st));
    let ln = body.mul(dn_t, lam);
    let ln = body.add(ln, e_t);
    body.set_outputs(vec![ln, ln]);
    let lam0 = g.full(Shape::new(&[s.b, s.d, s.n], dt), 0.0);
    let (_, lams) = g.scan_n(body, &[lam0], &[e, da_next], &[], true);
    let lams = lams[0];
    let hs_prev = g.slice_axis(hs, 0, 0, s.l - 1);
    let hs_prev = g.concat(&[zero1, hs_prev], 0);
    let dda = g.mul(lams, hs_prev);
    let dda = g.mul(dda, da);
    let dda_a = g.mul(dda, a);
    let ddt1 = g.sum(dda_a, &[-1], false);
    let lb = g.mul(lams, bt);
    let lb = g.sum(lb, &[-1], false);
    let ul3 = g.squeeze(ul, &[-1]);
    let dtl3 = g.squeeze(dtl, &[-1]);
    let ddt2 = g.mul(lb, ul3);
    let ddt = g.add(ddt1, ddt2);
    let ddt = g.transpose(ddt, &[1, 2, 0]);
    let dda_dt = g.mul(dda, dtl);
    let d_a = g.sum(dda_dt, &[0, 1], false);
    let ldu = g.mul(lams, dtu);
    let d_b = g.sum(ldu, &[2], false);
    let d_b = g.transpose(d_b, &[1, 2, 0]);
    let gh = g.mul(gpl, hs);
    let d_c = g.sum(gh, &[2], false);
    let d_c = g.transpose(d_c, &[1, 2, 0]);
    let du = g.mul(lb, dtl3);
    let mut du = g.transpose(du, &[1, 2, 0]);
    if let Some(k) = du_skip {
        du = g.add(du, k);
    }
    let ddelta = if op.delta_softplus {
        let sg = g.sigmoid(raw);
        g.mul(ddt, sg)
    } else {
        ddt
    };
    let mut parts = vec![du, ddelta, d_a, d_b, d_c];
    parts.extend(dd);
    parts.extend(grads_tail);
    if sb.is_some() {
        parts.push(g.sum(ddelta, &[0, 2], false));
    }
    let flat: Vec<NodeId> = parts
        .into_iter()
        .map(|p| {
            let n = dims(g, p).iter().product();
            g.reshape(p, &[n])
        })
        .collect();
    g.concat(&flat, 0)
}

impl SelectiveScan {
    /// The VJP: one `selective_scan_grad` node, sliced into each operand's gradient.
    pub(crate) fn vjp_rule(&self, g: &mut Graph, ins: &[NodeId], ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let shapes: Vec<Vec<usize>> = ins.iter().map(|&x| dims(g, x)).collect();
        let mut args = ins.to_vec();
        args.push(ct);
        let flat = g.add_node(SelectiveScanGrad { scan: self.clone() }, &args);
        let mut off = 0;
        let mut out = vec![];
        for d in shapes {
            let n: usize = d.iter().product();
            let part = g.slice_axis(flat, 0, off, off + n);
            out.push(Some(g.reshape(part, &d)));
            off += n;
        }
        Some(out)
    }
}
