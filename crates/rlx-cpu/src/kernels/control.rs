//! Control flow run as loops and branches: `scan`, `while_loop` and `cond` compile their bodies
//! once (legalized for this backend, dead code pruned) into executables of their own, and the
//! kernel runs a body per trip or the branch taken. Carries live in two buffers per carry,
//! allocated at compile time, that trade places each trip (the body reads one and writes the
//! other), sequences are read and stacked outputs written in place, so a trip allocates nothing.
//!
//! A scan's results are separate nodes (one output per node). Nodes that are the same loop on
//! the same operands form a `LoopGroup`: the first to run computes every member's value and the
//! others copy theirs from it, so the loop runs once.

use super::{ALL, Kernel, KernelBuilder, KernelCtx};
use crate::exec::{Bufs, CpuExecutable};
use rlx_driver::KernelTable;
use rlx_ir::ops::control::{Scan, ScanOutput, prune};
use rlx_ir::{Error, Graph, Op, OpDef, OpKind, Result, Shape};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub(super) fn register(t: &mut KernelTable<KernelBuilder>) {
    t.register(OpKind::Scan, ALL, build_scan);
    t.register(OpKind::WhileLoop, ALL, build_while);
    t.register(OpKind::Cond, ALL, build_cond);
}

/// Bytes on 64-byte boundaries: loop state, aligned so a body reads and writes it in place.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

struct Buf {
    lines: Vec<Line>,
    len: usize,
}

impl Buf {
    fn new(len: usize) -> Buf {
        Buf { lines: vec![Line([0; 64]); len.div_ceil(64).max(1)], len }
    }
    fn ptr(&mut self) -> *mut u8 {
        self.lines.as_mut_ptr() as *mut u8
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: `lines` holds at least `len` bytes.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr() as *const u8, self.len) }
    }
}

/// The nodes of one loop: a scan's results that differ only in which result they give.
#[derive(Clone)]
pub struct LoopGroup {
    /// Every member's op, in run order (member 0 runs the loop).
    pub ops: Vec<Op>,
    /// The members' values, written by member 0 and copied out by the others.
    values: Arc<Mutex<Vec<Buf>>>,
}

/// Whether `a` and `b` are one loop: the same body, except that one may give more stacked
/// outputs after the other's (a VJP's scan that saves the carries of the loop it
/// differentiates is that loop with the carries as extra outputs: it runs once).
fn one_loop(a: &Scan, b: &Scan) -> bool {
    let (x, y) = (a.body.outputs(), b.body.outputs());
    let n = x.len().min(y.len());
    a.num_carry == b.num_carry
        && a.num_xs == b.num_xs
        && a.reverse == b.reverse
        && a.length == b.length
        && x[..n] == y[..n]
        && a.body.nodes() == b.body.nodes()
}

/// The loop groups of `g` with more than one member: node index -> (group, member).
pub(crate) fn loop_groups(g: &Graph) -> HashMap<usize, (LoopGroup, usize)> {
    let mut found: Vec<Vec<(usize, &Scan)>> = vec![];
    for (i, n) in g.nodes().iter().enumerate() {
        let Op::Scan(s) = &n.op else { continue };
        let fits = |m: &Vec<(usize, &Scan)>| {
            g.nodes()[m[0].0].inputs == n.inputs && m.iter().all(|(_, other)| one_loop(other, s))
        };
        match found.iter_mut().find(|m| fits(m)) {
            Some(m) => m.push((i, s)),
            None => found.push(vec![(i, s)]),
        }
    }
    let mut out = HashMap::new();
    for members in found.into_iter().filter(|m| m.len() > 1) {
        let members: Vec<usize> = members.into_iter().map(|(i, _)| i).collect();
        let group = LoopGroup {
            ops: members.iter().map(|&i| g.nodes()[i].op.clone()).collect(),
            values: Arc::new(Mutex::new(vec![])),
        };
        for (k, &i) in members.iter().enumerate() {
            out.insert(i, (group.clone(), k));
        }
    }
    out
}

fn eval_err(op: &str, reason: String) -> Error {
    Error::eval(op, reason)
}

/// Compiles a body for this backend: pruned, legalized, one kernel per node.
fn compile_body(body: &Graph) -> Result<CpuExecutable> {
    let pruned = prune(body);
    let (legal, _) = rlx_driver::legalize(&pruned, &crate::CpuBackend::default())?;
    let table = super::table();
    CpuExecutable::new_body(&legal, |ctx| crate::build_kernel(&table, ctx))
}

fn bytes_of(s: &Shape, op: &str) -> Result<usize> {
    s.size_bytes().ok_or_else(|| eval_err(op, format!("{s} has no static size")))
}

/// A scan's compiled loop: the body, its carries' buffers and where each result goes.
struct ScanRun {
    body: CpuExecutable,
    /// Owns the carry buffers `carry_ptr` points into.
    _carries: Vec<[Buf; 2]>,
    carry_ptr: Vec<[*mut u8; 2]>,
    carry_bytes: Vec<usize>,
    /// Per carry, the buffers its final value goes to (None: this node's output).
    carry_dest: Vec<Vec<Option<*mut u8>>>,
    /// Bytes of one step of each sequence.
    x_step: Vec<usize>,
    /// Per stacked output the body gives: its buffer (None: this node's output), step bytes.
    ys: Vec<(Option<*mut u8>, usize)>,
    len: usize,
    reverse: bool,
    group: Option<Arc<Mutex<Vec<Buf>>>>,
    /// The version of the body's consts (`CpuExecutable::mark_invariant`): new every run.
    consts: Arc<AtomicU64>,
}

// SAFETY: the pointers target buffers the run (or its group, through the Arc) owns; a kernel
// runs only inside its executable's `&mut self` run.
unsafe impl Send for ScanRun {}

impl ScanRun {
    fn run(&mut self, b: &Bufs<'_>) -> Result<()> {
        let ScanRun { body, carry_ptr, carry_bytes, carry_dest, x_step, ys, len, reverse, group, consts, .. } = self;
        // The consts may have changed since the last run; they stay put over its trips.
        consts.fetch_add(1, Ordering::Relaxed);
        let (nc, nx, len) = (carry_ptr.len(), x_step.len(), *len);
        let _members = group.as_ref().map(|v| v.lock().unwrap_or_else(|e| e.into_inner()));
        let own = b.output_bytes().as_mut_ptr();
        for (i, c) in carry_ptr.iter().enumerate() {
            // SAFETY: the buffer holds the carry's bytes.
            unsafe { std::ptr::copy_nonoverlapping(b.input_bytes(i).as_ptr(), c[0], carry_bytes[i]) };
        }
        let mut cur = 0;
        for step in 0..len {
            let t = if *reverse { len - 1 - step } else { step };
            let ins = |k: usize| -> *const u8 {
                if k < nc {
                    carry_ptr[k][cur]
                } else if k < nc + nx {
                    b.input_bytes(k).as_ptr().wrapping_add(t * x_step[k - nc])
                } else {
                    b.input_bytes(k).as_ptr()
                }
            };
            let outs = |o: usize| -> *mut u8 {
                if o < nc {
                    carry_ptr[o][1 - cur]
                } else {
                    let (base, step) = ys[o - nc];
                    base.unwrap_or(own).wrapping_add(t * step)
                }
            };
            // SAFETY: the two buffers of a carry never overlap, step t of a sequence and of a
            // stacked output lies inside its buffer, and the outputs are this node's or a group
            // member's buffers, apart from every input.
            unsafe { body.run_body(&ins, &outs)? };
            cur = 1 - cur;
        }
        for (i, dests) in carry_dest.iter().enumerate() {
            for d in dests {
                // SAFETY: every destination holds the carry's bytes.
                unsafe { std::ptr::copy_nonoverlapping(carry_ptr[i][cur], d.unwrap_or(own), carry_bytes[i]) };
            }
        }
        Ok(())
    }
}

fn build_scan(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::Scan(me) = ctx.op else { return Err(super::unsupported(ctx)) };
    if let Some((group, member)) = ctx.group
        && member > 0
    {
        // Member 0 ran the loop earlier in this run: copy this node's value.
        let values = group.values.clone();
        return Ok(Box::new(move |b: &Bufs<'_>| {
            let v = values.lock().unwrap_or_else(|e| e.into_inner());
            let src = v.get(member).ok_or_else(|| eval_err("scan", "the loop's first result never ran".into()))?;
            b.output_bytes().copy_from_slice(src.bytes());
            Ok(())
        }));
    }
    let (nc, nx) = (me.num_carry, me.num_xs);
    let ins: Vec<&Shape> = ctx.ins.iter().collect();
    let len = me.trips(&ins).map_err(|e| eval_err("scan", e))?;
    // What this loop produces: every member's result (or this node's alone).
    let members: Vec<Scan> = match ctx.group {
        Some((g, _)) => g.ops.iter().filter_map(|o| if let Op::Scan(s) = o { Some(s.clone()) } else { None }).collect(),
        None => vec![me.clone()],
    };
    let mut values = vec![];
    let mut carry_dest: Vec<Vec<Option<*mut u8>>> = vec![vec![]; nc];
    let mut ys_dest: Vec<(usize, Option<*mut u8>)> = vec![];
    for (m, s) in members.iter().enumerate() {
        let out = s.infer(&ins).map_err(|e| eval_err("scan", e))?;
        let mut buf = Buf::new(if m == 0 { 0 } else { bytes_of(&out, "scan")? });
        // The heap block does not move when the Buf does: the pointer stays valid.
        let dest = (m > 0).then(|| buf.ptr());
        values.push(buf);
        match s.output {
            ScanOutput::Carry => carry_dest[s.index].push(dest),
            ScanOutput::Ys => ys_dest.push((s.index, dest)),
        }
    }
    let group = ctx.group.map(|(g, _)| g.values.clone());
    if let Some(v) = &group {
        *v.lock().unwrap_or_else(|e| e.into_inner()) = values;
    }
    // The body (the member's with the most outputs) computes the carries and only the stacked
    // outputs some member wants.
    let widest = members.iter().max_by_key(|s| s.body.outputs().len()).unwrap_or(me);
    let mut body = (*widest.body).clone();
    let outs = body.outputs().to_vec();
    let mut keep: Vec<_> = outs[..nc].to_vec();
    keep.extend(ys_dest.iter().map(|&(j, _)| outs[nc + j]));
    body.set_outputs(keep);
    let mut exe = compile_body(&body)?;
    let consts = Arc::new(AtomicU64::new(0));
    let invariant: Vec<usize> = (nc + nx..body.inputs().len()).collect();
    exe.mark_invariant(&invariant, consts.clone());
    let carry_bytes: Vec<usize> = ctx.ins[..nc].iter().map(|s| bytes_of(s, "scan")).collect::<Result<_>>()?;
    let x_step: Vec<usize> =
        ctx.ins[nc..nc + nx].iter().map(|s| Ok(bytes_of(s, "scan")? / len.max(1))).collect::<Result<_>>()?;
    let mut ys = vec![];
    for &(j, dest) in &ys_dest {
        let o = widest.body.outputs()[nc + j];
        let s = widest.body.shape(o).ok_or_else(|| eval_err("scan", format!("no body output {o}")))?;
        ys.push((dest, bytes_of(s, "scan")?));
    }
    let mut carries: Vec<[Buf; 2]> = carry_bytes.iter().map(|&n| [Buf::new(n), Buf::new(n)]).collect();
    let carry_ptr = carries.iter_mut().map(|[a, b]| [a.ptr(), b.ptr()]).collect();
    let mut run = ScanRun {
        body: exe,
        _carries: carries,
        carry_ptr,
        carry_bytes,
        carry_dest,
        x_step,
        ys,
        len,
        reverse: me.reverse,
        group,
        consts,
    };
    Ok(Box::new(move |b: &Bufs<'_>| run.run(b)))
}

/// A while loop's compiled bodies and its carry's two buffers.
struct WhileRun {
    cond: CpuExecutable,
    body: CpuExecutable,
    _bufs: [Buf; 3],
    carry: [*mut u8; 2],
    pred: *mut u8,
    bytes: usize,
    max_trips: usize,
    /// The version of the bodies' consts, new every run (as for `ScanRun`).
    consts: Arc<AtomicU64>,
}

// SAFETY: as for `ScanRun`.
unsafe impl Send for WhileRun {}

impl WhileRun {
    fn run(&mut self, b: &Bufs<'_>) -> Result<()> {
        let (carry, pred) = (self.carry, self.pred);
        self.consts.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the buffer holds the carry's bytes.
        unsafe { std::ptr::copy_nonoverlapping(b.input_bytes(0).as_ptr(), carry[0], self.bytes) };
        let mut cur = 0;
        // At most `max_trips` trips, as the reference runs: the bound on a runaway loop.
        for _ in 0..self.max_trips {
            let ins = |k: usize| -> *const u8 { if k == 0 { carry[cur] } else { b.input_bytes(k).as_ptr() } };
            // SAFETY: the predicate buffer holds one bool, apart from every input.
            unsafe { self.cond.run_body(&ins, &|_| pred)? };
            // SAFETY: as above.
            if unsafe { *pred } == 0 {
                break;
            }
            // SAFETY: the carry's two buffers never overlap.
            unsafe { self.body.run_body(&ins, &|_| carry[1 - cur])? };
            cur = 1 - cur;
        }
        // SAFETY: the output holds the carry's bytes.
        unsafe { std::ptr::copy_nonoverlapping(carry[cur], b.output_bytes().as_mut_ptr(), self.bytes) };
        Ok(())
    }
}

fn build_while(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::WhileLoop(w) = ctx.op else { return Err(super::unsupported(ctx)) };
    let bytes = bytes_of(ctx.out, "while_loop")?;
    let mut bufs = [Buf::new(bytes), Buf::new(bytes), Buf::new(1)];
    let carry = [bufs[0].ptr(), bufs[1].ptr()];
    let pred = bufs[2].ptr();
    let consts = Arc::new(AtomicU64::new(0));
    let (mut cond, mut body) = (compile_body(&w.cond)?, compile_body(&w.body)?);
    cond.mark_invariant(&(1..w.cond.inputs().len()).collect::<Vec<_>>(), consts.clone());
    body.mark_invariant(&(1..w.body.inputs().len()).collect::<Vec<_>>(), consts.clone());
    let mut run = WhileRun { cond, body, _bufs: bufs, carry, pred, bytes, max_trips: w.max_trips, consts };
    Ok(Box::new(move |b: &Bufs<'_>| run.run(b)))
}

fn build_cond(ctx: &KernelCtx<'_>) -> Result<Kernel> {
    let Op::Cond(c) = ctx.op else { return Err(super::unsupported(ctx)) };
    let mut then_exe = compile_body(&c.then_body)?;
    let mut else_exe = compile_body(&c.else_body)?;
    Ok(Box::new(move |b: &Bufs<'_>| {
        // Only the branch taken runs.
        let exe = if b.input_bytes(0).first().is_some_and(|&p| p != 0) { &mut then_exe } else { &mut else_exe };
        let own = b.output_bytes().as_mut_ptr();
        let ins = |k: usize| b.input_bytes(k + 1).as_ptr();
        // SAFETY: the output is this node's own buffer, apart from its inputs.
        unsafe { exe.run_body(&ins, &|_| own) }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Bufs;
    use rlx_ir::{DType, Node};

    /// The input versions each kernel call saw.
    type Seen = Arc<Mutex<Vec<Vec<Option<u64>>>>>;

    #[test]
    fn loop_invariant_inputs_keep_a_version_across_trips() {
        // A body `y = x + w`: x per trip, w a const of the loop.
        let f = |d: &[usize]| Shape::new(d, DType::F32);
        let mut body = Graph::new("body");
        let (x, w) = (body.input("x", f(&[4])), body.input("w", f(&[4])));
        let y = body.add(x, w);
        body.set_outputs(vec![y]);
        let seen: Seen = Arc::default();
        let table = crate::kernels::table();
        let mut exe = CpuExecutable::new(&body, |ctx| {
            let node = Node { op: ctx.op.clone(), inputs: vec![], ty: ctx.out.clone() };
            let ins: Vec<&Shape> = ctx.ins.iter().collect();
            let mut k = (table.lookup(&node, &ins).expect("kernel").build)(ctx)?;
            let seen = seen.clone();
            Ok(Box::new(move |b: &Bufs<'_>| {
                seen.lock().unwrap().push((0..b.num_inputs()).map(|i| b.input_version(i)).collect());
                k(b)
            }))
        })
        .unwrap();
        let cell = Arc::new(AtomicU64::new(7));
        exe.mark_invariant(&[1], cell.clone());
        let (xs, ws) = (Buf::new(16), Buf::new(16));
        let mut out = Buf::new(16);
        let o = out.ptr();
        let ins = |k: usize| if k == 0 { xs.lines.as_ptr() as *const u8 } else { ws.lines.as_ptr() as *const u8 };
        for _ in 0..2 {
            // SAFETY: every buffer holds the body's 16 bytes; the output is apart from the inputs.
            unsafe { exe.run_body(&ins, &|_| o).unwrap() };
        }
        cell.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { exe.run_body(&ins, &|_| o).unwrap() };
        let v = seen.lock().unwrap().clone();
        // The per-trip input has no version; the const keeps one until the loop bumps it.
        assert_eq!(v.iter().map(|c| c[0]).collect::<Vec<_>>(), vec![None; 3]);
        assert_eq!(v.iter().map(|c| c[1]).collect::<Vec<_>>(), vec![Some(7), Some(7), Some(8)]);
    }
}
