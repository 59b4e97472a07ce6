//! A compiled quantized matmul (decode and prefill) and dequantize allocate nothing per run,
//! on any thread: the activation scratch is allocated when the kernel is built.

use rlx_driver::Backend;
use rlx_ir::ops::quant::packed;
use rlx_ir::{DType, Graph, HostTensor, QuantScheme, Shape};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static COUNTING: AtomicBool = AtomicBool::new(false);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::SeqCst) {
            ALLOCS.fetch_add(1, Ordering::SeqCst);
        }
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn quantized_runs_allocate_nothing() {
    let cpu = rlx_cpu::CpuBackend::new();
    for (s, m, k) in [(QuantScheme::Q4_K, 1, 512), (QuantScheme::Q6_K, 7, 256), (QuantScheme::Q8_0, 5, 128)] {
        let n = 100;
        let mut g = Graph::new("q");
        let x = g.input("x", Shape::new(&[m, k], DType::F32));
        let w = g.param("w", Shape::new(&[n, s.row_bytes(k).unwrap()], DType::U8));
        let y = g.qmatmul(x, w, s, k);
        let d = g.dequantize(w, s, k);
        g.set_outputs(vec![y, d]);
        let (legal, _) = rlx_driver::legalize(&g, &cpu).unwrap();
        let mut exe = cpu.compile(&legal).unwrap();
        exe.set_param(0, &packed(s, &[n], k, 1).to_bytes()).unwrap();
        let xb = HostTensor::from_f32(&[m, k], &vec![0.3; m * k]).unwrap().to_bytes();
        let (mut yb, mut db) = (vec![0u8; m * n * 4], vec![0u8; n * k * 4]);
        exe.run(&[&xb], &mut [&mut yb, &mut db]).unwrap();
        let before = ALLOCS.load(Ordering::SeqCst);
        COUNTING.store(true, Ordering::SeqCst);
        for _ in 0..5 {
            exe.run(&[&xb], &mut [&mut yb, &mut db]).unwrap();
        }
        COUNTING.store(false, Ordering::SeqCst);
        assert_eq!(ALLOCS.load(Ordering::SeqCst) - before, 0, "{s} m={m}");
    }
}
