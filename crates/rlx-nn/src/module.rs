//! The model builder (a graph plus named, initialised params, flax-style scopes) and the
//! parameter store (name -> tensor).

use crate::init::{Init, Rng};
use rlx_ir::{DType, Error, Graph, HostTensor, NodeId, Result, Shape};
use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};

/// Inputs whose names start with this are filled with seeded uniform noise in [0, 1) by the
/// training step (dropout masks); at inference they are filled with 1.0 (keep everything).
pub const NOISE_PREFIX: &str = "rng:";

/// A declared parameter: its full dotted name, dims and initializer.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamSpec {
    /// Full name, e.g. `h0.attn.qkv.w`.
    pub name: String,
    /// Dims (f32).
    pub dims: Vec<usize>,
    /// How it starts.
    pub init: Init,
}

/// Builds a model graph: derefs to `Graph` for ops, and declares params with names under the
/// current scope and an initializer.
///
/// ```
/// use rlx_nn::{Builder, Init, Linear};
/// let mut b = Builder::new("mlp");
/// let x = b.input("x", rlx_ir::Shape::new(&[4, 3], rlx_ir::DType::F32));
/// let y = b.scoped("fc", |b| Linear::new(3, 2).apply(b, x));
/// assert_eq!(b.specs()[0].name, "fc.w");
/// assert_eq!(b.shape(y).unwrap().to_string(), "f32[4,2]");
/// ```
#[derive(Debug, Clone)]
pub struct Builder {
    g: Graph,
    specs: Vec<ParamSpec>,
    scope: Vec<String>,
    /// True while building a training graph (dropout active).
    pub training: bool,
    noise: usize,
}

impl Deref for Builder {
    type Target = Graph;
    fn deref(&self) -> &Graph {
        &self.g
    }
}

impl DerefMut for Builder {
    fn deref_mut(&mut self) -> &mut Graph {
        &mut self.g
    }
}

impl Builder {
    /// An empty model graph called `name` (training mode off).
    pub fn new(name: &str) -> Self {
        Builder { g: Graph::new(name), specs: vec![], scope: vec![], training: false, noise: 0 }
    }

    /// The full name of `name` under the current scope.
    pub fn full_name(&self, name: &str) -> String {
        let mut parts = self.scope.clone();
        parts.push(name.to_string());
        parts.join(".")
    }

    /// Runs `f` inside scope `name`: params it declares are called `<scope>.<name>.<param>`.
    pub fn scoped<R>(&mut self, name: &str, f: impl FnOnce(&mut Self) -> R) -> R {
        self.scope.push(name.to_string());
        let r = f(self);
        self.scope.pop();
        r
    }

    /// Declares an f32 param `name` (under the scope) of `dims`, started by `init`. Declaring
    /// the same full name twice returns the same node if the dims agree (weight tying).
    pub fn param(&mut self, name: &str, dims: &[usize], init: Init) -> NodeId {
        let full = self.full_name(name);
        if let Some(s) = self.specs.iter().find(|s| s.name == full) {
            if s.dims != dims {
                let reason = format!("param `{full}` declared with dims {:?} and again with {dims:?}", s.dims);
                self.g.record(Error::InvalidGraph { graph: self.g.name().into(), reason });
            }
            if let Some((id, _)) = self.g.params().into_iter().find(|(_, n)| *n == full) {
                return id;
            }
        }
        self.specs.push(ParamSpec { name: full.clone(), dims: dims.to_vec(), init });
        self.g.param(&full, Shape::new(dims, DType::F32))
    }

    /// An input of uniform noise in [0, 1) of `dims`, refilled by the training step every step.
    pub fn noise(&mut self, dims: &[usize]) -> NodeId {
        let name = format!("{NOISE_PREFIX}{}", self.noise);
        self.noise += 1;
        self.g.input(&name, Shape::new(dims, DType::F32))
    }

    /// Declared params, in declaration order.
    pub fn specs(&self) -> &[ParamSpec] {
        &self.specs
    }

    /// Sets the outputs and returns the graph and the param specs.
    pub fn finish(mut self, outputs: Vec<NodeId>) -> (Graph, Vec<ParamSpec>) {
        self.g.set_outputs(outputs);
        (self.g, self.specs)
    }
}

/// Named tensors: model params, optimizer state. Ordered by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParamStore {
    tensors: BTreeMap<String, HostTensor>,
}

impl ParamStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Initialises every spec from `seed` (each param from its own named stream).
    pub fn init(specs: &[ParamSpec], seed: u64) -> Result<Self> {
        let mut s = ParamStore::new();
        for p in specs {
            s.insert(&p.name, p.init.sample(&p.name, &p.dims, seed)?);
        }
        Ok(s)
    }

    /// Adds or replaces a tensor.
    pub fn insert(&mut self, name: &str, t: HostTensor) {
        self.tensors.insert(name.to_string(), t);
    }

    /// A tensor, or `UnknownName` listing what the store has.
    pub fn get(&self, name: &str) -> Result<&HostTensor> {
        self.tensors.get(name).ok_or_else(|| Error::UnknownName {
            kind: "param",
            name: name.into(),
            known: self.tensors.keys().cloned().collect(),
        })
    }

    /// Whether the store has `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Names and tensors, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &HostTensor)> {
        self.tensors.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Total number of elements.
    pub fn numel(&self) -> usize {
        self.tensors.values().map(|t| t.numel()).sum()
    }
}

/// Fills a noise input for one step: uniform [0, 1) from `(seed, step, name)`.
pub fn noise_tensor(shape: &Shape, seed: u64, step: u64, name: &str) -> Result<HostTensor> {
    let dims = shape.dims_fixed().map_err(|e| Error::eval("noise", e))?;
    let n: usize = dims.iter().product();
    let mut rng = Rng::for_name(seed ^ step.wrapping_mul(0x9E37_79B9), name);
    let v: Vec<f64> = (0..n).map(|_| rng.uniform()).collect();
    HostTensor::from_f64(&dims, DType::F32, &v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_name_params_and_tying_reuses_nodes() {
        let mut b = Builder::new("t");
        let a = b.scoped("emb", |b| b.param("w", &[4, 2], Init::Zeros));
        let again = b.scoped("emb", |b| b.param("w", &[4, 2], Init::Zeros));
        assert_eq!(a, again);
        b.scoped("emb", |b| b.param("w", &[3, 2], Init::Zeros));
        assert!(b.check().is_err(), "a dims clash is recorded");
        assert_eq!(b.specs().len(), 1);
        let store = ParamStore::init(b.specs(), 0).unwrap();
        assert_eq!(store.get("emb.w").unwrap().dims(), vec![4, 2]);
        assert!(matches!(store.get("nope"), Err(Error::UnknownName { .. })));
    }
}
