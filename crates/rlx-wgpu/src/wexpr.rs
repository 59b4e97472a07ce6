//! WGSL generated from the ops' own scalar expressions: `Wx` implements `rlx_ir::Scalar`
//! symbolically, so `UnaryKind::eval::<Wx>` writes WGSL instead of computing a number.
//!
//! `Scalar` needs `Copy`, so a `Wx` is an index into a thread-local list of `let` statements
//! recorded by `emit`; each operation appends one statement and returns its handle.

use rlx_ir::Scalar;
use std::cell::RefCell;
use std::ops::{Add, Div, Mul, Neg, Sub};

thread_local! {
    static LINES: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// A symbolic f32 value: the WGSL variable `v{index}` of the program being recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wx(u32);

impl Wx {
    /// The WGSL name of this value.
    pub fn name(self) -> String {
        format!("v{}", self.0)
    }

    /// Records `let vN: f32 = <expr>;` and returns vN.
    fn push(expr: String) -> Wx {
        LINES.with(|l| {
            let mut l = l.borrow_mut();
            let lines = l.as_mut().expect("Wx used outside wexpr::emit");
            let id = lines.len() as u32;
            lines.push(format!("let v{id}: f32 = {expr};"));
            Wx(id)
        })
    }

    /// A value read from a WGSL expression (an input load).
    pub fn load(expr: impl Into<String>) -> Wx {
        Wx::push(expr.into())
    }

    fn call(f: &str, args: &[Wx]) -> Wx {
        let a: Vec<String> = args.iter().map(|w| w.name()).collect();
        Wx::push(format!("{f}({})", a.join(", ")))
    }

    fn infix(self, op: &str, o: Wx) -> Wx {
        Wx::push(format!("{} {op} {}", self.name(), o.name()))
    }
}

/// Records the program built by `f` and returns its statements and result variable.
/// Nested calls are not allowed (they would share the statement list).
pub fn emit(f: impl FnOnce() -> Wx) -> (Vec<String>, String) {
    LINES.with(|l| {
        let prev = l.borrow_mut().replace(vec![]);
        assert!(prev.is_none(), "wexpr::emit is not reentrant");
    });
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let lines = LINES.with(|l| l.borrow_mut().take().unwrap_or_default());
    match out {
        Ok(r) => (lines, r.name()),
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// A WGSL f32 literal with exactly the f32 value of `v` (non-finite values by bit pattern).
pub fn literal(v: f64) -> String {
    let f = v as f32;
    if f.is_finite() { format!("f32({f:?})") } else { format!("bitcast<f32>({:#010x}u)", f.to_bits()) }
}

impl Add for Wx {
    type Output = Wx;
    fn add(self, o: Wx) -> Wx {
        self.infix("+", o)
    }
}
impl Sub for Wx {
    type Output = Wx;
    fn sub(self, o: Wx) -> Wx {
        self.infix("-", o)
    }
}
impl Mul for Wx {
    type Output = Wx;
    fn mul(self, o: Wx) -> Wx {
        self.infix("*", o)
    }
}
impl Div for Wx {
    type Output = Wx;
    fn div(self, o: Wx) -> Wx {
        self.infix("/", o)
    }
}
impl Neg for Wx {
    type Output = Wx;
    fn neg(self) -> Wx {
        Wx::push(format!("-{}", self.name()))
    }
}

impl Scalar for Wx {
    fn c(self, v: f64) -> Wx {
        Wx::push(literal(v))
    }
    fn exp(self) -> Wx {
        Wx::call("exp", &[self])
    }
    fn ln(self) -> Wx {
        Wx::call("log", &[self])
    }
    fn sqrt(self) -> Wx {
        Wx::call("sqrt", &[self])
    }
    fn sin(self) -> Wx {
        Wx::call("sin", &[self])
    }
    fn cos(self) -> Wx {
        Wx::call("cos", &[self])
    }
    fn tanh(self) -> Wx {
        Wx::call("rlx_tanh", &[self])
    }
    fn erf(self) -> Wx {
        Wx::call("rlx_erf", &[self])
    }
    fn abs(self) -> Wx {
        Wx::call("abs", &[self])
    }
    fn floor(self) -> Wx {
        Wx::call("floor", &[self])
    }
    fn round(self) -> Wx {
        // WGSL's round() rounds half to even, as numpy does.
        Wx::call("round", &[self])
    }
    fn max(self, o: Wx) -> Wx {
        Wx::call("rlx_max", &[self, o])
    }
    fn min(self, o: Wx) -> Wx {
        Wx::call("rlx_min", &[self, o])
    }
    fn pow(self, o: Wx) -> Wx {
        Wx::call("rlx_pow", &[self, o])
    }
    fn sign(self) -> Wx {
        Wx::call("rlx_sign", &[self])
    }
}

/// WGSL helpers the generated code calls: functions whose WGSL builtins differ from the
/// reference (NaN propagation, pow of negative bases, tanh overflow) or do not exist (erf).
pub const PRELUDE: &str = r#"
fn rlx_isnan(x: f32) -> bool {
    let b = bitcast<u32>(x) & 0x7fffffffu;
    return b > 0x7f800000u;
}
fn rlx_nan() -> f32 { return bitcast<f32>(0x7fc00000u); }
// f32 rounded to bf16 (nearest even; NaN stays a quiet NaN), kept as an f32 word.
fn rlx_round_bf(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) { return bitcast<f32>((b | 0x00400000u) & 0xffff0000u); }
    return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}
fn rlx_max(a: f32, b: f32) -> f32 {
    if (rlx_isnan(a) || rlx_isnan(b)) { return rlx_nan(); }
    return select(b, a, a >= b);
}
fn rlx_min(a: f32, b: f32) -> f32 {
    if (rlx_isnan(a) || rlx_isnan(b)) { return rlx_nan(); }
    return select(b, a, a <= b);
}
fn rlx_sign(x: f32) -> f32 {
    return select(select(0.0, -1.0, x < 0.0), 1.0, x > 0.0);
}
// tanh through exp(-2|x|), which cannot overflow (inf/inf gives NaN in some drivers).
fn rlx_tanh(x: f32) -> f32 {
    let e = exp(-2.0 * abs(x));
    let t = (1.0 - e) / (1.0 + e);
    return select(t, -t, x < 0.0);
}
// powf semantics: negative bases need integer exponents; x^0 = 1.
fn rlx_pow(x: f32, y: f32) -> f32 {
    if (y == 0.0) { return 1.0; }
    if (rlx_isnan(x) || rlx_isnan(y)) { return rlx_nan(); }
    if (x == 0.0) { return select(bitcast<f32>(0x7f800000u), 0.0, y > 0.0); }
    let m = exp2(y * log2(abs(x)));
    if (x > 0.0) { return m; }
    if (floor(y) != y) { return rlx_nan(); }
    let odd = abs(y - 2.0 * floor(y * 0.5)) == 1.0;
    return select(m, -m, odd);
}
// erf: Taylor series below |x| = 0.5, else 1 - erfc with the Numerical Recipes Chebyshev fit
// (erfc fractional error < 1.2e-7). Max abs error over [-6, 6]: 1.6e-7 on lavapipe (tests/device.rs).
fn rlx_erf(x: f32) -> f32 {
    let a = abs(x);
    if (a < 0.5) {
        let z = x * x;
        let p = 1.0 + z * (-1.0 / 3.0 + z * (1.0 / 10.0 + z * (-1.0 / 42.0 + z * (1.0 / 216.0 + z * (-1.0 / 1320.0)))));
        return 1.1283791670955126 * x * p;
    }
    let t = 1.0 / (1.0 + 0.5 * a);
    let r = t * exp(-a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
        t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
        t * (-0.82215223 + t * 0.17087277)))))))));
    let v = 1.0 - r;
    return select(v, -v, x < 0.0);
}
"#;

/// The same erf approximation in Rust f32, for measuring its accuracy on the host.
pub fn erf_f32(x: f32) -> f32 {
    let a = x.abs();
    if a < 0.5 {
        let z = x * x;
        let p = 1.0 + z * (-1.0 / 3.0 + z * (1.0 / 10.0 + z * (-1.0 / 42.0 + z * (1.0 / 216.0 + z * (-1.0 / 1320.0)))));
        return std::f32::consts::FRAC_2_SQRT_PI * x * p;
    }
    let t = 1.0 / (1.0 + 0.5 * a);
    let poly = -1.265_512_2
        + t * (1.000_023_7
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_204 + t * (1.488_515_9 + t * (-0.822_152_2 + t * 0.170_872_77))))))));
    let v = 1.0 - t * (-a * a + poly).exp();
    if x < 0.0 { -v } else { v }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::ops::{BinaryKind, UnaryKind};

    #[test]
    fn unary_expressions_print_wgsl() {
        let (lines, out) = emit(|| UnaryKind::Sigmoid.eval(Wx::load("x")));
        let text = lines.join("\n");
        assert!(text.contains("exp("), "{text}");
        assert_eq!(out, format!("v{}", lines.len() - 1));
        let (lines, _) = emit(|| BinaryKind::Maximum.eval(Wx::load("a"), Wx::load("b")));
        assert_eq!(lines.last().map(String::as_str), Some("let v2: f32 = rlx_max(v0, v1);"));
    }

    #[test]
    fn literals_keep_the_f32_value() {
        assert_eq!(literal(0.5), "f32(0.5)");
        assert_eq!(literal(-1e-7), "f32(-1e-7)");
        assert_eq!(literal(f64::INFINITY), "bitcast<f32>(0x7f800000u)");
    }

    #[test]
    fn erf_approximation_is_accurate_on_the_host() {
        let mut worst = 0f64;
        for i in -6000..=6000 {
            let x = i as f64 * 1e-3;
            let e = (erf_f32(x as f32) as f64 - libm::erf(x)).abs();
            worst = worst.max(e);
        }
        eprintln!("erf_f32 on the host: max abs error {worst:.3e} over [-6, 6]");
        assert!(worst < 5e-7, "max abs error {worst}");
    }
}
