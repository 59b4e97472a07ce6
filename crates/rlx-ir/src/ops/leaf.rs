//! Leaves: inputs, params, constants, `full` and `arange`.

use crate::tensor::float_vec;
use crate::{DType, Data, Error, Graph, HostTensor, NodeId, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::{Deserialize, Serialize};

/// A named runtime input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Input {
    /// Name used by `run`.
    pub name: String,
    /// Declared type.
    pub shape: Shape,
}

/// A named parameter, set once and kept across runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Param {
    /// Name used by `set_param`.
    pub name: String,
    /// Declared type.
    pub shape: Shape,
}

macro_rules! fed_leaf {
    ($t:ty, $name:literal) => {
        impl OpDef for $t {
            fn name(&self) -> &'static str {
                $name
            }
            fn traits(&self) -> OpTraits {
                OpTraits::LEAF
            }
            fn arity(&self) -> Arity {
                Arity::Exact(0)
            }
            fn infer(&self, _ins: &[&Shape]) -> std::result::Result<Shape, String> {
                Ok(self.shape.clone())
            }
            fn reference(&self, _ins: &[&HostTensor], _out: &Shape) -> Result<HostTensor> {
                Err(Error::eval($name, format!("`{}` is fed by the caller, not computed", self.name)))
            }
            fn samples() -> Vec<Sample> {
                vec![]
            }
        }
    };
}
fed_leaf!(Input, "input");
fed_leaf!(Param, "param");

/// A constant tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Constant {
    /// The value.
    pub value: HostTensor,
}

impl OpDef for Constant {
    fn name(&self) -> &'static str {
        "constant"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::LEAF
    }
    fn arity(&self) -> Arity {
        Arity::Exact(0)
    }
    fn infer(&self, _ins: &[&Shape]) -> std::result::Result<Shape, String> {
        if self.value.shape.numel() != Some(self.value.numel()) {
            return Err("constant data does not match its shape".into());
        }
        Ok(self.value.shape.clone())
    }
    fn reference(&self, _ins: &[&HostTensor], _out: &Shape) -> Result<HostTensor> {
        Ok(self.value.clone())
    }
    fn samples() -> Vec<Sample> {
        let f = HostTensor::from_f32(&[2, 2], &[1.0, -2.0, f32::INFINITY, 0.5]).expect("sample");
        let i = HostTensor::from_i64(&[3], DType::I64, &[1, -2, 3]).expect("sample");
        let b = HostTensor::from_bool(&[2], &[true, false]).expect("sample");
        vec![
            Sample::new("constant/f32", Constant { value: f }, vec![]),
            Sample::new("constant/i64", Constant { value: i }, vec![]),
            Sample::new("constant/bool", Constant { value: b }, vec![]),
        ]
    }
}

/// A tensor with every element equal to `value`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Full {
    /// Output type (static).
    pub shape: Shape,
    /// The fill value.
    #[serde(with = "float_vec::one")]
    pub value: f64,
}

impl OpDef for Full {
    fn name(&self) -> &'static str {
        "full"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::LEAF
    }
    fn arity(&self) -> Arity {
        Arity::Exact(0)
    }
    fn infer(&self, _ins: &[&Shape]) -> std::result::Result<Shape, String> {
        Ok(self.shape.clone())
    }
    fn reference(&self, _ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        HostTensor::full(out, self.value)
    }
    fn samples() -> Vec<Sample> {
        vec![
            Sample::new("full/f32", Full { shape: Shape::new(&[2, 3], DType::F32), value: -1.5 }, vec![]),
            Sample::new("full/-inf", Full { shape: Shape::new(&[4], DType::F32), value: f64::NEG_INFINITY }, vec![]),
            Sample::new("full/i32", Full { shape: Shape::new(&[3], DType::I32), value: 7.0 }, vec![]),
        ]
    }
}

/// `start, start + step, ...`: `n` values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arange {
    /// First value.
    pub start: f64,
    /// Increment.
    pub step: f64,
    /// Number of values.
    pub n: usize,
    /// Output dtype.
    pub dtype: DType,
}

impl OpDef for Arange {
    fn name(&self) -> &'static str {
        "arange"
    }
    fn traits(&self) -> OpTraits {
        OpTraits::LEAF
    }
    fn arity(&self) -> Arity {
        Arity::Exact(0)
    }
    fn infer(&self, _ins: &[&Shape]) -> std::result::Result<Shape, String> {
        if !(self.dtype.is_float() || self.dtype.is_int()) {
            return Err(format!("dtype {} is not supported", self.dtype));
        }
        Ok(Shape::new(&[self.n], self.dtype))
    }
    fn reference(&self, _ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        let v: Vec<f64> = (0..self.n).map(|i| self.start + self.step * i as f64).collect();
        HostTensor::new(Shape::new(&[self.n], DType::F64), Data::F(v)).map(|t| t.cast(out.dtype))
    }
    fn samples() -> Vec<Sample> {
        vec![
            Sample::new("arange/f32", Arange { start: 0.5, step: 0.25, n: 6, dtype: DType::F32 }, vec![]),
            Sample::new("arange/i64", Arange { start: 3.0, step: -2.0, n: 5, dtype: DType::I64 }, vec![]),
        ]
    }
}

impl Graph {
    /// A tensor filled with `value`.
    pub fn full(&mut self, shape: Shape, value: f64) -> NodeId {
        self.add_node(Full { shape, value }, &[])
    }

    /// `n` values `start, start + step, ...` of `dtype`.
    pub fn arange(&mut self, start: f64, step: f64, n: usize, dtype: DType) -> NodeId {
        self.add_node(Arange { start, step, n, dtype }, &[])
    }
}
