//! Binary elementwise families with numpy broadcasting: arithmetic (one table line per op) and
//! comparisons. Builders promote dtypes numpy-style and insert the casts.

use crate::ops::rules::{self, Sym, with_sym};
use crate::ops::util::{broadcast_index_map, fixed, rand_f64, rand_i64, same_dtype};
use crate::shape::broadcast_dims;
use crate::{
    DType, DTypeClass, Data, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Scalar, Shape,
    op::Arity,
};
use serde::{Deserialize, Serialize};

type C = [f64; 2];

fn cmul(a: C, b: C) -> C {
    [a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0]]
}

fn cdiv(a: C, b: C) -> C {
    let d = b[0] * b[0] + b[1] * b[1];
    [(a[0] * b[0] + a[1] * b[1]) / d, (a[1] * b[0] - a[0] * b[1]) / d]
}

macro_rules! binary_family {
    ($($variant:ident $name:literal [$($tr:ident)|*] |$a:ident, $b:ident| $f:expr,
        da |$da_a:ident, $da_b:ident| $da:expr, db |$db_a:ident, $db_b:ident| $db:expr
        $(, int |$ia:ident, $ib:ident| $int:expr)? $(, cplx |$ca:ident, $cb:ident| $cplx:expr)? ;)*) => {
        /// Which binary arithmetic op.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum BinaryKind { $(#[doc = $name] $variant),* }

        impl BinaryKind {
            /// Every member.
            pub const ALL: &'static [BinaryKind] = &[$(BinaryKind::$variant),*];
            /// The op name.
            pub fn name(self) -> &'static str { match self { $(BinaryKind::$variant => $name),* } }
            /// Extra properties.
            pub fn traits(self) -> OpTraits { match self { $(BinaryKind::$variant => OpTraits::empty() $(| OpTraits::$tr)*),* } }
            /// The value.
            #[inline(always)]
            pub fn eval<S: Scalar>(self, a: S, b: S) -> S {
                match self { $(BinaryKind::$variant => { let ($a, $b) = (a, b); $f }),* }
            }
            /// Partial derivative in the first input.
            #[inline(always)]
            pub fn deriv_a<S: Scalar>(self, a: S, b: S) -> S {
                match self { $(BinaryKind::$variant => { let ($da_a, $da_b) = (a, b); let _ = (&$da_a, &$da_b); $da }),* }
            }
            /// Partial derivative in the second input.
            #[inline(always)]
            pub fn deriv_b<S: Scalar>(self, a: S, b: S) -> S {
                match self { $(BinaryKind::$variant => { let ($db_a, $db_b) = (a, b); let _ = (&$db_a, &$db_b); $db }),* }
            }
            /// Integer form (wrapping), for ops defined on integers.
            pub fn eval_int(self, a: i64, b: i64) -> Option<i64> {
                match self { $(BinaryKind::$variant => binary_family!(@opt a b $(|$ia, $ib| $int)?)),* }
            }
            /// Complex form, for ops defined on complex numbers.
            pub fn eval_complex(self, a: [f64; 2], b: [f64; 2]) -> Option<[f64; 2]> {
                match self { $(BinaryKind::$variant => binary_family!(@opt a b $(|$ca, $cb| $cplx)?)),* }
            }
        }
    };
    (@opt $x:ident $y:ident |$p:ident, $q:ident| $e:expr) => {{ let ($p, $q) = ($x, $y); Some($e) }};
    (@opt $x:ident $y:ident) => {{ let _ = ($x, $y); None }};
}

binary_family! {
    Add "add" [COMMUTATIVE | LINEAR] |a, b| a + b, da |a, _b| a.c(1.0), db |a, _b| a.c(1.0),
        int |a, b| a.wrapping_add(b), cplx |a, b| [a[0] + b[0], a[1] + b[1]];
    Sub "sub" [LINEAR] |a, b| a - b, da |a, _b| a.c(1.0), db |a, _b| a.c(-1.0),
        int |a, b| a.wrapping_sub(b), cplx |a, b| [a[0] - b[0], a[1] - b[1]];
    Mul "mul" [COMMUTATIVE] |a, b| a * b, da |_a, b| b, db |a, _b| a,
        int |a, b| a.wrapping_mul(b), cplx |a, b| cmul(a, b);
    Div "div" [] |a, b| a / b, da |_a, b| b.c(1.0) / b, db |a, b| -a / (b * b), cplx |a, b| cdiv(a, b);
    Pow "pow" [] |a, b| a.pow(b), da |a, b| b * a.pow(b - b.c(1.0)), db |a, b| a.pow(b) * a.ln();
    Maximum "maximum" [COMMUTATIVE] |a, b| a.max(b),
        da |a, b| a.c(0.5) * (a.c(1.0) + (a - b).sign()), db |a, b| a.c(0.5) * (a.c(1.0) - (a - b).sign()),
        int |a, b| a.max(b);
    Minimum "minimum" [COMMUTATIVE] |a, b| a.min(b),
        da |a, b| a.c(0.5) * (a.c(1.0) - (a - b).sign()), db |a, b| a.c(0.5) * (a.c(1.0) + (a - b).sign()),
        int |a, b| a.min(b);
}

/// Broadcast output type of two inputs sharing a dtype.
fn broadcast_infer(ins: &[&Shape]) -> std::result::Result<Shape, String> {
    let dt = same_dtype(ins)?;
    Ok(Shape::with_dims(broadcast_dims(&ins[0].dims, &ins[1].dims)?, dt))
}

/// Broadcast input data to the output dims, returning per-element pairs through `f`.
fn broadcast_pair<T: Copy, R>(
    a: &[T],
    b: &[T],
    ad: &[usize],
    bd: &[usize],
    od: &[usize],
    f: impl Fn(T, T) -> R,
) -> Vec<R> {
    let ia = broadcast_index_map(od, ad);
    let ib = broadcast_index_map(od, bd);
    ia.iter().zip(&ib).map(|(&i, &j)| f(a[i], b[j])).collect()
}

/// A binary arithmetic op with numpy broadcasting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Binary {
    /// Which op.
    pub kind: BinaryKind,
}

impl OpDef for Binary {
    fn name(&self) -> &'static str {
        self.kind.name()
    }
    fn traits(&self) -> OpTraits {
        OpTraits::ELEMENTWISE | OpTraits::BROADCAST | self.kind.traits()
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let out = broadcast_infer(ins)?;
        let ok = match out.dtype.class() {
            DTypeClass::Float => true,
            DTypeClass::Int => self.kind.eval_int(1, 1).is_some(),
            DTypeClass::Complex => self.kind.eval_complex([1.0, 0.0], [1.0, 0.0]).is_some(),
            DTypeClass::Bool => false,
        };
        if !ok {
            return Err(format!("dtype {} is not supported", out.dtype));
        }
        Ok(out)
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let (ad, bd, od) = (ins[0].dims(), ins[1].dims(), out.fixed_dims().unwrap_or_default());
        let k = self.kind;
        let data = match (&ins[0].data, &ins[1].data) {
            (Data::F(a), Data::F(b)) => Data::F(broadcast_pair(a, b, &ad, &bd, &od, |x, y| k.eval(x, y))),
            (Data::I(a), Data::I(b)) => {
                Data::I(broadcast_pair(a, b, &ad, &bd, &od, |x, y| k.eval_int(x, y).unwrap_or(0)))
            }
            (Data::C(a), Data::C(b)) => {
                Data::C(broadcast_pair(a, b, &ad, &bd, &od, |x, y| k.eval_complex(x, y).unwrap_or([0.0; 2])))
            }
            _ => return Err(Error::eval(self.name(), "mismatched input classes")),
        };
        HostTensor::new(out.clone(), data)
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], out: NodeId) -> Option<NodeId> {
        let k = self.kind;
        let (da, db) = with_sym(g, |c| {
            let (a, b) = (Sym::new(c, ins[0]), Sym::new(c, ins[1]));
            (t[0].map(|_| k.deriv_a(a, b).id), t[1].map(|_| k.deriv_b(a, b).id))
        });
        let pa = t[0].zip(da).map(|(t, d)| rules::mul(g, t, d));
        let pb = t[1].zip(db).map(|(t, d)| rules::mul(g, t, d));
        let sum = match (pa, pb) {
            (Some(a), Some(b)) => g.add(a, b),
            (a, b) => a.or(b)?,
        };
        let od = rules::dims(g, out);
        Some(rules::broadcast_to(g, sum, &od))
    }

    fn vjp(&self, g: &mut Graph, ins: &[NodeId], _out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let k = self.kind;
        let (da, db) = with_sym(g, |c| {
            let (a, b) = (Sym::new(c, ins[0]), Sym::new(c, ins[1]));
            (k.deriv_a(a, b).id, k.deriv_b(a, b).id)
        });
        let mut v = vec![];
        for (x, d) in [(ins[0], da), (ins[1], db)] {
            let p = rules::mul(g, ct, d);
            let xd = rules::dims(g, x);
            v.push(Some(rules::sum_to(g, p, &xd)));
        }
        Some(v)
    }

    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        rules::elementwise_batch(g, self.clone().into(), ins, batched)
    }

    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        for &kind in BinaryKind::ALL {
            let lo = if kind == BinaryKind::Pow { 0.2 } else { -2.0 };
            let mk = |dims: &[usize], dt, seed| {
                let n = dims.iter().product();
                let mut v = rand_f64(n, lo, 2.0, seed);
                if kind == BinaryKind::Div {
                    v.iter_mut().for_each(|x| *x = if *x >= 0.0 { *x + 0.5 } else { *x - 0.5 });
                }
                HostTensor::from_f64(dims, dt, &v).expect("sample")
            };
            let cases: [(&[usize], &[usize], DType); 4] = [
                (&[2, 3], &[2, 3], DType::F32),
                (&[2, 1, 4], &[3, 1], DType::F32),
                (&[3], &[], DType::F64),
                (&[4, 2], &[2], DType::F16),
            ];
            for (i, (a, b, dt)) in cases.into_iter().enumerate() {
                let ins = vec![mk(a, dt, 3 + i as u64), mk(b, dt, 7 + i as u64)];
                out.push(Sample::new(format!("{}/{dt}{a:?}x{b:?}", kind.name()), Binary { kind }, ins));
            }
            if kind.eval_int(1, 1).is_some() {
                let a = HostTensor::from_i64(&[2, 3], DType::I32, &rand_i64(6, -9, 9, 5)).expect("sample");
                let b = HostTensor::from_i64(&[3], DType::I32, &rand_i64(3, -9, 9, 6)).expect("sample");
                out.push(Sample::new(format!("{}/i32", kind.name()), Binary { kind }, vec![a, b]));
            }
        }
        out
    }
}

/// Which comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompareKind {
    /// ==
    Eq,
    /// !=
    Ne,
    /// <
    Lt,
    /// <=
    Le,
    /// >
    Gt,
    /// >=
    Ge,
}

impl CompareKind {
    /// Every member.
    pub const ALL: &'static [CompareKind] =
        &[CompareKind::Eq, CompareKind::Ne, CompareKind::Lt, CompareKind::Le, CompareKind::Gt, CompareKind::Ge];
    /// The op name.
    pub fn name(self) -> &'static str {
        match self {
            CompareKind::Eq => "eq",
            CompareKind::Ne => "ne",
            CompareKind::Lt => "lt",
            CompareKind::Le => "le",
            CompareKind::Gt => "gt",
            CompareKind::Ge => "ge",
        }
    }
    /// Compares two values of any ordered type.
    #[inline(always)]
    pub fn eval<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CompareKind::Eq => a == b,
            CompareKind::Ne => a != b,
            CompareKind::Lt => a < b,
            CompareKind::Le => a <= b,
            CompareKind::Gt => a > b,
            CompareKind::Ge => a >= b,
        }
    }
}

/// An elementwise comparison with broadcasting; the output is bool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compare {
    /// Which comparison.
    pub kind: CompareKind,
}

impl OpDef for Compare {
    fn name(&self) -> &'static str {
        self.kind.name()
    }
    fn traits(&self) -> OpTraits {
        OpTraits::ELEMENTWISE | OpTraits::BROADCAST | OpTraits::NON_DIFFERENTIABLE
    }
    fn arity(&self) -> Arity {
        Arity::Exact(2)
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        let s = broadcast_infer(ins)?;
        if s.dtype == DType::C64 && !matches!(self.kind, CompareKind::Eq | CompareKind::Ne) {
            return Err("complex numbers are not ordered".into());
        }
        Ok(s.with_dtype(DType::Bool))
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let (ad, bd, od) = (ins[0].dims(), ins[1].dims(), fixed(&out.dims).unwrap_or_default());
        let k = self.kind;
        let v = match (&ins[0].data, &ins[1].data) {
            (Data::F(a), Data::F(b)) => broadcast_pair(a, b, &ad, &bd, &od, |x, y| k.eval(x, y)),
            (Data::I(a), Data::I(b)) => broadcast_pair(a, b, &ad, &bd, &od, |x, y| k.eval(x, y)),
            (Data::B(a), Data::B(b)) => broadcast_pair(a, b, &ad, &bd, &od, |x, y| k.eval(x, y)),
            (Data::C(a), Data::C(b)) => broadcast_pair(a, b, &ad, &bd, &od, |x, y| k.eval(x == y, true)),
            _ => return Err(Error::eval(self.name(), "mismatched input classes")),
        };
        HostTensor::new(out.clone(), Data::B(v))
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        rules::elementwise_batch(g, self.clone().into(), ins, batched)
    }

    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        for &kind in CompareKind::ALL {
            // Small integers stored as floats make ties likely, so == and <= are exercised.
            let a = rand_i64(6, -2, 3, 1).into_iter().map(|x| x as f64).collect::<Vec<_>>();
            let b = rand_i64(3, -2, 3, 2).into_iter().map(|x| x as f64).collect::<Vec<_>>();
            let fa = HostTensor::from_f64(&[2, 3], DType::F32, &a).expect("sample");
            let fb = HostTensor::from_f64(&[3], DType::F32, &b).expect("sample");
            out.push(Sample::new(format!("{}/f32", kind.name()), Compare { kind }, vec![fa, fb]));
            let ia = HostTensor::from_i64(&[2, 3], DType::I64, &rand_i64(6, -2, 3, 3)).expect("sample");
            let ib = HostTensor::from_i64(&[2, 1], DType::I64, &rand_i64(2, -2, 3, 4)).expect("sample");
            out.push(Sample::new(format!("{}/i64", kind.name()), Compare { kind }, vec![ia, ib]));
        }
        out
    }
}

impl Graph {
    /// Applies a binary op, promoting dtypes numpy-style (casts are inserted).
    pub fn binary(&mut self, kind: BinaryKind, a: NodeId, b: NodeId) -> NodeId {
        let (a, b) = self.promote_pair(a, b);
        self.add_node(Binary { kind }, &[a, b])
    }

    /// Applies a comparison, promoting dtypes numpy-style.
    pub fn compare(&mut self, kind: CompareKind, a: NodeId, b: NodeId) -> NodeId {
        let (a, b) = self.promote_pair(a, b);
        self.add_node(Compare { kind }, &[a, b])
    }

    fn promote_pair(&mut self, a: NodeId, b: NodeId) -> (NodeId, NodeId) {
        match (self.shape(a).map(|s| s.dtype), self.shape(b).map(|s| s.dtype)) {
            (Some(da), Some(db)) if da != db => {
                let to = DType::promote(da, db);
                (self.cast_to(a, to), self.cast_to(b, to))
            }
            _ => (a, b),
        }
    }

    /// a + b.
    pub fn add(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.binary(BinaryKind::Add, a, b)
    }
    /// a - b.
    pub fn sub(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.binary(BinaryKind::Sub, a, b)
    }
    /// a * b.
    pub fn mul(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.binary(BinaryKind::Mul, a, b)
    }
    /// a / b.
    pub fn div(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.binary(BinaryKind::Div, a, b)
    }
    /// a ^ b.
    pub fn pow(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.binary(BinaryKind::Pow, a, b)
    }
    /// Elementwise maximum.
    pub fn maximum(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.binary(BinaryKind::Maximum, a, b)
    }
    /// Elementwise minimum.
    pub fn minimum(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.binary(BinaryKind::Minimum, a, b)
    }
    /// a == b.
    pub fn eq(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.compare(CompareKind::Eq, a, b)
    }
    /// a != b.
    pub fn ne(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.compare(CompareKind::Ne, a, b)
    }
    /// a < b.
    pub fn lt(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.compare(CompareKind::Lt, a, b)
    }
    /// a <= b.
    pub fn le(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.compare(CompareKind::Le, a, b)
    }
    /// a > b.
    pub fn gt(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.compare(CompareKind::Gt, a, b)
    }
    /// a >= b.
    pub fn ge(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.compare(CompareKind::Ge, a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partials_match_finite_differences() {
        for &k in BinaryKind::ALL {
            for &(a, b) in &[(0.7, 1.3), (1.9, 0.4), (2.5, 1.1)] {
                let h = 1e-6;
                let fa = (k.eval(a + h, b) - k.eval(a - h, b)) / (2.0 * h);
                let fb = (k.eval(a, b + h) - k.eval(a, b - h)) / (2.0 * h);
                assert!((fa - k.deriv_a(a, b)).abs() < 1e-6, "{} d/da", k.name());
                assert!((fb - k.deriv_b(a, b)).abs() < 1e-6, "{} d/db", k.name());
            }
        }
    }
}
