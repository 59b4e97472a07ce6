//! What the pipeline examples share: seeded feeds for a compiled graph.

use rlx_driver::Executable;
use rlx_ir::ops::util::rand_f64;
use rlx_ir::{DType, Graph, HostTensor, Op, Result};

/// Sets every param of `exe` and returns the inputs' bytes, seeded by name (the same values for
/// every compilation of one graph); norm gains sit near 1.
pub fn prepare(exe: &mut dyn Executable, g: &Graph) -> Result<Vec<Vec<u8>>> {
    let mut inputs = vec![];
    let mut pi = 0;
    for n in g.nodes() {
        let (shape, is_param, name) = match &n.op {
            Op::Input(x) => (&x.shape, false, &x.name),
            Op::Param(x) => (&x.shape, true, &x.name),
            _ => continue,
        };
        let d = shape.fixed_dims().unwrap_or_default();
        let len: usize = d.iter().product();
        let t = if shape.dtype == DType::I64 {
            HostTensor::from_i64(&d, DType::I64, &(0..len as i64).collect::<Vec<_>>())?
        } else {
            // Seeded by name, so both graphs get the same values.
            let seed = name.bytes().fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
            let mut v = rand_f64(len, -0.1, 0.1, seed);
            if name.contains("norm") || name.contains("ln") {
                v.iter_mut().for_each(|x| *x += 1.0);
            }
            HostTensor::from_f64(&d, shape.dtype, &v)?
        };
        if is_param {
            exe.set_param(pi, &t.to_bytes())?;
            pi += 1;
        } else {
            inputs.push(t.to_bytes());
        }
    }
    Ok(inputs)
}
