//! Runs the exported digits model on every test image and prints its accuracy and how many of
//! its predictions equal the host INT8 reference's, through semihosting; exits with failure
//! unless every prediction agrees.

#![no_std]
#![no_main]

// Linked for its critical-section implementation, which semihosting output takes.
use cortex_m as _;
use cortex_m_rt::entry;
use cortex_m_semihosting::{debug, hprintln};

#[allow(clippy::all, dead_code)]
mod model {
    include!(concat!(env!("RLX_CORTEXM_MODEL_DIR"), "/model.rs"));
}
#[allow(clippy::all, dead_code)]
mod testset {
    include!(concat!(env!("RLX_CORTEXM_MODEL_DIR"), "/testset.rs"));
}

/// The model's one buffer; the exporter planned every tensor into it.
static mut ARENA: [i8; model::ARENA_SIZE] = [0; model::ARENA_SIZE];

#[entry]
fn main() -> ! {
    // SAFETY: the only reference to ARENA, taken once before anything else runs.
    let arena: &mut [i8] = unsafe { &mut *core::ptr::addr_of_mut!(ARENA) };
    let m = &model::MODEL;
    // SysTick on the core clock counts the inferences' time; under QEMU with `-icount` that is
    // virtual time driven by the instruction count (QEMU models no cycles).
    let mut syst = cortex_m::Peripherals::take().map(|p| p.SYST);
    if let Some(s) = syst.as_mut() {
        s.set_clock_source(cortex_m::peripheral::syst::SystClkSource::Core);
        s.set_reload(0x00ff_ffff);
        s.clear_current();
        s.enable_counter();
    }
    let mut ticks = 0u64;
    let (mut correct, mut agree) = (0usize, 0usize);
    for i in 0..testset::SAMPLES {
        let x = &testset::INPUTS[i * testset::SAMPLE_LEN..(i + 1) * testset::SAMPLE_LEN];
        let t0 = cortex_m::peripheral::SYST::get_current();
        let run = m.input_mut(arena).map(|inp| inp.copy_from_slice(x)).and_then(|_| m.invoke(arena));
        // A 24-bit down counter: one wrap at most per inference.
        ticks += (t0.wrapping_sub(cortex_m::peripheral::SYST::get_current()) & 0x00ff_ffff) as u64;
        let pred = match run {
            Ok(()) => m.output(arena).map(rlx_cortexm::model::argmax).unwrap_or(usize::MAX),
            Err(e) => {
                hprintln!("cortexm: sample {}: {}", i, e);
                debug::exit(debug::EXIT_FAILURE);
                usize::MAX
            }
        };
        correct += (pred == testset::LABELS[i] as usize) as usize;
        agree += (pred == testset::HOST_PREDICTIONS[i] as usize) as usize;
    }
    let n = testset::SAMPLES;
    let bp = (correct * 10000 + n / 2) / n; // basis points, rounded, printed without float formatting
    hprintln!(
        "cortexm: {} layers, arena {} bytes, {} MACs per inference, DSP instructions: {}",
        m.layers.len(),
        model::ARENA_SIZE,
        model::MACS,
        rlx_cortexm::simd::HAS_DSP
    );
    hprintln!("cortexm: accuracy {}/{} = {}.{:02}%", correct, n, bp / 100, bp % 100);
    hprintln!("cortexm: agreement with the host INT8 run: {}/{}", agree, n);
    hprintln!("cortexm: SysTick ticks per inference: {}", ticks / n as u64);
    debug::exit(if agree == n { debug::EXIT_SUCCESS } else { debug::EXIT_FAILURE });
    loop {}
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    hprintln!("cortexm: panic: {}", info);
    debug::exit(debug::EXIT_FAILURE);
    loop {}
}
