//! Ops defined outside rlx-ir (`Op::Custom`), through the same `OpDef` trait as built-in ones.
//!
//! A crate defines a struct with its attributes, implements `OpDef` for it (inference,
//! reference, samples, and any of decomposition, derivative and batching rules) and
//! `CustomOpDef` (its registry name), and calls `register::<T>()` once. `custom::op(value)`
//! makes the `Op`. The registry, keyed by name, is what lets a custom op come back from the
//! text form and JSON, and what puts its samples in `Op::all_samples()`, so the conformance
//! suite, the gradient checks and vmap-against-a-loop run it with no code of their own.
//! Backends look kernels up by the name (`rlx_cpu::custom::register_kernel`); without one, the
//! op's decomposition runs, else legalization reports it missing by name.
//!
//! An op that was made but never registered still builds, evaluates and differentiates in the
//! process that made it; only parsing it back (and its samples) needs the registry.

use crate::{Graph, HostTensor, NodeId, Op, OpDef, OpTraits, Result, Sample, Shape, op::Arity};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::any::{Any, TypeId};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock};

/// An op type that can be registered: its attributes serialize as a JSON object (a struct with
/// named fields, or `{}`), and every instance's `OpDef::name` is `NAME`.
pub trait CustomOpDef: OpDef + Serialize + DeserializeOwned + Clone + 'static {
    /// The name it registers under and prints as in the text form.
    const NAME: &'static str;
}

/// Why a registration or a lookup failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The name is taken by another type, or by a built-in op.
    #[error("custom op `{name}`: the name is already taken by {taken_by} (registering {type_name})")]
    NameClash {
        /// The contested name.
        name: String,
        /// What holds it: a type name, or "the built-in op".
        taken_by: String,
        /// The type being registered.
        type_name: String,
    },
    /// No op of that name was registered.
    #[error("custom op `{name}` is not registered (call rlx_ir::custom::register in this process)")]
    NotRegistered {
        /// The name looked up.
        name: String,
    },
    /// The attributes do not deserialize into the registered type.
    #[error("custom op `{name}`: bad attributes {attrs}: {reason}")]
    BadAttrs {
        /// The op.
        name: String,
        /// The attributes given.
        attrs: String,
        /// serde's message.
        reason: String,
    },
}

type MakeFn = fn(&Value) -> std::result::Result<Custom, String>;

struct Entry {
    type_id: TypeId,
    type_name: &'static str,
    make: MakeFn,
    samples: fn() -> Vec<Sample>,
}

fn registry() -> &'static RwLock<BTreeMap<&'static str, Entry>> {
    static R: std::sync::OnceLock<RwLock<BTreeMap<&'static str, Entry>>> = std::sync::OnceLock::new();
    R.get_or_init(Default::default)
}

/// Registers `T` under `T::NAME`. Registering the same type again is a no-op; another type (or a
/// built-in op) with that name is `RegistryError::NameClash`.
pub fn register<T: CustomOpDef>() -> std::result::Result<(), RegistryError> {
    let clash = |taken_by: String| RegistryError::NameClash {
        name: T::NAME.into(),
        taken_by,
        type_name: std::any::type_name::<T>().into(),
    };
    if builtin_names().contains(&T::NAME) {
        return Err(clash("the built-in op".into()));
    }
    let mut r = registry().write().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = r.get(T::NAME) {
        return if e.type_id == TypeId::of::<T>() { Ok(()) } else { Err(clash(e.type_name.into())) };
    }
    let make: MakeFn = |v| {
        // A struct without fields may serialize as null rather than `{}`.
        let t: T = serde_json::from_value(v.clone())
            .or_else(|e| if is_empty(v) { serde_json::from_value(Value::Null).map_err(|_| e) } else { Err(e) })
            .map_err(|e| e.to_string())?;
        Ok(Custom::new(t))
    };
    r.insert(
        T::NAME,
        Entry { type_id: TypeId::of::<T>(), type_name: std::any::type_name::<T>(), make, samples: T::samples },
    );
    Ok(())
}

fn is_empty(v: &Value) -> bool {
    v.is_null() || v.as_object().is_some_and(|o| o.is_empty())
}

/// Names of the built-in ops (family members included), which custom ops may not take.
fn builtin_names() -> &'static [&'static str] {
    static N: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    N.get_or_init(|| {
        let mut v: Vec<&'static str> = builtin_samples().iter().map(|s| s.op.def().name()).collect();
        v.extend(["input", "param", "constant", "custom"]);
        v.sort_unstable();
        v.dedup();
        v
    })
}

fn builtin_samples() -> Vec<Sample> {
    Op::all_samples().into_iter().filter(|s| !matches!(s.op, Op::Custom(_))).collect()
}

/// The registered names, sorted.
pub fn registered() -> Vec<&'static str> {
    registry().read().unwrap_or_else(|p| p.into_inner()).keys().copied().collect()
}

/// Builds the registered op `name` from its attributes (the text form's and JSON's path back).
pub fn from_attrs(name: &str, attrs: &Value) -> std::result::Result<Custom, RegistryError> {
    let make = {
        let r = registry().read().unwrap_or_else(|p| p.into_inner());
        r.get(name).map(|e| e.make).ok_or_else(|| RegistryError::NotRegistered { name: name.into() })?
    };
    let c = make(attrs).map_err(|reason| RegistryError::BadAttrs {
        name: name.into(),
        attrs: attrs.to_string(),
        reason,
    })?;
    if c.name() != name {
        return Err(RegistryError::BadAttrs {
            name: name.into(),
            attrs: attrs.to_string(),
            reason: format!("the op it makes is named `{}`; OpDef::name must equal CustomOpDef::NAME", c.name()),
        });
    }
    Ok(c)
}

/// The op for a custom op value (registered or not; see the module docs).
pub fn op<T: OpDef + Serialize + 'static>(value: T) -> Op {
    Op::Custom(Custom::new(value))
}

/// An instance of a custom op: its definition and its attributes as JSON.
#[derive(Clone)]
pub struct Custom {
    def: Arc<dyn OpDef>,
    /// The same value, for `get` (OpDef has no `Any` supertrait).
    any: Arc<dyn Any + Send + Sync>,
    attrs: Value,
}

impl Custom {
    /// Wraps an op value.
    pub fn new<T: OpDef + Serialize + 'static>(value: T) -> Custom {
        let attrs = serde_json::to_value(&value).unwrap_or(Value::Null);
        let attrs = if attrs.is_null() { Value::Object(Default::default()) } else { attrs };
        let value = Arc::new(value);
        Custom { def: value.clone(), any: value, attrs }
    }

    /// The op value as its own type (how a kernel reads its attributes), None for another type.
    pub fn get<T: 'static>(&self) -> Option<&T> {
        self.any.downcast_ref()
    }

    /// The op's name.
    pub fn name(&self) -> &'static str {
        self.def.name()
    }

    /// The attributes as JSON.
    pub fn attrs(&self) -> &Value {
        &self.attrs
    }

    /// The definition.
    pub fn inner(&self) -> &dyn OpDef {
        &*self.def
    }
}

impl fmt::Debug for Custom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Custom({} {})", self.name(), self.attrs)
    }
}

impl PartialEq for Custom {
    fn eq(&self, o: &Custom) -> bool {
        self.name() == o.name() && self.attrs == o.attrs
    }
}

#[derive(Serialize, Deserialize)]
struct Raw {
    name: String,
    #[serde(default)]
    attrs: Value,
}

impl Serialize for Custom {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        Raw { name: self.name().into(), attrs: self.attrs.clone() }.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Custom {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Custom, D::Error> {
        let raw = Raw::deserialize(d)?;
        from_attrs(&raw.name, &raw.attrs).map_err(serde::de::Error::custom)
    }
}

impl OpDef for Custom {
    fn name(&self) -> &'static str {
        self.def.name()
    }
    fn traits(&self) -> OpTraits {
        self.def.traits()
    }
    fn arity(&self) -> Arity {
        self.def.arity()
    }
    fn infer(&self, ins: &[&Shape]) -> std::result::Result<Shape, String> {
        self.def.infer(ins)
    }
    fn reference(&self, ins: &[&HostTensor], out: &Shape) -> Result<HostTensor> {
        self.def.reference(ins, out)
    }
    fn decompose(&self, g: &mut Graph, ins: &[NodeId]) -> Option<NodeId> {
        self.def.decompose(g, ins)
    }
    fn jvp(&self, g: &mut Graph, ins: &[NodeId], t: &[Option<NodeId>], out: NodeId) -> Option<NodeId> {
        self.def.jvp(g, ins, t, out)
    }
    fn vjp(&self, g: &mut Graph, ins: &[NodeId], out: NodeId, ct: NodeId) -> Option<Vec<Option<NodeId>>> {
        self.def.vjp(g, ins, out, ct)
    }
    fn batch(&self, g: &mut Graph, ins: &[NodeId], batched: &[bool], size: usize) -> Option<NodeId> {
        self.def.batch(g, ins, batched, size)
    }
    fn tolerance(&self) -> Option<(f64, f64)> {
        self.def.tolerance()
    }
    /// The samples of every registered custom op.
    fn samples() -> Vec<Sample> {
        let fns: Vec<fn() -> Vec<Sample>> =
            registry().read().unwrap_or_else(|p| p.into_inner()).values().map(|e| e.samples).collect();
        fns.into_iter().flat_map(|f| f()).collect()
    }
}

impl Graph {
    /// Applies a custom op value to `ins`.
    pub fn custom<T: OpDef + Serialize + 'static>(&mut self, value: T, ins: &[NodeId]) -> NodeId {
        self.add_node(op(value), ins)
    }
}
