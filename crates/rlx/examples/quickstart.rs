//! The README quickstart: build a graph, compile it for the CPU, run it.

use rlx::prelude::*;

fn main() -> rlx::Result<()> {
    let mut g = Graph::new("hello");
    let x = g.input("x", Shape::new(&[1, 4], DType::F32));
    let w = g.param("w", Shape::new(&[4, 2], DType::F32));
    let y = g.matmul(x, w); // output type inferred: [1, 2] f32
    g.set_outputs(vec![y]);
    println!("{}", g.to_text());

    let mut compiled = Session::new(Device::Cpu).compile(g)?;
    compiled.set_param("w", &[1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0])?;
    let out = compiled.run(&[("x", &[1.0, 2.0, 3.0, 4.0])])?;
    assert_eq!(out, vec![vec![4.0, 6.0]]);
    println!("x @ w = {:?}", out[0]);
    Ok(())
}
