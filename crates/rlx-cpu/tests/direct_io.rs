//! Inputs read from the caller's bytes and outputs written straight into them (no copy through
//! the arena) give the reference interpreter's values in every case where that could go wrong:
//! an output a later step reads, one node given twice as an output, an output that is a view of
//! an input or an input itself, an input whose bytes the plan reuses, and caller
//! buffers too misaligned to be used in place (copied instead).

use rlx_driver::legalize;
use rlx_ir::{DType, Graph, HostTensor, Shape, interp};

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n).map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) % 1000).map(|v| v as f32 / 250.0 - 2.0).collect()
}

/// Runs `g` on the CPU with the inputs at byte offset `shift` in their buffers (and outputs at
/// the same offset), twice, and checks every output against the reference interpreter.
fn check(g: &Graph, shift: usize) {
    let cpu = rlx_cpu::CpuBackend::new();
    let (legal, _) = legalize(g, &cpu).unwrap();
    let mut exe = rlx_driver::compile_graph(&cpu, &legal).unwrap();
    let feeds: Vec<(String, Vec<f32>)> = g
        .inputs()
        .iter()
        .enumerate()
        .map(|(k, &(id, name))| {
            let n = g.nodes()[id.index()].ty.numel().unwrap();
            (name.to_string(), values(n, k as u32 + 7))
        })
        .collect();
    let tensors: Vec<(&str, HostTensor)> = feeds
        .iter()
        .zip(g.inputs())
        .map(|((name, v), (id, _))| {
            let dims = g.nodes()[id.index()].ty.fixed_dims().unwrap();
            (name.as_str(), HostTensor::from_f32(&dims, v).unwrap())
        })
        .collect();
    let want = interp::evaluate(g, &tensors).unwrap();
    // Buffers with `shift` spare bytes in front, so the data start is as aligned as asked.
    let mut in_bufs: Vec<Vec<u8>> = feeds
        .iter()
        .map(|(_, v)| [vec![0u8; shift], v.iter().flat_map(|x| x.to_le_bytes()).collect()].concat())
        .collect();
    let sizes: Vec<usize> = g.outputs().iter().map(|o| g.nodes()[o.index()].ty.size_bytes().unwrap()).collect();
    for run in 0..2 {
        let mut out_bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0xAB; n + shift]).collect();
        let ins: Vec<&[u8]> = in_bufs.iter().map(|b| &b[shift..]).collect();
        let mut outs: Vec<&mut [u8]> = out_bufs.iter_mut().map(|b| &mut b[shift..]).collect();
        exe.run(&ins, &mut outs).unwrap();
        for (o, (got, want)) in out_bufs.iter().zip(&want).enumerate() {
            let got: Vec<f32> =
                got[shift..].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
            let want = want.to_f32_vec().unwrap();
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "{} shift {shift} run {run} output {o}[{i}]: {a} vs {b}",
                    g.name()
                );
            }
        }
        // The caller's inputs are never written.
        for (b, (_, v)) in in_bufs.iter_mut().zip(&feeds) {
            let now: Vec<f32> = b[shift..].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
            assert_eq!(&now, v, "{}: an input buffer changed", g.name());
        }
    }
}

fn graphs() -> Vec<Graph> {
    let s = |d: &[usize]| Shape::new(d, DType::F32);
    let mut out = vec![];

    // An output that a later step reads, and the same node given twice.
    let mut g = Graph::new("read_after");
    let x = g.input("x", s(&[64, 32]));
    let w = g.input("w", s(&[32, 48]));
    let y = g.matmul(x, w);
    let r = g.relu(y);
    let z = g.mul(r, r);
    g.set_outputs(vec![y, z, y]);
    out.push(g);

    // Outputs that are views of an input, and an input itself.
    let mut g = Graph::new("views");
    let x = g.input("x", s(&[16, 24]));
    let v = g.reshape(x, &[24, 16]);
    let e = g.exp(x);
    g.set_outputs(vec![v, e, x]);
    out.push(g);

    // An input dead after the first step, so the plan may give its bytes to later values; and
    // an elementwise chain the plan runs in place.
    let mut g = Graph::new("reuse");
    let x = g.input("x", s(&[128, 64]));
    let a = g.exp(x);
    let b = g.tanh(a);
    let c = g.sigmoid(b);
    let d = g.add(c, b);
    let sm = g.softmax(d, -1);
    g.set_outputs(vec![sm]);
    out.push(g);

    // A reduction's output and a broadcast reading it.
    let mut g = Graph::new("reduce");
    let x = g.input("x", s(&[32, 40]));
    let m = g.sum(x, &[1], true);
    let y = g.sub(x, m);
    g.set_outputs(vec![m, y]);
    out.push(g);
    out
}

#[test]
fn direct_inputs_and_outputs_match_the_reference_when_aligned_and_when_not() {
    for g in graphs() {
        for shift in [0, 16, 4] {
            check(&g, shift);
        }
    }
}
