//! Elementwise StableHLO from the ops' own scalar expressions: `Hx` implements `rlx_ir::Scalar`
//! symbolically over whole tensors, so `UnaryKind::eval::<Hx>` writes StableHLO ops instead of
//! computing a number (the same expression drives the interpreter and the CPU kernels).

use super::{Ctx, V};
use rlx_ir::{DType, Scalar};
use std::cell::RefCell;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// What `Hx` operations append to: the function, the tensor type they all share, and the
/// values recorded so far.
struct Rec {
    ctx: Ctx,
    dims: Vec<usize>,
    dt: DType,
    vals: Vec<V>,
}

thread_local! {
    static REC: RefCell<Option<Rec>> = const { RefCell::new(None) };
}

/// A symbolic tensor value: index into the recorded values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hx(usize);

fn with<R>(f: impl FnOnce(&mut Rec) -> R) -> R {
    REC.with(|r| f(r.borrow_mut().as_mut().expect("Hx used outside elementwise::emit")))
}

impl Hx {
    fn push(v: V) -> Hx {
        with(|r| {
            r.vals.push(v);
            Hx(r.vals.len() - 1)
        })
    }

    fn val(self) -> V {
        with(|r| r.vals[self.0].clone())
    }

    /// An op over the shared type.
    fn op(name: &str, args: &[Hx]) -> Hx {
        let vs: Vec<V> = args.iter().map(|a| a.val()).collect();
        let v = with(|r| {
            let refs: Vec<&V> = vs.iter().collect();
            let (dims, dt) = (r.dims.clone(), r.dt);
            r.ctx.op(name, &refs, "", &dims, dt)
        });
        Hx::push(v)
    }

    fn compare(self, dir: &str, o: Hx) -> V {
        let (a, b) = (self.val(), o.val());
        with(|r| {
            let dims = r.dims.clone();
            let attrs = super::emit::compare_attrs(dir, r.dt);
            r.ctx.op("compare", &[&a, &b], &attrs, &dims, DType::Bool)
        })
    }

    fn select(pred: &V, a: Hx, b: Hx) -> Hx {
        let (a, b) = (a.val(), b.val());
        let v = with(|r| {
            let (dims, dt) = (r.dims.clone(), r.dt);
            r.ctx.op("select", &[pred, &a, &b], "", &dims, dt)
        });
        Hx::push(v)
    }
}

/// Records the ops `f` builds over `inputs` (all of `dims` and `dt`) into `ctx`; returns the
/// result value.
pub fn emit(ctx: &mut Ctx, dims: &[usize], dt: DType, inputs: &[V], f: impl FnOnce(&[Hx]) -> Hx) -> V {
    let rec = Rec { ctx: std::mem::take(ctx), dims: dims.to_vec(), dt, vals: inputs.to_vec() };
    REC.with(|r| {
        let prev = r.borrow_mut().replace(rec);
        assert!(prev.is_none(), "elementwise::emit is not reentrant");
    });
    let hs: Vec<Hx> = (0..inputs.len()).map(Hx).collect();
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&hs)));
    let rec = REC.with(|r| r.borrow_mut().take()).expect("recording");
    *ctx = rec.ctx;
    match out {
        Ok(h) => rec.vals[h.0].clone(),
        Err(p) => std::panic::resume_unwind(p),
    }
}

impl Add for Hx {
    type Output = Hx;
    fn add(self, o: Hx) -> Hx {
        Hx::op("add", &[self, o])
    }
}
impl Sub for Hx {
    type Output = Hx;
    fn sub(self, o: Hx) -> Hx {
        Hx::op("subtract", &[self, o])
    }
}
impl Mul for Hx {
    type Output = Hx;
    fn mul(self, o: Hx) -> Hx {
        Hx::op("multiply", &[self, o])
    }
}
impl Div for Hx {
    type Output = Hx;
    fn div(self, o: Hx) -> Hx {
        Hx::op("divide", &[self, o])
    }
}
impl Neg for Hx {
    type Output = Hx;
    fn neg(self) -> Hx {
        Hx::op("negate", &[self])
    }
}

impl Scalar for Hx {
    fn c(self, v: f64) -> Hx {
        let c = with(|r| {
            let (dims, dt) = (r.dims.clone(), r.dt);
            r.ctx.splat(v, &dims, dt)
        });
        Hx::push(c)
    }
    fn exp(self) -> Hx {
        Hx::op("exponential", &[self])
    }
    fn ln(self) -> Hx {
        Hx::op("log", &[self])
    }
    fn sqrt(self) -> Hx {
        Hx::op("sqrt", &[self])
    }
    fn sin(self) -> Hx {
        Hx::op("sine", &[self])
    }
    fn cos(self) -> Hx {
        Hx::op("cosine", &[self])
    }
    fn tanh(self) -> Hx {
        Hx::op("tanh", &[self])
    }
    fn erf(self) -> Hx {
        // CHLO is what JAX emits for erf; XLA expands it to a rational approximation.
        Hx::op("chlo.erf", &[self])
    }
    fn abs(self) -> Hx {
        Hx::op("abs", &[self])
    }
    fn floor(self) -> Hx {
        Hx::op("floor", &[self])
    }
    fn round(self) -> Hx {
        Hx::op("round_nearest_even", &[self])
    }
    fn max(self, o: Hx) -> Hx {
        Hx::op("maximum", &[self, o])
    }
    fn min(self, o: Hx) -> Hx {
        Hx::op("minimum", &[self, o])
    }
    fn pow(self, o: Hx) -> Hx {
        Hx::op("power", &[self, o])
    }
    fn sign(self) -> Hx {
        // StableHLO's sign(NaN) is NaN; RLX's is 0.
        let s = Hx::op("sign", &[self]);
        let nan = self.compare("NE", self);
        let zero = self.c(0.0);
        Hx::select(&nan, zero, s)
    }
}
