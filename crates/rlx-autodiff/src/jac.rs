//! Full Jacobians: `jacfwd` (vmapped jvp over the input basis) and `jacrev` (vmapped vjp over
//! the output basis).

use crate::api::{bind_input, jvp, leaf, vjp};
use crate::batch::vmap;
use rlx_ir::ops::rules::dims;
use rlx_ir::{Error, Graph, HostTensor, Result};

fn one_output(g: &Graph, what: &str) -> Result<()> {
    if g.outputs().len() != 1 {
        return Err(Error::InvalidGraph {
            graph: g.name().into(),
            reason: format!("{what} needs exactly one output, the graph has {}", g.outputs().len()),
        });
    }
    Ok(())
}

/// The identity basis `[n] + dims` of `dtype`.
fn eye(n: usize, d: &[usize], dtype: rlx_ir::DType) -> Result<HostTensor> {
    let mut v = vec![0.0; n * n];
    for i in 0..n {
        v[i * n + i] = 1.0;
    }
    let mut shape = vec![n];
    shape.extend_from_slice(d);
    HostTensor::from_f64(&shape, dtype, &v)
}

/// Reshapes `[k, rest]` Jacobian rows into `out_dims + in_dims` (transposing first when the rows
/// run over the input, as in forward mode).
fn finish(mut g: Graph, k: usize, out_d: &[usize], in_d: &[usize], rows_are_inputs: bool) -> Result<Graph> {
    let y = g.outputs()[0];
    let (m, n) = (out_d.iter().product::<usize>(), in_d.iter().product::<usize>());
    debug_assert_eq!(k, if rows_are_inputs { n } else { m });
    let mut y2 = g.reshape(y, &[k, if rows_are_inputs { m } else { n }]);
    if rows_are_inputs {
        y2 = g.transpose(y2, &[1, 0]);
    }
    let mut full = out_d.to_vec();
    full.extend_from_slice(in_d);
    let r = g.reshape(y2, &full);
    g.set_outputs(vec![r]);
    g.verify()?;
    Ok(g)
}

/// The Jacobian of the single output with respect to input or param `wrt`, by forward mode:
/// one output of shape `out_dims + wrt_dims`.
pub fn jacfwd(g: &Graph, wrt: &str) -> Result<Graph> {
    one_output(g, "jacfwd")?;
    let w = leaf(g, wrt)?;
    let (in_d, out_d) = (dims(g, w), dims(g, g.outputs()[0]));
    let n = in_d.iter().product();
    let mut j = jvp(g, &[wrt])?;
    let t = j.outputs()[1];
    j.set_outputs(vec![t]);
    let tname = format!("tangent_{wrt}");
    let v = vmap(&j, &[&tname], n)?;
    let basis = eye(n, &in_d, g.dtype(w))?;
    finish(bind_input(&v, &tname, basis)?, n, &out_d, &in_d, true)
}

/// The Jacobian of the single output with respect to input or param `wrt`, by reverse mode:
/// one output of shape `out_dims + wrt_dims`.
pub fn jacrev(g: &Graph, wrt: &str) -> Result<Graph> {
    one_output(g, "jacrev")?;
    let w = leaf(g, wrt)?;
    let y = g.outputs()[0];
    let (in_d, out_d) = (dims(g, w), dims(g, y));
    let m = out_d.iter().product();
    let mut j = vjp(g, &[w])?;
    let c = j.outputs()[1];
    j.set_outputs(vec![c]);
    let v = vmap(&j, &["cotangent_0"], m)?;
    let basis = eye(m, &out_d, g.dtype(y))?;
    finish(bind_input(&v, "cotangent_0", basis)?, m, &out_d, &in_d, false)
}
