//! The numeric cores of the decompositions on faer, in f64, on row-major buffers, with the sign
//! conventions fixed so the outputs are unique (the fixtures apply the same conventions to
//! numpy's LAPACK results).

use faer::{Mat, Side};

/// The reduced QR of the row-major `m x n` `a`: `q` (`m x k`) and `r` (`k x n`), `k = min(m,
/// n)`, row-major, with `diag(r) >= 0` (columns of `q` and rows of `r` negated where LAPACK's
/// Householder QR gives a negative diagonal; unique for a full-rank `a`).
pub(crate) fn qr(a: &[f64], m: usize, n: usize, q: &mut [f64], r: &mut [f64]) {
    let k = m.min(n);
    let f = Mat::from_fn(m, n, |i, j| a[i * n + j]).qr();
    let (fq, fr) = (f.compute_thin_Q(), f.thin_R());
    let sign: Vec<f64> = (0..k).map(|i| if fr[(i, i)] < 0.0 { -1.0 } else { 1.0 }).collect();
    for i in 0..m {
        for j in 0..k {
            q[i * k + j] = fq[(i, j)] * sign[j];
        }
    }
    for i in 0..k {
        for j in 0..n {
            r[i * n + j] = if j >= i { fr[(i, j)] * sign[i] } else { 0.0 };
        }
    }
}

/// Multiplies each column of the row-major `rows x cols` `v` by -1 where its entry of largest
/// magnitude is negative (the first such entry on ties), so that entry is positive.
pub(crate) fn fix_column_signs(v: &mut [f64], rows: usize, cols: usize) {
    for j in 0..cols {
        let mut best = 0;
        for i in 1..rows {
            if v[i * cols + j].abs() > v[best * cols + j].abs() {
                best = i;
            }
        }
        if v[best * cols + j] < 0.0 {
            (0..rows).for_each(|i| v[i * cols + j] = -v[i * cols + j]);
        }
    }
}

/// The eigendecomposition of `(a + a^T) / 2` for the row-major `n x n` `a`: eigenvalues `w`
/// ascending, eigenvectors as the columns of the row-major `v`, signs fixed by
/// `fix_column_signs`. Err(reason) when faer's iteration does not converge.
pub(crate) fn eigh(a: &[f64], n: usize, w: &mut [f64], v: &mut [f64]) -> Result<(), String> {
    let sym = Mat::from_fn(n, n, |i, j| 0.5 * (a[i * n + j] + a[j * n + i]));
    let e = sym.self_adjoint_eigen(Side::Lower).map_err(|e| format!("the eigensolver failed: {e:?}"))?;
    let (u, s) = (e.U(), e.S());
    for i in 0..n {
        w[i] = s[i];
        for j in 0..n {
            v[i * n + j] = u[(i, j)];
        }
    }
    fix_column_signs(v, n, n);
    Ok(())
}

/// The reduced SVD of the row-major `m x n` `a`: `u` (`m x k`), `s` (`k`, descending), `vt`
/// (`k x n`), row-major, each column of `u` with its entry of largest magnitude positive (the
/// matching row of `vt` negated with it). Err(reason) when faer's iteration does not converge.
pub(crate) fn svd(a: &[f64], m: usize, n: usize, u: &mut [f64], s: &mut [f64], vt: &mut [f64]) -> Result<(), String> {
    let k = m.min(n);
    let f = Mat::from_fn(m, n, |i, j| a[i * n + j]).thin_svd().map_err(|e| format!("the SVD failed: {e:?}"))?;
    let (fu, fs, fv) = (f.U(), f.S(), f.V());
    for i in 0..m {
        for j in 0..k {
            u[i * k + j] = fu[(i, j)];
        }
    }
    for i in 0..k {
        s[i] = fs[i];
        for j in 0..n {
            vt[i * n + j] = fv[(j, i)];
        }
    }
    fix_column_signs(u, m, k);
    for j in 0..k {
        // Column j of u was negated: negate row j of vt with it.
        let flipped = (0..m).any(|i| u[i * k + j] != 0.0 && u[i * k + j] == -fu[(i, j)]);
        if flipped {
            (0..n).for_each(|c| vt[j * n + c] = -vt[j * n + c]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qr_eigh_svd_by_hand() {
        // [[3], [4]] = [[0.6], [0.8]] [[5]]; a negated column gives the same factors.
        let (mut q, mut r) = ([0.0; 2], [0.0; 1]);
        qr(&[-3.0, -4.0], 2, 1, &mut q, &mut r);
        assert!((q[0] + 0.6).abs() < 1e-12 && (q[1] + 0.8).abs() < 1e-12 && (r[0] - 5.0).abs() < 1e-12);
        // [[2, 1], [1, 2]]: eigenvalues 1, 3; eigenvectors (1, -1) and (1, 1) over sqrt 2.
        let (mut w, mut v) = ([0.0; 2], [0.0; 4]);
        eigh(&[2.0, 1.0, 1.0, 2.0], 2, &mut w, &mut v).unwrap();
        assert!((w[0] - 1.0).abs() < 1e-12 && (w[1] - 3.0).abs() < 1e-12, "{w:?}");
        let h = 0.5f64.sqrt();
        for (g, e) in v.iter().zip([h, h, -h, h]) {
            assert!((g - e).abs() < 1e-12, "{v:?}");
        }
        // [[0, -3], [2, 0]]: s = (3, 2); u's columns made positive, vt's rows follow them.
        let (mut u, mut sv, mut vt) = ([0.0; 4], [0.0; 2], [0.0; 4]);
        svd(&[0.0, -3.0, 2.0, 0.0], 2, 2, &mut u, &mut sv, &mut vt).unwrap();
        assert!((sv[0] - 3.0).abs() < 1e-12 && (sv[1] - 2.0).abs() < 1e-12, "{sv:?}");
        for (g, e) in u.iter().chain(&vt).zip([1.0, 0.0, 0.0, 1.0, 0.0, -1.0, 1.0, 0.0]) {
            assert!((g - e).abs() < 1e-12, "{u:?} {vt:?}");
        }
    }
}
