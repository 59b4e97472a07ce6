//! c64 on the CPU: complex arithmetic (with broadcasting) and casts, against the reference.

use rlx_ir::ops::{Binary, BinaryKind, Cast};
use rlx_ir::{DType, Data, HostTensor, Sample, Shape};

fn c64(dims: &[usize], v: &[[f64; 2]]) -> HostTensor {
    HostTensor::new(Shape::new(dims, DType::C64), Data::C(v.to_vec())).unwrap()
}

#[test]
fn complex_samples_match_reference() {
    let a = c64(&[2, 2], &[[1.0, 2.0], [-0.5, 0.25], [3.0, -1.0], [0.0, 1.0]]);
    let b = c64(&[2], &[[0.5, -1.5], [2.0, 0.75]]);
    let mut samples = vec![];
    for kind in [BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul, BinaryKind::Div] {
        samples.push(Sample::new(format!("{}/c64", kind.name()), Binary { kind }, vec![a.clone(), b.clone()]));
    }
    let f = HostTensor::from_f32(&[3], &[1.5, -2.0, 0.0]).unwrap();
    samples.push(Sample::new("cast/f32->c64", Cast { to: DType::C64 }, vec![f]));
    for to in [DType::F32, DType::F64, DType::I32, DType::Bool] {
        samples.push(Sample::new(format!("cast/c64->{to}"), Cast { to }, vec![a.clone()]));
    }
    let report =
        rlx_ir::testkit::run_samples(samples, |g, feeds| rlx_driver::run_host(&rlx_cpu::CpuBackend::new(), g, feeds));
    assert_eq!(report.passed.len(), 9);
    report.assert_all_pass();
}
