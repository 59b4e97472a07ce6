//! `rlx export fpga` without the CLI (quicker to build while working on the emitter):
//!
//!     cargo run -p rlx-fpga --example export_fpga -- data/cortexm/digits_mlp_qat.safetensors OUT 16 [hx8k|up5k|any]

use rlx_cortexm_export::TestSet;
use rlx_fpga::{Device, FpgaOptions, export};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (ckpt, out, reuse) = match args.as_slice() {
        [_, c, o, r, ..] => (c, o, r.parse()?),
        _ => return Err("usage: export_fpga CKPT OUT REUSE [DEVICE]".into()),
    };
    let device = Device::parse(args.get(4).map_or("hx8k", |s| s.as_str())).ok_or("unknown device")?;
    let opts = FpgaOptions { reuse, device, testset: Some(TestSet::Digits) };
    let r = export(ckpt.as_ref(), out.as_ref(), &opts)?;
    println!("cycles per inference {}, estimate {:?}, host check {:?}", r.design.cycles(), r.estimate, r.host_check);
    Ok(())
}
