//! Warm f16/bf16 matmuls allocate nothing on any thread: the packed GEMM (threaded), the
//! matvec (m = 1), a param B packed once, and a batch split one batch per pool task.

use rlx_driver::Backend;
use rlx_ir::{DType, Graph, HostTensor, Shape};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
// The file holds a single #[test], so no other test allocates while runs are counted.
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

/// Allocations on any thread during five runs of `a @ b` (B a param) after two warm-up runs
/// (the second packs the param).
fn allocs(dt: DType, ad: &[usize], bd: &[usize]) -> usize {
    let mut g = Graph::new("half-mm");
    let a = g.input("a", Shape::new(ad, dt));
    let b = g.param("b", Shape::new(bd, dt));
    let y = g.matmul(a, b);
    g.set_outputs(vec![y]);
    let cpu = rlx_cpu::CpuBackend::new();
    let (legal, _) = rlx_driver::legalize(&g, &cpu).unwrap();
    let mut exe = cpu.compile(&legal).unwrap();
    let t = |d: &[usize]| {
        let v: Vec<f64> = (0..d.iter().product()).map(|i| ((i * 7 % 13) as f64 - 6.0) / 8.0).collect();
        HostTensor::from_f64(d, dt, &v).unwrap().to_bytes()
    };
    exe.set_param(0, &t(bd)).unwrap();
    let ins = t(ad);
    let mut out = vec![0u8; legal.shape(y).unwrap().size_bytes().unwrap()];
    for _ in 0..2 {
        exe.run(&[&ins], &mut [&mut out]).unwrap();
    }
    let before = ALLOCS.load(Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..5 {
        exe.run(&[&ins], &mut [&mut out]).unwrap();
    }
    COUNTING.store(false, Ordering::SeqCst);
    ALLOCS.load(Ordering::SeqCst) - before
}

#[test]
fn warm_half_matmuls_allocate_nothing() {
    for dt in [DType::F16, DType::BF16] {
        for (a, b) in [
            (&[96, 256][..], &[256, 192][..]),
            (&[1, 512][..], &[512, 300][..]),
            (&[16, 64, 32][..], &[16, 32, 64][..]),
            (&[2, 128, 300][..], &[300, 200][..]),
        ] {
            assert_eq!(allocs(dt, a, b), 0, "{dt} {a:?} x {b:?}");
        }
    }
}
