//! The unary elementwise family: one table line per op (name, expression, derivative, integer form).

use crate::ops::rules::{self, Sym, with_sym};
use crate::ops::util::{rand_f64, unary_dtype_check};
use crate::{DType, Data, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Scalar, Shape, op::Arity};
use serde::{Deserialize, Serialize};

const SQRT_2_OVER_PI: f64 = 0.7978845608028654;
const FRAC_1_SQRT_2: f64 = std::f64::consts::FRAC_1_SQRT_2;
const FRAC_2_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;
const FRAC_1_SQRT_2PI: f64 = 0.3989422804014327;

/// Input range the samples draw from, so each op is tested where it is defined.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Domain {
    /// Any real number (samples use [-3, 3]).
    Real,
    /// Strictly positive numbers (samples use [0.1, 3]).
    Positive,
}

macro_rules! unary_family {
    ($($variant:ident $name:literal $dom:ident
        |$x:ident| $f:expr,
        d |$dx:ident, $dy:ident| $d:expr
        $(, int |$xi:ident| $int:expr)? ;)*) => {
        /// Which unary elementwise op.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum UnaryKind { $(#[doc = $name] $variant),* }

        impl UnaryKind {
            /// Every member of the family.
            pub const ALL: &'static [UnaryKind] = &[$(UnaryKind::$variant),*];

            /// The op name.
            pub fn name(self) -> &'static str {
                match self { $(UnaryKind::$variant => $name),* }
            }

            /// Where samples draw inputs from.
            pub fn domain(self) -> Domain {
                match self { $(UnaryKind::$variant => Domain::$dom),* }
            }

            /// The op's value at `x`.
            #[inline(always)]
            pub fn eval<S: Scalar>(self, x: S) -> S {
                match self { $(UnaryKind::$variant => { let $x = x; $f }),* }
            }

            /// The derivative at `x`, given the output `y`.
            #[inline(always)]
            pub fn deriv<S: Scalar>(self, x: S, y: S) -> S {
                match self { $(UnaryKind::$variant => { let ($dx, $dy) = (x, y); let _ = (&$dx, &$dy); $d }),* }
            }

            /// The integer form, for ops defined on integers.
            pub fn eval_int(self, x: i64) -> Option<i64> {
                match self { $(UnaryKind::$variant => unary_family!(@int x $(|$xi| $int)?)),* }
            }
        }
    };
    (@int $v:ident |$xi:ident| $int:expr) => {{ let $xi = $v; Some($int) }};
    (@int $v:ident) => { None };
}

unary_family! {
    Neg "neg" Real |x| -x, d |x, _y| x.c(-1.0), int |x| x.wrapping_neg();
    Abs "abs" Real |x| x.abs(), d |x, _y| x.sign(), int |x| x.wrapping_abs();
    Exp "exp" Real |x| x.exp(), d |_x, y| y;
    Log "log" Positive |x| x.ln(), d |x, _y| x.c(1.0) / x;
    Sqrt "sqrt" Positive |x| x.sqrt(), d |_x, y| y.c(0.5) / y;
    Rsqrt "rsqrt" Positive |x| x.c(1.0) / x.sqrt(), d |x, y| y.c(-0.5) * y / x;
    Recip "recip" Positive |x| x.c(1.0) / x, d |_x, y| -(y * y);
    Square "square" Real |x| x * x, d |x, _y| x.c(2.0) * x, int |x| x.wrapping_mul(x);
    Sin "sin" Real |x| x.sin(), d |x, _y| x.cos();
    Cos "cos" Real |x| x.cos(), d |x, _y| -x.sin();
    Tanh "tanh" Real |x| x.tanh(), d |_x, y| y.c(1.0) - y * y;
    Sigmoid "sigmoid" Real |x| x.c(1.0) / (x.c(1.0) + (-x).exp()), d |_x, y| y * (y.c(1.0) - y);
    Relu "relu" Real |x| x.max(x.c(0.0)), d |x, _y| x.sign().max(x.c(0.0)), int |x| x.max(0);
    Gelu "gelu" Real |x| x.c(0.5) * x * (x.c(1.0) + (x * x.c(FRAC_1_SQRT_2)).erf()),
        d |x, _y| x.c(0.5) * (x.c(1.0) + (x * x.c(FRAC_1_SQRT_2)).erf())
            + x * (x * x * x.c(-0.5)).exp() * x.c(FRAC_1_SQRT_2PI);
    GeluTanh "gelu_tanh" Real |x| x.c(0.5) * x * (x.c(1.0) + (x.c(SQRT_2_OVER_PI) * (x + x.c(0.044715) * x * x * x)).tanh()),
        d |x, _y| {
            let t = (x.c(SQRT_2_OVER_PI) * (x + x.c(0.044715) * x * x * x)).tanh();
            x.c(0.5) * (x.c(1.0) + t)
                + x.c(0.5) * x * (x.c(1.0) - t * t) * x.c(SQRT_2_OVER_PI) * (x.c(1.0) + x.c(3.0 * 0.044715) * x * x)
        };
    Silu "silu" Real |x| x / (x.c(1.0) + (-x).exp()),
        d |x, _y| { let s = x.c(1.0) / (x.c(1.0) + (-x).exp()); s * (x.c(1.0) + x * (x.c(1.0) - s)) };
    Erf "erf" Real |x| x.erf(), d |x, _y| x.c(FRAC_2_SQRT_PI) * (-(x * x)).exp();
    Softplus "softplus" Real |x| x.max(x.c(0.0)) + (x.c(1.0) + (-x.abs()).exp()).ln(),
        d |x, _y| x.c(1.0) / (x.c(1.0) + (-x).exp());
    Floor "floor" Real |x| x.floor(), d |x, _y| x.c(0.0), int |x| x;
    Round "round" Real |x| x.round(), d |x, _y| x.c(0.0), int |x| x;
    Sign "sign" Real |x| x.sign(), d |x, _y| x.c(0.0), int |x| x.signum();
}

/// A unary elementwise op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unary {
    /// Which op.
    pub kind: UnaryKind,
}

impl OpDef for Unary {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn traits(&self) -> OpTraits {
        let mut t = OpTraits::ELEMENTWISE;
        if self.kind == UnaryKind::Neg {
            t |= OpTraits::LINEAR;
        }
        t
    }

    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }

    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        unary_dtype_check(ins[0].dtype, self.kind.eval_int(1).is_some())?;
        Ok(ins[0].clone())
    }

    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let data = match &ins[0].data {
            Data::F(v) => Data::F(v.iter().map(|&x| self.kind.eval(x)).collect()),
            Data::I(v) => Data::I(v.iter().map(|&x| self.kind.eval_int(x).unwrap_or(0)).collect()),
            _ => {
                return Err(crate::Error::eval(self.name(), format!("unsupported dtype {}", out.dtype)));
            }
        };
        HostTensor::new(out.clone(), data)
    }

    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], out: NodeId) -> Option<NodeId> {
        let d = with_sym(g, |c| self.kind.deriv(Sym::new(c, ins[0]), Sym::new(c, out)).id);
        Some(rules::mul(g, t[0]?, d))
    }

    fn vjp(&self, g: &mut Graph, ins: &[NodeId], out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        let d = with_sym(g, |c| self.kind.deriv(Sym::new(c, ins[0]), Sym::new(c, out)).id);
        Some(vec![Some(rules::mul(g, ct, d))])
    }

    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], _size: usize) -> Option<NodeId> {
        rules::elementwise_batch(g, self.clone().into(), ins, batched)
    }

    fn samples() -> Vec<Sample> {
        let mut out = vec![];
        for &kind in UnaryKind::ALL {
            let (lo, hi) = match kind.domain() {
                Domain::Real => (-3.0, 3.0),
                Domain::Positive => (0.1, 3.0),
            };
            for (i, dt) in [DType::F32, DType::F64, DType::F16, DType::BF16].into_iter().enumerate() {
                let dims = [[2, 3], [4, 1], [1, 7], [3, 3]][i];
                let v = rand_f64(dims.iter().product(), lo, hi, 11 + i as u64);
                let t = HostTensor::from_f64(&dims, dt, &v).expect("sample");
                out.push(Sample::new(format!("{}/{dt}", kind.name()), Unary { kind }, vec![t]));
            }
            if kind.eval_int(1).is_some() {
                let t = HostTensor::from_i64(&[5], DType::I32, &[-7, -1, 0, 2, 9]).expect("sample");
                out.push(Sample::new(format!("{}/i32", kind.name()), Unary { kind }, vec![t]));
            }
        }
        out
    }
}

macro_rules! unary_builders {
    ($($fn_name:ident => $kind:ident),* $(,)?) => {
        impl Graph {
            $(
                #[doc = concat!("Elementwise `", stringify!($fn_name), "`.")]
                pub fn $fn_name(&mut self, x: NodeId) -> NodeId {
                    self.add_node(Unary { kind: UnaryKind::$kind }, &[x])
                }
            )*
        }
    };
}

unary_builders! {
    neg => Neg, abs => Abs, exp => Exp, log => Log, sqrt => Sqrt, rsqrt => Rsqrt, recip => Recip,
    square => Square, sin => Sin, cos => Cos, tanh => Tanh, sigmoid => Sigmoid, relu => Relu,
    gelu => Gelu, gelu_tanh => GeluTanh, silu => Silu, erf => Erf, softplus => Softplus,
    floor => Floor, round => Round, sign => Sign,
}

impl Graph {
    /// Applies any unary op by kind.
    pub fn unary(&mut self, kind: UnaryKind, x: NodeId) -> NodeId {
        self.add_node(Unary { kind }, &[x])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derivatives_match_finite_differences() {
        for &k in UnaryKind::ALL {
            let pts: &[f64] = match k.domain() {
                Domain::Real => &[-2.3, -0.7, 0.4, 1.9],
                Domain::Positive => &[0.3, 0.9, 2.2],
            };
            for &x in pts {
                let h = 1e-6;
                let fd = (k.eval(x + h) - k.eval(x - h)) / (2.0 * h);
                let an = k.deriv(x, k.eval(x));
                assert!((fd - an).abs() < 1e-6 * (1.0 + an.abs()), "{} at {x}: fd {fd} vs {an}", k.name());
            }
        }
    }
}
