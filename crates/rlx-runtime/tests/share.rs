//! Params shared between compiled graphs (`share_params_from`) and bound to external bytes.

use rlx_driver::Device;
use rlx_ir::{DType, Graph, HostTensor, Shape};
use rlx_runtime::{CompiledGraph, Session};
use std::sync::Arc;

fn f32s(d: &[usize]) -> Shape {
    Shape::new(d, DType::F32)
}

/// `cache[pos] = row` (in place), output: the sum of the cache; `w` is a read-only weight.
fn writer() -> Graph {
    let mut g = Graph::new("writer");
    let cache = g.param("cache", f32s(&[4, 2]));
    let w = g.param("w", f32s(&[2]));
    let row = g.input("row", f32s(&[1, 2]));
    let pos = g.input("pos", Shape::scalar(DType::I32));
    let new = g.dynamic_update_slice(cache, row, pos, 0);
    g.update_param(cache, new);
    let s = g.sum(new, &[0], false);
    let y = g.mul(s, w);
    g.set_outputs(vec![y]);
    g
}

/// Reads the cache: output cache * w (broadcast over rows).
fn reader() -> Graph {
    let mut g = Graph::new("reader");
    let cache = g.param("cache", f32s(&[4, 2]));
    let w = g.param("w", f32s(&[2]));
    let x = g.input("x", f32s(&[1]));
    let y = g.mul(cache, w);
    let y = g.mul(y, x);
    g.set_outputs(vec![y]);
    g
}

fn compile(g: Graph) -> CompiledGraph {
    Session::new(Device::Cpu).compile(g).unwrap()
}

fn write(c: &mut CompiledGraph, pos: i64, row: [f32; 2]) -> Vec<f32> {
    let row = HostTensor::from_f32(&[1, 2], &row).unwrap();
    let pos = HostTensor::from_i64(&[], DType::I32, &[pos]).unwrap();
    c.run_tensors(&[("row", &row), ("pos", &pos)]).unwrap()[0].to_f32_vec().unwrap()
}

fn read(c: &mut CompiledGraph) -> Vec<f32> {
    c.run(&[("x", &[1.0])]).unwrap().remove(0)
}

#[test]
fn a_state_written_by_one_graph_is_read_by_the_other() {
    let mut a = compile(writer());
    a.set_param("cache", &[0.0; 8]).unwrap();
    a.set_param("w", &[1.0, 10.0]).unwrap();
    let mut b = compile(reader());
    b.share_params_from(&a, &["cache", "w"]).unwrap();
    write(&mut a, 1, [1.0, 2.0]);
    assert_eq!(read(&mut b), vec![0.0, 0.0, 1.0, 20.0, 0.0, 0.0, 0.0, 0.0]);
    write(&mut a, 3, [3.0, 4.0]);
    assert_eq!(read(&mut b), vec![0.0, 0.0, 1.0, 20.0, 0.0, 0.0, 3.0, 40.0]);
    // set_param through either graph writes the one buffer.
    b.set_param("w", &[2.0, 2.0]).unwrap();
    assert_eq!(write(&mut a, 0, [1.0, 1.0]), vec![2.0 * 5.0, 2.0 * 7.0]);
    b.set_param("cache", &[1.0; 8]).unwrap();
    assert_eq!(a.get_param("cache").unwrap().to_f32_vec().unwrap(), vec![1.0; 8]);
    assert_eq!(write(&mut a, 2, [0.0, 0.0]), vec![2.0 * 3.0, 2.0 * 3.0]);
    assert_eq!(b.get_param("cache").unwrap().to_f32_vec().unwrap(), vec![1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]);
}

#[test]
fn sharing_checks_names_types_and_that_the_source_was_set() {
    let a = compile(writer());
    let mut b = compile(reader());
    // Not set in the source yet.
    assert!(b.share_params_from(&a, &["w"]).unwrap_err().to_string().contains("w"));
    let mut a = a;
    a.set_param("w", &[1.0, 1.0]).unwrap();
    b.share_params_from(&a, &["w"]).unwrap();
    assert!(b.share_params_from(&a, &["nope"]).is_err());
    // Same name, other shape or dtype.
    let mut g = Graph::new("other");
    let w = g.param("w", f32s(&[3]));
    g.set_outputs(vec![w]);
    let mut c = compile(g);
    let e = c.share_params_from(&a, &["w"]).unwrap_err().to_string();
    assert!(e.contains("f32[3]") || e.contains("[3]"), "{e}");
    let mut g = Graph::new("other-dtype");
    let w = g.param("w", Shape::new(&[2], DType::F16));
    g.set_outputs(vec![w]);
    let mut d = compile(g);
    assert!(matches!(d.share_params_from(&a, &["w"]), Err(rlx_ir::Error::DTypeMismatch { .. })));
}

#[test]
fn external_bytes_are_read_without_a_copy_and_never_written() {
    let owner: Vec<u8> = [0.5f32, 1.5, 2.5, 3.5].iter().flat_map(|x| x.to_le_bytes()).collect();
    let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(owner);
    let mut a = compile(writer());
    a.set_param("cache", &[0.0; 8]).unwrap();
    a.bind_param_external("w", owner.clone(), 8..16, DType::F32).unwrap();
    assert_eq!(write(&mut a, 0, [1.0, 1.0]), vec![2.5, 3.5]);
    assert!(a.set_param("w", &[1.0, 1.0]).is_err());
    assert!(a.bind_param_external("w", owner.clone(), 0..4, DType::F32).is_err());
    assert!(a.bind_param_external("w", owner.clone(), 0..8, DType::I32).is_err());
    // Bytes not aligned for f32 are refused with the offset named (kernels read typed slices).
    let odd: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(vec![0u8; 16]);
    let e = a.bind_param_external("w", odd, 1..9, DType::F32).unwrap_err().to_string();
    assert!(e.contains("offset 1") && e.contains("aligned"), "{e}");
    // The cache is written by the graph: read-only bytes are refused.
    let long: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(vec![0u8; 32]);
    assert!(a.bind_param_external("cache", long, 0..32, DType::F32).is_err());
    // A read-only weight can still be shared.
    let mut b = compile(reader());
    b.share_params_from(&a, &["w", "cache"]).unwrap();
    assert_eq!(read(&mut b)[..2], [2.5, 3.5]);
}

#[test]
fn graphs_sharing_a_state_on_two_threads_never_lose_an_update() {
    // c <- c + 1 in both graphs; their runs are serialized by the shared lock.
    let counter = || {
        let mut g = Graph::new("counter");
        let c = g.param("c", f32s(&[64]));
        let x = g.input("x", f32s(&[64]));
        let n = g.add(c, x);
        g.update_param(c, n);
        g.set_outputs(vec![n]);
        g
    };
    let mut a = compile(counter());
    a.set_param("c", &[0.0; 64]).unwrap();
    let mut b = compile(counter());
    b.share_params_from(&a, &["c"]).unwrap();
    let n = 2000;
    let spin = move |mut g: CompiledGraph| {
        std::thread::spawn(move || {
            for _ in 0..n {
                g.run(&[("x", &[1.0; 64])]).unwrap();
            }
            g
        })
    };
    let (ta, tb) = (spin(a), spin(b));
    let (a, _b) = (ta.join().unwrap(), tb.join().unwrap());
    assert_eq!(a.get_param("c").unwrap().to_f32_vec().unwrap(), vec![2.0 * n as f32; 64]);
}

#[test]
fn a_graph_joins_one_sharing_group_only() {
    let mut a = compile(writer());
    a.set_param("cache", &[0.0; 8]).unwrap();
    a.set_param("w", &[1.0, 1.0]).unwrap();
    let mut c = compile(writer());
    c.set_param("cache", &[0.0; 8]).unwrap();
    c.set_param("w", &[1.0, 1.0]).unwrap();
    // b joins a's group; then c joins b's; b cannot then take from c's old group.
    let mut b = compile(reader());
    b.share_params_from(&a, &["cache"]).unwrap();
    let mut d = compile(reader());
    d.share_params_from(&c, &["cache"]).unwrap();
    assert!(b.share_params_from(&c, &["w"]).is_err());
    // Within one group, any number of graphs share.
    b.share_params_from(&a, &["w"]).unwrap();
    assert_eq!(read(&mut b), vec![0.0; 8]);
}
