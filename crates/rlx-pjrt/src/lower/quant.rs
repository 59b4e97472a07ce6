//! `dequantize` of ggml blocks in StableHLO: rlx-driver's `block_quant` written with StableHLO
//! ops (`slice`, `bitcast_convert` for the f16 scales and i8 values, `and` / `or` / shifts on
//! bytes), so packed weights stay packed on the device and XLA fuses the unpacking.

use super::emit::{broadcast, i64_array};
use super::{Ctx, V};
use rlx_driver::block_quant::{self, Arith, BitOp, BlockOps};
use rlx_ir::{DType, Node, Op};

impl BlockOps for Ctx {
    type V = V;

    fn dims(&self, v: &V) -> Vec<usize> {
        v.dims.clone()
    }

    fn slice_last(&mut self, x: &V, start: usize, end: usize) -> V {
        let r = x.dims.len();
        let mut limit = x.dims.clone();
        limit[r - 1] = end;
        let starts: Vec<usize> = (0..r).map(|i| if i == r - 1 { start } else { 0 }).collect();
        let attrs = format!(
            "start_indices = {}, limit_indices = {}, strides = {}",
            i64_array(&starts),
            i64_array(&limit),
            i64_array(vec![1; r])
        );
        let mut dims = x.dims.clone();
        dims[r - 1] = end - start;
        self.op("slice", &[x], &attrs, &dims, x.dt)
    }

    fn reshape(&mut self, x: &V, dims: &[usize]) -> V {
        self.op("reshape", &[x], "", dims, x.dt)
    }

    fn f16_pairs(&mut self, x: &V) -> V {
        let lead = &x.dims[..x.dims.len() - 1];
        let h = self.op("bitcast_convert", &[x], "", lead, DType::F16);
        self.op("convert", &[&h], "", lead, DType::F32)
    }

    fn i8_bytes(&mut self, x: &V) -> V {
        let s = self.op("bitcast_convert", &[x], "", &x.dims.clone(), DType::I8);
        self.op("convert", &[&s], "", &x.dims.clone(), DType::F32)
    }

    fn u8_to_f32(&mut self, x: &V) -> V {
        self.op("convert", &[x], "", &x.dims.clone(), DType::F32)
    }

    fn bits(&mut self, op: BitOp, a: &V, b: &V) -> V {
        let name = match op {
            BitOp::And => "and",
            BitOp::Or => "or",
            BitOp::Shl => "shift_left",
            BitOp::Shr => "shift_right_logical",
        };
        self.op(name, &[a, b], "", &a.dims.clone(), a.dt)
    }

    fn bits_const(&mut self, op: BitOp, a: &V, c: u8) -> V {
        let k = self.splat(f64::from(c), &a.dims, a.dt);
        self.bits(op, a, &k)
    }

    fn arith(&mut self, op: Arith, a: &V, b: &V) -> V {
        let name = match op {
            Arith::Mul => "multiply",
            Arith::Sub => "subtract",
        };
        self.op(name, &[a, b], "", &a.dims.clone(), a.dt)
    }

    fn arith_const(&mut self, op: Arith, a: &V, c: f32) -> V {
        let k = self.splat(f64::from(c), &a.dims, DType::F32);
        self.arith(op, a, &k)
    }

    fn concat(&mut self, parts: &[&V], axis: usize) -> V {
        let mut dims = parts[0].dims.clone();
        dims[axis] = parts.iter().map(|p| p.dims[axis]).sum();
        self.op("concatenate", parts, &format!("dimension = {axis} : i64"), &dims, parts[0].dt)
    }

    fn broadcast(&mut self, x: &V, dims: &[usize]) -> V {
        broadcast(self, x, dims)
    }

    fn u8_along(&mut self, vals: &[u8], dims: &[usize], axis: usize) -> V {
        let list: Vec<String> = vals.iter().map(u8::to_string).collect();
        let n = [vals.len()];
        let attrs = format!("value = dense<[{}]> : {}", list.join(", "), super::tensor_ty(&n, DType::U8));
        let c = self.op("constant", &[], &attrs, &n, DType::U8);
        self.op("broadcast_in_dim", &[&c], &format!("broadcast_dimensions = array<i64: {axis}>"), dims, DType::U8)
    }
}

/// Writes `Dequantize` for Q8_0, Q4_0, Q4_K, Q5_K and Q6_K (u8 `[.., row_bytes]` -> f32
/// `[.., k]`); None for other schemes or dtypes, which are then reported missing.
pub fn dequantize(ctx: &mut Ctx, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::Dequantize(d) = &n.op else { return None };
    if n.ty.dtype != DType::F32 || ins[0].dt != DType::U8 {
        return None;
    }
    let y = block_quant::dequantize(ctx, &ins[0], d.scheme, d.k)?;
    (y.dims == dims).then_some(y)
}
