//! Every op. Adding one: write its file (struct + `OpDef` + builder + samples) and add one line
//! to `define_ops!` below. Elementwise ops are one line in the family tables instead.

use crate::{OpDef, Sample};
use serde::{Deserialize, Serialize};

pub mod binary;
pub mod cast;
pub mod layout;
pub mod leaf;
pub mod matmul;
pub mod reduce;
pub mod softmax;
pub mod unary;
pub mod util;

pub use binary::{Binary, BinaryKind, Compare, CompareKind};
pub use cast::{Cast, Where};
pub use layout::{Reshape, Transpose};
pub use leaf::{Arange, Constant, Full, Input, Param};
pub use matmul::MatMul;
pub use reduce::{ArgMax, Reduce, ReduceKind};
pub use softmax::{LogSoftmax, Softmax};
pub use unary::{Unary, UnaryKind};

macro_rules! define_ops {
    ($($variant:ident($ty:ty)),* $(,)?) => {
        /// Every op, as a closed enum generated from the list in `ops/mod.rs`.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "op", rename_all = "snake_case")]
        pub enum Op {
            $(#[doc = stringify!($ty)] $variant($ty)),*
        }

        impl Op {
            /// The op's definition: name, traits, inference, reference, rules.
            pub fn def(&self) -> &dyn OpDef {
                match self { $(Op::$variant(o) => o),* }
            }

            /// Samples of every op, for the conformance suite.
            pub fn all_samples() -> Vec<Sample> {
                let mut v = vec![];
                $(v.extend(<$ty as OpDef>::samples());)*
                v
            }

            /// The serde tags of every variant (snake_case variant names).
            pub fn variant_tags() -> Vec<String> {
                vec![$(crate::ops::snake(stringify!($variant))),*]
            }
        }

        $(impl From<$ty> for Op {
            fn from(o: $ty) -> Op { Op::$variant(o) }
        })*
    };
}

define_ops! {
    Input(Input),
    Param(Param),
    Constant(Constant),
    Full(Full),
    Arange(Arange),
    Unary(Unary),
    Binary(Binary),
    Compare(Compare),
    Where(Where),
    Cast(Cast),
    Reduce(Reduce),
    ArgMax(ArgMax),
    MatMul(MatMul),
    Softmax(Softmax),
    LogSoftmax(LogSoftmax),
    Reshape(Reshape),
    Transpose(Transpose),
}

/// CamelCase to snake_case, as serde's rename does.
pub fn snake(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
