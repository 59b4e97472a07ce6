//! The CPU executable: one 64-byte-aligned arena with precomputed offsets, and a list of steps.

use crate::kernels::{Kernel, KernelCtx};
use rlx_driver::ParamUpdate;
use rlx_ir::{Error, Graph, Op, Result, Shape};
use rlx_opt::memory::{MemoryPlan, SlotKind};

/// The buffers of one step: input and output byte ranges inside the arena.
pub struct Bufs<'a> {
    base: *mut u8,
    ins: &'a [(usize, usize)],
    out: (usize, usize),
}

impl Bufs<'_> {
    /// Input `i` as bytes. Only kernels the plan lets run in place (`fused`) can see an input
    /// that overlaps the output; they use the `*_range` accessors and never hold both at once.
    #[inline]
    pub fn input_bytes(&self, i: usize) -> &[u8] {
        let (off, len) = self.ins[i];
        // SAFETY: the plan keeps every range inside the arena.
        unsafe { std::slice::from_raw_parts(self.base.add(off), len) }
    }

    /// The output as bytes.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub fn output_bytes(&self) -> &mut [u8] {
        let (off, len) = self.out;
        // SAFETY: the output range overlaps no input range, except for in-place kernels (above).
        unsafe { std::slice::from_raw_parts_mut(self.base.add(off), len) }
    }

    /// Elements `start..end` of input `i`, typed. Drop it before taking an output range.
    #[inline]
    pub fn input_range<T: bytemuck::Pod>(&self, i: usize, start: usize, end: usize) -> &[T] {
        let (off, len) = self.ins[i];
        let size = std::mem::size_of::<T>();
        assert!(start <= end && end * size <= len, "input range out of bounds");
        // SAFETY: inside the input's range, which lies inside the arena; offsets are 64-aligned.
        unsafe { std::slice::from_raw_parts(self.base.add(off + start * size) as *const T, end - start) }
    }

    /// Elements `start..end` of the output, typed.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub fn output_range<T: bytemuck::Pod>(&self, start: usize, end: usize) -> &mut [T] {
        let (off, len) = self.out;
        let size = std::mem::size_of::<T>();
        assert!(start <= end && end * size <= len, "output range out of bounds");
        // SAFETY: inside the output's range; the caller holds no overlapping input slice.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(off + start * size) as *mut T, end - start) }
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

    /// The same buffers with only the first `n` inputs (a kernel built from another kernel).
    pub fn first_inputs(&self, n: usize) -> Bufs<'_> {
        Bufs { base: self.base, ins: &self.ins[..n.min(self.ins.len())], out: self.out }
    }

    /// Whether input `i` and the output are the same bytes (the plan made the step in place).
    pub fn in_place(&self, i: usize) -> bool {
        self.ins.get(i).is_some_and(|r| *r == self.out)
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
    /// State updates `(value range, param range)` not already computed in place.
    copies: Vec<((usize, usize), (usize, usize))>,
    /// Updates whose value overlaps another update's param go through this buffer first.
    staged: Vec<usize>,
    staging: Vec<u8>,
}

// SAFETY: the raw pointers exist only during `run`, which takes `&mut self`.
unsafe impl Send for CpuExecutable {}

fn align64(n: usize) -> usize {
    n.div_ceil(64) * 64
}

impl CpuExecutable {
    /// Plans the arena with `rlx_opt::memory::plan` (liveness reuse, in place for `fused`,
    /// views share their parent) and builds a kernel per node. `build` picks the kernel.
    pub fn new(g: &Graph, build: impl Fn(&KernelCtx) -> Result<Kernel>) -> Result<Self> {
        Self::new_stateful(g, &[], build)
    }

    /// Like `new`, for a graph whose outputs include state updates: values computed in place
    /// over their param cost nothing; the others are copied into the param after each run.
    pub fn new_stateful(
        g: &Graph,
        updates: &[ParamUpdate],
        build: impl Fn(&KernelCtx) -> Result<Kernel>,
    ) -> Result<Self> {
        let params = g.params();
        let mut pairs = Vec::with_capacity(updates.len());
        for u in updates {
            match (params.get(u.param), g.outputs().get(u.output)) {
                (Some(&(p, _)), Some(&v)) => pairs.push((p, v)),
                _ => return Err(Error::eval("cpu compile", format!("bad param update {u:?}"))),
            }
        }
        let plan = rlx_opt::memory::plan_with_updates(g, &rlx_opt::memory::fused_in_place, &pairs)?;
        let mut exe = Self::with_plan(g, &plan, build)?;
        let slot = |id: rlx_ir::NodeId| (plan.slots[id.index()].offset, plan.slots[id.index()].bytes);
        let copies: Vec<_> =
            pairs.iter().map(|&(p, v)| (slot(v), slot(p))).filter(|(src, dst)| src.0 != dst.0).collect();
        let overlaps = |a: (usize, usize), b: (usize, usize)| a.0 < b.0 + b.1 && b.0 < a.0 + a.1;
        exe.staged = (0..copies.len())
            .filter(|&i| copies.iter().enumerate().any(|(j, c)| j != i && overlaps(copies[i].0, c.1)))
            .collect();
        exe.staging = vec![0; exe.staged.iter().map(|&i| copies[i].0.1).sum()];
        exe.copies = copies;
        let is_update: Vec<bool> = (0..g.outputs().len()).map(|o| updates.iter().any(|u| u.output == o)).collect();
        exe.outputs = exe.outputs.iter().zip(&is_update).filter(|(_, u)| !**u).map(|(r, _)| *r).collect();
        Ok(exe)
    }

    /// Builds with a given plan (one slot per node of `g`).
    pub fn with_plan(g: &Graph, plan: &MemoryPlan, build: impl Fn(&KernelCtx) -> Result<Kernel>) -> Result<Self> {
        if plan.slots.len() != g.len() {
            return Err(Error::eval(
                "cpu compile",
                format!("plan has {} slots for {} nodes", plan.slots.len(), g.len()),
            ));
        }
        let slots: Vec<(usize, usize)> = plan.slots.iter().map(|s| (s.offset, s.bytes)).collect();
        let top = plan.arena_bytes.max(slots.iter().map(|&(o, b)| o + align64(b.max(1))).max().unwrap_or(0));
        let mut arena = vec![Line([0; 64]); top.div_ceil(64)];
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
                // A view shares its parent's bytes: nothing to run.
                _ if matches!(plan.slots[i].kind, SlotKind::View(_)) => {}
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
        Ok(CpuExecutable { arena, steps, inputs, params, outputs, copies: vec![], staged: vec![], staging: vec![] })
    }

    /// Arena size in bytes.
    pub fn arena_bytes(&self) -> usize {
        self.arena.len() * 64
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
        self.write_updates();
        Ok(())
    }

    fn get_param(&self, index: usize) -> Result<Vec<u8>> {
        let (off, len) =
            *self.params.get(index).ok_or_else(|| Error::eval("get_param", format!("no param #{index}")))?;
        let bytes = bytemuck::cast_slice::<Line, u8>(&self.arena);
        Ok(bytes[off..off + len].to_vec())
    }
}

// SAFETY: a Line is 64 plain bytes.
unsafe impl bytemuck::Zeroable for Line {}
// SAFETY: as above; no padding, any bit pattern is valid.
unsafe impl bytemuck::Pod for Line {}

impl CpuExecutable {
    /// Writes the state updates into their params: staged values first (they overlap another
    /// update's param), then the direct copies, then the staged ones.
    fn write_updates(&mut self) {
        let base = self.base();
        let mut at = 0;
        for &i in &self.staged {
            let ((src, len), _) = self.copies[i];
            // SAFETY: the staging buffer holds the sum of the staged lengths; src lies in the arena.
            unsafe { std::ptr::copy_nonoverlapping(base.add(src), self.staging.as_mut_ptr().add(at), len) };
            at += len;
        }
        for (i, &((src, len), (dst, _))) in self.copies.iter().enumerate() {
            if !self.staged.contains(&i) {
                // SAFETY: both ranges lie in the arena; `copy` allows any overlap.
                unsafe { std::ptr::copy(base.add(src), base.add(dst), len) };
            }
        }
        at = 0;
        for &i in &self.staged {
            let ((_, len), (dst, _)) = self.copies[i];
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(self.staging.as_ptr().add(at), base.add(dst), len) };
            at += len;
        }
    }
}
