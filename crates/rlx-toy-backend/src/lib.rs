//! A toy third backend, for tests: f32 `add`, `mul`, `relu` and 2-D `matmul` as plain Rust
//! kernels in a `KernelTable`, plugged into a `Session` with `Session::with_backend`.
//!
//! It depends on the `rlx` facade alone (without the CPU backend), so it compiles only if a
//! backend outside the RLX crates can do everything the built-in ones do: state what it
//! supports, say why a node is missing, receive a legalized graph and run it. Everything it
//! lacks is decomposed by `legalize` (a `fused` region becomes its `add` / `mul` / `relu`
//! nodes) or reported missing.
#![warn(missing_docs)]

use rlx::driver::{Backend, Capabilities, CompileRequest, Executable, KernelTable};
use rlx::ir::ops::{BinaryKind, UnaryKind};
use rlx::ir::{DType, Error, Graph, Node, Op, OpKind, Result, Shape};

/// A kernel: the inputs' values (graph order of the node's inputs) and the output to fill.
pub type Kernel = Box<dyn Fn(&[&[f32]], &mut [f32]) + Send>;

/// A kernel-table entry: builds the kernel for a node, or None when its attributes or shapes
/// are outside what the toy runs (the table keys on op kind and dtypes only).
pub type Build = fn(&Node, &[&Shape]) -> Option<Kernel>;

const F32: &[DType] = &[DType::F32];

/// The toy backend: a kernel table of four f32 ops.
pub struct ToyBackend {
    table: KernelTable<Build>,
}

impl Default for ToyBackend {
    fn default() -> Self {
        let mut table: KernelTable<Build> = KernelTable::new();
        table.register(OpKind::Binary, F32, build_binary);
        table.register(OpKind::Unary, F32, build_relu);
        table.register(OpKind::MatMul, F32, build_matmul);
        ToyBackend { table }
    }
}

impl ToyBackend {
    /// The backend with its four kernels.
    pub fn new() -> Self {
        Self::default()
    }

    fn kernel(&self, node: &Node, inputs: &[&Shape]) -> Option<Kernel> {
        (self.table.lookup(node, inputs)?.build)(node, inputs)
    }
}

/// `add` or `mul` of equal shapes, or with one side a single element (the scalar constant that
/// `legalize` makes of a fused region's `Const`), read by index modulo its length.
fn build_binary(node: &Node, ins: &[&Shape]) -> Option<Kernel> {
    let Op::Binary(b) = &node.op else { return None };
    let n = node.ty.numel();
    if !ins.iter().all(|s| s.numel() == n || s.numel() == Some(1)) {
        return None;
    }
    match b.kind {
        BinaryKind::Add => Some(Box::new(|x, o| elementwise(x, o, |a, b| a + b))),
        BinaryKind::Mul => Some(Box::new(|x, o| elementwise(x, o, |a, b| a * b))),
        _ => None,
    }
}

fn elementwise(ins: &[&[f32]], out: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    let (a, b) = (ins[0], ins[1]);
    for (j, o) in out.iter_mut().enumerate() {
        *o = f(a[j % a.len()], b[j % b.len()]);
    }
}

fn build_relu(node: &Node, _: &[&Shape]) -> Option<Kernel> {
    let Op::Unary(u) = &node.op else { return None };
    (u.kind == UnaryKind::Relu).then(|| -> Kernel {
        Box::new(|x, o| {
            for (o, &v) in o.iter_mut().zip(x[0]) {
                *o = v.max(0.0);
            }
        })
    })
}

/// Plain `[m, k] @ [k, n]`: no batch dims, no transpose flags (the toy states none in its
/// capabilities, so the pipeline never sets them).
fn build_matmul(node: &Node, ins: &[&Shape]) -> Option<Kernel> {
    let Op::MatMul(mm) = &node.op else { return None };
    let (a, b) = (ins.first()?.fixed_dims()?, ins.get(1)?.fixed_dims()?);
    if mm.transpose_a || mm.transpose_b || a.len() != 2 || b.len() != 2 {
        return None;
    }
    let (m, k, n) = (a[0], a[1], b[1]);
    Some(Box::new(move |x, o| {
        for i in 0..m {
            for j in 0..n {
                o[i * n + j] = (0..k).map(|p| x[0][i * k + p] * x[1][p * n + j]).sum();
            }
        }
    }))
}

impl Backend for ToyBackend {
    fn name(&self) -> &'static str {
        "toy"
    }

    fn capabilities(&self) -> Capabilities {
        // The conservative answer: graphs keep their head layout, matmuls get no flags.
        Capabilities::default()
    }

    fn supports(&self, node: &Node, inputs: &[&Shape]) -> bool {
        // Leaves (constants) are evaluated by the op's reference at compile time.
        (node.inputs.is_empty() && node.ty.dtype == DType::F32) || self.kernel(node, inputs).is_some()
    }

    fn missing_reason(&self, node: &Node, _inputs: &[&Shape]) -> Option<String> {
        match &node.op {
            _ if node.ty.dtype != DType::F32 => Some(format!("the toy backend stores f32 only, not {}", node.ty.dtype)),
            Op::MatMul(_) => Some("the toy matmul takes 2-D operands without transpose flags".into()),
            _ => None,
        }
    }

    fn compile(&self, req: &CompileRequest<'_>) -> Result<Box<dyn Executable>> {
        if !req.updates.is_empty() {
            return Err(req.unsupported_updates(self.name()));
        }
        Ok(Box::new(ToyExecutable::new(self, req.graph)?))
    }
}

/// What one node does at run time.
enum Step {
    /// Filled by `run` (inputs) or `set_param` (params), or at compile time (constants).
    Fed,
    /// A kernel over the listed nodes' values.
    Kernel { run: Kernel, inputs: Vec<usize> },
}

/// A graph compiled for the toy backend: one f32 buffer per node, kernels in node order.
pub struct ToyExecutable {
    steps: Vec<Step>,
    values: Vec<Vec<f32>>,
    inputs: Vec<usize>,
    params: Vec<usize>,
    outputs: Vec<usize>,
}

impl ToyExecutable {
    fn new(backend: &ToyBackend, g: &Graph) -> Result<Self> {
        let nodes = g.nodes();
        let mut steps = Vec::with_capacity(nodes.len());
        let mut values = Vec::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            let len =
                n.ty.numel().ok_or_else(|| Error::eval(n.op.def().name(), format!("node {i}: dims not fixed")))?;
            let ins: Vec<&Shape> = n.inputs.iter().map(|x| &nodes[x.index()].ty).collect();
            let step = match &n.op {
                Op::Input(_) | Op::Param(_) => Step::Fed,
                _ if n.inputs.is_empty() => {
                    let t = n.op.def().reference(&[], &n.ty)?;
                    values.push(t.to_f64_vec()?.into_iter().map(|v| v as f32).collect());
                    steps.push(Step::Fed);
                    continue;
                }
                op => {
                    let run = backend.kernel(n, &ins).ok_or_else(|| Error::Unsupported {
                        backend: "toy".into(),
                        missing: format!("`{}` node {i}: not legalized", op.def().name()),
                        report: String::new(),
                    })?;
                    Step::Kernel { run, inputs: n.inputs.iter().map(|x| x.index()).collect() }
                }
            };
            values.push(vec![0.0; len]);
            steps.push(step);
        }
        let ids = |v: Vec<(rlx::ir::NodeId, &str)>| v.into_iter().map(|(id, _)| id.index()).collect();
        Ok(ToyExecutable {
            steps,
            values,
            inputs: ids(g.inputs()),
            params: ids(g.params()),
            outputs: g.outputs().iter().map(|o| o.index()).collect(),
        })
    }
}

/// Reads little-endian f32 bytes into `into` (the runtime has checked the length).
fn read_f32(bytes: &[u8], into: &mut [f32]) -> Result<()> {
    if bytes.len() != into.len() * 4 {
        return Err(Error::eval("toy", format!("expected {} bytes, got {}", into.len() * 4, bytes.len())));
    }
    for (v, c) in into.iter_mut().zip(bytes.chunks_exact(4)) {
        *v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    Ok(())
}

impl Executable for ToyExecutable {
    fn set_param(&mut self, index: usize, bytes: &[u8]) -> Result<()> {
        let node = *self.params.get(index).ok_or_else(|| Error::eval("toy", format!("no param #{index}")))?;
        read_f32(bytes, &mut self.values[node])
    }

    fn run(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<()> {
        for (&node, bytes) in self.inputs.iter().zip(inputs) {
            read_f32(bytes, &mut self.values[node])?;
        }
        for (i, step) in self.steps.iter().enumerate() {
            let Step::Kernel { run, inputs } = step else { continue };
            // Take the output out so the inputs can be borrowed beside it (a node never reads itself).
            let mut out = std::mem::take(&mut self.values[i]);
            let ins: Vec<&[f32]> = inputs.iter().map(|&x| self.values[x].as_slice()).collect();
            run(&ins, &mut out);
            self.values[i] = out;
        }
        for (&node, out) in self.outputs.iter().zip(outputs.iter_mut()) {
            for (o, v) in out.chunks_exact_mut(4).zip(&self.values[node]) {
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
        Ok(())
    }

    fn backend_name(&self) -> &'static str {
        "toy"
    }
}
