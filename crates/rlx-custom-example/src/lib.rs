//! An op defined outside rlx-ir: `scaled_softplus(x; beta) = log(1 + exp(beta x)) / beta`,
//! through the same `OpDef` trait as built-in ops (inference, reference, decomposition, jvp,
//! vjp, batching rule, samples), registered by name with `rlx_ir::custom::register`, with a CPU
//! kernel registered by the same name for f32 (f64 runs through the decomposition).
//!
//! ```
//! use rlx_ir::{DType, Graph, Shape};
//! rlx_custom_example::register().unwrap();
//! let mut g = Graph::new("demo");
//! let x = g.input("x", Shape::new(&[3], DType::F32));
//! let y = g.custom(rlx_custom_example::ScaledSoftplus { beta: 2.0 }, &[x]);
//! g.set_outputs(vec![y]);
//! // The text form names the op and parses back through the registry.
//! let text = g.to_text();
//! assert!(text.contains("scaled_softplus(%0) {\"beta\":2.0}"));
//! assert_eq!(Graph::from_text(&text).unwrap(), g);
//! ```
#![warn(missing_docs)]

use rlx_cpu::exec::Bufs;
use rlx_cpu::kernels::{Kernel, KernelCtx, unsupported};
use rlx_ir::custom::CustomOpDef;
use rlx_ir::ops::util::rand_f64;
use rlx_ir::{DType, Data, Error, Graph, HostTensor, NodeId, Op, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// `log(1 + exp(beta x)) / beta`, elementwise: a smooth relu whose sharpness is `beta` (> 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaledSoftplus {
    /// The sharpness; must be positive.
    pub beta: f64,
}

/// The value in f64, stable for large `|beta x|`.
fn value(beta: f64, x: f64) -> f64 {
    let z = beta * x;
    (z.max(0.0) + (-z.abs()).exp().ln_1p()) / beta
}

impl OpDef for ScaledSoftplus {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn traits(&self) -> OpTraits {
        // Not ELEMENTWISE: passes that fuse elementwise regions expect the built-in families.
        OpTraits::COMPOSITE
    }
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        if !ins[0].dtype.is_float() {
            return Err(format!("needs a float input, got {}", ins[0].dtype));
        }
        if !(self.beta > 0.0 && self.beta.is_finite()) {
            return Err(format!("beta must be positive and finite, got {}", self.beta));
        }
        Ok(ins[0].clone())
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let Data::F(x) = &ins[0].data else { return Err(Error::eval(self.name(), "needs a float tensor")) };
        HostTensor::new(out.clone(), Data::F(x.iter().map(|&v| value(self.beta, v)).collect()))
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        let b = g.scalar(self.beta, g.dtype(ins[0]));
        let z = g.mul(ins[0], b);
        let s = g.softplus(z);
        Some(g.div(s, b))
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], _out: NodeId) -> Option<NodeId> {
        let d = self.slope(g, ins[0]);
        Some(g.mul(t[0]?, d))
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let d = self.slope(g, ins[0]);
        Some(vec![Some(g.mul(ct, d))])
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], _batched: &[bool], _size: usize) -> Option<NodeId> {
        // Elementwise: the batch axis is one more axis.
        Some(g.custom(self.clone(), &[ins[0]]))
    }
    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        for (dt, beta, dims) in
            [(DType::F32, 1.0, vec![2, 5]), (DType::F64, 3.0, vec![4, 3]), (DType::F32, 0.5, vec![7])]
        {
            let n = dims.iter().product();
            let x = HostTensor::from_f64(&dims, dt, &rand_f64(n, -4.0, 4.0, 11)).expect("sample");
            out.push(Sample::new(
                format!("scaled_softplus/{dt}/beta{beta}"),
                rlx_ir::custom::op(ScaledSoftplus { beta }),
                vec![x],
            ));
        }
        out
    }
}

impl CustomOpDef for ScaledSoftplus {
    const NAME: &'static str = "scaled_softplus";
}

impl ScaledSoftplus {
    /// The derivative `sigmoid(beta x)`, as graph nodes.
    fn slope(&self, g: &mut Graph, x: NodeId) -> NodeId {
        let b = g.scalar(self.beta, g.dtype(x));
        let z = g.mul(x, b);
        g.sigmoid(z)
    }
}

/// The CPU kernel (f32; f64 graphs take the decomposition).
fn cpu_kernel(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Some(op) = (match ctx.op {
        Op::Custom(c) => c.get::<ScaledSoftplus>(),
        _ => None,
    }) else {
        return Err(unsupported(ctx));
    };
    let beta = op.beta;
    Ok(Box::new(move |b: &Bufs<'_>| {
        let (x, y) = (b.input::<f32>(0), b.output::<f32>());
        y.iter_mut().zip(x).for_each(|(o, &v)| *o = value(beta, v as f64) as f32);
        Ok(())
    }))
}

/// Why `register` failed (shared by the custom-op crates).
pub use rlx_cpu::custom::RegisterError;

/// Registers the op and its f32 CPU kernel (idempotent).
pub fn register() -> std::result::Result<(), RegisterError> {
    rlx_ir::custom::register::<ScaledSoftplus>()?;
    // The same builder again is a no-op; only a different kernel for the name would clash.
    rlx_cpu::custom::register_kernel(ScaledSoftplus::NAME, &[DType::F32], cpu_kernel)?;
    Ok(())
}
