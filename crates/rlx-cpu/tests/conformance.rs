//! Every op's samples on the CPU backend against the reference interpreter.

rlx_ir::conformance_suite!(|g, feeds| rlx_driver::run_host(&rlx_cpu::CpuBackend::new(), g, feeds));
