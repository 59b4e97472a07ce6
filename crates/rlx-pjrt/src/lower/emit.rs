//! The emitter table (the backend's kernel table) and the elementwise emitters.

use super::elementwise::{self, Hx};
use super::{Ctx, V, quant, structured};
use rlx_driver::KernelTable;
use rlx_ir::ops::{BinaryKind, CompareKind, UnaryKind};
use rlx_ir::{DType, DTypeClass, Node, Op, OpKind};
use std::sync::LazyLock;

/// Writes one node: its input values and output dims in, its value out; None when the node's
/// attributes or dtypes are outside what the emitter handles (the node is then decomposed or
/// reported missing).
pub type Emit = fn(&mut Ctx, &Node, &[V], &[usize]) -> Option<V>;

const NUMBERS: &[DType] = &DType::NUMERIC;
const ALL: &[DType] = &DType::REAL_AND_BOOL;

/// Every op rlx-pjrt writes directly; the rest is decomposed by `legalize` first.
pub static EMITTERS: LazyLock<KernelTable<Emit>> = LazyLock::new(|| {
    let mut t: KernelTable<Emit> = KernelTable::new();
    t.register(OpKind::Constant, ALL, constant);
    t.register(OpKind::Full, ALL, full);
    t.register(OpKind::Arange, NUMBERS, structured::arange);
    t.register(OpKind::Unary, NUMBERS, unary);
    t.register(OpKind::Binary, NUMBERS, binary);
    t.register(OpKind::Compare, ALL, compare);
    t.register(OpKind::Where, ALL, where_);
    t.register(OpKind::Cast, ALL, cast);
    t.register(OpKind::Reduce, NUMBERS, structured::reduce);
    t.register(OpKind::ArgMax, ALL, structured::argmax);
    t.register(OpKind::MatMul, NUMBERS, structured::matmul);
    t.register(OpKind::Reshape, ALL, reshape);
    t.register(OpKind::ExpandDims, ALL, reshape);
    t.register(OpKind::Squeeze, ALL, reshape);
    t.register(OpKind::Transpose, ALL, structured::transpose);
    t.register(OpKind::BroadcastTo, ALL, |c, _, i, d| Some(broadcast(c, &i[0], d)));
    t.register(OpKind::Slice, ALL, structured::slice);
    t.register(OpKind::Concat, ALL, structured::concat);
    t.register(OpKind::DynamicSlice, ALL, structured::dynamic_slice);
    t.register(OpKind::DynamicUpdateSlice, ALL, structured::dynamic_update_slice);
    t.register(OpKind::Gather, ALL, structured::gather);
    t.register(OpKind::ScatterAdd, NUMBERS, structured::scatter_add);
    t.register(OpKind::Cumsum, NUMBERS, structured::cumsum);
    t.register(OpKind::TopK, ALL, structured::top_k);
    t.register(OpKind::Dequantize, &[DType::U8, DType::F32], quant::dequantize);
    t
});

/// `x` broadcast numpy-style (right-aligned) to `dims`; `x` itself when it already has them.
pub fn broadcast(ctx: &mut Ctx, x: &V, dims: &[usize]) -> V {
    if x.dims == dims {
        return x.clone();
    }
    let off = dims.len() - x.dims.len();
    let map: Vec<String> = (0..x.dims.len()).map(|i| (off + i).to_string()).collect();
    let attrs = format!("broadcast_dimensions = array<i64{}>", list_tail(&map));
    ctx.op("broadcast_in_dim", &[x], &attrs, dims, x.dt)
}

/// `: a, b, c` for an `array<i64...>` attribute (empty for none).
pub fn list_tail(items: &[String]) -> String {
    if items.is_empty() { String::new() } else { format!(": {}", items.join(", ")) }
}

/// `array<i64: ...>` of these numbers.
pub fn i64_array(v: impl IntoIterator<Item = impl ToString>) -> String {
    let items: Vec<String> = v.into_iter().map(|x| x.to_string()).collect();
    format!("array<i64{}>", list_tail(&items))
}

/// The attributes of `stablehlo.compare` in direction `dir` over `dt` values.
pub fn compare_attrs(dir: &str, dt: DType) -> String {
    let ty = match dt.class() {
        DTypeClass::Float => "FLOAT",
        _ if dt.is_unsigned() || dt == DType::Bool => "UNSIGNED",
        _ => "SIGNED",
    };
    format!(
        "comparison_direction = #stablehlo<comparison_direction {dir}>, compare_type = #stablehlo<comparison_type {ty}>"
    )
}

/// `a <dir> b` elementwise (same dims).
pub fn cmp(ctx: &mut Ctx, a: &V, b: &V, dir: &str) -> V {
    ctx.op("compare", &[a, b], &compare_attrs(dir, a.dt), &a.dims.clone(), DType::Bool)
}

fn constant(ctx: &mut Ctx, n: &Node, _: &[V], dims: &[usize]) -> Option<V> {
    let Op::Constant(c) = &n.op else { return None };
    let dt = n.ty.dtype;
    let value = if dt == DType::Bool {
        let rlx_ir::tensor::Data::B(b) = &c.value.data else { return None };
        nested_bools(b, dims)
    } else if dt == DType::C64 {
        return None;
    } else {
        let bytes = c.value.to_bytes();
        if bytes.is_empty() {
            "[]".to_string()
        } else {
            let hex: String = bytes.iter().map(|b| format!("{b:02X}")).collect();
            format!("\"0x{hex}\"")
        }
    };
    let attrs = format!("value = dense<{value}> : {}", super::tensor_ty(dims, dt));
    Some(ctx.op("constant", &[], &attrs, dims, dt))
}

/// A bool tensor literal as nested lists (`[[true, false], [false, true]]`).
fn nested_bools(b: &[bool], dims: &[usize]) -> String {
    fn go(b: &[bool], dims: &[usize]) -> String {
        match dims.split_first() {
            None => b.first().map(|v| v.to_string()).unwrap_or_else(|| "false".into()),
            Some((&n, rest)) => {
                let inner: usize = rest.iter().product();
                let parts: Vec<String> = (0..n).map(|i| go(&b[i * inner..(i + 1) * inner], rest)).collect();
                format!("[{}]", parts.join(", "))
            }
        }
    }
    go(b, dims)
}

fn full(ctx: &mut Ctx, n: &Node, _: &[V], dims: &[usize]) -> Option<V> {
    let Op::Full(f) = &n.op else { return None };
    Some(ctx.splat(f.value, dims, n.ty.dtype))
}

fn reshape(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    Some(ctx.op("reshape", &[&ins[0]], "", dims, n.ty.dtype))
}

fn unary(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::Unary(u) = &n.op else { return None };
    let dt = n.ty.dtype;
    if dt.class() == DTypeClass::Float {
        return Some(elementwise::emit(ctx, dims, dt, &ins[0..1], |x| u.kind.eval(x[0])));
    }
    // Integers: only the kinds with an integer definition.
    u.kind.eval_int(0)?;
    let x = &ins[0];
    Some(match u.kind {
        UnaryKind::Floor | UnaryKind::Round => x.clone(),
        UnaryKind::Neg => ctx.op("negate", &[x], "", dims, dt),
        UnaryKind::Abs => ctx.op("abs", &[x], "", dims, dt),
        UnaryKind::Sign => ctx.op("sign", &[x], "", dims, dt),
        UnaryKind::Square => ctx.op("multiply", &[x, x], "", dims, dt),
        UnaryKind::Relu => {
            let z = ctx.splat(0.0, dims, dt);
            ctx.op("maximum", &[x, &z], "", dims, dt)
        }
        _ => return None,
    })
}

fn binary(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::Binary(b) = &n.op else { return None };
    let dt = n.ty.dtype;
    let (x, y) = (broadcast(ctx, &ins[0], dims), broadcast(ctx, &ins[1], dims));
    if dt.class() == DTypeClass::Float {
        return Some(elementwise::emit(ctx, dims, dt, &[x, y], |v: &[Hx]| b.kind.eval(v[0], v[1])));
    }
    let op = match b.kind {
        BinaryKind::Add => "add",
        BinaryKind::Sub => "subtract",
        BinaryKind::Mul => "multiply",
        BinaryKind::Maximum => "maximum",
        BinaryKind::Minimum => "minimum",
        _ => return None,
    };
    Some(ctx.op(op, &[&x, &y], "", dims, dt))
}

fn compare(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::Compare(c) = &n.op else { return None };
    let dir = match c.kind {
        CompareKind::Eq => "EQ",
        CompareKind::Ne => "NE",
        CompareKind::Lt => "LT",
        CompareKind::Le => "LE",
        CompareKind::Gt => "GT",
        CompareKind::Ge => "GE",
    };
    let (x, y) = (broadcast(ctx, &ins[0], dims), broadcast(ctx, &ins[1], dims));
    Some(cmp(ctx, &x, &y, dir))
}

fn where_(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let c = broadcast(ctx, &ins[0], dims);
    let (a, b) = (broadcast(ctx, &ins[1], dims), broadcast(ctx, &ins[2], dims));
    Some(ctx.op("select", &[&c, &a, &b], "", dims, n.ty.dtype))
}

/// Float to int truncates toward zero into i64 (saturating, NaN becomes 0) and then wraps to
/// the target width, as the reference does; to bool is `!= 0`.
fn cast(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let (x, to) = (&ins[0], n.ty.dtype);
    if x.dt == to {
        return Some(x.clone());
    }
    if to == DType::Bool {
        let z = ctx.splat(0.0, dims, x.dt);
        return Some(cmp(ctx, x, &z, "NE"));
    }
    if x.dt.class() == DTypeClass::Float && to.class() == DTypeClass::Int {
        // Clamp in f64 (exact for every float type), to the largest f64 below 2^63.
        let x = if x.dt == DType::F64 { x.clone() } else { ctx.op("convert", &[x], "", dims, DType::F64) };
        let lo = ctx.splat(i64::MIN as f64, dims, DType::F64);
        let hi = ctx.splat(f64::from_bits((i64::MAX as f64).to_bits() - 1), dims, DType::F64);
        let clamped = ctx.op("clamp", &[&lo, &x, &hi], "", dims, DType::F64);
        let nan = cmp(ctx, &x, &x, "NE");
        let z = ctx.splat(0.0, dims, DType::F64);
        let clean = ctx.op("select", &[&nan, &z, &clamped], "", dims, DType::F64);
        let wide = ctx.op("convert", &[&clean], "", dims, DType::I64);
        return Some(if to == DType::I64 { wide } else { ctx.op("convert", &[&wide], "", dims, to) });
    }
    Some(ctx.op("convert", &[x], "", dims, to))
}

/// The identity of a reduction over dt (`0` for sum, lowest for max...).
pub fn lowest(dt: DType) -> f64 {
    match dt {
        DType::I8 => -128.0,
        DType::I16 => -32768.0,
        DType::I32 => -2147483648.0,
        DType::I64 => i64::MIN as f64,
        DType::U8 | DType::U32 | DType::Bool => 0.0,
        _ => f64::NEG_INFINITY,
    }
}

/// The largest value of dt (the identity of min).
pub fn highest(dt: DType) -> f64 {
    match dt {
        DType::I8 => 127.0,
        DType::I16 => 32767.0,
        DType::I32 => 2147483647.0,
        DType::I64 => i64::MAX as f64,
        DType::U8 => 255.0,
        DType::U32 => 4294967295.0,
        DType::Bool => 1.0,
        _ => f64::INFINITY,
    }
}
