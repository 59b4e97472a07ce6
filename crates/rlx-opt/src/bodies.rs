//! Loop and branch bodies go through the same pipeline as the graph that holds them: a backend
//! that runs `scan`, `while_loop` or `cond` natively compiles each body once and runs it every
//! trip, so a body's simplification and fusion pay off once per trip.

use crate::pipeline::optimize;
use rlx_driver::{Backend, CompileOptions, Reports};
use rlx_ir::{Graph, Op, Result, Shape};

/// A body's interface: its inputs (name and type, in order) and its output types.
type Interface = (Vec<(String, Option<Shape>)>, Vec<Option<Shape>>);

/// The interface of `g`.
fn interface(g: &Graph) -> Interface {
    let ins = g.inputs().iter().map(|(id, n)| (n.to_string(), g.shape(*id).cloned())).collect();
    let outs = g.outputs().iter().map(|o| g.shape(*o).cloned()).collect();
    (ins, outs)
}

/// `body` optimized for `backend`, or as it was when the optimized graph would not keep its
/// interface (a body's operands are positional: an input the pipeline drops as dead must stay).
fn optimize_body(body: &Graph, backend: &dyn Backend, opts: &CompileOptions) -> Result<Graph> {
    let o = optimize(body.clone(), backend, opts, &[])?;
    Ok(if interface(&o.graph) == interface(body) { o.graph } else { body.clone() })
}

/// `g` with the bodies of its native control-flow nodes optimized (quietly: no reports, no
/// dumps; bodies are not cached on their own).
pub fn optimize_bodies(g: &Graph, backend: &dyn Backend, opts: &CompileOptions) -> Result<Graph> {
    let quiet = CompileOptions { reports: Reports::default(), dump: None, cache: false, ..opts.clone() };
    let mut out = Graph::new(g.name());
    for n in g.nodes() {
        let op = match &n.op {
            Op::Scan(s) => {
                let mut s = s.clone();
                s.body = Box::new(optimize_body(&s.body, backend, &quiet)?);
                Op::Scan(s)
            }
            Op::WhileLoop(w) => {
                let mut w = w.clone();
                w.cond = Box::new(optimize_body(&w.cond, backend, &quiet)?);
                w.body = Box::new(optimize_body(&w.body, backend, &quiet)?);
                Op::WhileLoop(w)
            }
            Op::Cond(c) => {
                let mut c = c.clone();
                c.then_body = Box::new(optimize_body(&c.then_body, backend, &quiet)?);
                c.else_body = Box::new(optimize_body(&c.else_body, backend, &quiet)?);
                Op::Cond(c)
            }
            op => op.clone(),
        };
        out.try_add(op, &n.inputs)?;
    }
    out.set_outputs(g.outputs().to_vec());
    Ok(out)
}
