//! The wgpu kernel table. A kernel builder turns one node (op + static types) into a `Plan`:
//! WGSL compute dispatches with their bindings, or a plain buffer copy.

mod elementwise;
mod indexing;
mod int;
mod logic;
mod matmul;
mod movement;
mod quant;
mod reduce;

use rlx_driver::KernelTable;
use rlx_ir::{DType, Op, Result, Shape};

/// Element dtypes every kernel computes in.
pub const F32: &[DType] = &[DType::F32];
/// f32, f16 where the device has shader-f16, and bf16 (emulated: f32 words holding bf16
/// values). Kernels compute in f32 and round at the store.
pub const FLOATS: &[DType] = &[DType::F32, DType::F16, DType::BF16];

/// Accepts nodes whose inputs and output share one float dtype the device computes with.
pub fn same_float(ctx: &Ctx<'_>) -> bool {
    is_float(ctx.out.dtype) && ctx.ins.iter().all(|s| s.dtype == ctx.out.dtype)
}
/// Float data with integer indices or positions (scatter_add, rope).
pub const FLOAT_AND_INDEX: &[DType] = &[DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U32];

/// What a kernel builder sees: the op, its static input and output types, and its node id.
pub struct Ctx<'a> {
    /// The op with its attributes.
    pub op: &'a Op,
    /// Input types.
    pub ins: &'a [&'a Shape],
    /// Output type.
    pub out: &'a Shape,
    /// Node id (for error messages raised on the device).
    pub node: u32,
}

impl Ctx<'_> {
    /// Static dims of input `i` (legalized graphs are static).
    pub fn in_dims(&self, i: usize) -> Vec<usize> {
        self.ins[i].fixed_dims().unwrap_or_default()
    }
    /// Static dims of the output.
    pub fn out_dims(&self) -> Vec<usize> {
        self.out.fixed_dims().unwrap_or_default()
    }
    /// Output element count.
    pub fn out_numel(&self) -> usize {
        self.out_dims().iter().product()
    }
    /// The op's name.
    pub fn name(&self) -> &'static str {
        self.op.def().name()
    }
}

/// A buffer bound to a dispatch, in binding order.
#[derive(Debug, Clone)]
pub enum Bind {
    /// The node's input `i` (read-only).
    Input(usize),
    /// The node's output (read-write).
    Output,
    /// Constant data made at compile time (index maps), uploaded once.
    Aux(Vec<u32>),
    /// The executable's status words (atomic): device-side errors such as bad indices.
    Status,
}

/// One compute dispatch.
pub struct Dispatch {
    /// A complete WGSL module with entry point `main`.
    pub wgsl: String,
    /// Workgroups to launch (the executor splits them over x and y).
    pub groups: u32,
    /// Bindings 0.. of group 0.
    pub binds: Vec<Bind>,
}

/// How a node runs.
pub enum Plan {
    /// Dispatches in order.
    Dispatches(Vec<Dispatch>),
    /// The output's bytes are input 0's bytes (reshape-like ops).
    Copy,
}

/// A table entry: `accepts` refines the dtype check for ops with mixed dtypes.
pub struct Kernel {
    /// Builds the plan.
    pub build: fn(&Ctx<'_>) -> Result<Plan>,
    /// Whether the node fits this kernel beyond the table's dtype list.
    pub accepts: fn(&Ctx<'_>) -> bool,
}

/// The wgpu kernel table.
pub fn table() -> KernelTable<Kernel> {
    let mut t = KernelTable::new();
    elementwise::register(&mut t);
    int::register(&mut t);
    reduce::register(&mut t);
    matmul::register(&mut t);
    indexing::register(&mut t);
    logic::register(&mut t);
    movement::register(&mut t);
    quant::register(&mut t);
    t
}

/// Threads per workgroup of the one-thread-per-element kernels.
pub const WG: u32 = 256;

/// Workgroups for `n` threads of `WG`.
pub fn groups_for(n: usize) -> u32 {
    n.div_ceil(WG as usize) as u32
}

/// Storage buffer declarations: `(name, element type, writable)` at bindings 0...
pub fn decls(bufs: &[(&str, &str, bool)]) -> String {
    let mut s = String::new();
    for (i, (name, ty, rw)) in bufs.iter().enumerate() {
        let access = if *rw { "read_write" } else { "read" };
        s += &format!("@group(0) @binding({i}) var<storage, {access}> {name}: array<{ty}>;\n");
    }
    s
}

/// Whether `dt` is f32, bf16 (emulated), or f16 on a device with shader-f16.
pub fn is_float(dt: DType) -> bool {
    matches!(dt, DType::F32 | DType::BF16) || (dt == DType::F16 && crate::gpu::has_f16())
}

/// The WGSL type of a float dtype's elements in device buffers (f16, else f32: a bf16 is an
/// f32 word whose low half is zero).
pub fn float_ty(dt: DType) -> &'static str {
    if dt == DType::F16 { "f16" } else { "f32" }
}

/// The WGSL converting an f32 value to a buffer of float dtype `dt` (f16 saturates to inf;
/// bf16 rounds to nearest even, as the reference does).
pub fn store_fn(dt: DType) -> &'static str {
    match dt {
        DType::F16 => "rlx_to_f16",
        DType::BF16 => "rlx_round_bf",
        _ => "",
    }
}

/// The helpers of modules with f16 buffers: f32 to f16 rounding with overflow to infinity
/// (WGSL leaves out-of-range conversions undefined).
const F16_PRELUDE: &str = "
fn rlx_to_f16(x: f32) -> f16 {
    if (rlx_isnan(x)) { return f16(x); }
    let inf = unpack2x16float(0xfc007c00u);
    if (x >= 65520.0) { return f16(inf.x); }
    if (x <= -65520.0) { return f16(inf.y); }
    return f16(x);
}
";

/// A full module: declarations, the helper prelude and `main` with `g` (the linear workgroup
/// index, uniform) and `lid` in scope; `main` returns early past `groups`.
pub fn module(decls: &str, extra: &str, wg: u32, groups: u32, body: &str) -> String {
    let uses_f16 = [decls, extra, body].iter().any(|t| t.contains("f16"));
    let (enable, f16) = if uses_f16 { ("enable f16;\n", F16_PRELUDE) } else { ("", "") };
    // Bodies with subgroup operations get the subgroup builtins (see `subgroups`); naga 30
    // takes them with the device feature and no `enable subgroups;` directive.
    let mut sg = "";
    if body.contains("subgroup") {
        sg = ",\n        @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_size) sgs: u32,\n\
              \x20       @builtin(subgroup_id) sgid: u32, @builtin(num_subgroups) nsg: u32";
    }
    format!(
        "{enable}{decls}{prelude}{f16}{extra}\n@compute @workgroup_size({wg})\n\
         fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n\
         \x20       @builtin(local_invocation_id) lid3: vec3<u32>{sg}) {{\n\
         let g = wid.x + wid.y * nwg.x;\n\
         if (g >= {groups}u) {{ return; }}\n\
         let lid = lid3.x;\n{body}\n}}\n",
        prelude = crate::wexpr::PRELUDE
    )
}

/// Whether kernels built now may use subgroup operations (`gpu::has_subgroups`). Kernels that
/// do keep a shared-memory path for devices without them, taken when this is false.
pub fn subgroups() -> bool {
    crate::gpu::has_subgroups()
}

/// Row-major strides of `dims`.
pub fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// WGSL computing `var {var}: u32` = the offset in a tensor with per-axis `strides` of the
/// element whose coordinates over `dims` are those of the flat index `idx` (row-major).
pub fn offset_code(var: &str, idx: &str, dims: &[usize], strides: &[usize]) -> String {
    let mut s = format!("var {var}: u32 = 0u;\n{{ var rem: u32 = {idx};\n");
    for (d, st) in dims.iter().zip(strides).rev() {
        if *d == 1 {
            continue;
        }
        if *st != 0 {
            s += &format!("{var} += (rem % {d}u) * {st}u;\n");
        }
        s += &format!("rem = rem / {d}u;\n");
    }
    s += "}\n";
    s
}

/// Strides for reading an input of dims `ind` broadcast to `od` (0 on broadcast axes).
pub fn broadcast_strides(ind: &[usize], od: &[usize]) -> Vec<usize> {
    let st = strides(ind);
    let pad = od.len() - ind.len();
    (0..od.len()).map(|k| if k < pad || ind[k - pad] == 1 { 0 } else { st[k - pad] }).collect()
}

/// The error for a type a builder reached but cannot handle.
pub fn unsupported(ctx: &Ctx<'_>, why: &str) -> rlx_ir::Error {
    let ins: Vec<String> = ctx.ins.iter().map(|s| s.to_string()).collect();
    rlx_ir::Error::Unsupported {
        backend: "wgpu".into(),
        missing: format!("`{}` (node %{}) {} <- ({}): {why}", ctx.name(), ctx.node, ctx.out, ins.join(", ")),
        report: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_offsets_skip_size_one_axes() {
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
        let code = offset_code("o", "i", &[2, 3, 4], &[0, 1, 0]);
        assert!(code.contains("o += (rem % 3u) * 1u;"), "{code}");
        assert!(!code.contains("* 0u"), "{code}");
    }
}
