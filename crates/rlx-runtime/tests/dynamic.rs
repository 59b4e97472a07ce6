//! DynamicGraph: one compile per (bucketed) binding, params shared, padding masked by the caller.

use rlx_driver::Device;
use rlx_ir::{DType, Dim, Graph, HostTensor, Shape};
use rlx_runtime::{DynamicGraph, Session};

/// sum over `seq` of mask * (x @ w).
fn masked_sum() -> Graph {
    let mut g = Graph::new("masked_sum");
    let x = g.input("x", Shape::with_dims(vec![Dim::Sym("seq".into()), Dim::Fixed(4)], DType::F32));
    let mask = g.input("mask", Shape::with_dims(vec![Dim::Sym("seq".into())], DType::F32));
    let w = g.param("w", Shape::new(&[4, 1], DType::F32));
    let xw = g.matmul(x, w);
    let xw = g.squeeze(xw, &[1]);
    let m = g.mul(xw, mask);
    let s = g.sum(m, &[0], false);
    g.set_outputs(vec![s]);
    g
}

fn run_padded(dg: &mut DynamicGraph, rows: &[[f32; 4]]) -> f32 {
    let n = dg.bucket("seq", rows.len()).unwrap();
    let mut x: Vec<f32> = rows.iter().flatten().copied().collect();
    x.resize(n * 4, 1e6); // padding that would show if the mask failed
    let mask: Vec<f32> = (0..n).map(|i| if i < rows.len() { 1.0 } else { 0.0 }).collect();
    let cg = dg.get(&[("seq", rows.len())]).unwrap();
    cg.run(&[("x", &x), ("mask", &mask)]).unwrap()[0][0]
}

#[test]
fn bucketed_sizes_share_one_compile() {
    let mut dg =
        DynamicGraph::new(Session::new(Device::Cpu), masked_sum()).unwrap().with_buckets("seq", &[8, 4]).unwrap();
    assert_eq!(dg.symbols(), ["seq"]);
    dg.set_param("w", &HostTensor::from_f32(&[4, 1], &[1.0, 2.0, 3.0, 4.0]).unwrap()).unwrap();
    let row = [1.0, 1.0, 1.0, 1.0];
    assert_eq!(run_padded(&mut dg, &[row; 3]), 30.0);
    assert_eq!(run_padded(&mut dg, &[row; 4]), 40.0);
    assert_eq!(dg.compiled_count(), 1);
    assert_eq!(run_padded(&mut dg, &[row; 5]), 50.0);
    assert_eq!(dg.compiled_count(), 2);
    // A param set later reaches every compiled instance.
    dg.set_param("w", &HostTensor::from_f32(&[4, 1], &[0.0, 0.0, 0.0, 1.0]).unwrap()).unwrap();
    assert_eq!(run_padded(&mut dg, &[row; 2]), 2.0);
    assert_eq!(run_padded(&mut dg, &[row; 7]), 7.0);
    assert_eq!(dg.compiled_count(), 2);
}

#[test]
fn unbucketed_sizes_compile_exactly() {
    let mut dg = DynamicGraph::new(Session::new(Device::Cpu), masked_sum()).unwrap();
    dg.set_param("w", &HostTensor::from_f32(&[4, 1], &[1.0, 0.0, 0.0, 0.0]).unwrap()).unwrap();
    for n in [1usize, 2, 3, 2] {
        let rows = vec![[2.0, 0.0, 0.0, 0.0]; n];
        assert_eq!(run_padded(&mut dg, &rows), 2.0 * n as f32);
    }
    assert_eq!(dg.compiled_count(), 3);
}

#[test]
fn dynamic_errors_name_the_symbol() {
    let dg = DynamicGraph::new(Session::new(Device::Cpu), masked_sum()).unwrap();
    let e = dg.with_buckets("len", &[4]).err().unwrap().to_string();
    assert!(e.contains("len") && e.contains("seq"), "{e}");
    let mut dg = DynamicGraph::new(Session::new(Device::Cpu), masked_sum()).unwrap().with_buckets("seq", &[4]).unwrap();
    let e = dg.get(&[("seq", 9)]).err().unwrap().to_string();
    assert!(e.contains("above the largest bucket 4"), "{e}");
    let e = dg.get(&[]).err().unwrap().to_string();
    assert!(e.contains("seq"), "{e}");
    let e = dg.get(&[("seq", 2), ("batch", 1)]).err().unwrap().to_string();
    assert!(e.contains("batch"), "{e}");
    // Params not yet set are reported by run, naming the param.
    let cg = dg.get(&[("seq", 2)]).unwrap();
    let e = cg.run(&[("x", &[0.0; 16]), ("mask", &[0.0; 4])]).unwrap_err().to_string();
    assert!(e.contains("`w`") || e.contains("w"), "{e}");
}
