//! The CPU executable: one 64-byte-aligned arena for inputs and intermediates, one shareable
//! buffer per param (`rlx_driver::ParamBuffer`), and a list of steps whose buffer addresses
//! are resolved once (again only when a param is rebound).

use crate::kernels::{Kernel, KernelCtx};
use rlx_driver::memory::{MemoryPlan, SlotKind};
use rlx_driver::{ParamBuffer, ParamShare, ParamUpdate, RunGroup};
use rlx_ir::{Error, Graph, Op, Result, Shape};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where one buffer of a step lives: its first byte, length, and the version counter of the
/// param it belongs to (null outside params).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Loc {
    ptr: *mut u8,
    len: usize,
    version: *const AtomicU64,
}

/// The buffers of one step: its inputs and its output.
pub struct Bufs<'a> {
    ins: &'a [Loc],
    out: Loc,
}

impl Bufs<'_> {
    /// Input `i` as bytes. Only kernels the plan lets run in place (`fused`) can see an input
    /// that overlaps the output; they use the `*_range` accessors and never hold both at once.
    #[inline]
    pub fn input_bytes(&self, i: usize) -> &[u8] {
        let l = self.ins[i];
        // SAFETY: every location lies inside the arena or a param buffer the executable holds.
        unsafe { std::slice::from_raw_parts(l.ptr, l.len) }
    }

    /// The output as bytes.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub fn output_bytes(&self) -> &mut [u8] {
        let l = self.out;
        // SAFETY: the output overlaps no input, except for in-place kernels (above).
        unsafe { std::slice::from_raw_parts_mut(l.ptr, l.len) }
    }

    /// Elements `start..end` of input `i`, typed. Drop it before taking an output range.
    #[inline]
    pub fn input_range<T: bytemuck::Pod>(&self, i: usize, start: usize, end: usize) -> &[T] {
        let l = self.ins[i];
        let size = std::mem::size_of::<T>();
        assert!(start <= end && end * size <= l.len, "input range out of bounds");
        // SAFETY: inside the input's bytes; arena slots are 64-aligned, params at least as T.
        unsafe { std::slice::from_raw_parts(l.ptr.add(start * size) as *const T, end - start) }
    }

    /// Elements `start..end` of the output, typed.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub fn output_range<T: bytemuck::Pod>(&self, start: usize, end: usize) -> &mut [T] {
        let l = self.out;
        let size = std::mem::size_of::<T>();
        assert!(start <= end && end * size <= l.len, "output range out of bounds");
        // SAFETY: inside the output's bytes; the caller holds no overlapping input slice.
        unsafe { std::slice::from_raw_parts_mut(l.ptr.add(start * size) as *mut T, end - start) }
    }

    /// Input `i` as a typed slice.
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
        Bufs { ins: &self.ins[..n.min(self.ins.len())], out: self.out }
    }

    /// Whether input `i` and the output are the same bytes (the plan made the step in place).
    pub fn in_place(&self, i: usize) -> bool {
        self.ins.get(i).is_some_and(|r| r.ptr == self.out.ptr && r.len == self.out.len)
    }

    /// Number of inputs.
    pub fn num_inputs(&self) -> usize {
        self.ins.len()
    }

    /// `Some(version)` when input `i` is (a view of) a param; the version changes whenever the
    /// param's bytes may have changed (`set_param`, a state update, a sharing executable), so a
    /// kernel may cache what it derives from the bytes while the version stays the same.
    pub fn input_version(&self, i: usize) -> Option<u64> {
        let v = self.ins.get(i)?.version;
        // SAFETY: a non-null version points into a param buffer the executable holds.
        (!v.is_null()).then(|| unsafe { (*v).load(Ordering::Relaxed) })
    }
}

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

/// A byte range in the memory plan's address space (offset, length).
type Slot = (usize, usize);

/// One buffer of one step: input `arg` of step `step`, or its output (`arg == usize::MAX`).
#[derive(Clone, Copy, Debug)]
struct Ref {
    step: usize,
    arg: usize,
}

impl Ref {
    const OUT: usize = usize::MAX;
}

struct Step {
    kernel: Kernel,
    ins: Vec<Slot>,
    out: Slot,
    rins: Vec<Loc>,
    rout: Loc,
}

struct Param {
    slot: Slot,
    buf: Arc<ParamBuffer>,
}

/// A graph compiled for the CPU.
///
/// Params live outside the arena, one `ParamBuffer` each, so that executables can share them
/// (`share_param` / `bind_param`): executables sharing a writable buffer share a `RunGroup`
/// lock, held by every `run`, `set_param` and `get_param`, so their runs never overlap.
pub struct CpuExecutable {
    arena: Vec<Line>,
    steps: Vec<Step>,
    inputs: Vec<Loc>,
    params: Vec<Param>,
    outputs: Vec<Slot>,
    routs: Vec<Loc>,
    /// Per input and output, the step buffers that `run` points at the caller's bytes instead of
    /// the arena (`direct_io`), or None where the value must be copied.
    direct_in: Vec<Option<Vec<Ref>>>,
    direct_out: Vec<Option<Vec<Ref>>>,
    /// The step buffers a run pointed elsewhere, restored after it (kept to allocate nothing).
    patched: Vec<(Ref, *mut u8)>,
    /// State updates `(value, param)` not already computed in place.
    copies: Vec<(Slot, Slot)>,
    rcopies: Vec<(Loc, Loc)>,
    /// Updates whose value overlaps another update's param go through this buffer first.
    staged: Vec<usize>,
    staging: Vec<u8>,
    /// Params the graph writes (state updates): their versions change on every run.
    updated: Vec<usize>,
    /// Param ranges of the plan `(offset, aligned length, param)`, sorted, and `below[k]`, the
    /// bytes of the first `k` ranges: the arena leaves them out.
    holes: Vec<(usize, usize, usize)>,
    below: Vec<usize>,
    group: RunGroup,
    /// The compile's cap on the threads of each run (`CompileOptions::threads`).
    threads: Option<usize>,
    /// The version the inputs marked loop-invariant report (`mark_invariant`), kept alive here.
    invariant: Option<Arc<AtomicU64>>,
}

// SAFETY: the raw pointers target the arena and the param buffers the executable owns; they are
// used only by `&mut self` methods and under the run group's lock for shared buffers.
unsafe impl Send for CpuExecutable {}

fn align64(n: usize) -> usize {
    n.max(1).div_ceil(64) * 64
}

impl CpuExecutable {
    /// Plans the arena with `rlx_driver::memory::plan_updates` (liveness reuse, in place for
    /// `fused`, views share their parent) and builds a kernel per node. `build` picks the kernel.
    pub fn new(g: &Graph, build: impl Fn(&KernelCtx) -> Result<Kernel>) -> Result<Self> {
        let plan = rlx_driver::memory::plan_updates(g, &[])?;
        Self::new_stateful(g, &[], &plan, build)
    }

    /// Like `new` for a loop body (`rlx_driver::memory::plan_body`): its inputs keep their
    /// bytes, so every trip reads the loop's buffers in place (`direct_io`).
    pub fn new_body(g: &Graph, build: impl Fn(&KernelCtx) -> Result<Kernel>) -> Result<Self> {
        let plan = rlx_driver::memory::plan_body(g)?;
        Self::new_stateful(g, &[], &plan, build)
    }

    /// Like `new`, with the compile's memory plan (`plan_updates` of `g` and `updates`), for a
    /// graph whose outputs include state updates: values the plan puts on their param cost
    /// nothing; the others are copied into the param after each run.
    pub fn new_stateful(
        g: &Graph,
        updates: &[ParamUpdate],
        plan: &MemoryPlan,
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
        let mut exe = Self::with_plan(g, plan, build)?;
        let slot = |id: rlx_ir::NodeId| (plan.slots[id.index()].offset, plan.slots[id.index()].bytes);
        let copies: Vec<_> =
            pairs.iter().map(|&(p, v)| (slot(v), slot(p))).filter(|(src, dst)| src.0 != dst.0).collect();
        let overlaps = |a: Slot, b: Slot| a.0 < b.0 + b.1 && b.0 < a.0 + a.1;
        exe.staged = (0..copies.len())
            .filter(|&i| copies.iter().enumerate().any(|(j, c)| j != i && overlaps(copies[i].0, c.1)))
            .collect();
        exe.staging = vec![0; exe.staged.iter().map(|&i| copies[i].0.1).sum()];
        exe.copies = copies;
        exe.updated = updates.iter().map(|u| u.param).collect();
        exe.updated.sort_unstable();
        exe.updated.dedup();
        let is_update: Vec<bool> = (0..g.outputs().len()).map(|o| updates.iter().any(|u| u.output == o)).collect();
        exe.outputs = exe.outputs.iter().zip(&is_update).filter(|(_, u)| !**u).map(|(r, _)| *r).collect();
        exe.resolve_all()?;
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
        let slots: Vec<Slot> = plan.slots.iter().map(|s| (s.offset, s.bytes)).collect();
        let mut params = vec![];
        for (i, n) in g.nodes().iter().enumerate() {
            if matches!(n.op, Op::Param(_)) {
                params.push(Param { slot: slots[i], buf: Arc::new(ParamBuffer::zeroed(slots[i].1)) });
            }
        }
        let mut holes: Vec<(usize, usize, usize)> =
            params.iter().enumerate().map(|(k, p)| (p.slot.0, align64(p.slot.1), k)).collect();
        holes.sort_unstable();
        // The arena leaves the param ranges out when no other slot crosses them (the plan never
        // reuses a param's block); otherwise it keeps the plan's layout as is.
        let in_hole = |o: usize| holes.iter().any(|&(h, len, _)| o >= h && o < h + len);
        let crosses = slots
            .iter()
            .any(|&(o, b)| !in_hole(o) && holes.iter().any(|&(h, len, _)| o < h + len && h < o + align64(b)));
        let mut below = vec![0];
        for &(_, len, _) in &holes {
            below.push(below[below.len() - 1] + if crosses { 0 } else { len });
        }
        let mut exe = CpuExecutable {
            arena: vec![],
            steps: vec![],
            inputs: vec![],
            params,
            outputs: vec![],
            routs: vec![],
            direct_in: vec![],
            direct_out: vec![],
            patched: vec![],
            copies: vec![],
            rcopies: vec![],
            staged: vec![],
            staging: vec![],
            threads: None,
            updated: vec![],
            holes: holes.clone(),
            below,
            group: RunGroup::new(),
            invariant: None,
        };
        let top = slots.iter().filter(|s| !in_hole(s.0)).map(|&(o, b)| exe.compact(o) + align64(b)).max().unwrap_or(0);
        exe.arena = rlx_driver::huge_pages::vec(top.div_ceil(64), Line([0; 64]));
        let mut inputs = vec![];
        // Results of one loop (scan) are computed together by the first of them to run.
        let groups = crate::kernels::control::loop_groups(g);
        for (i, n) in g.nodes().iter().enumerate() {
            match &n.op {
                Op::Input(_) => inputs.push(slots[i]),
                Op::Param(_) => {}
                op if n.inputs.is_empty() => {
                    // Constants, full, arange: computed once at compile time.
                    let v = op.def().reference(&[], &n.ty)?;
                    let bytes = v.to_bytes();
                    let at = exe.resolve(slots[i])?;
                    // SAFETY: the slot lies inside the arena and has exactly this size.
                    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at.ptr, bytes.len().min(at.len)) };
                }
                // A view shares its parent's bytes: nothing to run.
                _ if matches!(plan.slots[i].kind, SlotKind::View(_)) => {}
                op => {
                    let ins: Vec<Shape> = n.inputs.iter().map(|x| g.nodes()[x.index()].ty.clone()).collect();
                    let group = groups.get(&i).map(|(grp, member)| (grp, *member));
                    let ctx = KernelCtx { op, ins: &ins, out: &n.ty, group };
                    let kernel = build(&ctx)?;
                    let null = Loc { ptr: std::ptr::null_mut(), len: 0, version: std::ptr::null() };
                    exe.steps.push(Step {
                        kernel,
                        ins: n.inputs.iter().map(|x| slots[x.index()]).collect(),
                        out: slots[i],
                        rins: vec![null; n.inputs.len()],
                        rout: null,
                    });
                }
            }
        }
        exe.inputs = inputs.into_iter().map(|s| exe.resolve(s)).collect::<Result<_>>()?;
        exe.outputs = g.outputs().iter().map(|o| slots[o.index()]).collect();
        exe.resolve_all()?;
        Ok(exe)
    }

    /// Arena size in bytes (inputs, intermediates, constants; params are separate).
    pub fn arena_bytes(&self) -> usize {
        self.arena.len() * 64
    }

    /// Bytes of param buffers this executable holds (shared buffers included).
    pub fn param_bytes(&self) -> usize {
        self.params.iter().map(|p| p.buf.len()).sum()
    }

    /// A plan offset outside every param range, moved down over the param ranges below it.
    fn compact(&self, o: usize) -> usize {
        o - self.below[self.holes.partition_point(|h| h.0 + h.1 <= o)]
    }

    /// Where a slot of the plan lives now: in a param buffer or in the arena.
    fn resolve(&self, (o, len): Slot) -> Result<Loc> {
        let k = self.holes.partition_point(|h| h.0 <= o);
        if k > 0 {
            let (h, hl, p) = self.holes[k - 1];
            if o < h + hl {
                let buf = &self.params[p].buf;
                if o - h + len > buf.len() {
                    let reason =
                        format!("a {len}-byte slot at +{} passes the end of param #{p} ({} bytes)", o - h, buf.len());
                    return Err(Error::eval("cpu compile", reason));
                }
                // SAFETY: inside the buffer (checked above).
                let ptr = unsafe { buf.as_ptr().add(o - h) };
                return Ok(Loc { ptr, len, version: buf.version_cell() });
            }
        }
        let at = self.compact(o);
        if at + len > self.arena.len() * 64 {
            return Err(Error::eval("cpu compile", format!("slot {o}+{len} lies outside the arena")));
        }
        // SAFETY: inside the arena (checked above).
        let ptr = unsafe { (self.arena.as_ptr() as *mut u8).add(at) };
        Ok(Loc { ptr, len, version: std::ptr::null() })
    }

    /// Resolves every step, output and update copy (after building or rebinding a param).
    fn resolve_all(&mut self) -> Result<()> {
        for i in 0..self.steps.len() {
            let rins = self.steps[i].ins.iter().map(|&s| self.resolve(s)).collect::<Result<Vec<_>>>()?;
            let rout = self.resolve(self.steps[i].out)?;
            let step = &mut self.steps[i];
            step.rins = rins;
            step.rout = rout;
        }
        self.routs = self.outputs.iter().map(|&s| self.resolve(s)).collect::<Result<_>>()?;
        self.rcopies =
            self.copies.iter().map(|&(v, p)| Ok((self.resolve(v)?, self.resolve(p)?))).collect::<Result<_>>()?;
        self.direct_io();
        Ok(())
    }

    /// Finds the inputs kernels may read straight from the caller's bytes and the outputs the
    /// last kernel may write straight into them, so that `run` copies neither (a 1024^2 f32
    /// input and output are 8 MiB of copies per run). Only where that cannot change a result:
    /// an input no step writes over (the plan reuses dead inputs' bytes) and no output or state
    /// update copies out of the arena (views of it), an output in the arena
    /// written by exactly one step over exactly its bytes, overlapping no input, other output or
    /// state update; reads of it after that step follow it. Anything else is copied as before.
    fn direct_io(&mut self) {
        let overlaps =
            |a: Loc, b: Loc| (a.ptr as usize) < b.ptr as usize + b.len && (b.ptr as usize) < a.ptr as usize + a.len;
        let within =
            |x: Loc, l: Loc| x.ptr as usize >= l.ptr as usize && x.ptr as usize + x.len <= l.ptr as usize + l.len;
        let steps = &self.steps;
        let written = |l: Loc, from: usize| steps.iter().skip(from).any(|s| overlaps(s.rout, l));
        // Step inputs from `from` on that read inside `l` (or None when one straddles its edge).
        let reads = |l: Loc, from: usize| {
            let mut refs = vec![];
            for (k, s) in steps.iter().enumerate().skip(from) {
                for (a, &x) in s.rins.iter().enumerate() {
                    if within(x, l) && x.len > 0 {
                        refs.push(Ref { step: k, arg: a });
                    } else if overlaps(x, l) {
                        return None;
                    }
                }
            }
            Some(refs)
        };
        // An input an output or a state update copies out of the arena (a view of it) stays there.
        let copied_out = |l: Loc| self.routs.iter().chain(self.rcopies.iter().map(|c| &c.0)).any(|&r| overlaps(r, l));
        self.direct_in = self
            .inputs
            .iter()
            .map(|&l| if l.len == 0 || written(l, 0) || copied_out(l) { None } else { reads(l, 0) })
            .collect();
        self.direct_out = (0..self.routs.len())
            .map(|o| {
                let l = self.routs[o];
                let alone = l.len > 0
                    && l.version.is_null()
                    && !self.inputs.iter().any(|&i| overlaps(i, l))
                    && !self.routs.iter().enumerate().any(|(p, &r)| p != o && overlaps(r, l))
                    && !self.rcopies.iter().any(|&(v, p)| overlaps(v, l) || overlaps(p, l));
                let producers: Vec<usize> = (0..steps.len()).filter(|&k| overlaps(steps[k].rout, l)).collect();
                let &last = producers.last()?;
                if !alone || steps[last].rout != l || written(l, last + 1) {
                    return None;
                }
                let mut refs = reads(l, last + 1)?;
                refs.push(Ref { step: last, arg: Ref::OUT });
                Some(refs)
            })
            .collect();
        let most = self.direct_in.iter().chain(&self.direct_out).flatten().map(Vec::len).sum();
        self.patched = Vec::with_capacity(most);
    }
}

/// Points the step buffers `refs` (inside `from`'s bytes) at the same offsets of `to`, noting
/// each old address in `patched`.
fn patch(steps: &mut [Step], patched: &mut Vec<(Ref, *mut u8)>, refs: &[Ref], from: Loc, to: *mut u8) {
    for &r in refs {
        let s = &mut steps[r.step];
        let loc = if r.arg == Ref::OUT { &mut s.rout } else { &mut s.rins[r.arg] };
        patched.push((r, loc.ptr));
        loc.ptr = to.wrapping_add(loc.ptr as usize - from.ptr as usize);
    }
}

/// Undoes every `patch` noted in `patched`.
fn unpatch(steps: &mut [Step], patched: &mut Vec<(Ref, *mut u8)>) {
    for (r, ptr) in patched.drain(..) {
        let s = &mut steps[r.step];
        if r.arg == Ref::OUT { s.rout.ptr = ptr } else { s.rins[r.arg].ptr = ptr }
    }
}

impl CpuExecutable {
    fn param(&self, index: usize, what: &str) -> Result<&Param> {
        self.params.get(index).ok_or_else(|| Error::eval(what, format!("no param #{index} (of {})", self.params.len())))
    }
}

impl CpuExecutable {
    /// Sets the cap on the threads of each run (`CompileOptions::threads`); kernels built
    /// under the same cap (`threads::with_thread_cap`) split their work for it.
    pub fn set_thread_cap(&mut self, threads: Option<usize>) {
        self.threads = threads;
    }

    /// `run` under the executable's thread cap.
    fn run_capped(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<()> {
        if inputs.len() != self.inputs.len() || outputs.len() != self.routs.len() {
            return Err(Error::eval("run", "wrong number of input or output buffers"));
        }
        for (data, l) in inputs.iter().zip(&self.inputs) {
            if data.len() != l.len {
                return Err(Error::eval("run", format!("input needs {} bytes, got {}", l.len, data.len())));
            }
        }
        for (dst, l) in outputs.iter().zip(&self.routs) {
            if dst.len() != l.len {
                return Err(Error::eval("run", format!("output buffer needs {} bytes, got {}", l.len, dst.len())));
            }
        }
        let group = self.group.clone();
        let _guard = group.lock();
        let ins = |i: usize| inputs[i].as_ptr();
        let base = outputs.as_mut_ptr();
        // SAFETY: `o` is below `outputs.len()` (run_core asks for each output once).
        let outs = |o: usize| unsafe { (*base.add(o)).as_mut_ptr() };
        self.run_core(&ins, &outs)?;
        // Buffers a task grew on one pool thread, grown on every thread: warm runs allocate
        // nothing whichever thread takes which task.
        crate::kernels::spread_thread_buffers();
        Ok(())
    }

    /// Marks `inputs` (a loop body's consts) as loop-invariant: the steps that read them see
    /// `cell`'s value as their version, as if they were params, so kernels that cache what they
    /// derive from a param (a matmul's packed B) do so across trips; the loop bumps `cell`
    /// whenever the bytes may have changed (every run of the loop). Inputs a step writes over
    /// (`direct_io` found no plain reads) stay unmarked.
    pub(crate) fn mark_invariant(&mut self, inputs: &[usize], cell: Arc<AtomicU64>) {
        let v = Arc::as_ptr(&cell);
        for &i in inputs {
            for r in self.direct_in.get(i).into_iter().flatten().flatten() {
                if r.arg != Ref::OUT {
                    self.steps[r.step].rins[r.arg].version = v;
                }
            }
        }
        self.invariant = Some(cell);
    }

    /// Runs a graph without params or updates (a loop body) once per trip, reading input `i`
    /// at `inputs(i)` and writing output `o` at `outputs(o)` (each exactly the graph's length):
    /// no checks, no lock and no allocation, so a loop kernel can call it every trip.
    ///
    /// # Safety
    /// Every pointer must be valid for its input's or output's byte length, the outputs must
    /// not overlap each other or the inputs, and nothing else may touch them during the call.
    pub(crate) unsafe fn run_body(
        &mut self,
        inputs: &dyn Fn(usize) -> *const u8,
        outputs: &dyn Fn(usize) -> *mut u8,
    ) -> Result<()> {
        self.run_core(inputs, outputs)
    }

    /// The steps of a run with the caller's buffers, whose lengths the caller has checked.
    fn run_core(&mut self, inputs: &dyn Fn(usize) -> *const u8, outputs: &dyn Fn(usize) -> *mut u8) -> Result<()> {
        // The params the graph writes change during the run: new versions before any kernel.
        for &p in &self.updated {
            self.params[p].buf.touch();
        }
        // Caller bytes at least 16-aligned (every dtype's alignment) are used in place where
        // `direct_io` allows it; the rest goes through the arena.
        let aligned = |p: *const u8| (p as usize).is_multiple_of(16);
        let (direct_in, direct_out) = (std::mem::take(&mut self.direct_in), std::mem::take(&mut self.direct_out));
        for (i, direct) in direct_in.iter().enumerate() {
            let (l, data) = (self.inputs[i], inputs(i));
            match direct {
                Some(refs) if aligned(data) => patch(&mut self.steps, &mut self.patched, refs, l, data as *mut u8),
                // SAFETY: the slot lies inside the arena and has exactly this length (checked).
                _ => unsafe { std::ptr::copy_nonoverlapping(data, l.ptr, l.len) },
            }
        }
        for (o, direct) in direct_out.iter().enumerate() {
            let dst = outputs(o);
            if let Some(refs) = direct.as_ref().filter(|_| aligned(dst)) {
                patch(&mut self.steps, &mut self.patched, refs, self.routs[o], dst);
            }
        }
        let mut result = Ok(());
        for step in &mut self.steps {
            let bufs = Bufs { ins: &step.rins, out: step.rout };
            result = (step.kernel)(&bufs);
            if result.is_err() {
                break;
            }
        }
        unpatch(&mut self.steps, &mut self.patched);
        for (o, direct) in direct_out.iter().enumerate() {
            let dst = outputs(o);
            if direct.is_none() || !aligned(dst) {
                // SAFETY: as above.
                unsafe { std::ptr::copy_nonoverlapping(self.routs[o].ptr, dst, self.routs[o].len) };
            }
        }
        (self.direct_in, self.direct_out) = (direct_in, direct_out);
        result?;
        write_updates(&self.rcopies, &self.staged, &mut self.staging);
        Ok(())
    }
}

impl rlx_driver::Executable for CpuExecutable {
    fn set_param(&mut self, index: usize, bytes: &[u8]) -> Result<()> {
        let p = self.param(index, "set_param")?;
        let (len, buf) = (p.slot.1, p.buf.clone());
        if bytes.len() != len {
            return Err(Error::eval("set_param", format!("param #{index} needs {len} bytes, got {}", bytes.len())));
        }
        if !buf.is_writable() {
            let reason = format!("param #{index} is bound to read-only external bytes; bind a writable buffer first");
            return Err(Error::eval("set_param", reason));
        }
        let _guard = self.group.lock();
        // SAFETY: the buffer has exactly `len` writable bytes; the group lock excludes sharers.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.as_ptr(), len) };
        buf.touch();
        Ok(())
    }

    fn run(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<()> {
        crate::threads::with_thread_cap(self.threads, || self.run_capped(inputs, outputs))
    }

    fn get_param(&self, index: usize) -> Result<Vec<u8>> {
        let p = self.param(index, "get_param")?;
        let _guard = self.group.lock();
        let mut v = p.buf.to_vec();
        v.truncate(p.slot.1);
        Ok(v)
    }

    fn backend_name(&self) -> &'static str {
        "cpu"
    }

    fn share_param(&self, index: usize) -> Result<ParamShare> {
        let buf = self.param(index, "share_param")?.buf.clone();
        let group = buf.is_writable().then(|| self.group.clone());
        Ok(ParamShare { buffer: buf, group })
    }

    fn bind_param(&mut self, index: usize, share: ParamShare) -> Result<()> {
        let p = self.param(index, "bind_param")?;
        if share.buffer.len() != p.slot.1 {
            let reason = format!("param #{index} has {} bytes, the shared buffer {}", p.slot.1, share.buffer.len());
            return Err(Error::eval("bind_param", reason));
        }
        if !share.buffer.is_writable() && self.updated.contains(&index) {
            let reason = format!("param #{index} is a state the graph writes; it cannot use read-only bytes");
            return Err(Error::eval("bind_param", reason));
        }
        if let Some(g) = &share.group
            && !g.same(&self.group)
        {
            if self.group.is_shared() {
                let reason = format!(
                    "param #{index}: this executable already shares params with another group; \
                     bind every param from one group"
                );
                return Err(Error::eval("bind_param", reason));
            }
            self.group = g.clone();
        }
        let old = std::mem::replace(&mut self.params[index].buf, share.buffer);
        if let Err(e) = self.resolve_all() {
            self.params[index].buf = old;
            self.resolve_all()?;
            return Err(e);
        }
        Ok(())
    }
}

// SAFETY: a Line is 64 plain bytes.
unsafe impl bytemuck::Zeroable for Line {}
// SAFETY: as above; no padding, any bit pattern is valid.
unsafe impl bytemuck::Pod for Line {}

/// Writes the state updates into their params: staged values first (they overlap another
/// update's param), then the direct copies, then the staged ones.
fn write_updates(copies: &[(Loc, Loc)], staged: &[usize], staging: &mut [u8]) {
    let mut at = 0;
    for &i in staged {
        let (src, _) = copies[i];
        // SAFETY: the staging buffer holds the sum of the staged lengths.
        unsafe { std::ptr::copy_nonoverlapping(src.ptr, staging.as_mut_ptr().add(at), src.len) };
        at += src.len;
    }
    for (i, &(src, dst)) in copies.iter().enumerate() {
        if !staged.contains(&i) {
            // SAFETY: both locations are valid for `src.len` bytes; `copy` allows any overlap.
            unsafe { std::ptr::copy(src.ptr, dst.ptr, src.len) };
        }
    }
    at = 0;
    for &i in staged {
        let (src, dst) = copies[i];
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(staging.as_ptr().add(at), dst.ptr, src.len) };
        at += src.len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_driver::Executable;
    use rlx_ir::{DType, Node};
    use std::sync::Mutex;

    /// `(step, input versions)` per kernel call.
    type Calls = Vec<(usize, Vec<Option<u64>>)>;
    type Seen = Arc<Mutex<Calls>>;

    /// Compiles with the CPU table, each kernel recording `(step, input versions)` when it runs.
    fn compile(g: &Graph, seen: &Seen) -> CpuExecutable {
        let (lowered, ups) = g.lower_updates();
        let params = lowered.params();
        let updates: Vec<ParamUpdate> = ups
            .iter()
            .map(|(n, o)| ParamUpdate { param: params.iter().position(|(_, p)| p == n).unwrap(), output: *o })
            .collect();
        let table = crate::kernels::table();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let plan = rlx_driver::memory::plan_updates(&lowered, &updates).unwrap();
        CpuExecutable::new_stateful(&lowered, &updates, &plan, |ctx: &KernelCtx<'_>| {
            let node = Node { op: ctx.op.clone(), inputs: vec![], ty: ctx.out.clone() };
            let ins: Vec<&Shape> = ctx.ins.iter().collect();
            let mut k = (table.lookup(&node, &ins).expect("kernel").build)(ctx)?;
            let (id, seen) = (next.fetch_add(1, Ordering::Relaxed), seen.clone());
            Ok(Box::new(move |b: &Bufs<'_>| {
                let v = (0..b.num_inputs()).map(|i| b.input_version(i)).collect();
                seen.lock().unwrap().push((id, v));
                k(b)
            }))
        })
        .unwrap()
    }

    /// y = x + w (w a weight); c <- c + x (a state). Steps: 0 = x + w, 1 = c + x.
    fn graph() -> Graph {
        let f = |d: &[usize]| Shape::new(d, DType::F32);
        let mut g = Graph::new("versions");
        let (w, c, x) = (g.param("w", f(&[4])), g.param("c", f(&[4])), g.input("x", f(&[4])));
        let y = g.add(x, w);
        let c2 = g.add(c, x);
        g.update_param(c, c2);
        g.set_outputs(vec![y]);
        g
    }

    fn bytes(v: &[f32]) -> Vec<u8> {
        bytemuck::cast_slice(v).to_vec()
    }

    fn run(exe: &mut CpuExecutable, seen: &Seen) -> (Vec<f32>, Calls) {
        seen.lock().unwrap().clear();
        let mut out = vec![0u8; 16];
        exe.run(&[&bytes(&[1.0; 4])], &mut [&mut out]).unwrap();
        (bytemuck::cast_slice(&out).to_vec(), std::mem::take(&mut *seen.lock().unwrap()))
    }

    #[test]
    fn input_versions_follow_param_writes_and_sharing() {
        let seen: Seen = Arc::default();
        let mut a = compile(&graph(), &seen);
        a.set_param(0, &bytes(&[1.0, 2.0, 3.0, 4.0])).unwrap();
        a.set_param(1, &bytes(&[0.0; 4])).unwrap();
        let (_, r1) = run(&mut a, &seen);
        let (_, r2) = run(&mut a, &seen);
        // Step 0 reads the input (no version) and the weight (stable while nobody writes it).
        assert_eq!(r1[0].1[0], None);
        assert!(r1[0].1[1].is_some() && r1[0].1[1] == r2[0].1[1]);
        // Step 1 reads the state, which the graph writes: a new version every run.
        assert!(r1[1].1[0].is_some() && r1[1].1[0] != r2[1].1[0]);
        // A second executable bound to the weight sees writes made through the first.
        let seen_b: Seen = Arc::default();
        let mut b = compile(&graph(), &seen_b);
        b.bind_param(0, a.share_param(0).unwrap()).unwrap();
        b.set_param(1, &bytes(&[0.0; 4])).unwrap();
        let (y, rb) = run(&mut b, &seen_b);
        assert_eq!(y, vec![2.0, 3.0, 4.0, 5.0]);
        assert_eq!(rb[0].1[1], r2[0].1[1]);
        a.set_param(0, &bytes(&[10.0; 4])).unwrap();
        let (y, rb2) = run(&mut b, &seen_b);
        assert_eq!(y, vec![11.0; 4]);
        assert_ne!(rb2[0].1[1], rb[0].1[1]);
        assert!(a.group.same(&b.group));
    }

    #[test]
    fn params_live_outside_the_arena() {
        let f = |d: &[usize]| Shape::new(d, DType::F32);
        let mut g = Graph::new("big-param");
        let (w, x) = (g.param("w", f(&[1024])), g.input("x", f(&[1024])));
        let y = g.mul(x, w);
        g.set_outputs(vec![y]);
        let exe = compile(&g, &Arc::default());
        assert_eq!(exe.param_bytes(), 4096);
        assert!(exe.arena_bytes() <= 2 * 4096, "arena {}", exe.arena_bytes());
    }

    #[test]
    fn read_only_params_refuse_writes() {
        let seen: Seen = Arc::default();
        let mut a = compile(&graph(), &seen);
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(bytes(&[1.0; 8]));
        a.bind_param(0, ParamShare::external(owner.clone(), 0..16).unwrap()).unwrap();
        assert!(a.set_param(0, &bytes(&[0.0; 4])).is_err());
        // The state param is written by every run: read-only bytes are refused.
        let e = a.bind_param(1, ParamShare::external(owner.clone(), 16..32).unwrap()).unwrap_err();
        assert!(e.to_string().contains("state"), "{e}");
        assert!(a.bind_param(0, ParamShare::external(owner, 0..12).unwrap()).is_err());
        a.set_param(1, &bytes(&[0.0; 4])).unwrap();
        assert_eq!(run(&mut a, &seen).0, vec![2.0; 4]);
    }
}
