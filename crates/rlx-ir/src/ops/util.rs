//! Helpers shared by op definitions: index maps for broadcasting, sample data, dtype checks.

use crate::{DType, DTypeClass, Dim, Shape, shape::strides};

/// Deterministic pseudo-random values in [lo, hi) (a small LCG; samples must be reproducible).
pub fn rand_f64(n: usize, lo: f64, hi: f64, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            lo + (hi - lo) * u
        })
        .collect()
}

/// Deterministic integers in [lo, hi).
pub fn rand_i64(n: usize, lo: i64, hi: i64, seed: u64) -> Vec<i64> {
    rand_f64(n, lo as f64, hi as f64, seed).into_iter().map(|x| x.floor() as i64).collect()
}

/// Checks that a unary arithmetic op accepts `dt` (floats always; ints when the op has an integer form).
pub fn unary_dtype_check(dt: DType, int_ok: bool) -> Result<(), String> {
    match dt.class() {
        DTypeClass::Float => Ok(()),
        DTypeClass::Int if int_ok => Ok(()),
        _ => Err(format!("dtype {dt} is not supported")),
    }
}

/// For each element of the broadcast output, the flat index into an input of `in_dims`.
pub fn broadcast_index_map(out_dims: &[usize], in_dims: &[usize]) -> Vec<usize> {
    let n: usize = out_dims.iter().product();
    let rank = out_dims.len();
    let in_strides = strides(in_dims);
    // Stride per output axis: 0 where the input is broadcast.
    let mut bstride = vec![0usize; rank];
    for (i, s) in bstride.iter_mut().enumerate() {
        if i + in_dims.len() >= rank {
            let j = i + in_dims.len() - rank;
            if in_dims[j] != 1 {
                *s = in_strides[j];
            }
        }
    }
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; rank];
    for _ in 0..n {
        out.push(idx.iter().zip(&bstride).map(|(a, b)| a * b).sum());
        for ax in (0..rank).rev() {
            idx[ax] += 1;
            if idx[ax] < out_dims[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
    out
}

/// Unravels a flat index into a multi-index for `dims`.
pub fn unravel(mut flat: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for ax in (0..dims.len()).rev() {
        if dims[ax] > 0 {
            idx[ax] = flat % dims[ax];
            flat /= dims[ax];
        }
    }
    idx
}

/// Fixed dims from a list of `Dim`s (None when any is symbolic).
pub fn fixed(dims: &[Dim]) -> Option<Vec<usize>> {
    dims.iter().map(Dim::fixed).collect()
}

/// Checks that all shapes share one dtype, returning it.
pub fn same_dtype(ins: &[&Shape]) -> Result<DType, String> {
    let dt = ins[0].dtype;
    if let Some(s) = ins.iter().find(|s| s.dtype != dt) {
        return Err(format!("inputs must share one dtype, got {dt} and {}", s.dtype));
    }
    Ok(dt)
}

/// Whether a flag is off (serde leaves such fields out of the text form).
pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

/// Requires a real floating dtype.
pub fn require_float(dt: DType) -> Result<(), String> {
    if dt.is_float() { Ok(()) } else { Err(format!("needs a float dtype, got {dt}")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_map_repeats_rows_and_columns() {
        assert_eq!(broadcast_index_map(&[2, 3], &[3]), vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(broadcast_index_map(&[2, 3], &[2, 1]), vec![0, 0, 0, 1, 1, 1]);
        assert_eq!(broadcast_index_map(&[2, 2], &[]), vec![0; 4]);
    }
}
