//! `selective_scan`: Mamba's selective state-space recurrence, as mamba's `selective_scan_ref`.
//!
//! Per batch `b` and channel `d`, with a state `h[n]` (N entries) starting at zero, for each
//! step `t` of L:
//! `dt = delta[b,d,t] (+ delta_bias[d]) (softplus'd when delta_softplus)`,
//! `h[n] = exp(dt * A[d,n]) * h[n] + dt * B[b,n,t] * u[b,d,t]`,
//! `y[b,d,t] = sum_n h[n] * C[b,n,t]`, then `y += D[d] * u` and `y *= silu(z)` when given.
//!
//! Shapes (mamba's "variable B/C" case): u, delta, z `[B, D, L]`; A `[D, N]`; B, C `[B, N, L]`;
//! D, delta_bias `[D]`; the output `[B, D, L]`. Operands: `[u, delta, A, B, C]`, then D, z and
//! delta_bias in that order, each only when its flag is set.
//!
//! The decomposition is a `scan` over L (the state `[B, D, N]` as its carry), so forward mode
//! and batching come from the scan's rules; backends without a loop get it unrolled. Reverse
//! mode emits `selective_scan_grad` (its own op, with a native CPU kernel and a decomposition).

use crate::ops::rules::dims;
use crate::ops::util::{rand_f64, require_float, same_dtype};
use crate::{DType, Data, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

fn is_false(b: &bool) -> bool {
    !*b
}

/// Mamba's selective scan (`selective_scan_ref`), "variable B/C" form. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SelectiveScan {
    /// Apply softplus to `delta` (after adding `delta_bias`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub delta_softplus: bool,
    /// A `D` operand `[D]` is given: the skip `y + D * u`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub has_d: bool,
    /// A `z` operand `[B, D, L]` is given: the gate `y * silu(z)`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub has_z: bool,
    /// A `delta_bias` operand `[D]` is given, added to delta.
    #[serde(default, skip_serializing_if = "is_false")]
    pub has_bias: bool,
}

/// The sizes of one selective scan: batch, channels, state size, length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanDims {
    /// Batch.
    pub b: usize,
    /// Channels (mamba's D, `d_inner`).
    pub d: usize,
    /// State size per channel (`d_state`).
    pub n: usize,
    /// Sequence length.
    pub l: usize,
}

impl SelectiveScan {
    /// Number of operands the flags call for.
    pub fn num_inputs(&self) -> usize {
        5 + self.has_d as usize + self.has_z as usize + self.has_bias as usize
    }

    /// Operand positions of D, z and delta_bias (None when absent).
    pub fn optional_slots(&self) -> (Option<usize>, Option<usize>, Option<usize>) {
        let mut i = 5;
        let mut next = |has: bool| {
            has.then(|| {
                i += 1;
                i - 1
            })
        };
        let d = next(self.has_d);
        let z = next(self.has_z);
        let bias = next(self.has_bias);
        (d, z, bias)
    }

    /// Checks the operand shapes and returns the sizes.
    pub fn dims_of(&self, ins: &[&[usize]]) -> std::result::Result<ScanDims, String> {
        if ins.len() != self.num_inputs() {
            return Err(format!("needs {} operands for its flags, got {}", self.num_inputs(), ins.len()));
        }
        let [b, d, l] = *ins[0] else { return Err(format!("u must be [B, D, L], got {:?}", ins[0])) };
        let [d2, n] = *ins[2] else { return Err(format!("A must be [D, N], got {:?}", ins[2])) };
        let s = ScanDims { b, d, n, l };
        let want = |name: &str, got: &[usize], want: &[usize]| {
            if got == want {
                Ok(())
            } else {
                Err(format!("{name} must be {want:?} (u {:?}, A {:?}), got {got:?}", ins[0], ins[2]))
            }
        };
        want("delta", ins[1], &[b, d, l])?;
        want("A", &[d2], &[d])?;
        want("B", ins[3], &[b, n, l])?;
        want("C", ins[4], &[b, n, l])?;
        let (dd, z, bias) = self.optional_slots();
        if let Some(i) = dd {
            want("D", ins[i], &[d])?;
        }
        if let Some(i) = z {
            want("z", ins[i], &[b, d, l])?;
        }
        if let Some(i) = bias {
            want("delta_bias", ins[i], &[d])?;
        }
        Ok(s)
    }
}

/// softplus(x) = log(1 + exp(x)), written to not overflow.
pub fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

/// The recurrence on f64 slices (row-major as the op's operands): the oracle the kernels are
/// tested against.
#[allow(clippy::too_many_arguments)]
pub fn selective_scan_f64(
    op: &SelectiveScan,
    s: ScanDims,
    u: &[f64],
    delta: &[f64],
    a: &[f64],
    bm: &[f64],
    cm: &[f64],
    dv: Option<&[f64]>,
    z: Option<&[f64]>,
    bias: Option<&[f64]>,
) -> Vec<f64> {
    let ScanDims { b: nb, d: nd, n: nn, l: nl } = s;
    let mut y = vec![0.0; nb * nd * nl];
    let mut h = vec![0.0; nn];
    for b in 0..nb {
        for d in 0..nd {
            h.iter_mut().for_each(|v| *v = 0.0);
            let row = (b * nd + d) * nl;
            for t in 0..nl {
                let mut dt = delta[row + t] + bias.map_or(0.0, |v| v[d]);
                if op.delta_softplus {
                    dt = softplus(dt);
                }
                let ut = u[row + t];
                let mut acc = 0.0;
                for (k, hk) in h.iter_mut().enumerate() {
                    let bc = (b * nn + k) * nl + t;
                    *hk = (dt * a[d * nn + k]).exp() * *hk + dt * bm[bc] * ut;
                    acc += *hk * cm[bc];
                }
                if let Some(dv) = dv {
                    acc += dv[d] * ut;
                }
                if let Some(z) = z {
                    let zt = z[row + t];
                    acc *= zt / (1.0 + (-zt).exp());
                }
                y[row + t] = acc;
            }
        }
    }
    y
}

/// The operands' dims, which must all be fixed (the scan's shape checks need numbers).
pub(crate) fn fixed_dims(ins: &[&Shape]) -> std::result::Result<Vec<Vec<usize>>, String> {
    ins.iter().map(|s| s.dims_fixed()).collect()
}

impl OpDef for SelectiveScan {
    fn name(&self) -> &'static str {
        "selective_scan"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::Range(5, 8)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let dt = same_dtype(ins)?;
        require_float(dt)?;
        let d = fixed_dims(ins)?;
        let s = self.dims_of(&d.iter().map(Vec::as_slice).collect::<Vec<_>>())?;
        Ok(Shape::new(&[s.b, s.d, s.l], dt))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let err = |e: String| Error::eval("selective_scan", e);
        let dims: Vec<Vec<usize>> = ins.iter().map(|t| t.dims()).collect();
        let dref: Vec<&[usize]> = dims.iter().map(|v| v.as_slice()).collect();
        let s = self.dims_of(&dref).map_err(err)?;
        let v: Vec<Vec<f64>> = ins.iter().map(|t| t.to_f64_vec()).collect::<Result<_>>()?;
        let (dd, z, bias) = self.optional_slots();
        let opt = |i: Option<usize>| i.map(|i| v[i].as_slice());
        let y = selective_scan_f64(self, s, &v[0], &v[1], &v[2], &v[3], &v[4], opt(dd), opt(z), opt(bias));
        HostTensor::new(out.clone(), Data::F(y))
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        let shapes: Vec<Vec<usize>> = ins.iter().map(|&x| dims(g, x)).collect();
        let dref: Vec<&[usize]> = shapes.iter().map(|v| v.as_slice()).collect();
        let s = self.dims_of(&dref).ok()?;
        let dt = g.shape(ins[0])?.dtype;
        let (dd, z, bias) = self.optional_slots();
        let (u, a, bm, cm) = (ins[0], ins[2], ins[3], ins[4]);
        let mut delta = ins[1];
        if let Some(i) = bias {
            let bv = g.reshape(ins[i], &[1, s.d, 1]);
            delta = g.add(delta, bv);
        }
        if self.delta_softplus {
            delta = g.softplus(delta);
        }
        let mut y = if s.l == 0 || s.n == 0 {
            // No steps (or no state): nothing to scan, the sum over the state is empty.
            g.full(Shape::new(&[s.b, s.d, s.l], dt), 0.0)
        } else {
            // Time leading, as the scan's sequences: dA, dBu [L, B, D, N], C [L, B, 1, N].
            let dl = g.transpose(delta, &[2, 0, 1]);
            let dl4 = g.expand_dims(dl, -1);
            let da = g.mul(dl4, a);
            let da = g.exp(da);
            let du = g.mul(delta, u);
            let du = g.transpose(du, &[2, 0, 1]);
            let du = g.expand_dims(du, -1);
            let bt = g.transpose(bm, &[2, 0, 1]);
            let bt = g.expand_dims(bt, 2);
            let dbu = g.mul(du, bt);
            let ct = g.transpose(cm, &[2, 0, 1]);
            let ct = g.expand_dims(ct, 2);
            let mut body = Graph::new("selective_scan_step");
            let h = body.input("h", Shape::new(&[s.b, s.d, s.n], dt));
            let da_t = body.input("dA", Shape::new(&[s.b, s.d, s.n], dt));
            let dbu_t = body.input("dBu", Shape::new(&[s.b, s.d, s.n], dt));
            let c_t = body.input("C", Shape::new(&[s.b, 1, s.n], dt));
            let hn = body.mul(da_t, h);
            let hn = body.add(hn, dbu_t);
            let yc = body.mul(hn, c_t);
            let yt = body.sum(yc, &[-1], false);
            body.set_outputs(vec![hn, yt]);
            let h0 = g.full(Shape::new(&[s.b, s.d, s.n], dt), 0.0);
            let (_, ys) = g.scan_n(body, &[h0], &[da, dbu, ct], &[], false);
            g.transpose(ys[0], &[1, 2, 0])
        };
        if let Some(i) = dd {
            let dv = g.reshape(ins[i], &[1, s.d, 1]);
            let du = g.mul(dv, u);
            y = g.add(y, du);
        }
        if let Some(i) = z {
            let gate = g.silu(ins[i]);
            y = g.mul(y, gate);
        }
        Some(y)
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        // One `selective_scan_grad` node: a backend with the native backward runs it in one pass.
        self.vjp_rule(g, ins, ct)
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        let full = SelectiveScan { delta_softplus: true, has_d: true, has_z: true, has_bias: true };
        let cases = [
            ("full", full.clone(), DType::F64, [2, 3, 4, 5]),
            ("full", full, DType::F32, [2, 3, 4, 5]),
            ("plain", SelectiveScan::default(), DType::F64, [1, 2, 3, 4]),
            ("z_only", SelectiveScan { has_z: true, ..Default::default() }, DType::F32, [2, 2, 2, 3]),
            (
                "softplus_d",
                SelectiveScan { delta_softplus: true, has_d: true, ..Default::default() },
                DType::F64,
                [1, 3, 2, 6],
            ),
        ];
        for (k, (name, op, dt, [b, d, n, l])) in cases.into_iter().enumerate() {
            let ins = sample_inputs(&op, dt, ScanDims { b, d, n, l }, 300 + 10 * k as u64);
            out.push(Sample::new(format!("selective_scan/{name}/{dt}"), op, ins));
        }
        out
    }
}

/// Random operands for `op` of sizes `s`: A negative, delta positive (or around zero when it
/// goes through softplus), as in a trained Mamba.
pub fn sample_inputs(op: &SelectiveScan, dt: DType, s: ScanDims, seed: u64) -> Vec<HostTensor> {
    let ScanDims { b, d, n, l } = s;
    let t = |dims: &[usize], lo: f64, hi: f64, k: u64| {
        let len = dims.iter().product();
        HostTensor::from_f64(dims, dt, &rand_f64(len, lo, hi, seed + k)).expect("sample")
    };
    let (dlo, dhi) = if op.delta_softplus { (-1.0, 0.5) } else { (0.05, 0.8) };
    let mut v = vec![
        t(&[b, d, l], -1.0, 1.0, 0),
        t(&[b, d, l], dlo, dhi, 1),
        t(&[d, n], -1.5, -0.2, 2),
        t(&[b, n, l], -1.0, 1.0, 3),
        t(&[b, n, l], -1.0, 1.0, 4),
    ];
    if op.has_d {
        v.push(t(&[d], -1.0, 1.0, 5));
    }
    if op.has_z {
        v.push(t(&[b, d, l], -1.0, 1.0, 6));
    }
    if op.has_bias {
        v.push(t(&[d], -0.5, 0.5, 7));
    }
    v
}

impl Graph {
    /// Mamba's selective scan: `ins` are `[u, delta, A, B, C]` followed by D, z and delta_bias
    /// as `op`'s flags say (see `ops::selective_scan`).
    pub fn selective_scan(&mut self, op: SelectiveScan, ins: &[NodeId]) -> NodeId {
        self.add_node(op, ins)
    }
}
