//! A legalized graph as a list of shim calls (`Step`s) over numbered values: inputs, then params,
//! then one value per step. Running it builds MLX's lazy graph; `eval` computes it.
//!
//! The emitters (the backend's kernel table) decide each node's steps at compile time, so a run
//! only walks the list. Elementwise ops come from the ops' own scalar expressions through `Mx`,
//! a symbolic value that records steps (as rlx-pjrt's `Hx` records StableHLO).

use rlx_ir::{DType, Scalar};
use std::cell::RefCell;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// A value of the program: its index, dims and dtype.
#[derive(Debug, Clone, PartialEq)]
pub struct V {
    /// Index into the run's values.
    pub id: usize,
    /// Static dims.
    pub dims: Vec<usize>,
    /// Element type.
    pub dt: DType,
}

/// One shim call.
#[derive(Debug, Clone)]
pub struct Step {
    /// The shim op name.
    pub op: &'static str,
    /// Input value ids.
    pub ins: Vec<usize>,
    /// Integer attributes.
    pub ints: Vec<i64>,
    /// Float attributes.
    pub floats: Vec<f64>,
    /// The dtype attribute (`astype`, `full`, `arange`).
    pub dt: DType,
    /// The graph node it belongs to, for eager-mode errors.
    pub node: usize,
}

/// The steps of one graph.
#[derive(Debug, Default, Clone)]
pub struct Prog {
    /// Values fed by the run: inputs then params.
    pub fed: usize,
    /// Every step, in order; step `i` makes value `fed + i`.
    pub steps: Vec<Step>,
    /// u8 scalars that must be 0 after a run, with the error to raise.
    pub checks: Vec<(usize, String)>,
    /// Constant tensors: bytes, dims and dtype (`@const` steps name them by index).
    pub consts: Vec<(Vec<u8>, Vec<usize>, DType)>,
    /// The node being emitted.
    pub node: usize,
}

impl Prog {
    /// Appends `op` and returns its value.
    pub fn op(&mut self, op: &'static str, ins: &[&V], ints: &[i64], floats: &[f64], dims: &[usize], dt: DType) -> V {
        self.steps.push(Step {
            op,
            ins: ins.iter().map(|v| v.id).collect(),
            ints: ints.to_vec(),
            floats: floats.to_vec(),
            dt,
            node: self.node,
        });
        V { id: self.fed + self.steps.len() - 1, dims: dims.to_vec(), dt }
    }

    /// A constant tensor of these bytes.
    pub fn constant(&mut self, bytes: Vec<u8>, dims: &[usize], dt: DType) -> V {
        let k = self.consts.len() as i64;
        self.consts.push((bytes, dims.to_vec(), dt));
        self.op("@const", &[], &[k], &[], dims, dt)
    }

    /// A constant of `dims` filled with `v`.
    pub fn full(&mut self, v: f64, dims: &[usize], dt: DType) -> V {
        let shape: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        self.op("full", &[], &shape, &[v], dims, dt)
    }
}

/// What `Mx` operations append to: the program, the dims and dtype they share, and the values
/// recorded so far.
type Rec = (Prog, Vec<usize>, DType, Vec<V>);

thread_local! {
    static REC: RefCell<Option<Rec>> = const { RefCell::new(None) };
}

/// A symbolic value of the program being recorded (index into the recorded values).
#[derive(Debug, Clone, Copy)]
pub struct Mx(usize);

fn with<R>(f: impl FnOnce(&mut Rec) -> R) -> R {
    REC.with(|r| f(r.borrow_mut().as_mut().expect("Mx used outside program::emit")))
}

impl Mx {
    fn op(name: &'static str, args: &[Mx]) -> Mx {
        with(|(p, dims, dt, vals)| {
            let ins: Vec<V> = args.iter().map(|a| vals[a.0].clone()).collect();
            let refs: Vec<&V> = ins.iter().collect();
            let v = p.op(name, &refs, &[], &[], &dims.clone(), *dt);
            vals.push(v);
            Mx(vals.len() - 1)
        })
    }
}

/// Records the steps `f` builds over `inputs` (all of `dims` and `dt`) into `prog`.
pub fn emit(prog: &mut Prog, dims: &[usize], dt: DType, inputs: &[V], f: impl FnOnce(&[Mx]) -> Mx) -> V {
    let rec = (std::mem::take(prog), dims.to_vec(), dt, inputs.to_vec());
    REC.with(|r| {
        let prev = r.borrow_mut().replace(rec);
        assert!(prev.is_none(), "program::emit is not reentrant");
    });
    let xs: Vec<Mx> = (0..inputs.len()).map(Mx).collect();
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&xs)));
    let (p, _, _, vals) = REC.with(|r| r.borrow_mut().take()).expect("recording");
    *prog = p;
    match out {
        Ok(m) => vals[m.0].clone(),
        Err(e) => std::panic::resume_unwind(e),
    }
}

macro_rules! binop {
    ($tr:ident, $f:ident, $name:literal) => {
        impl $tr for Mx {
            type Output = Mx;
            fn $f(self, o: Mx) -> Mx {
                Mx::op($name, &[self, o])
            }
        }
    };
}
binop!(Add, add, "add");
binop!(Sub, sub, "subtract");
binop!(Mul, mul, "multiply");
binop!(Div, div, "divide");

impl Neg for Mx {
    type Output = Mx;
    fn neg(self) -> Mx {
        Mx::op("negative", &[self])
    }
}

impl Scalar for Mx {
    fn c(self, v: f64) -> Mx {
        with(|(p, dims, dt, vals)| {
            let c = p.full(v, &dims.clone(), *dt);
            vals.push(c);
            Mx(vals.len() - 1)
        })
    }
    fn exp(self) -> Mx {
        Mx::op("exp", &[self])
    }
    fn ln(self) -> Mx {
        Mx::op("log", &[self])
    }
    fn sqrt(self) -> Mx {
        Mx::op("sqrt", &[self])
    }
    fn sin(self) -> Mx {
        Mx::op("sin", &[self])
    }
    fn cos(self) -> Mx {
        Mx::op("cos", &[self])
    }
    fn tanh(self) -> Mx {
        Mx::op("tanh", &[self])
    }
    fn erf(self) -> Mx {
        Mx::op("erf", &[self])
    }
    fn abs(self) -> Mx {
        Mx::op("abs", &[self])
    }
    fn floor(self) -> Mx {
        Mx::op("floor", &[self])
    }
    fn round(self) -> Mx {
        Mx::op("round", &[self])
    }
    fn max(self, o: Mx) -> Mx {
        Mx::op("maximum", &[self, o])
    }
    fn min(self, o: Mx) -> Mx {
        Mx::op("minimum", &[self, o])
    }
    fn pow(self, o: Mx) -> Mx {
        Mx::op("power", &[self, o])
    }
    fn sign(self) -> Mx {
        // RLX's sign(NaN) is 0; MLX's follows the input.
        let s = Mx::op("sign", &[self]);
        let zero = self.c(0.0);
        with(|(p, dims, dt, vals)| {
            let x = vals[self.0].clone();
            let nan = p.op("isnan", &[&x], &[], &[], &dims.clone(), DType::Bool);
            let (z, s) = (vals[zero.0].clone(), vals[s.0].clone());
            let v = p.op("where", &[&nan, &z, &s], &[], &[], &dims.clone(), *dt);
            vals.push(v);
            Mx(vals.len() - 1)
        })
    }
}
