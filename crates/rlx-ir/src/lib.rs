//! rlx-ir: the RLX tensor IR.
//!
//! Dtypes, shapes, graphs built with shape inference, every op defined once (`OpDef`), the text
//! form, the reference interpreter (the oracle of every test) and the testkit that checks a
//! backend against it.
//!
//! ```
//! use rlx_ir::{DType, Graph, Shape};
//! let mut g = Graph::new("demo");
//! let x = g.input("x", Shape::new(&[2, 3], DType::F32));
//! let y = g.softmax(x, -1);
//! g.set_outputs(vec![y]);
//! assert_eq!(g.shape(y).unwrap().to_string(), "f32[2,3]");
//! g.verify().unwrap();
//! ```
#![warn(missing_docs)]

pub mod custom;
pub mod dtype;
pub mod error;
pub mod graph;
pub mod interp;
pub mod op;
pub mod ops;
pub mod quant;
pub mod scalar;
pub mod shape;
pub mod tensor;
pub mod testkit;
pub mod text;

pub use dtype::{DType, DTypeClass};
pub use error::{Error, Result};
pub use graph::{Graph, Node, NodeId};
pub use op::{Arity, OpDef, OpTraits, Sample};
pub use ops::{MaskKind, Op, OpKind};
pub use quant::QuantScheme;
pub use scalar::Scalar;
pub use shape::{Dim, Shape};
pub use tensor::{Data, HostTensor};
