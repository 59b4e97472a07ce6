//! `dequantize` of arbitrary block bytes on XLA against rlx-ir's reference. Quantizer output
//! (the conformance samples) leaves some bit patterns unused; random bytes set every bit of
//! every scale, min and quant field. The f16 scales are overwritten with finite values so the
//! comparison stays about the bit unpacking, not inf/NaN arithmetic.

use rlx_driver::run_host;
use rlx_ir::ops::Dequantize;
use rlx_ir::testkit::run_samples;
use rlx_ir::{DType, HostTensor, QuantScheme, Sample};
use rlx_pjrt::PjrtBackend;

/// xorshift64*: deterministic bytes without a dependency.
fn bytes(n: usize, mut s: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

#[test]
fn random_block_bytes_match_the_reference() {
    if std::env::var_os("RLX_PJRT_PLUGIN").is_none() {
        eprintln!("RLX_PJRT_PLUGIN is not set; skipping");
        return;
    }
    // (scheme, byte offsets of its f16 scales in a block)
    let schemes: [(QuantScheme, &[usize]); 5] = [
        (QuantScheme::Q8_0, &[0]),
        (QuantScheme::Q4_0, &[0]),
        (QuantScheme::Q4_K, &[0, 2]),
        (QuantScheme::Q5_K, &[0, 2]),
        (QuantScheme::Q6_K, &[208]),
    ];
    let mut samples = vec![];
    for (i, (s, halves)) in schemes.into_iter().enumerate() {
        let (k, rows) = (512, 3);
        let bb = s.block_bytes();
        let mut b = bytes(rows * s.row_bytes(k).unwrap(), 0x9E37_79B9 + i as u64);
        for (j, block) in b.chunks_exact_mut(bb).enumerate() {
            for (h, &at) in halves.iter().enumerate() {
                let v = half::f16::from_f32(((j * 7 + h * 3) % 17) as f32 / 8.0 - 1.0);
                block[at..at + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        let packed = HostTensor::from_i64(
            &[rows, b.len() / rows],
            DType::U8,
            &b.iter().map(|&x| i64::from(x)).collect::<Vec<_>>(),
        )
        .expect("packed");
        samples.push(Sample::new(format!("dequantize-bytes/{s}"), Dequantize { scheme: s, k }, vec![packed]));
    }
    let backend = PjrtBackend::new();
    let report = run_samples(samples, |g, feeds| run_host(&backend, g, feeds));
    eprintln!("random-byte dequantize: {} passed, {} failed", report.passed.len(), report.failed.len());
    report.assert_all_pass();
}
