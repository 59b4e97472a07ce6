//! The CPU executable: one 64-byte-aligned arena with precomputed offsets, and a list of steps.

use crate::kernels::{Kernel, KernelCtx};
use rlx_ir::{Error, Graph, Op, Result, Shape};

/// The buffers of one step: input and output byte ranges inside the arena.
pub struct Bufs<'a> {
    base: *mut u8,
    ins: &'a [(usize, usize)],
    out: (usize, usize),
}

impl Bufs<'_> {
    /// Input `i` as bytes.
    #[inline]
    pub fn input_bytes(&self, i: usize) -> &[u8] {
        let (off, len) = self.ins[i];
        // SAFETY: the plan keeps every range inside the arena; inputs are never the step's output.
        unsafe { std::slice::from_raw_parts(self.base.add(off), len) }
    }

    /// The output as bytes.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub fn output_bytes(&self) -> &mut [u8] {
        let (off, len) = self.out;
        // SAFETY: the output range overlaps no input range of the same step (see `plan`).
        unsafe { std::slice::from_raw_parts_mut(self.base.add(off), len) }
    }

    /// Input `i` as a typed slice (offsets are 64-byte aligned).
    #[inline]
    pub fn input<T: bytemuck::Pod>(&self, i: usize) -> &[T] {
        bytemuck::cast_slice(self.input_bytes(i))
    }

    /// The output as a typed slice.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub fn output<T: bytemuck::Pod>(&self) -> &mut [T] {
        bytemuck::cast_slice_mut(self.output_bytes())
    }

    /// Number of inputs.
    pub fn num_inputs(&self) -> usize {
        self.ins.len()
    }
}

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

struct Step {
    kernel: Kernel,
    ins: Vec<(usize, usize)>,
    out: (usize, usize),
}

/// A graph compiled for the CPU.
pub struct CpuExecutable {
    arena: Vec<Line>,
    steps: Vec<Step>,
    inputs: Vec<(usize, usize)>,
    params: Vec<(usize, usize)>,
    outputs: Vec<(usize, usize)>,
}

// SAFETY: the raw pointers exist only during `run`, which takes `&mut self`.
unsafe impl Send for CpuExecutable {}

fn align64(n: usize) -> usize {
    n.div_ceil(64) * 64
}

impl CpuExecutable {
    /// Plans the arena and builds a kernel per node. `build` picks the kernel from the table.
    pub fn new(g: &Graph, build: impl Fn(&KernelCtx) -> Result<Kernel>) -> Result<Self> {
        // One slot per node for now; liveness-based reuse is the memory planner's job.
        let mut slots = Vec::with_capacity(g.len());
        let mut top = 0usize;
        for (i, n) in g.nodes().iter().enumerate() {
            let bytes = n.ty.size_bytes().ok_or_else(|| Error::UnboundDim {
                symbol: n.ty.symbols().next().unwrap_or("?").into(),
                context: format!("node %{i} ({}) at CPU compile", n.op.def().name()),
            })?;
            slots.push((top, bytes));
            top += align64(bytes.max(1));
        }
        let mut arena = vec![Line([0; 64]); top / 64];
        let base = arena.as_mut_ptr() as *mut u8;
        let (mut steps, mut inputs, mut params) = (vec![], vec![], vec![]);
        for (i, n) in g.nodes().iter().enumerate() {
            match &n.op {
                Op::Input(_) => inputs.push(slots[i]),
                Op::Param(_) => params.push(slots[i]),
                op if n.inputs.is_empty() => {
                    // Constants, full, arange: computed once at compile time.
                    let v = op.def().reference(&[], &n.ty)?;
                    let bytes = v.to_bytes();
                    // SAFETY: the slot lies inside the arena and has exactly this size.
                    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(slots[i].0), bytes.len()) };
                }
                op => {
                    let ins: Vec<Shape> = n.inputs.iter().map(|x| g.nodes()[x.index()].ty.clone()).collect();
                    let ctx = KernelCtx { op, ins: &ins, out: &n.ty };
                    let kernel = build(&ctx)?;
                    steps.push(Step {
                        kernel,
                        ins: n.inputs.iter().map(|x| slots[x.index()]).collect(),
                        out: slots[i],
                    });
                }
            }
        }
        let outputs = g.outputs().iter().map(|o| slots[o.index()]).collect();
        Ok(CpuExecutable { arena, steps, inputs, params, outputs })
    }

    fn base(&mut self) -> *mut u8 {
        self.arena.as_mut_ptr() as *mut u8
    }
}

impl rlx_driver::Executable for CpuExecutable {
    fn set_param(&mut self, index: usize, bytes: &[u8]) -> Result<()> {
        let (off, len) =
            *self.params.get(index).ok_or_else(|| Error::eval("set_param", format!("no param #{index}")))?;
        if bytes.len() != len {
            return Err(Error::eval("set_param", format!("param #{index} needs {len} bytes, got {}", bytes.len())));
        }
        let base = self.base();
        // SAFETY: the slot lies inside the arena and has exactly `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(off), len) };
        Ok(())
    }

    fn run(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<()> {
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            return Err(Error::eval("run", "wrong number of input or output buffers"));
        }
        let base = self.base();
        for (data, &(off, len)) in inputs.iter().zip(&self.inputs) {
            if data.len() != len {
                return Err(Error::eval("run", format!("input needs {len} bytes, got {}", data.len())));
            }
            // SAFETY: the slot lies inside the arena and has exactly `len` bytes.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base.add(off), len) };
        }
        for step in &mut self.steps {
            let bufs = Bufs { base, ins: &step.ins, out: step.out };
            (step.kernel)(&bufs)?;
        }
        for (dst, &(off, len)) in outputs.iter_mut().zip(&self.outputs) {
            if dst.len() != len {
                return Err(Error::eval("run", format!("output buffer needs {len} bytes, got {}", dst.len())));
            }
            // SAFETY: the slot lies inside the arena and has exactly `len` bytes.
            unsafe { std::ptr::copy_nonoverlapping(base.add(off), dst.as_mut_ptr(), len) };
        }
        Ok(())
    }
}
