//! rlx-opt: the RLX optimizer.
//!
//! One rewrite engine (`engine`: rewrite on insertion, hash-consing, repeat until nothing fires,
//! dead-code elimination on emission) runs small declarative rule sets (`rules`): algebraic
//! identities, constant folding through the reference interpreter, views, broadcasts and
//! transposes folded into matmul. `fuse` builds elementwise regions and matmul epilogues,
//! `fuse_norm` norm prologues (`report` says what fused and why not), `memory` plans the arena, and
//! `compile_pipeline` runs it all for a backend.
//!
//! ```
//! use rlx_ir::{DType, Graph, Shape};
//! let mut g = Graph::new("demo");
//! let x = g.input("x", Shape::new(&[4], DType::F32));
//! let one = g.scalar(1.0, DType::F32);
//! let y = g.mul(x, one);
//! let z = g.exp(y);
//! g.set_outputs(vec![z]);
//! let (opt, stats) = rlx_opt::rewrite(&g, rlx_opt::rules::SIMPLIFY).unwrap();
//! assert_eq!(opt.len(), 2); // x, exp(x)
//! assert_eq!(stats.fired["mul-one"], 1);
//! ```
#![warn(missing_docs)]

pub mod bodies;
pub mod cross_entropy;
pub mod engine;
pub mod fuse;
pub mod fuse_norm;
pub mod fuse_reduce;
pub mod merge_matmul;
pub mod patterns;
pub mod pipeline;
pub mod precision;
pub mod quantize;
pub mod report;
pub mod rules;
pub mod zoo;

pub use engine::{RewriteStats, Rewriter, Rule, RuleSet, rewrite};
pub use fuse::{fuse_elementwise, fuse_matmul_epilogues};
pub use fuse_norm::fuse_norm_prologues;
pub use memory::{MemoryPlan, Slot, SlotKind, plan};
pub use merge_matmul::merge_sibling_matmuls;
pub use pipeline::{CompileReport, Optimized, compile_pipeline, compile_with, optimize};
pub use report::{Fusion, FusionKind, FusionReport, NotFused, Reason};
/// The memory plan lives in rlx-driver (the pipeline makes it, backends receive it); re-exported
/// here where it has always been.
pub use rlx_driver::memory;
pub use rlx_driver::{CompileOptions, DispatchPolicy, PrecisionPolicy};
