//! Every op. Adding one: write its file (struct + `OpDef` + builder + samples) and add one line
//! to `define_ops!` below. Elementwise ops are one line in the family tables instead.

use crate::{OpDef, Sample};
use serde::{Deserialize, Serialize};

pub mod attention;
pub mod binary;
pub mod cast;
pub mod control;
pub mod conv;
pub mod cross_entropy;
pub mod cumsum;
pub mod dims;
pub mod dynamic;
pub mod fake_quant;
pub mod fft;
pub mod fused;
pub mod fused_norm;
pub mod fused_reduce;
pub mod gather;
pub mod layout;
pub mod leaf;
pub mod matmul;
pub mod norm;
pub mod paged;
pub mod pool;
pub mod quant;
pub mod reduce;
pub mod rope;
pub mod rules;
pub mod selective_scan;
pub mod selective_scan_grad;
pub mod slice;
pub mod softmax;
pub mod stacked_matmul;
pub mod stft;
pub mod topk;
pub mod unary;
pub mod util;

pub use attention::{Attention, HeadLayout, MaskKind, kv_dtype_fits};
pub use binary::{Binary, BinaryKind, Compare, CompareKind};
pub use cast::{Cast, Where};
pub use control::{AssociativeScan, Cond, CustomFn, Scan, ScanOutput, WhileLoop};
pub use conv::Conv2d;
pub use cross_entropy::SoftmaxCrossEntropy;
pub use cumsum::Cumsum;
pub use dims::{BroadcastTo, ExpandDims, Squeeze};
pub use dynamic::{DynamicSlice, DynamicUpdateSlice};
pub use fake_quant::FakeQuant;
pub use fft::{Fft, FftKind, FftNorm};
pub use fused::{Fused, FusedMatMul, Instr};
pub use fused_norm::{FusedNorm, NormKind};
pub use fused_reduce::FusedReduce;
pub use gather::{Gather, ScatterAdd};
pub use layout::{Reshape, Transpose};
pub use leaf::{Arange, Constant, Full, Input, Param};
pub use matmul::MatMul;
pub use norm::{LayerNorm, RmsNorm};
pub use paged::{PagedAttention, PagedKvWrite};
pub use pool::{AvgPool2d, MaxPool2d};
pub use quant::{Dequantize, QMatMul};
pub use reduce::{ArgMax, Reduce, ReduceKind};
pub use rope::Rope;
pub use selective_scan::SelectiveScan;
pub use selective_scan_grad::SelectiveScanGrad;
pub use slice::{Concat, Slice};
pub use softmax::{LogSoftmax, Softmax};
pub use stacked_matmul::StackedMatMul;
pub use topk::{TopK, TopKOutput};
pub use unary::{Unary, UnaryKind};

macro_rules! define_ops {
    ($($variant:ident($ty:ty)),* $(,)?) => {
        /// Every op, as a closed enum generated from the list in `ops/mod.rs`.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "op", rename_all = "snake_case")]
        pub enum Op {
            $(#[doc = stringify!($ty)] $variant($ty)),*
        }

        /// The variant of an `Op` without its attributes: the key of backend kernel tables.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum OpKind {
            $(#[doc = stringify!($ty)] $variant),*
        }

        impl Op {
            /// The variant, without attributes.
            pub fn kind(&self) -> OpKind {
                match self { $(Op::$variant(_) => OpKind::$variant),* }
            }

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
    SoftmaxCrossEntropy(SoftmaxCrossEntropy),
    Reshape(Reshape),
    Transpose(Transpose),
    BroadcastTo(BroadcastTo),
    ExpandDims(ExpandDims),
    Squeeze(Squeeze),
    Slice(Slice),
    Concat(Concat),
    DynamicSlice(DynamicSlice),
    DynamicUpdateSlice(DynamicUpdateSlice),
    Gather(Gather),
    ScatterAdd(ScatterAdd),
    Cumsum(Cumsum),
    Fft(Fft),
    SelectiveScan(SelectiveScan),
    SelectiveScanGrad(SelectiveScanGrad),
    Custom(crate::custom::Custom),
    TopK(TopK),
    LayerNorm(LayerNorm),
    RmsNorm(RmsNorm),
    Attention(Attention),
    PagedKvWrite(PagedKvWrite),
    PagedAttention(PagedAttention),
    Rope(Rope),
    Conv2d(Conv2d),
    Dequantize(Dequantize),
    QMatMul(QMatMul),
    FakeQuant(FakeQuant),
    MaxPool2d(MaxPool2d),
    AvgPool2d(AvgPool2d),
    Fused(Fused),
    FusedMatMul(FusedMatMul),
    StackedMatMul(StackedMatMul),
    FusedNorm(FusedNorm),
    FusedReduce(FusedReduce),
    CustomFn(CustomFn),
    Cond(Cond),
    Scan(Scan),
    WhileLoop(WhileLoop),
    AssociativeScan(AssociativeScan),
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
