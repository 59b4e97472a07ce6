//! `scan`: `jax.lax.scan` with any number of carries, sequences and stacked outputs.

use super::{check_body, inline, run_body};
use crate::ops::rules::dims;
use crate::ops::util::rand_f64;
use crate::{DType, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// Which result of a scan a node is (one output per node, as for top_k).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScanOutput {
    /// A final carry (`Scan::index` says which).
    Carry,
    /// Per-step outputs, stacked on a new leading axis (`Scan::index` says which).
    Ys,
}

use super::serde_defaults::{is_false, is_one, is_zero, one};

/// `jax.lax.scan`: `body(carries..., x_ts..., consts...) -> (carries..., ys...)` for each step
/// `t` along the leading axis of every sequence (inputs: `[inits..., xs..., consts...]`; the
/// consts are what the body closes over, such as weights). Each node gives one result: final
/// carry `index` or stacked outputs `index`; nodes that differ only in that are one loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scan {
    /// The step function: inputs (carries, x_ts, consts), outputs (new carries, ys).
    pub body: Box<Graph>,
    /// Which kind of result this node gives.
    pub output: ScanOutput,
    /// Which carry or which stacked output.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub index: usize,
    /// Number of carries (the first operands and the first body outputs).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub num_carry: usize,
    /// Number of sequences scanned over (the operands after the carries).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub num_xs: usize,
    /// Steps run from the last element to the first; the stacked outputs keep element order.
    #[serde(default, skip_serializing_if = "is_false")]
    pub reverse: bool,
    /// The trip count, needed only without sequences (checked against them otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<usize>,
    /// Reverse mode keeps the carry entering every `k`-th step only (`Some(k)`), and the
    /// reverse loop recomputes each segment of `k` steps from its checkpoint before reversing
    /// through it: memory `T/k` carries plus `k` steps' residuals instead of `T` steps' carries
    /// and residuals, for one more forward pass (equinox's `scan(checkpoints=...)`, the
    /// `jax.checkpoint`-per-segment scheme; `k` near `sqrt(T)` minimizes the sum). None: save
    /// every step, the default: it is faster wherever the saved steps fit (measured, CPU,
    /// forward + backward, test profile: the 1000-step RNN of `rlx-bench scan` 16.0 ms plain vs
    /// 23.8 ms checkpointed; 10,000 steps of hidden 32, 36.5 vs 43.7 ms). It changes
    /// derivatives' memory and time, never values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<usize>,
}

impl Scan {
    /// A scan over `body` giving its first carry.
    pub fn new(body: Graph, num_carry: usize, num_xs: usize, reverse: bool) -> Scan {
        Scan {
            body: Box::new(body),
            output: ScanOutput::Carry,
            index: 0,
            num_carry,
            num_xs,
            reverse,
            length: None,
            checkpoint: None,
        }
    }

    /// The same loop whose reverse mode keeps every `k`-th carry (see `Scan::checkpoint`).
    pub fn with_checkpoint(&self, k: Option<usize>) -> Scan {
        Scan { checkpoint: k, ..self.clone() }
    }

    /// The same loop giving another result.
    pub fn with_output(&self, output: ScanOutput, index: usize) -> Scan {
        Scan { output, index, ..self.clone() }
    }

    /// Number of stacked outputs (body outputs after the carries).
    pub fn num_ys(&self) -> usize {
        self.body.outputs().len().saturating_sub(self.num_carry)
    }

    /// Whether `other` is the same loop (it may give another result).
    pub fn same_loop(&self, other: &Scan) -> bool {
        self.num_carry == other.num_carry
            && self.num_xs == other.num_xs
            && self.reverse == other.reverse
            && self.length == other.length
            && self.checkpoint == other.checkpoint
            && self.body == other.body
    }

    /// The trip count from the operand types.
    pub fn trips(&self, ins: &[&Shape]) -> std::result::Result<usize, String> {
        let (nc, nx) = (self.num_carry, self.num_xs);
        if ins.len() < nc + nx {
            return Err(format!("needs {nc} carries and {nx} sequences, got {} operands", ins.len()));
        }
        let mut len = self.length;
        for (j, s) in ins[nc..nc + nx].iter().enumerate() {
            let d = s.dims_fixed()?;
            let Some(&n) = d.first() else {
                return Err(format!("sequence {j} ({s}) needs a leading (time) axis"));
            };
            match len {
                Some(l) if l != n => return Err(format!("sequence {j} ({s}) has {n} steps, the scan {l}")),
                _ => len = Some(n),
            }
        }
        len.ok_or_else(|| "a scan without sequences needs a length".into())
    }
}

impl OpDef for Scan {
    fn name(&self) -> &'static str {
        "scan"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::AtLeast(0)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let (nc, nx) = (self.num_carry, self.num_xs);
        let len = self.trips(ins)?;
        if self.checkpoint == Some(0) {
            return Err("checkpoint segments must have at least one step (Some(0) given)".into());
        }
        let x_ts: Vec<Shape> = ins[nc..nc + nx]
            .iter()
            .map(|s| Ok(Shape::new(&s.dims_fixed()?[1..], s.dtype)))
            .collect::<std::result::Result<_, String>>()?;
        let mut want: Vec<&Shape> = ins[..nc].to_vec();
        want.extend(x_ts.iter());
        want.extend_from_slice(&ins[nc + nx..]);
        let nout = self.body.outputs().len();
        if nout < nc {
            return Err(format!("the body has {nout} outputs, fewer than its {nc} carries"));
        }
        let outs = check_body(&self.body, "scan", &want, nout)?;
        for i in 0..nc {
            if &outs[i] != ins[i] {
                return Err(format!("the body's carry output {i} is {}, the carry is {}", outs[i], ins[i]));
            }
        }
        match self.output {
            ScanOutput::Carry if self.index < nc => Ok(outs[self.index].clone()),
            ScanOutput::Ys if self.index < nout - nc => {
                let y = &outs[nc + self.index];
                let mut d = vec![len];
                d.extend(y.dims_fixed()?);
                Ok(Shape::new(&d, y.dtype))
            }
            o => Err(format!("no {o:?} {} (the body has {nc} carries and {} outputs)", self.index, nout - nc)),
        }
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let (nc, nx) = (self.num_carry, self.num_xs);
        let shapes: Vec<&Shape> = ins.iter().map(|t| &t.shape).collect();
        let len = self.trips(&shapes).map_err(|e| crate::Error::eval("scan", e))?;
        let mut carries: Vec<HostTensor> = ins[..nc].iter().map(|t| (*t).clone()).collect();
        let mut ys: Vec<Vec<HostTensor>> = vec![vec![]; self.num_ys()];
        let order: Vec<usize> = if self.reverse { (0..len).rev().collect() } else { (0..len).collect() };
        for &t in &order {
            let mut x_ts = vec![];
            for xs in &ins[nc..nc + nx] {
                let d = xs.dims();
                let step: usize = d[1..].iter().product();
                let idx: Vec<usize> = (t * step..(t + 1) * step).collect();
                x_ts.push(HostTensor::new(Shape::new(&d[1..], xs.dtype()), xs.data.gather(&idx))?);
            }
            let mut args: Vec<&HostTensor> = carries.iter().collect();
            args.extend(x_ts.iter());
            args.extend_from_slice(&ins[nc + nx..]);
            let mut r = run_body("scan", &self.body, &args)?;
            for (j, y) in r.drain(nc..).enumerate() {
                ys[j].push(y);
            }
            carries = r;
        }
        match self.output {
            ScanOutput::Carry => Ok(carries.swap_remove(self.index)),
            ScanOutput::Ys => {
                let mut parts = std::mem::take(&mut ys[self.index]);
                if self.reverse {
                    parts.reverse();
                }
                let parts: Vec<&crate::Data> = parts.iter().map(|y| &y.data).collect();
                let data = crate::Data::concat(&parts).unwrap_or_else(|| crate::Data::zeros(out.dtype, 0));
                HostTensor::new(out.clone(), data)
            }
        }
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        // The unrolled loop, for backends that cannot run one.
        let (nc, nx) = (self.num_carry, self.num_xs);
        let shapes: Vec<Shape> = ins.iter().map(|&x| g.shape(x).cloned()).collect::<Option<_>>()?;
        let len = self.trips(&shapes.iter().collect::<Vec<_>>()).ok()?;
        let mut carries = ins[..nc].to_vec();
        let mut ys = vec![];
        let order: Vec<usize> = if self.reverse { (0..len).rev().collect() } else { (0..len).collect() };
        for t in order {
            let mut args = carries.clone();
            for &xs in &ins[nc..nc + nx] {
                let d = dims(g, xs);
                let x = g.slice_axis(xs, 0, t, t + 1);
                args.push(g.reshape(x, &d[1..]));
            }
            args.extend_from_slice(&ins[nc + nx..]);
            let r = inline(g, &self.body, &args)?;
            carries = r[..nc].to_vec();
            if self.output == ScanOutput::Ys {
                ys.push(g.expand_dims(r[nc + self.index], 0));
            }
        }
        if self.reverse {
            ys.reverse();
        }
        match self.output {
            ScanOutput::Carry => carries.get(self.index).copied(),
            ScanOutput::Ys if ys.is_empty() => None,
            ScanOutput::Ys => Some(g.concat(&ys, 0)),
        }
    }
    fn nested(&self) -> Option<&dyn super::NestedRules> {
        Some(self)
    }
    fn samples() -> Vec<Sample> {
        let h0 = HostTensor::from_f64(&[3], DType::F64, &rand_f64(3, -1.0, 1.0, 84)).expect("sample");
        let xs = HostTensor::from_f64(&[4, 3], DType::F64, &rand_f64(12, -1.0, 1.0, 85)).expect("sample");
        let w = HostTensor::from_f64(&[3], DType::F64, &rand_f64(3, -1.0, 1.0, 86)).expect("sample");
        let c2 = HostTensor::from_f64(&[2], DType::F32, &rand_f64(2, -1.0, 1.0, 87)).expect("sample");
        let mut out: Vec<Sample> = [ScanOutput::Carry, ScanOutput::Ys]
            .into_iter()
            .map(|o| {
                let ins = vec![h0.clone(), xs.clone(), w.clone()];
                Sample::new(format!("scan/{o:?}"), scan_sample(DType::F64).with_output(o, 0), ins)
            })
            .collect();
        // Two carries of different dtypes, reversed: every result of one loop.
        let two = two_carry_sample();
        for (o, i) in [(ScanOutput::Carry, 0), (ScanOutput::Carry, 1), (ScanOutput::Ys, 0)] {
            let ins = vec![h0.clone(), c2.clone(), xs.clone(), w.clone()];
            out.push(Sample::new(format!("scan/reverse/{o:?}{i}"), two.with_output(o, i), ins));
        }
        out
    }
}

fn scan_sample(dt: DType) -> Scan {
    let s = Shape::new(&[3], dt);
    let mut b = Graph::new("step");
    let (h, x, w) = (b.input("h", s.clone()), b.input("x", s.clone()), b.input("w", s));
    let a = b.mul(h, w);
    let a = b.add(a, x);
    let hn = b.tanh(a);
    let y = b.square(hn);
    b.set_outputs(vec![hn, y]);
    Scan::new(b, 1, 1, false)
}

/// Carries `h` (f64[3]) and `c` (f32[2]); `c` counts a scaled sum of `h` along the way.
fn two_carry_sample() -> Scan {
    let s = Shape::new(&[3], DType::F64);
    let mut b = Graph::new("step2");
    let h = b.input("h", s.clone());
    let c = b.input("c", Shape::new(&[2], DType::F32));
    let (x, w) = (b.input("x", s.clone()), b.input("w", s));
    let a = b.mul(h, w);
    let a = b.add(a, x);
    let hn = b.sin(a);
    let t = b.sum_all(hn);
    let t = b.cast_to(t, DType::F32);
    let cn = b.add(c, t);
    b.set_outputs(vec![hn, cn, a]);
    Scan::new(b, 2, 1, true)
}
