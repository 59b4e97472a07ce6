//! Graphs with dynamic dims (sequence length, batch): compiled once per concrete binding and
//! cached, with optional bucketing so that nearby sizes share one compiled graph.

use crate::{CompiledGraph, Session};
use rlx_ir::{Error, Graph, HostTensor, Result};
use std::collections::{BTreeSet, HashMap};

/// A graph with symbolic dims, compiled on demand per binding. Params are kept on the host and
/// set on every compiled instance (state updates act per instance).
pub struct DynamicGraph {
    session: Session,
    graph: Graph,
    symbols: Vec<String>,
    buckets: HashMap<String, Vec<usize>>,
    params: Vec<(String, HostTensor)>,
    cache: HashMap<Vec<usize>, CompiledGraph>,
}

impl DynamicGraph {
    /// Wraps a verified graph; nothing is compiled until `get`.
    pub fn new(session: Session, graph: Graph) -> Result<Self> {
        graph.verify()?;
        let symbols: BTreeSet<String> =
            graph.nodes().iter().flat_map(|n| n.ty.symbols().map(str::to_string).collect::<Vec<_>>()).collect();
        Ok(DynamicGraph {
            session,
            graph,
            symbols: symbols.into_iter().collect(),
            buckets: HashMap::new(),
            params: vec![],
            cache: HashMap::new(),
        })
    }

    /// The graph's dynamic symbols, sorted.
    pub fn symbols(&self) -> &[String] {
        &self.symbols
    }

    /// Rounds sizes of `symbol` up to the next of `sizes`; a size above the largest is an error.
    /// The caller pads its inputs to the bucket and masks the padding.
    pub fn with_buckets(mut self, symbol: &str, sizes: &[usize]) -> Result<Self> {
        if !self.symbols.iter().any(|s| s == symbol) {
            return Err(self.unknown(symbol));
        }
        let mut sizes = sizes.to_vec();
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.first().is_none_or(|&s| s == 0) {
            return Err(Error::eval("with_buckets", format!("buckets for `{symbol}` must be non-empty and positive")));
        }
        self.buckets.insert(symbol.to_string(), sizes);
        Ok(self)
    }

    fn unknown(&self, symbol: &str) -> Error {
        Error::UnknownName { kind: "dynamic dim", name: symbol.into(), known: self.symbols.clone() }
    }

    /// The size `n` of `symbol` is compiled as: its bucket, or `n` itself without buckets.
    pub fn bucket(&self, symbol: &str, n: usize) -> Result<usize> {
        match self.buckets.get(symbol) {
            None => Ok(n),
            Some(b) => b.iter().copied().find(|&s| s >= n).ok_or_else(|| {
                Error::eval(
                    "bucket",
                    format!("`{symbol}` = {n} is above the largest bucket {}", b.last().copied().unwrap_or(0)),
                )
            }),
        }
    }

    /// Sets a param on every compiled instance, now and later.
    pub fn set_param(&mut self, name: &str, value: &HostTensor) -> Result<()> {
        for cg in self.cache.values_mut() {
            cg.set_param_tensor(name, value)?;
        }
        match self.params.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value.clone(),
            None => self.params.push((name.to_string(), value.clone())),
        }
        Ok(())
    }

    /// The binding actually compiled for `bindings` (bucketed, in `symbols` order).
    pub fn resolve(&self, bindings: &[(&str, usize)]) -> Result<Vec<(String, usize)>> {
        for (name, _) in bindings {
            if !self.symbols.iter().any(|s| s == name) {
                return Err(self.unknown(name));
            }
        }
        self.symbols
            .iter()
            .map(|s| {
                let n = bindings.iter().find(|(b, _)| b == s).map(|(_, n)| *n).ok_or_else(|| Error::UnboundDim {
                    symbol: s.clone(),
                    context: format!("DynamicGraph `{}`: no size given", self.graph.name()),
                })?;
                Ok((s.clone(), self.bucket(s, n)?))
            })
            .collect()
    }

    /// The compiled graph for `bindings`, compiling (and setting the params) on first use.
    pub fn get(&mut self, bindings: &[(&str, usize)]) -> Result<&mut CompiledGraph> {
        let resolved = self.resolve(bindings)?;
        let key: Vec<usize> = resolved.iter().map(|(_, n)| *n).collect();
        if !self.cache.contains_key(&key) {
            let refs: Vec<(&str, usize)> = resolved.iter().map(|(s, n)| (s.as_str(), *n)).collect();
            let mut cg = self.session.compile(self.graph.bind_dims(&refs)?)?;
            for (name, value) in &self.params {
                cg.set_param_tensor(name, value)?;
            }
            self.cache.insert(key.clone(), cg);
        }
        Ok(self.cache.get_mut(&key).unwrap_or_else(|| unreachable!("inserted above")))
    }

    /// How many bindings have been compiled.
    pub fn compiled_count(&self) -> usize {
        self.cache.len()
    }
}
