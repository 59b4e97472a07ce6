//! Packed quantized weights: `dequantize` (U8 GGUF rows to f32) and `qmatmul` (x @ dequant(w)^T),
//! the op behind every quantized linear layer. Weights stay packed in the arena.

use crate::ops::util::rand_f64;
use crate::quant::QuantScheme;
use crate::{
    DType, DTypeClass, Data, Dim, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity,
};
use serde::{Deserialize, Serialize};

/// U8 `[..., n, row_bytes(k)]` (GGUF rows of `scheme` blocks) to f32 `[..., n, k]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dequantize {
    /// The block format.
    pub scheme: QuantScheme,
    /// Elements per row.
    pub k: usize,
}

/// `y = x @ dequant(w)^T`: x float `[..., m, k]`, w U8 `[n, row_bytes(k)]`, y `[..., m, n]` in
/// x's dtype. Backends may quantize x to 8 bits on the fly (see `tolerance`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QMatMul {
    /// The weight's block format.
    pub scheme: QuantScheme,
    /// The contracted size.
    pub k: usize,
}

/// Checks a packed operand `[..., n, row_bytes(k)]` of U8; returns its leading dims.
fn packed_dims(s: &Shape, scheme: QuantScheme, k: usize) -> std::result::Result<&[Dim], String> {
    if s.dtype != DType::U8 {
        return Err(format!("packed weights must be u8, got {}", s.dtype));
    }
    let rb = scheme.row_bytes(k)?;
    match s.dims.last() {
        Some(Dim::Fixed(b)) if *b == rb && s.rank() >= 2 => Ok(&s.dims[..s.rank() - 1]),
        _ => Err(format!("packed {scheme} rows of k = {k} need shape [..., n, {rb}], got {s}")),
    }
}

/// The packed bytes of a U8 host tensor.
fn bytes(t: &HostTensor) -> Result<Vec<u8>> {
    match &t.data {
        Data::I(v) => Ok(v.iter().map(|&b| b as u8).collect()),
        _ => Err(Error::eval("dequantize", "packed weights are not u8")),
    }
}

impl OpDef for Dequantize {
    fn name(&self) -> &'static str {
        "dequantize"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::NON_DIFFERENTIABLE
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let mut dims = packed_dims(ins[0], self.scheme, self.k)?.to_vec();
        dims.push(Dim::Fixed(self.k));
        Ok(Shape::with_dims(dims, DType::F32))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let mut y = vec![0f32; ins[0].numel() / self.scheme.row_bytes(self.k).unwrap_or(1) * self.k];
        self.scheme.dequantize_rows(&bytes(ins[0])?, self.k, &mut y)?;
        HostTensor::new(out.clone(), Data::F(y.into_iter().map(f64::from).collect()))
    }
    fn samples() -> Vec<Sample> {
        let cases: [(QuantScheme, &[usize], usize); 3] =
            [(QuantScheme::Q4_K, &[3], 256), (QuantScheme::Q8_0, &[2, 2], 64), (QuantScheme::Q6_K, &[2], 512)];
        cases
            .iter()
            .enumerate()
            .map(|(i, &(s, lead, k))| {
                let op = Dequantize { scheme: s, k };
                Sample::new(format!("dequantize/{s}{lead:?}x{k}"), op, vec![packed(s, lead, k, 40 + i as u64)])
            })
            .collect()
    }
}

/// Deterministic packed weights `[lead..., row_bytes(k)]` quantized from values in [-1, 1).
pub fn packed(scheme: QuantScheme, lead: &[usize], k: usize, seed: u64) -> HostTensor {
    let rows: usize = lead.iter().product();
    let w: Vec<f32> = rand_f64(rows * k, -1.0, 1.0, seed).into_iter().map(|v| v as f32).collect();
    let b = scheme.quantize_rows(&w, k).expect("sample quantization");
    let mut dims = lead.to_vec();
    dims.push(b.len() / rows.max(1));
    HostTensor::from_i64(&dims, DType::U8, &b.iter().map(|&x| x as i64).collect::<Vec<_>>()).expect("sample")
}

impl OpDef for QMatMul {
    fn name(&self) -> &'static str {
        "qmatmul"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::CONTRACTION | OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let (x, w) = (ins[0], ins[1]);
        if x.dtype.class() != DTypeClass::Float {
            return Err(format!("activations must be float, got {}", x.dtype));
        }
        let lead = packed_dims(w, self.scheme, self.k)?;
        if lead.len() != 1 {
            return Err(format!("packed weights must be [n, row_bytes], got {w}"));
        }
        match x.dims.last() {
            Some(Dim::Fixed(k)) if *k == self.k && x.rank() >= 2 => {}
            _ => return Err(format!("activations need shape [..., m, {}], got {x}", self.k)),
        }
        let mut dims = x.dims[..x.rank() - 1].to_vec();
        dims.push(lead[0].clone());
        Ok(Shape::with_dims(dims, x.dtype))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let k = self.k;
        let rb = self.scheme.row_bytes(k).map_err(|e| Error::eval("qmatmul", e))?;
        let n = ins[1].numel() / rb;
        let mut w = vec![0f32; n * k];
        self.scheme.dequantize_rows(&bytes(ins[1])?, k, &mut w)?;
        let x = ins[0].to_f64_vec()?;
        let mut y = Vec::with_capacity(x.len() / k * n);
        for row in x.chunks_exact(k) {
            for wr in w.chunks_exact(k) {
                y.push(row.iter().zip(wr).fold(0.0, |acc, (a, b)| a.mul_add(f64::from(*b), acc)));
            }
        }
        HostTensor::new(out.clone(), Data::F(y))
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        let w = g.add_node(Dequantize { scheme: self.scheme, k: self.k }, &[ins[1]]);
        let dt = g.dtype(ins[0]);
        let w = if dt == DType::F32 { w } else { g.cast(w, dt) };
        Some(g.matmul_t(ins[0], w, false, true))
    }
    fn tolerance(&self) -> Option<(f64, f64)> {
        // Activations quantized to 8 bits per block: for |x|, |w| <= 1 the error of one output
        // is a sum of k terms of about 1/127 each, so it grows like sqrt(k).
        Some((0.01 * (self.k as f64).sqrt(), 1e-2))
    }
    fn samples() -> Vec<Sample> {
        let x = |d: &[usize], s| HostTensor::from_f64(d, DType::F32, &rand_f64(d.iter().product(), -1.0, 1.0, s));
        let schemes = [
            (QuantScheme::Q4_0, 64),
            (QuantScheme::Q8_0, 96),
            (QuantScheme::Q4_K, 256),
            (QuantScheme::Q5_K, 512),
            (QuantScheme::Q6_K, 256),
        ];
        let mut out = vec![];
        for (i, (s, k)) in schemes.into_iter().enumerate() {
            let seed = 60 + 10 * i as u64;
            let op = QMatMul { scheme: s, k };
            // Decode (m = 1), prefill (m > 1, n spanning several row tiles) and a batched case.
            for (j, (xd, n)) in [(vec![1, k], 7), (vec![5, k], 19), (vec![2, 3, k], 4)].into_iter().enumerate() {
                let xs = x(&xd, seed + j as u64).expect("sample");
                let w = packed(s, &[n], k, seed + 5 + j as u64);
                out.push(Sample::new(format!("qmatmul/{s}/{xd:?}x{n}"), op.clone(), vec![xs, w]));
            }
        }
        out
    }
}

impl Graph {
    /// Dequantizes packed `scheme` rows of `k` elements to f32.
    pub fn dequantize(&mut self, packed: NodeId, scheme: QuantScheme, k: usize) -> NodeId {
        self.add_node(Dequantize { scheme, k }, &[packed])
    }

    /// `x @ dequant(w)^T` with `w` packed `[n, row_bytes(k)]`.
    pub fn qmatmul(&mut self, x: NodeId, w: NodeId, scheme: QuantScheme, k: usize) -> NodeId {
        self.add_node(QMatMul { scheme, k }, &[x, w])
    }
}
