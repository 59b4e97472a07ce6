//! Graph -> StableHLO: one `func.func @main` whose arguments are the graph's inputs then params
//! and whose results are its outputs (then one bool per run-time check, see `Check`).
//!
//! Ops are written in MLIR's generic form (`"stablehlo.add"(%a, %b) : (...) -> ...`), which every
//! StableHLO version parses the same way; the pretty forms differ between releases.

mod elementwise;
mod emit;
mod quant;
mod structured;

pub use emit::{EMITTERS, Emit};

use rlx_ir::{DType, Error, Graph, Op, Result, Shape};
use std::fmt::Write;

/// A value of the module being written: its SSA name and tensor type.
#[derive(Debug, Clone, PartialEq)]
pub struct V {
    /// `%v3`, `%arg0` or `%v5#1`.
    pub name: String,
    /// Static dims.
    pub dims: Vec<usize>,
    /// Element type.
    pub dt: DType,
}

impl V {
    /// The MLIR tensor type.
    pub fn ty(&self) -> String {
        tensor_ty(&self.dims, self.dt)
    }
}

/// A run-time check the module computes: a bool scalar output that is true when the graph
/// asked for something XLA would silently clamp (an out-of-range gather index).
#[derive(Debug, Clone)]
pub struct Check {
    /// The error to raise when the flag is set.
    pub message: String,
}

/// A graph lowered to StableHLO.
#[derive(Debug, Clone)]
pub struct Lowered {
    /// The module text.
    pub text: String,
    /// The graph outputs' shapes, in order (the module's first results).
    pub outputs: Vec<Shape>,
    /// The module's trailing results: one bool flag per check.
    pub checks: Vec<Check>,
}

/// Statements of the function being written.
#[derive(Debug, Default)]
pub struct Ctx {
    lines: Vec<String>,
    next: usize,
    /// Checks added by emitters (each with its flag value).
    pub checks: Vec<(V, Check)>,
}

impl Ctx {
    fn fresh(&mut self) -> String {
        let s = format!("%v{}", self.next);
        self.next += 1;
        s
    }

    /// `%vN = "stablehlo.<op>"(args) {attrs} : (arg types) -> result type`.
    pub fn op(&mut self, op: &str, args: &[&V], attrs: &str, dims: &[usize], dt: DType) -> V {
        let name = self.fresh();
        let out = V { name, dims: dims.to_vec(), dt };
        let line = generic(&out.name, op, args, attrs, "", &out.ty());
        self.lines.push(line);
        out
    }

    /// An op with a region (`reduce`, `sort`, `scatter`, `reduce_window`) and `n` results of the
    /// given types. `region` is the block text, without braces.
    pub fn op_region(
        &mut self,
        op: &str,
        args: &[&V],
        attrs: &str,
        region: &str,
        results: &[(Vec<usize>, DType)],
    ) -> Vec<V> {
        let base = self.fresh();
        let outs: Vec<V> = if results.len() == 1 {
            vec![V { name: base.clone(), dims: results[0].0.clone(), dt: results[0].1 }]
        } else {
            results
                .iter()
                .enumerate()
                .map(|(i, (d, t))| V { name: format!("{base}#{i}"), dims: d.clone(), dt: *t })
                .collect()
        };
        let lhs = if results.len() == 1 { base } else { format!("{base}:{}", results.len()) };
        let tys: Vec<String> = outs.iter().map(V::ty).collect();
        let res_ty = if tys.len() == 1 { tys[0].clone() } else { format!("({})", tys.join(", ")) };
        let region = format!("({{\n{region}\n    }})");
        self.lines.push(generic(&lhs, op, args, attrs, &region, &res_ty));
        outs
    }

    /// A constant filled with one value.
    pub fn splat(&mut self, v: f64, dims: &[usize], dt: DType) -> V {
        let attrs = format!("value = dense<{}> : {}", scalar_literal(v, dt), tensor_ty(dims, dt));
        self.op("constant", &[], &attrs, dims, dt)
    }
}

/// The generic-form line for one op.
fn generic(lhs: &str, op: &str, args: &[&V], attrs: &str, region: &str, res_ty: &str) -> String {
    let names: Vec<&str> = args.iter().map(|a| a.name.as_str()).collect();
    let tys: Vec<String> = args.iter().map(|a| a.ty()).collect();
    let attrs = if attrs.is_empty() { String::new() } else { format!(" {{{attrs}}}") };
    let op = if op.contains('.') { op.to_string() } else { format!("stablehlo.{op}") };
    format!("    {lhs} = \"{op}\"({}){region}{attrs} : ({}) -> {res_ty}", names.join(", "), tys.join(", "))
}

/// The MLIR element type of a dtype (RLX's name, except where MLIR spells it differently).
pub fn elem_ty(dt: DType) -> &'static str {
    match dt {
        DType::U8 => "ui8",
        DType::U32 => "ui32",
        DType::Bool => "i1",
        DType::C64 => "complex<f32>",
        d => d.name(),
    }
}

/// `tensor<2x3xf32>`, or `tensor<f32>` for a scalar.
pub fn tensor_ty(dims: &[usize], dt: DType) -> String {
    let mut s = String::from("tensor<");
    for d in dims {
        let _ = write!(s, "{d}x");
    }
    s.push_str(elem_ty(dt));
    s.push('>');
    s
}

/// One element as an MLIR literal: floats by their exact bits in hex (also NaN and inf).
pub fn scalar_literal(v: f64, dt: DType) -> String {
    match dt {
        DType::F32 => format!("{:#010X}", (v as f32).to_bits()).replacen("0X", "0x", 1),
        DType::F64 => format!("{:#018X}", v.to_bits()).replacen("0X", "0x", 1),
        DType::F16 => format!("{:#06X}", half::f16::from_f64(v).to_bits()).replacen("0X", "0x", 1),
        DType::BF16 => format!("{:#06X}", half::bf16::from_f64(v).to_bits()).replacen("0X", "0x", 1),
        DType::Bool => (if v != 0.0 { "true" } else { "false" }).into(),
        _ => format!("{}", v as i64),
    }
}

/// Lowers a legalized graph whose every node has an emitter.
pub fn lower(g: &Graph) -> Result<Lowered> {
    lower_aliased(g, &[])
}

/// As `lower`, with param `p`'s buffer donated to output `o` for each `(p, o)` in `aliases`
/// (`tf.aliasing_output` on the argument): XLA then writes the state update into the param's
/// own device memory instead of a new buffer (a KV cache row costs a row, not a cache copy).
pub fn lower_aliased(g: &Graph, aliases: &[(usize, usize)]) -> Result<Lowered> {
    let mut ctx = Ctx::default();
    let mut vals: Vec<Option<V>> = vec![None; g.len()];
    let mut args: Vec<V> = vec![];
    let fixed = |s: &Shape, what: &str| {
        s.fixed_dims()
            .ok_or_else(|| Error::eval("pjrt lower", format!("{what} has dynamic dims ({s}); bind them first")))
    };
    // Arguments: inputs, then params, in graph order.
    for (id, _) in g.inputs().iter().chain(g.params().iter()) {
        let s = g.shape(*id).ok_or_else(|| Error::eval("pjrt lower", "argument without a shape"))?;
        let v = V { name: format!("%arg{}", args.len()), dims: fixed(s, "an argument")?, dt: s.dtype };
        vals[id.index()] = Some(v.clone());
        args.push(v);
    }
    for (i, n) in g.nodes().iter().enumerate() {
        if matches!(n.op, Op::Input(_) | Op::Param(_)) {
            continue;
        }
        let ins: Vec<V> = n
            .inputs
            .iter()
            .map(|x| {
                vals[x.index()]
                    .clone()
                    .ok_or_else(|| Error::eval("pjrt lower", format!("node %{i} reads an unlowered value")))
            })
            .collect::<Result<_>>()?;
        let out_dims = fixed(&n.ty, "a node")?;
        let in_tys: Vec<&Shape> = n.inputs.iter().map(|x| &g.nodes()[x.index()].ty).collect();
        let emit = EMITTERS.lookup(n, &in_tys).map(|e| e.build).ok_or_else(|| {
            Error::eval(n.op.def().name(), format!("node %{i}: rlx-pjrt has no emitter for {}", n.ty))
        })?;
        let v = emit(&mut ctx, n, &ins, &out_dims).ok_or_else(|| {
            Error::eval(
                n.op.def().name(),
                format!("node %{i}: rlx-pjrt cannot emit it with these attributes ({})", n.ty),
            )
        })?;
        debug_assert_eq!(v.dims, out_dims, "emitter of {} produced the wrong dims", n.op.def().name());
        vals[i] = Some(v);
    }
    let mut results: Vec<V> = vec![];
    for o in g.outputs() {
        results.push(vals[o.index()].clone().ok_or_else(|| Error::eval("pjrt lower", "output not lowered"))?);
    }
    let checks: Vec<Check> = ctx.checks.iter().map(|(_, c)| c.clone()).collect();
    results.extend(ctx.checks.iter().map(|(v, _)| v.clone()));
    let mut text = String::new();
    let _ = writeln!(
        text,
        "module @{} attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32}} {{",
        module_name(g.name())
    );
    let n_inputs = g.inputs().len();
    let params: Vec<String> = args
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let alias = i.checked_sub(n_inputs).and_then(|p| aliases.iter().find(|(q, _)| *q == p));
            match alias {
                Some((_, o)) => format!("{}: {} {{tf.aliasing_output = {o} : i32}}", a.name, a.ty()),
                None => format!("{}: {}", a.name, a.ty()),
            }
        })
        .collect();
    let res_tys: Vec<String> = results.iter().map(V::ty).collect();
    let _ = writeln!(text, "  func.func public @main({}) -> ({}) {{", params.join(", "), res_tys.join(", "));
    for l in &ctx.lines {
        text.push_str(l);
        text.push('\n');
    }
    let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
    let _ = writeln!(text, "    \"func.return\"({}) : ({}) -> ()", names.join(", "), res_tys.join(", "));
    text.push_str("  }\n}\n");
    let outputs = g.outputs().iter().map(|o| g.shape(*o).cloned().unwrap_or(Shape::scalar(DType::F32))).collect();
    Ok(Lowered { text, outputs, checks })
}

/// A symbol name MLIR accepts (letters, digits, `_`, `.`, `$`).
fn module_name(name: &str) -> String {
    let s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) { format!("g_{s}") } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_exact() {
        assert_eq!(scalar_literal(1.0, DType::F32), "0x3F800000");
        assert_eq!(scalar_literal(f64::NEG_INFINITY, DType::F32), "0xFF800000");
        assert_eq!(scalar_literal(1.0, DType::F64), "0x3FF0000000000000");
        assert_eq!(scalar_literal(-3.0, DType::I32), "-3");
        assert_eq!(tensor_ty(&[], DType::Bool), "tensor<i1>");
        assert_eq!(tensor_ty(&[2, 0], DType::U8), "tensor<2x0xui8>");
    }
}
