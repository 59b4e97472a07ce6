//! `run` on the CPU performs no heap allocation once compiled and warm: a counting allocator
//! sees none on any thread, pool workers included.

use rlx_driver::alloc_count::{CountingAllocator, count};
use rlx_ir::ops::quant::packed;
use rlx_ir::{DType, Graph, HostTensor, QuantScheme, Shape};

// Counts allocations on every thread (pool workers included) while runs are measured. The file
// runs without libtest (`harness = false`): libtest's main thread records the running test in a
// map after spawning it and, on a loaded machine, did so during a measured run (a CI failure).
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

/// Allocations on any thread during five runs after two warm-up runs.
fn allocs_during_run(g: &Graph, params: &[HostTensor], inputs: &[HostTensor]) -> usize {
    let cpu = rlx_cpu::CpuBackend::new();
    let (legal, _) = rlx_driver::legalize(g, &cpu).unwrap();
    let mut exe = rlx_driver::compile_graph(&cpu, &legal).unwrap();
    for (i, p) in params.iter().enumerate() {
        exe.set_param(i, &p.to_bytes()).unwrap();
    }
    let ins: Vec<Vec<u8>> = inputs.iter().map(|t| t.to_bytes()).collect();
    let in_refs: Vec<&[u8]> = ins.iter().map(|b| b.as_slice()).collect();
    let mut outs: Vec<Vec<u8>> =
        legal.outputs().iter().map(|&o| vec![0; legal.shape(o).unwrap().size_bytes().unwrap()]).collect();
    let mut out_refs: Vec<&mut [u8]> = outs.iter_mut().map(|b| b.as_mut_slice()).collect();
    // Two warm-up runs: a param's packed copy is made on the run that first sees its version.
    for _ in 0..2 {
        exe.run(&in_refs, &mut out_refs).unwrap();
    }
    count(|| {
        for _ in 0..5 {
            exe.run(&in_refs, &mut out_refs).unwrap();
        }
    })
}

fn elementwise_reduce_softmax_gather_topk() {
    let mut g = Graph::new("no-alloc");
    let x = g.input("x", Shape::new(&[4, 8], DType::F32));
    let ids = g.input("ids", Shape::new(&[3], DType::I64));
    let table = g.param("table", Shape::new(&[10, 8], DType::F32));
    let e = g.gather(table, ids, 0);
    let s = g.softmax(x, -1);
    let m = g.mean(s, &[0], true);
    let t = g.transpose(x, &[1, 0]);
    let (v, _) = g.topk(x, 3);
    let c = g.cumsum(x, 1);
    let y = g.add(e, m);
    g.set_outputs(vec![y, t, v, c]);
    let table_v = HostTensor::from_f32(&[10, 8], &(0..80).map(|i| i as f32 * 0.1).collect::<Vec<_>>()).unwrap();
    let x_v = HostTensor::from_f32(&[4, 8], &(0..32).map(|i| (i as f32).sin()).collect::<Vec<_>>()).unwrap();
    let ids_v = HostTensor::from_i64(&[3], DType::I64, &[1, 9, 4]).unwrap();
    assert_eq!(allocs_during_run(&g, &[table_v], &[x_v, ids_v]), 0);
}

/// The four transforms, batched lanes split across the pool (scratch per task made at compile).
fn fft_family() {
    use rlx_ir::ops::FftNorm;
    let mut g = Graph::new("fft");
    let x = g.input("x", Shape::new(&[64, 1000], DType::F32));
    let r = g.rfft(x, None, FftNorm::Ortho);
    let c = g.fft(r, None, FftNorm::Backward);
    let i = g.ifft(c, None, FftNorm::Forward);
    let y = g.irfft(i, Some(1000), FftNorm::Backward);
    g.set_outputs(vec![y]);
    let v: Vec<f32> = (0..64_000).map(|k| (k as f32 * 0.37).sin()).collect();
    let x_v = HostTensor::from_f32(&[64, 1000], &v).unwrap();
    assert_eq!(allocs_during_run(&g, &[], &[x_v]), 0);
}

fn small_matmul() {
    let mut g = Graph::new("mm");
    let a = g.input("a", Shape::new(&[2, 16, 32], DType::F32));
    let b = g.param("b", Shape::new(&[32, 24], DType::F32));
    let y = g.matmul(a, b);
    g.set_outputs(vec![y]);
    let b_v = HostTensor::from_f32(&[32, 24], &vec![0.5; 32 * 24]).unwrap();
    let a_v = HostTensor::from_f32(&[2, 16, 32], &vec![0.25; 2 * 16 * 32]).unwrap();
    assert_eq!(allocs_during_run(&g, &[b_v], &[a_v]), 0);
}

fn threaded_matmul() {
    let mut g = Graph::new("mm-big");
    let a = g.input("a", Shape::new(&[64, 256], DType::F32));
    let b = g.param("b", Shape::new(&[256, 192], DType::F32));
    let y = g.matmul(a, b);
    g.set_outputs(vec![y]);
    let b_v = HostTensor::from_f32(&[256, 192], &vec![0.5; 256 * 192]).unwrap();
    let a_v = HostTensor::from_f32(&[64, 256], &vec![0.25; 64 * 256]).unwrap();
    assert_eq!(allocs_during_run(&g, &[b_v], &[a_v]), 0);
}

/// Two runtime inputs with many rows (4 KiB rows in A): B is packed by the task grid's first
/// row tiles (`gemm::grid`), into the whole-B buffer and per-thread private panels.
fn matmul_of_two_inputs_packs_b_in_its_tasks() {
    let mut g = Graph::new("mm-inputs");
    let a = g.input("a", Shape::new(&[400, 1024], DType::F32));
    let b = g.input("b", Shape::new(&[1024, 200], DType::F32));
    let y = g.matmul(a, b);
    g.set_outputs(vec![y]);
    let a_v = HostTensor::from_f32(&[400, 1024], &vec![0.25; 400 * 1024]).unwrap();
    let b_v = HostTensor::from_f32(&[1024, 200], &vec![0.5; 1024 * 200]).unwrap();
    assert_eq!(allocs_during_run(&g, &[], &[a_v, b_v]), 0);
}

/// Quantized matmul (decode and prefill) and dequantize: the activation scratch is allocated
/// when the kernel is built.
fn quantized_matmul_and_dequantize() {
    for (s, m, k) in [(QuantScheme::Q4_K, 1, 512), (QuantScheme::Q6_K, 7, 256), (QuantScheme::Q8_0, 5, 128)] {
        let n = 100;
        let mut g = Graph::new("q");
        let x = g.input("x", Shape::new(&[m, k], DType::F32));
        let w = g.param("w", Shape::new(&[n, s.row_bytes(k).unwrap()], DType::U8));
        let y = g.qmatmul(x, w, s, k);
        let d = g.dequantize(w, s, k);
        g.set_outputs(vec![y, d]);
        let x_v = HostTensor::from_f32(&[m, k], &vec![0.3; m * k]).unwrap();
        assert_eq!(allocs_during_run(&g, &[packed(s, &[n], k, 1)], &[x_v]), 0, "{s} m={m}");
    }
}

/// A residual add fused into layer_norm (`fused_norm`), on enough rows to use the pool.
fn fused_norm_prologue() {
    use rlx_ir::ops::{BinaryKind, Fused, FusedNorm, Instr, NormKind};
    let (rows, n) = (128, 384);
    let mut g = Graph::new("fused-norm");
    let x = g.input("x", Shape::new(&[rows, n], DType::F32));
    let r = g.input("r", Shape::new(&[rows, n], DType::F32));
    let gamma = g.param("gamma", Shape::new(&[n], DType::F32));
    let beta = g.param("beta", Shape::new(&[n], DType::F32));
    let prologue = Fused { program: vec![Instr::Input(0), Instr::Input(1), Instr::Binary(BinaryKind::Add, 0, 1)] };
    let y = g.add_node(FusedNorm { prologue, norm: NormKind::LayerNorm, eps: 1e-5 }, &[x, r, gamma, beta]);
    g.set_outputs(vec![y]);
    let v =
        |len: usize, k: f32| HostTensor::from_f32(&[len], &(0..len).map(|i| (i as f32 * k).sin()).collect::<Vec<_>>());
    let xs = HostTensor::from_f32(&[rows, n], &(0..rows * n).map(|i| (i as f32 * 0.1).sin()).collect::<Vec<_>>());
    let rs = HostTensor::from_f32(&[rows, n], &(0..rows * n).map(|i| (i as f32 * 0.3).cos()).collect::<Vec<_>>());
    let params = [v(n, 0.2).unwrap(), v(n, 0.7).unwrap()];
    assert_eq!(allocs_during_run(&g, &params, &[xs.unwrap(), rs.unwrap()]), 0);
}

/// Q/K/V as one stacked matmul over param weights, on enough rows to use the pool.
fn stacked_matmul_of_params() {
    let (m, k, n) = (128, 64, 48);
    let mut g = Graph::new("stacked");
    let x = g.input("x", Shape::new(&[m, k], DType::F32));
    let ws: Vec<_> = (0..3).map(|i| g.param(&format!("w{i}"), Shape::new(&[k, n], DType::F32))).collect();
    let y = g.stacked_matmul(x, &ws, false);
    g.set_outputs(vec![y]);
    let w = |c: f32| HostTensor::from_f32(&[k, n], &(0..k * n).map(|i| (i as f32 * c).sin()).collect::<Vec<_>>());
    let params = [w(0.1).unwrap(), w(0.2).unwrap(), w(0.3).unwrap()];
    let xs = HostTensor::from_f32(&[m, k], &vec![0.25; m * k]).unwrap();
    assert_eq!(allocs_during_run(&g, &params, &[xs]), 0);
}

/// SwiGLU as one combining stacked matmul over param weights: prefill rows (pool tasks with
/// tiles) and a decode row.
fn combined_swiglu_of_params() {
    use rlx_ir::ops::{BinaryKind, Fused, Instr, StackedMatMul, UnaryKind};
    let (k, n) = (64, 80);
    for m in [96, 1] {
        let mut g = Graph::new("swiglu");
        let x = g.input("x", Shape::new(&[m, k], DType::F32));
        let ws: Vec<_> = (0..2).map(|i| g.param(&format!("w{i}"), Shape::new(&[n, k], DType::F32))).collect();
        let program = vec![
            Instr::Input(0),
            Instr::Unary(UnaryKind::Silu, 0),
            Instr::Input(1),
            Instr::Binary(BinaryKind::Mul, 1, 2),
        ];
        let op = StackedMatMul { groups: 2, transpose_b: true, epilogue: Some(Fused { program }), combine: true };
        let y = g.add_node(op, &[x, ws[0], ws[1]]);
        g.set_outputs(vec![y]);
        let w = |c: f32| HostTensor::from_f32(&[n, k], &(0..k * n).map(|i| (i as f32 * c).sin()).collect::<Vec<_>>());
        let xs = HostTensor::from_f32(&[m, k], &vec![0.25; m * k]).unwrap();
        assert_eq!(allocs_during_run(&g, &[w(0.1).unwrap(), w(0.2).unwrap()], &[xs]), 0, "{m} rows");
    }
}

/// The fused softmax cross-entropy loss and a reduction with an elementwise prologue.
fn cross_entropy_and_fused_reduce() {
    use rlx_ir::ops::{BinaryKind, Fused, FusedReduce, Instr, Reduce, ReduceKind};
    let (rows, classes) = (256, 65);
    let mut g = Graph::new("loss");
    let x = g.input("x", Shape::new(&[rows, classes], DType::F32));
    let labels = g.input("labels", Shape::new(&[rows], DType::I64));
    let loss = g.softmax_cross_entropy(x, labels);
    let prologue = Fused { program: vec![Instr::Input(0), Instr::Binary(BinaryKind::Mul, 0, 0)] };
    let reduce = Reduce { kind: ReduceKind::Mean, axes: vec![-1], keep_dims: false };
    let ms = g.add_node(FusedReduce { prologue, reduce }, &[x]);
    g.set_outputs(vec![loss, ms]);
    let xs = HostTensor::from_f32(
        &[rows, classes],
        &(0..rows * classes).map(|i| (i as f32 * 0.1).sin()).collect::<Vec<_>>(),
    );
    let ys = HostTensor::from_i64(&[rows], DType::I64, &(0..rows as i64).map(|i| i % 65).collect::<Vec<_>>());
    assert_eq!(allocs_during_run(&g, &[], &[xs.unwrap(), ys.unwrap()]), 0);
}

/// f16/bf16 matmuls (B a param): the threaded packed GEMM, the matvec (m = 1), a batch split one
/// batch per pool task, and a broadcast param B.
fn half_matmuls() {
    for dt in [DType::F16, DType::BF16] {
        for (ad, bd) in [
            (&[96, 256][..], &[256, 192][..]),
            (&[1, 512][..], &[512, 300][..]),
            (&[16, 64, 32][..], &[16, 32, 64][..]),
            (&[2, 128, 300][..], &[300, 200][..]),
        ] {
            let mut g = Graph::new("half-mm");
            let a = g.input("a", Shape::new(ad, dt));
            let b = g.param("b", Shape::new(bd, dt));
            let y = g.matmul(a, b);
            g.set_outputs(vec![y]);
            let t = |d: &[usize]| {
                let v: Vec<f64> = (0..d.iter().product()).map(|i| ((i * 7 % 13) as f64 - 6.0) / 8.0).collect();
                HostTensor::from_f64(d, dt, &v).unwrap()
            };
            assert_eq!(allocs_during_run(&g, &[t(bd)], &[t(ad)]), 0, "{dt} {ad:?} x {bd:?}");
        }
    }
}

/// The f16/bf16 kernels that compute in f32 (stack chunks, scratch made at build time): casts,
/// unary and broadcast binary ops, a fused region, a fused matmul epilogue on the GEMM's tiles,
/// a fused reduction and norm, and a column sum.
fn half_elementwise_fused_and_reductions() {
    use rlx_ir::ops::{
        BinaryKind, Fused, FusedMatMul, FusedNorm, FusedReduce, Instr, MatMul, NormKind, Reduce, ReduceKind, UnaryKind,
    };
    for dt in [DType::F16, DType::BF16] {
        let (m, k, n) = (96, 64, 200);
        let mut g = Graph::new("half-ew");
        let x32 = g.input("x", Shape::new(&[m, k], DType::F32));
        let w = g.param("w", Shape::new(&[k, n], dt));
        let bias = g.param("bias", Shape::new(&[n], dt));
        let x = g.cast(x32, dt);
        let epi = Fused {
            program: vec![
                Instr::Input(0),
                Instr::Input(1),
                Instr::Binary(BinaryKind::Add, 0, 1),
                Instr::Unary(UnaryKind::GeluTanh, 2),
            ],
        };
        let h = g.add_node(FusedMatMul { matmul: MatMul::default(), epilogue: epi }, &[x, w, bias]);
        let e = g.unary(UnaryKind::Exp, h);
        let s = g.binary(BinaryKind::Mul, e, bias);
        let region = Fused {
            program: vec![
                Instr::Input(0),
                Instr::Input(1),
                Instr::Binary(BinaryKind::Sub, 0, 1),
                Instr::Unary(UnaryKind::Silu, 2),
            ],
        };
        let f = g.add_node(region.clone(), &[s, h]);
        let red = Reduce { kind: ReduceKind::Sum, axes: vec![-1], keep_dims: true };
        let fr = g.add_node(FusedReduce { prologue: region.clone(), reduce: red }, &[f, h]);
        let fnorm = g.add_node(FusedNorm { prologue: region, norm: NormKind::RmsNorm, eps: 1e-5 }, &[f, h, bias]);
        let col = g.sum(f, &[0], false);
        let out = g.cast(f, DType::F32);
        g.set_outputs(vec![out, fr, fnorm, col]);
        let t = |d: &[usize], dt: DType| {
            let v: Vec<f64> = (0..d.iter().product()).map(|i| ((i * 7 % 13) as f64 - 6.0) / 8.0).collect();
            HostTensor::from_f64(d, dt, &v).unwrap()
        };
        assert_eq!(allocs_during_run(&g, &[t(&[k, n], dt), t(&[n], dt)], &[t(&[m, k], DType::F32)]), 0, "{dt}");
    }
}

/// Attention (grouped-query heads; causal, sliding-window and unmasked; prefill rows over the
/// pool and one decode row; f32 and half precision, whose Q/K/V are widened into the arena),
/// with rope on the queries and layer and RMS norms around it.
fn attention_rope_and_norms() {
    use rlx_ir::ops::MaskKind;
    let (heads, kv_heads, d) = (8, 2, 64);
    for (dt, s, t, mask) in [
        (DType::F32, 256, 256, MaskKind::Causal),
        (DType::F32, 96, 96, MaskKind::SlidingWindow(32)),
        (DType::F32, 1, 300, MaskKind::None),
        (DType::F16, 128, 128, MaskKind::Causal),
        (DType::BF16, 1, 200, MaskKind::Causal),
    ] {
        let mut g = Graph::new("attn");
        let q = g.input("q", Shape::new(&[1, heads, s, d], dt));
        let k = g.input("k", Shape::new(&[1, kv_heads, t, d], dt));
        let v = g.input("v", Shape::new(&[1, kv_heads, t, d], dt));
        let pos = g.input("pos", Shape::new(&[s], DType::I64));
        let gamma = g.param("gamma", Shape::new(&[d], dt));
        let beta = g.param("beta", Shape::new(&[d], dt));
        let qn = g.rms_norm(q, gamma, 1e-6);
        let qr = g.rope(qn, pos, 10000.0);
        let a = g.attention(qr, k, v, mask, 0.125);
        let y = g.layer_norm(a, gamma, beta, 1e-5);
        g.set_outputs(vec![y]);
        let t_ = |dims: &[usize], c: f64| {
            let vals: Vec<f64> = (0..dims.iter().product()).map(|i| (i as f64 * c).sin()).collect();
            HostTensor::from_f64(dims, dt, &vals).unwrap()
        };
        let positions: Vec<i64> = (0..s as i64).map(|i| i + (t - s) as i64).collect();
        let ins = [
            t_(&[1, heads, s, d], 0.37),
            t_(&[1, kv_heads, t, d], 0.11),
            t_(&[1, kv_heads, t, d], 0.23),
            HostTensor::from_i64(&[s], DType::I64, &positions).unwrap(),
        ];
        let params = [t_(&[d], 0.5), t_(&[d], 0.9)];
        assert_eq!(allocs_during_run(&g, &params, &ins), 0, "{dt} s {s} t {t} {mask:?}");
    }
}

/// Loops: a scan whose carry and stacked outputs are both used (one loop, two nodes), a
/// while_loop and a cond; trips allocate nothing.
fn loops() {
    let s = |d: &[usize]| Shape::new(d, DType::F32);
    let mut body = Graph::new("step");
    let h = body.input("h", s(&[4, 8]));
    let x = body.input("x", s(&[4, 8]));
    let w = body.input("w", s(&[8, 8]));
    let a = body.matmul(h, w);
    let a = body.add(a, x);
    let hn = body.tanh(a);
    body.set_outputs(vec![hn, hn]);
    let mut c = Graph::new("cond");
    let cx = c.input("x", s(&[4, 8]));
    let t = c.sum_all(cx);
    let lim = c.scalar(100.0, DType::F32);
    let go = c.lt(t, lim);
    c.set_outputs(vec![go]);
    let mut b = Graph::new("double");
    let bx = b.input("x", s(&[4, 8]));
    let two = b.scalar(2.0, DType::F32);
    let y = b.mul(bx, two);
    b.set_outputs(vec![y]);
    let mut then = Graph::new("then");
    let tx = then.input("x", s(&[4, 8]));
    let ty = then.exp(tx);
    then.set_outputs(vec![ty]);
    let mut other = Graph::new("else");
    let ex = other.input("x", s(&[4, 8]));
    let ey = other.neg(ex);
    other.set_outputs(vec![ey]);
    let mut g = Graph::new("loops");
    let h0 = g.input("h0", s(&[4, 8]));
    let xs = g.input("xs", s(&[16, 4, 8]));
    let p = g.input("p", Shape::new(&[], DType::Bool));
    let w = g.param("w", s(&[8, 8]));
    let (last, hs) = g.scan(body, h0, xs, &[w]);
    let one = g.full(s(&[4, 8]), 1.0);
    let start = g.add(last, one);
    let wl = g.while_loop(c, b, start, &[], usize::MAX);
    let br = g.cond(p, then, other, &[last]);
    g.set_outputs(vec![hs, wl, br]);
    let w_v =
        HostTensor::from_f32(&[8, 8], &(0..64).map(|i| (i as f32 * 0.1).sin() * 0.3).collect::<Vec<_>>()).unwrap();
    let h_v = HostTensor::from_f32(&[4, 8], &[0.1; 32]).unwrap();
    let xs_v = HostTensor::from_f32(&[16, 4, 8], &(0..512).map(|i| (i as f32).cos()).collect::<Vec<_>>()).unwrap();
    let p_v = HostTensor::from_bool(&[], &[true]).unwrap();
    assert_eq!(allocs_during_run(&g, &[w_v], &[h_v, xs_v, p_v]), 0);
}

fn main() {
    loops();
    half_elementwise_fused_and_reductions();
    half_matmuls();
    stacked_matmul_of_params();
    combined_swiglu_of_params();
    cross_entropy_and_fused_reduce();
    fused_norm_prologue();
    elementwise_reduce_softmax_gather_topk();
    small_matmul();
    fft_family();
    threaded_matmul();
    matmul_of_two_inputs_packs_b_in_its_tasks();
    quantized_matmul_and_dequantize();
    attention_rope_and_norms();
    println!("zero_alloc: warm runs allocate nothing");
}
