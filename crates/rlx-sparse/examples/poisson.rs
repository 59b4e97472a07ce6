//! 2D Poisson equation `-laplace(u) = 1` on the unit square with zero boundary values, on a
//! 64x64 interior grid (5-point stencil, 4096 unknowns): solved in an RLX graph by conjugate
//! gradient and by sparse LU on the CPU backend, and the two solutions compared.
//!
//! Run: cargo run --release -p rlx-sparse --example poisson

use rlx_ir::{DType, Graph, HostTensor, Shape};
use rlx_sparse::Csr;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    rlx_sparse::register()?;
    let m = 64;
    let n = m * m;
    let h = 1.0 / (m + 1) as f64;
    let mut trip = vec![];
    for i in 0..m {
        for j in 0..m {
            let p = i * m + j;
            trip.push((p, p, 4.0));
            for (di, dj) in [(-1i64, 0i64), (1, 0), (0, -1), (0, 1)] {
                let (a, b) = (i as i64 + di, j as i64 + dj);
                if (0..m as i64).contains(&a) && (0..m as i64).contains(&b) {
                    trip.push((p, a as usize * m + b as usize, -1.0));
                }
            }
        }
    }
    let a = Csr::from_triplets(n, n, &trip)?;
    // Scaled by h^2 so the matrix is the plain stencil.
    let rhs = vec![h * h; n];

    let mut g = Graph::new("poisson");
    let an = a.inputs(&mut g, "A", DType::F64);
    let b = g.input("b", Shape::new(&[n], DType::F64));
    let x_cg = rlx_sparse::cg_solve(&mut g, an, b, 1e-10, None);
    let x_lu = rlx_sparse::splu_solve(&mut g, an, b);
    g.set_outputs(vec![x_cg, x_lu]);
    let mut feeds = a.feeds("A", DType::F64);
    feeds.push(("b".into(), HostTensor::from_f64(&[n], DType::F64, &rhs)?));
    let feeds: Vec<(&str, HostTensor)> = feeds.iter().map(|(k, t)| (k.as_str(), t.clone())).collect();
    let t = std::time::Instant::now();
    let out = rlx_driver::run_host(&rlx_cpu::CpuBackend::new(), &g, &feeds)?;
    let secs = t.elapsed().as_secs_f64();
    let (u_cg, u_lu) = (out[0].to_f64_vec()?, out[1].to_f64_vec()?);
    let diff = u_cg.iter().zip(&u_lu).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    let peak = u_lu.iter().fold(0.0f64, |m, v| m.max(*v));
    let info = rlx_sparse::cg(&a, &rhs, 1e-10, 10 * n)?;
    println!("2D Poisson, {m}x{m} grid, {n} unknowns, {} nonzeros", a.nnz());
    println!("CG: {} iterations to relative residual {:.2e}", info.iterations, info.residual);
    println!("max |u_cg - u_lu| = {diff:.3e}; max u = {peak:.6} (continuum: 0.073671); both solves {secs:.3} s");
    if diff > 1e-8 * peak {
        return Err(format!("CG and LU disagree: {diff:e}").into());
    }
    Ok(())
}
