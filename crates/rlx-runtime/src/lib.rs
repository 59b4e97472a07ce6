//! rlx-runtime: `Session::new(device).compile(graph)` gives a `CompiledGraph`.
//!
//! Compile verifies the graph, legalizes it for the device's backend (decomposing what the
//! backend lacks), and builds the backend's executable. `RLX_DISPATCH_REPORT=1` prints the
//! dispatch report on every compile.
#![warn(missing_docs)]

mod compiled;

pub use compiled::CompiledGraph;

use rlx_driver::{Backend, Device, DispatchReport};
use rlx_ir::{Error, Graph, Result};
use std::sync::Arc;

/// Compiles graphs for one device.
pub struct Session {
    device: Device,
}

impl Session {
    /// A session for `device`. An unavailable device is reported by `compile`.
    pub fn new(device: Device) -> Self {
        Session { device }
    }

    /// The device.
    pub fn device(&self) -> Device {
        self.device
    }

    fn backend(&self) -> Result<Arc<dyn Backend>> {
        match self.device {
            Device::Cpu => Ok(Arc::new(rlx_cpu::CpuBackend::new())),
            d => Err(Error::DeviceUnavailable {
                device: d.to_string(),
                reason: d.unavailable_reason().unwrap_or("unknown").into(),
            }),
        }
    }

    /// Verifies, legalizes and compiles `g`.
    pub fn compile(&self, g: Graph) -> Result<CompiledGraph> {
        let backend = self.backend()?;
        g.verify()?;
        if let Some((node, symbol)) = g.first_symbol() {
            return Err(Error::UnboundDim { symbol, context: format!("node {node} of graph `{}`", g.name()) });
        }
        let (legal, report) = rlx_driver::legalize(&g, backend.as_ref())?;
        if std::env::var("RLX_DISPATCH_REPORT").is_ok_and(|v| v == "1") {
            eprintln!("{report}");
        }
        let exe = backend.compile(&legal)?;
        Ok(CompiledGraph::new(&g, exe, report))
    }

    /// The dispatch report `compile` would produce, without compiling.
    pub fn dispatch_report(&self, g: &Graph) -> Result<DispatchReport> {
        let backend = self.backend()?;
        rlx_driver::legalize(g, backend.as_ref()).map(|(_, r)| r)
    }
}
