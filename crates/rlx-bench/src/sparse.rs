//! Sparse products, f32 and f64: RLX (`rlx_sparse::spmv` / `spmm` compiled through `Session`,
//! the CPU kernel reading the CSR arrays in place, rows spread over RLX's pool) against
//! scipy.sparse (`A @ x`, its single-threaded csr_matvec / csr_matvecs) in interleaved rounds,
//! medians. The matrix is the 5-point Laplacian on an `m x m` grid with i32 indices, as scipy
//! stores it; x is `[n]` (spmv) or `[n, 16]` (spmm). RLX's time includes copying the operands
//! into its arena and the result out. Each RLX result is checked against scipy's sum and first
//! entries (x holds small integers, so both are exact in either dtype).

use crate::peers::PyPeers;
use crate::stats::{Timer, median};
use rlx_driver::Device;
use rlx_ir::{DType, Graph, HostTensor, Shape};
use rlx_runtime::Session;

/// Runs per round.
const REPS: usize = 10;

/// The CSR arrays of the 5-point Laplacian on an `m x m` grid (columns sorted in each row).
fn poisson(m: usize) -> (Vec<i64>, Vec<i64>, Vec<f64>) {
    let (mut indptr, mut indices, mut values) = (vec![0i64], vec![], vec![]);
    for i in 0..m as i64 {
        for j in 0..m as i64 {
            for (di, dj, v) in [(-1, 0, -1.0), (0, -1, -1.0), (0, 0, 4.0), (0, 1, -1.0), (1, 0, -1.0)] {
                let (a, b) = (i + di, j + dj);
                if (0..m as i64).contains(&a) && (0..m as i64).contains(&b) {
                    indices.push(a * m as i64 + b);
                    values.push(v);
                }
            }
            indptr.push(indices.len() as i64);
        }
    }
    (indptr, indices, values)
}

/// Prints one table row per (operand columns, dtype) for the `m x m` grid.
pub fn run(m: usize, rounds: usize, py: &mut Option<PyPeers>) -> Result<(), String> {
    rlx_sparse::register().map_err(|e| e.to_string())?;
    let (indptr, indices, values) = poisson(m);
    let (n, nnz) = (m * m, values.len());
    println!(
        "\n## sparse products, 5-point Laplacian {m}x{m} grid (n {n}, nnz {nnz}, i32 indices) \
         (median ms; scipy / RLX > 1 means RLX is faster)\n"
    );
    println!("| op | dtype | RLX ms | scipy ms | scipy / RLX |");
    println!("|---|---|---|---|---|");
    for (k, dt) in [(0, DType::F32), (0, DType::F64), (16, DType::F32), (16, DType::F64)] {
        let name = if dt == DType::F32 { "f32" } else { "f64" };
        let cols = k.max(1);
        let xd: Vec<usize> = if k == 0 { vec![n] } else { vec![n, k] };
        let mut g = Graph::new("sparse");
        let ip = g.input("indptr", Shape::new(&[n + 1], DType::I32));
        let ix = g.input("indices", Shape::new(&[nnz], DType::I32));
        let vs = g.input("values", Shape::new(&[nnz], dt));
        let x = g.input("x", Shape::new(&xd, dt));
        let a = rlx_sparse::CsrNodes { indptr: ip, indices: ix, values: vs, shape: [n, n] };
        let y = rlx_sparse::spmm(&mut g, a, x);
        g.set_outputs(vec![y]);
        let mut c = Session::new(Device::Cpu).compile(g).map_err(|e| e.to_string())?;
        let bytes = |dims: &[usize], dt: DType, v: &[f64]| HostTensor::from_f64(dims, dt, v).map(|t| t.to_bytes());
        let xs: Vec<f64> = (0..n * cols).map(|i| (i % 7) as f64 - 3.0).collect();
        let ins = [
            HostTensor::from_i64(&[n + 1], DType::I32, &indptr).map_err(|e| e.to_string())?.to_bytes(),
            HostTensor::from_i64(&[nnz], DType::I32, &indices).map_err(|e| e.to_string())?.to_bytes(),
            bytes(&[nnz], dt, &values).map_err(|e| e.to_string())?,
            bytes(&xd, dt, &xs).map_err(|e| e.to_string())?,
        ];
        let refs: Vec<&[u8]> = ins.iter().map(|b| b.as_slice()).collect();
        let mut out = vec![0u8; n * cols * dt.size_bytes()];
        let mut once = || c.run_into(&refs, &mut [&mut out]).map_err(|e| e.to_string());
        once()?;
        let (mut rlx, mut sp, mut check) = (Timer::default(), vec![], None);
        for _ in 0..rounds {
            for _ in 0..REPS {
                rlx.time(&mut once)?;
            }
            if let Some(p) = py.as_mut().filter(|p| p.has("scipy")) {
                let v = p.ask(&format!("sparse {m} {k} {name} {REPS}"))?;
                sp.extend(PyPeers::ms(&v));
                check = Some(v);
            }
        }
        if let Some(v) = check {
            agree(&out, dt, &v)?;
        }
        let (r, s) = (rlx.median_ms(), median(&sp));
        let op = if k == 0 { "spmv".to_string() } else { format!("spmm k={k}") };
        let show = |v: f64| if v.is_nan() { "skipped".to_string() } else { format!("{v:.3}") };
        let ratio = if s.is_nan() { "-".into() } else { format!("{:.2}x", s / r) };
        println!("| {op} | {name} | {r:.3} | {} | {ratio} |", show(s));
    }
    Ok(())
}

/// Checks RLX's result against scipy's sum and first entries.
fn agree(out: &[u8], dt: DType, v: &serde_json::Value) -> Result<(), String> {
    let y: Vec<f64> = match dt {
        DType::F32 => {
            out.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap_or_default()) as f64).collect()
        }
        _ => out.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap_or_default())).collect(),
    };
    let sum: f64 = y.iter().sum();
    let want = v.get("sum").and_then(serde_json::Value::as_f64).ok_or("scipy gave no sum")?;
    let head: Vec<f64> = v
        .get("head")
        .and_then(serde_json::Value::as_array)
        .map_or(vec![], |a| a.iter().filter_map(serde_json::Value::as_f64).collect());
    if (sum - want).abs() > 1e-6 * want.abs().max(1.0) || head.iter().zip(&y).any(|(a, b)| a != b) {
        return Err(format!(
            "RLX disagrees with scipy: sum {sum} vs {want}, head {:?} vs {head:?}",
            &y[..head.len().min(y.len())]
        ));
    }
    Ok(())
}
