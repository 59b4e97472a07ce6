//! `dequantize` of ggml blocks as MLX calls: rlx-driver's `block_quant` written with MLX's
//! `slice`, `view` (the f16 scales and i8 values) and bitwise ops, so packed weights stay packed.

use crate::program::{Prog, V};
use rlx_driver::block_quant::{self, Arith, BitOp, BlockOps};
use rlx_ir::{DType, Node, Op};

impl BlockOps for Prog {
    type V = V;

    fn dims(&self, v: &V) -> Vec<usize> {
        v.dims.clone()
    }

    fn slice_last(&mut self, x: &V, start: usize, end: usize) -> V {
        let r = x.dims.len();
        let starts = (0..r).map(|i| if i == r - 1 { start as i64 } else { 0 });
        let stops = x.dims.iter().enumerate().map(|(i, &d)| if i == r - 1 { end as i64 } else { d as i64 });
        let a: Vec<i64> = starts.chain(stops).chain(std::iter::repeat_n(1, r)).collect();
        let mut dims = x.dims.clone();
        dims[r - 1] = end - start;
        self.op("slice", &[x], &a, &[], &dims, x.dt)
    }

    fn reshape(&mut self, x: &V, dims: &[usize]) -> V {
        let shape: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        self.op("reshape", &[x], &shape, &[], dims, x.dt)
    }

    fn f16_pairs(&mut self, x: &V) -> V {
        // `view` halves the last axis ([.., 2] u8 -> [.., 1] f16); the reshape drops it.
        let mut one = x.dims.clone();
        let r = one.len();
        one[r - 1] = 1;
        let h = self.op("view", &[x], &[], &[], &one, DType::F16);
        let lead = x.dims[..r - 1].to_vec();
        let h = self.reshape(&h, &lead);
        self.op("astype", &[&h], &[], &[], &lead, DType::F32)
    }

    fn i8_bytes(&mut self, x: &V) -> V {
        let s = self.op("view", &[x], &[], &[], &x.dims.clone(), DType::I8);
        self.op("astype", &[&s], &[], &[], &x.dims.clone(), DType::F32)
    }

    fn u8_to_f32(&mut self, x: &V) -> V {
        self.op("astype", &[x], &[], &[], &x.dims.clone(), DType::F32)
    }

    fn bits(&mut self, op: BitOp, a: &V, b: &V) -> V {
        let name = match op {
            BitOp::And => "bitwise_and",
            BitOp::Or => "bitwise_or",
            BitOp::Shl => "left_shift",
            BitOp::Shr => "right_shift",
        };
        self.op(name, &[a, b], &[], &[], &a.dims.clone(), a.dt)
    }

    fn bits_const(&mut self, op: BitOp, a: &V, c: u8) -> V {
        let k = self.full(f64::from(c), &[], DType::U8);
        self.bits(op, a, &k)
    }

    fn arith(&mut self, op: Arith, a: &V, b: &V) -> V {
        let name = match op {
            Arith::Mul => "multiply",
            Arith::Sub => "subtract",
        };
        self.op(name, &[a, b], &[], &[], &a.dims.clone(), a.dt)
    }

    fn arith_const(&mut self, op: Arith, a: &V, c: f32) -> V {
        let k = self.full(f64::from(c), &[], DType::F32);
        self.arith(op, a, &k)
    }

    fn concat(&mut self, parts: &[&V], axis: usize) -> V {
        let mut dims = parts[0].dims.clone();
        dims[axis] = parts.iter().map(|p| p.dims[axis]).sum();
        self.op("concatenate", parts, &[axis as i64], &[], &dims, parts[0].dt)
    }

    fn broadcast(&mut self, x: &V, dims: &[usize]) -> V {
        if x.dims == dims {
            return x.clone();
        }
        let shape: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        self.op("broadcast_to", &[x], &shape, &[], dims, x.dt)
    }

    fn u8_along(&mut self, vals: &[u8], dims: &[usize], axis: usize) -> V {
        let shape: Vec<usize> = (0..dims.len()).map(|i| if i == axis { vals.len() } else { 1 }).collect();
        let c = self.constant(vals.to_vec(), &shape, DType::U8);
        self.broadcast(&c, dims)
    }
}

/// `Dequantize` for Q8_0, Q4_0, Q4_K, Q5_K and Q6_K (u8 `[.., row_bytes]` -> f32 `[.., k]`).
pub fn dequantize(p: &mut Prog, n: &Node, ins: &[V], dims: &[usize]) -> Option<V> {
    let Op::Dequantize(d) = &n.op else { return None };
    if n.ty.dtype != DType::F32 || ins[0].dt != DType::U8 {
        return None;
    }
    let y = block_quant::dequantize(p, &ins[0], d.scheme, d.k)?;
    (y.dims == dims).then_some(y)
}
