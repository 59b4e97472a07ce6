//! Post-training quantization: record the ranges of chosen values ("taps") over calibration
//! batches, then insert `fake_quant` at each tap with scales from those ranges.
//!
//! ```
//! use rlx_ir::{DType, Graph, HostTensor, Shape, interp};
//! use rlx_opt::quantize::{Calibrator, Granularity, Observer, QuantConfig, contraction_taps, insert_fake_quant};
//! let mut g = Graph::new("lin");
//! let x = g.input("x", Shape::new(&[2, 3], DType::F32));
//! let w = g.param("w", Shape::new(&[3, 2], DType::F32));
//! let y = g.matmul(x, w);
//! g.set_outputs(vec![y]);
//! let taps = contraction_taps(&g, Granularity::PerTensor);
//! let mut cal = Calibrator::new(&g, taps, Observer::MinMax);
//! let feeds = [("x", HostTensor::from_f32(&[2, 3], &[1., -2., 3., 0.5, 0., -1.]).unwrap()),
//!              ("w", HostTensor::from_f32(&[3, 2], &[0.1, 0.2, -0.3, 0.4, 0.5, -0.6]).unwrap())];
//! let values = interp::evaluate(cal.tapped_graph(), &feeds).unwrap();
//! cal.observe(&values).unwrap();
//! let q = insert_fake_quant(&g, &cal.finish().unwrap(), QuantConfig::int8()).unwrap();
//! assert_eq!(q.nodes().iter().filter(|n| n.op.def().name() == "fake_quant").count(), 2);
//! ```

use rlx_ir::ops::FakeQuant;
use rlx_ir::{Error, Graph, HostTensor, NodeId, Op, OpTraits, Result, shape::normalize_axis};
use std::collections::HashMap;

/// One range per tensor, or one per channel along an axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Granularity {
    /// One scale for the whole tensor.
    PerTensor,
    /// One scale per index of this axis (weights: the output-channel axis).
    PerChannel(i64),
}

/// How a range is read from the observed values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Observer {
    /// The smallest and largest value seen.
    MinMax,
    /// The p-th and (100-p)-th percentiles of the values seen (p in 50..=100), which ignores
    /// rare outliers. Keeps the observed values until `finish`.
    Percentile(f64),
}

/// A value to quantize.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tap {
    /// The node whose value is observed and fake-quantized.
    pub node: NodeId,
    /// Per tensor or per channel.
    pub granularity: Granularity,
}

/// The float inputs of every contraction (matmul, conv, attention): activations per tensor;
/// params (weights) per channel along their last axis when `weights` asks for it.
pub fn contraction_taps(g: &Graph, weights: Granularity) -> Vec<Tap> {
    let mut taps: Vec<Tap> = vec![];
    for n in g.nodes() {
        if !n.op.def().traits().contains(OpTraits::CONTRACTION) || matches!(n.op, Op::QMatMul(_)) {
            continue;
        }
        for &x in &n.inputs {
            if !g.dtype(x).is_float() || taps.iter().any(|t| t.node == x) {
                continue;
            }
            let is_param = matches!(g.node(x).map(|n| &n.op), Some(Op::Param(_)));
            let granularity = if is_param { weights } else { Granularity::PerTensor };
            taps.push(Tap { node: x, granularity });
        }
    }
    taps
}

/// The calibrated `(min, max)` of one tap, per channel (one entry per tensor).
pub type TapRanges = (Tap, Vec<(f64, f64)>);

/// Recorded ranges of every tap.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Calibration {
    /// Taps in order with their ranges.
    pub ranges: Vec<TapRanges>,
}

/// Collects ranges over calibration batches. Run `tapped_graph()` on any backend (or the
/// reference interpreter) per batch and pass its outputs to `observe`.
pub struct Calibrator {
    taps: Vec<Tap>,
    observer: Observer,
    tapped: Graph,
    outputs: usize,
    // Per tap, per channel: running (min, max) or the values seen.
    minmax: Vec<Vec<(f64, f64)>>,
    values: Vec<Vec<Vec<f64>>>,
    batches: usize,
}

impl Calibrator {
    /// A calibrator for `taps` of `g`.
    pub fn new(g: &Graph, taps: Vec<Tap>, observer: Observer) -> Self {
        let mut tapped = g.clone();
        let mut outs = g.outputs().to_vec();
        outs.extend(taps.iter().map(|t| t.node));
        tapped.set_outputs(outs);
        let n = taps.len();
        Calibrator {
            taps,
            observer,
            tapped,
            outputs: g.outputs().len(),
            minmax: vec![vec![]; n],
            values: vec![vec![]; n],
            batches: 0,
        }
    }

    /// The graph with every tap appended to the outputs.
    pub fn tapped_graph(&self) -> &Graph {
        &self.tapped
    }

    /// Records one batch: the outputs of `tapped_graph()` (the original outputs first).
    pub fn observe(&mut self, outputs: &[HostTensor]) -> Result<()> {
        let want = self.outputs + self.taps.len();
        if outputs.len() != want {
            return Err(Error::eval(
                "calibrate",
                format!("expected {want} outputs of the tapped graph, got {}", outputs.len()),
            ));
        }
        for (k, tap) in self.taps.iter().enumerate() {
            let t = &outputs[self.outputs + k];
            let (channels, inner, axis_len) = match tap.granularity {
                Granularity::PerTensor => (1, 1, 1),
                Granularity::PerChannel(a) => {
                    let d = t.dims();
                    let a = normalize_axis(a, d.len()).map_err(|e| Error::eval("calibrate", e))?;
                    (d[a], d[a + 1..].iter().product::<usize>(), d[a])
                }
            };
            let v = t.to_f64_vec()?;
            if self.minmax[k].is_empty() {
                self.minmax[k] = vec![(f64::INFINITY, f64::NEG_INFINITY); channels];
                self.values[k] = vec![vec![]; channels];
            } else if self.minmax[k].len() != channels {
                return Err(Error::eval("calibrate", format!("tap {} changed channel count", tap.node)));
            }
            for (i, &x) in v.iter().enumerate() {
                if !x.is_finite() {
                    return Err(Error::eval("calibrate", format!("tap {} has a non-finite value {x}", tap.node)));
                }
                let c = (i / inner) % axis_len;
                let r = &mut self.minmax[k][c];
                *r = (r.0.min(x), r.1.max(x));
                if let Observer::Percentile(_) = self.observer {
                    self.values[k][c].push(x);
                }
            }
        }
        self.batches += 1;
        Ok(())
    }

    /// The ranges; an error before any batch was observed.
    pub fn finish(mut self) -> Result<Calibration> {
        if self.batches == 0 {
            return Err(Error::eval("calibrate", "no batch was observed"));
        }
        let mut ranges = vec![];
        for (k, tap) in self.taps.iter().enumerate() {
            let r = match self.observer {
                Observer::MinMax => self.minmax[k].clone(),
                Observer::Percentile(p) => {
                    if !(50.0..=100.0).contains(&p) {
                        return Err(Error::eval("calibrate", format!("percentile {p} is outside 50..=100")));
                    }
                    self.values[k]
                        .iter_mut()
                        .map(|v| {
                            v.sort_by(f64::total_cmp);
                            let at = |q: f64| v[((q / 100.0) * (v.len() - 1) as f64).round() as usize];
                            (at(100.0 - p), at(p))
                        })
                        .collect()
                }
            };
            ranges.push((*tap, r));
        }
        Ok(Calibration { ranges })
    }
}

/// The integer grid of inserted fake quantization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantConfig {
    /// Bits (2..=16).
    pub bits: u8,
    /// Symmetric signed grid (zero point 0) or asymmetric unsigned with a zero point.
    pub signed: bool,
}

impl QuantConfig {
    /// Symmetric int8.
    pub fn int8() -> Self {
        QuantConfig { bits: 8, signed: true }
    }
}

impl QuantConfig {
    /// The integer grid's bounds (the `fake_quant` op's).
    pub fn range(&self) -> (f64, f64) {
        FakeQuant::new(self.bits, self.signed, None).range()
    }
}

/// Scale and zero point of one range on the grid of `cfg`: symmetric around zero when signed,
/// else covering `min(min, 0) ..= max(max, 0)` with an integer zero point.
pub fn scale_and_zero(min: f64, max: f64, cfg: QuantConfig) -> (f64, f64) {
    let (lo, hi) = cfg.range();
    let s = if cfg.signed { min.abs().max(max.abs()) / hi } else { (max.max(0.0) - min.min(0.0)) / (hi - lo) };
    let s = if s > 0.0 { s } else { 1.0 };
    (s, if cfg.signed { 0.0 } else { (-min.min(0.0) / s).round() })
}

/// Inserts `fake_quant` after every calibrated tap (its consumers read the quantized value);
/// scales and zero points become constants.
pub fn insert_fake_quant(g: &Graph, cal: &Calibration, cfg: QuantConfig) -> Result<Graph> {
    let mut out = Graph::new(g.name());
    let by_node: HashMap<NodeId, &TapRanges> = cal.ranges.iter().map(|r| (r.0.node, r)).collect();
    let mut map: Vec<NodeId> = Vec::with_capacity(g.len());
    for (i, n) in g.nodes().iter().enumerate() {
        let ins: Vec<NodeId> = n.inputs.iter().map(|x| map[x.index()]).collect();
        let mut id = out.try_add(n.op.clone(), &ins)?;
        if let Some((tap, ranges)) = by_node.get(&NodeId(i as u32)) {
            let dt = out.dtype(id);
            let (s, z): (Vec<f64>, Vec<f64>) = ranges.iter().map(|&(lo, hi)| scale_and_zero(lo, hi, cfg)).unzip();
            let (dims, axis) = match tap.granularity {
                Granularity::PerTensor => (vec![], None),
                Granularity::PerChannel(a) => (vec![s.len()], Some(a)),
            };
            let s = out.constant(HostTensor::from_f64(&dims, dt, &s)?);
            let z = out.constant(HostTensor::from_f64(&dims, dt, &z)?);
            id = out.fake_quant(id, s, z, cfg.bits, cfg.signed, axis);
        }
        map.push(id);
    }
    out.set_outputs(g.outputs().iter().map(|o| map[o.index()]).collect());
    out.verify()?;
    Ok(out)
}

/// Weight export: a float weight quantized to `cfg` per channel along `axis` (or per tensor):
/// the integers (as i32) and the per-channel scales and zero points.
pub fn quantize_weight(w: &HostTensor, axis: Option<i64>, cfg: QuantConfig) -> Result<(Vec<i32>, Vec<f64>, Vec<f64>)> {
    let d = w.dims();
    let (inner, ch) = match axis {
        Some(a) => {
            let a = normalize_axis(a, d.len()).map_err(|e| Error::eval("quantize_weight", e))?;
            (d[a + 1..].iter().product::<usize>(), d[a])
        }
        None => (1, 1),
    };
    let v = w.to_f64_vec()?;
    let mut ranges = vec![(f64::INFINITY, f64::NEG_INFINITY); ch];
    for (i, &x) in v.iter().enumerate() {
        let r = &mut ranges[(i / inner) % ch];
        *r = (r.0.min(x), r.1.max(x));
    }
    let (s, z): (Vec<f64>, Vec<f64>) = ranges.iter().map(|&(lo, hi)| scale_and_zero(lo, hi, cfg)).unzip();
    let (lo, hi) = cfg.range();
    let q = v
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let c = (i / inner) % ch;
            ((x / s[c]).round() + z[c]).clamp(lo, hi) as i32
        })
        .collect();
    Ok((q, s, z))
}
