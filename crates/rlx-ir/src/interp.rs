//! The reference interpreter: evaluates a graph node by node with each op's `reference`.

use crate::{Error, Graph, HostTensor, Op, Result};
use std::collections::HashMap;

/// Evaluates `g` with the given inputs and params (by name); returns the outputs in order.
pub fn evaluate(g: &Graph, feeds: &[(&str, HostTensor)]) -> Result<Vec<HostTensor>> {
    g.verify()?;
    let feeds: HashMap<&str, &HostTensor> = feeds.iter().map(|(n, t)| (*n, t)).collect();
    let mut vals: Vec<Option<HostTensor>> = vec![None; g.len()];
    // Free each value after its last use.
    let mut last_use = vec![0usize; g.len()];
    for (i, n) in g.nodes().iter().enumerate() {
        for x in &n.inputs {
            last_use[x.index()] = i;
        }
    }
    for o in g.outputs() {
        last_use[o.index()] = usize::MAX;
    }
    for (i, n) in g.nodes().iter().enumerate() {
        let v = match &n.op {
            Op::Input(x) => fed(&feeds, &x.name, &n.ty, "input")?,
            Op::Param(x) => fed(&feeds, &x.name, &n.ty, "param")?,
            op => {
                let ins: Vec<&HostTensor> =
                    n.inputs.iter().map(|x| vals[x.index()].as_ref().expect("topological order")).collect();
                let out = op.def().reference(&ins, &n.ty)?;
                if out.shape != n.ty {
                    return Err(Error::eval(
                        op.def().name(),
                        format!("reference produced {} for node %{i} typed {}", out.shape, n.ty),
                    ));
                }
                out
            }
        };
        vals[i] = Some(v);
        for x in &n.inputs {
            if last_use[x.index()] == i {
                vals[x.index()] = None;
            }
        }
    }
    Ok(g.outputs().iter().map(|o| vals[o.index()].clone().expect("output kept")).collect())
}

fn fed(feeds: &HashMap<&str, &HostTensor>, name: &str, ty: &crate::Shape, kind: &'static str) -> Result<HostTensor> {
    let t = feeds.get(name).ok_or_else(|| match kind {
        "param" => Error::ParamNotSet { name: name.into(), shape: ty.clone() },
        _ => Error::MissingInput { name: name.into(), shape: ty.clone() },
    })?;
    if t.shape.dtype != ty.dtype {
        return Err(Error::DTypeMismatch { kind, name: name.into(), expected: ty.dtype, got: t.shape.dtype });
    }
    if &t.shape != ty {
        return Err(Error::DataLength {
            kind,
            name: name.into(),
            shape: ty.clone(),
            expected: ty.numel().unwrap_or(0),
            got: t.numel(),
        });
    }
    Ok((*t).clone())
}
