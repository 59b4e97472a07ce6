//! Quantized matmul on the CPU: the native kernel is used (not the decomposition), the arena
//! holds the weights packed, other dtypes fall back to the decomposition, and bad shapes error.

use rlx_cpu::CpuBackend;
use rlx_cpu::exec::CpuExecutable;
use rlx_cpu::kernels::{self, KernelCtx};
use rlx_driver::{legalize, run_host};
use rlx_ir::ops::quant::packed;
use rlx_ir::testkit::compare_within;
use rlx_ir::{DType, Graph, HostTensor, Node, Op, OpDef, QuantScheme, Shape, interp};

fn qmm_graph(s: QuantScheme, xd: &[usize], dt: DType, n: usize, k: usize) -> Graph {
    let mut g = Graph::new("qmm");
    let x = g.input("x", Shape::new(xd, dt));
    let w = g.input("w", Shape::new(&[n, s.row_bytes(k).unwrap()], DType::U8));
    let y = g.qmatmul(x, w, s, k);
    g.set_outputs(vec![y]);
    g
}

fn has_qmatmul(g: &Graph) -> bool {
    g.nodes().iter().any(|n| matches!(n.op, Op::QMatMul(_)))
}

#[test]
fn native_kernel_for_f32_and_decomposition_for_f64() {
    let cpu = CpuBackend::new();
    for s in [QuantScheme::Q4_0, QuantScheme::Q8_0, QuantScheme::Q4_K, QuantScheme::Q5_K, QuantScheme::Q6_K] {
        let k = 512;
        for dt in [DType::F32, DType::F64] {
            let g = qmm_graph(s, &[3, k], dt, 70, k);
            let (legal, _) = legalize(&g, &cpu).unwrap();
            assert_eq!(has_qmatmul(&legal), dt == DType::F32, "{s} {dt}");
            let x = HostTensor::from_f64(&[3, k], dt, &rlx_ir::ops::util::rand_f64(3 * k, -1.0, 1.0, 3)).unwrap();
            let feeds = [("x", x), ("w", packed(s, &[70], k, 4))];
            let want = interp::evaluate(&g, &feeds).unwrap();
            let got = run_host(&cpu, &g, &feeds).unwrap();
            // f32 goes through 8-bit activations; f64 through the exact decomposition.
            let tol = if dt == DType::F32 { rlx_ir::ops::QMatMul { scheme: s, k }.tolerance() } else { None };
            compare_within(&got[0], &want[0], tol).unwrap_or_else(|e| panic!("{s} {dt}: {e}"));
        }
    }
}

#[test]
fn other_schemes_run_exactly_through_the_generic_path() {
    // Q4_1 and IQ4_XS have no int8 path: one block at a time, f32 math (dtype tolerance).
    let cpu = CpuBackend::new();
    for name in ["Q4_1", "IQ4_XS", "Q3_K"] {
        let s = QuantScheme::from_name(name).unwrap();
        let (n, k) = (40, 256);
        let bytes: Vec<i64> = (0..n * s.row_bytes(k).unwrap()).map(|i| ((i * 131 + 7) % 251) as i64).collect();
        let mut w = HostTensor::from_i64(&[n, s.row_bytes(k).unwrap()], DType::U8, &bytes).unwrap();
        // Small finite f16 scales at the start of each block (0x3000 = 0.125).
        if let rlx_ir::Data::I(v) = &mut w.data {
            for b in v.chunks_exact_mut(s.block_bytes()) {
                let at = if name == "Q3_K" { s.block_bytes() - 2 } else { 0 };
                (b[at], b[at + 1]) = (0x00, 0x30);
                if name == "Q4_1" {
                    (b[2], b[3]) = (0x00, 0x30);
                }
            }
        }
        let g = qmm_graph(s, &[2, k], DType::F32, n, k);
        assert!(has_qmatmul(&legalize(&g, &cpu).unwrap().0));
        let x = HostTensor::from_f64(&[2, k], DType::F32, &rlx_ir::ops::util::rand_f64(2 * k, -1.0, 1.0, 5)).unwrap();
        let feeds = [("x", x), ("w", w)];
        let want = interp::evaluate(&g, &feeds).unwrap();
        let got = run_host(&cpu, &g, &feeds).unwrap();
        compare_within(&got[0], &want[0], Some((1e-3, 1e-4))).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn arena_holds_weights_packed() {
    let (n, k, s) = (1024, 2048, QuantScheme::Q4_K);
    let mut g = Graph::new("packed");
    let x = g.input("x", Shape::new(&[1, k], DType::F32));
    let w = g.param("w", Shape::new(&[n, s.row_bytes(k).unwrap()], DType::U8));
    let y = g.qmatmul(x, w, s, k);
    g.set_outputs(vec![y]);
    let table = kernels::table();
    let exe = CpuExecutable::new(&g, |ctx: &KernelCtx<'_>| {
        let node = Node { op: ctx.op.clone(), inputs: vec![], ty: ctx.out.clone() };
        let ins: Vec<&Shape> = ctx.ins.iter().collect();
        (table.lookup(&node, &ins).expect("qmatmul kernel").build)(ctx)
    })
    .unwrap();
    let packed_bytes = n * s.row_bytes(k).unwrap();
    assert!(exe.arena_bytes() < packed_bytes + 64 * 1024, "arena {} for {packed_bytes} packed", exe.arena_bytes());
    assert!(exe.arena_bytes() * 6 < n * k * 4);
}

#[test]
fn bad_shapes_are_clear_errors() {
    let mut g = Graph::new("bad");
    let x = g.input("x", Shape::new(&[1, 300], DType::F32));
    let w = g.input("w", Shape::new(&[4, 144], DType::U8));
    let e = g.try_add(rlx_ir::ops::QMatMul { scheme: QuantScheme::Q4_K, k: 300 }, &[x, w]).unwrap_err();
    assert!(e.to_string().contains("block size 256"), "{e}");
    let x = g.input("x2", Shape::new(&[1, 256], DType::F32));
    let e = g.try_add(rlx_ir::ops::QMatMul { scheme: QuantScheme::Q4_K, k: 256 }, &[x, x]).unwrap_err();
    assert!(e.to_string().contains("u8"), "{e}");
    let w = g.input("w2", Shape::new(&[4, 140], DType::U8));
    let e = g.try_add(rlx_ir::ops::QMatMul { scheme: QuantScheme::Q4_K, k: 256 }, &[x, w]).unwrap_err();
    assert!(e.to_string().contains("[..., n, 144]"), "{e}");
}
