//! `run_into` allocates nothing for graphs whose params (a KV-cache-like state and a weight)
//! are shared with another graph: the shared lock and version counters cost no allocation.

use rlx_driver::Device;
use rlx_driver::alloc_count::{CountingAllocator, count};
use rlx_ir::{DType, Graph, Shape};
use rlx_runtime::Session;

// The file runs without libtest (`harness = false`), whose main thread could allocate (record the
// running test) while runs are counted, on a loaded machine.
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

/// `cache[pos] = row`, output `sum(cache, 0) * w`.
fn graph(rows: usize) -> Graph {
    let mut g = Graph::new("cache");
    let cache = g.param("cache", Shape::new(&[8, 4], DType::F32));
    let w = g.param("w", Shape::new(&[4], DType::F32));
    let row = g.input("row", Shape::new(&[rows, 4], DType::F32));
    let pos = g.input("pos", Shape::scalar(DType::I32));
    let new = g.dynamic_update_slice(cache, row, pos, 0);
    g.update_param(cache, new);
    let s = g.sum(new, &[0], false);
    let y = g.mul(s, w);
    g.set_outputs(vec![y]);
    g
}

fn main() {
    shared_param_runs_allocate_nothing();
    println!("zero_alloc_shared: shared-param runs allocate nothing");
}

fn shared_param_runs_allocate_nothing() {
    let s = Session::new(Device::Cpu);
    let mut prefill = s.compile(graph(3)).unwrap();
    prefill.set_param("cache", &[0.0; 32]).unwrap();
    prefill.set_param("w", &[1.0; 4]).unwrap();
    let mut decode = s.compile(graph(1)).unwrap();
    decode.share_params_from(&prefill, &["cache", "w"]).unwrap();
    let rows: Vec<u8> = [1.0f32; 12].iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = vec![0u8; 16];
    prefill.run_into(&[&rows, &0i32.to_le_bytes()], &mut [&mut out]).unwrap();
    let row = &rows[..16];
    decode.run_into(&[row, &3i32.to_le_bytes()], &mut [&mut out]).unwrap();
    let n = count(|| {
        for p in 4..8i32 {
            decode.run_into(&[row, &p.to_le_bytes()], &mut [&mut out]).unwrap();
        }
    });
    assert_eq!(n, 0);
    // Three prefill rows and five decode rows of ones: every cache row is 1.
    let sums: Vec<f32> = out.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(sums, vec![8.0; 4]);
}
