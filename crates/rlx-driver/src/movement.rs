//! Index maps for data-movement ops, shared by every backend: running an op's reference on
//! tensors of element ids tells, for each output element, which input element it copies.

use rlx_ir::{DType, Data, Error, HostTensor, Op, OpTraits, Result, Shape};
use std::borrow::Borrow;

/// For each output element of a DATA_MOVEMENT op, the (input, element) it copies.
pub fn movement_index_map<S: Borrow<Shape>>(op: &Op, ins: &[S], out: &Shape) -> Result<Vec<(usize, usize)>> {
    if !op.def().traits().contains(OpTraits::DATA_MOVEMENT) {
        return Err(Error::eval(op.def().name(), "not a data-movement op"));
    }
    // Element ids: input i's elements are numbered after those of inputs 0..i.
    let (mut ids, mut starts, mut next) = (vec![], vec![], 0i64);
    for s in ins.iter().map(Borrow::borrow) {
        let n = s.numel().unwrap_or(0) as i64;
        starts.push(next);
        ids.push(HostTensor::new(s.with_dtype(DType::I64), Data::I((next..next + n).collect()))?);
        next += n;
    }
    let refs: Vec<&HostTensor> = ids.iter().collect();
    let mapped = op.def().reference(&refs, &out.with_dtype(DType::I64))?;
    let Data::I(src) = mapped.data else { return Err(Error::eval(op.def().name(), "index map is not integer")) };
    Ok(src
        .iter()
        .map(|&id| {
            let i = starts.partition_point(|&s| s <= id) - 1;
            (i, (id - starts[i]) as usize)
        })
        .collect())
}

/// True when a one-input map copies every element to the same place (a plain copy).
pub fn is_identity_map<S: Borrow<Shape>>(map: &[(usize, usize)], ins: &[S]) -> bool {
    ins.len() == 1
        && map.len() == ins[0].borrow().numel().unwrap_or(0)
        && map.iter().enumerate().all(|(j, &(_, e))| e == j)
}
