//! GGUF writer: metadata, tensor table and aligned tensor data, for versions 1, 2 and 3.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use crate::GgmlType;
use crate::error::{Error, Result};
use crate::reader::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS, alignment_of, tensor_size};
use crate::value::{Array, Value};

struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

/// Builds a GGUF file in memory and writes it out.
pub struct GgufWriter {
    version: u32,
    alignment: u64,
    metadata: Vec<(String, Value)>,
    keys: HashSet<String>,
    tensors: Vec<PendingTensor>,
    names: HashSet<String>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// A writer for GGUF v3 with the default 32-byte alignment.
    pub fn new() -> Self {
        GgufWriter {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            keys: HashSet::new(),
            tensors: Vec::new(),
            names: HashSet::new(),
        }
    }

    /// A writer for a given version (1, 2 or 3).
    pub fn with_version(version: u32) -> Result<Self> {
        if !(1..=3).contains(&version) {
            return Err(Error::UnsupportedVersion { version, hint: " (the writer supports 1, 2 and 3)" });
        }
        Ok(GgufWriter { version, ..Self::new() })
    }

    /// Adds a metadata entry; `general.alignment` also sets the data alignment.
    pub fn add_metadata(&mut self, key: impl Into<String>, value: Value) -> Result<&mut Self> {
        let key = key.into();
        if self.keys.contains(&key) {
            return Err(Error::DuplicateKey { key, offset: 0 });
        }
        if key == ALIGNMENT_KEY {
            self.alignment = alignment_of(&[(key.clone(), value.clone())])?;
        }
        self.keys.insert(key.clone());
        self.metadata.push((key, value));
        Ok(self)
    }

    /// Adds a tensor; `dims` are in ggml order (innermost first) and `data` is its packed bytes.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> Result<&mut Self> {
        let name = name.into();
        if dims.len() > MAX_DIMS {
            return Err(Error::TooManyDims { tensor: name, offset: 0, n_dims: dims.len() as u32, max: MAX_DIMS });
        }
        let (_, n_bytes) = tensor_size(&name, dims, ty)?;
        if n_bytes != data.len() as u64 {
            return Err(Error::LengthMismatch {
                what: format!("data of tensor {name:?} ({ty} {dims:?})"),
                expected: n_bytes as usize,
                got: data.len(),
            });
        }
        if !self.names.insert(name.clone()) {
            return Err(Error::DuplicateTensor { tensor: name });
        }
        self.tensors.push(PendingTensor { name, dims: dims.to_vec(), ty, data });
        Ok(self)
    }

    /// Serializes the file.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.write_to(&mut out)?;
        Ok(out)
    }

    /// Writes the file to a path.
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let bytes = self.to_bytes()?;
        std::fs::write(path, bytes).map_err(|source| Error::Io { path: path.display().to_string(), source })
    }

    /// Writes the file to a stream.
    pub fn write_to(&self, w: &mut impl Write) -> Result<()> {
        let mut e = Encoder { out: Vec::new(), version: self.version };
        e.out.extend_from_slice(&GGUF_MAGIC);
        e.u32(self.version);
        e.len(self.tensors.len() as u64, "tensor count")?;
        e.len(self.metadata.len() as u64, "metadata count")?;
        for (key, value) in &self.metadata {
            e.string(key)?;
            e.u32(value.value_type() as u32);
            e.value(value)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            e.string(&t.name)?;
            e.u32(t.dims.len() as u32);
            for &d in &t.dims {
                e.len(d, "tensor dimension")?;
            }
            e.u32(t.ty.id());
            e.u64(offset);
            offset += (t.data.len() as u64).div_ceil(self.alignment) * self.alignment;
        }
        e.pad(self.alignment);
        for t in &self.tensors {
            e.out.extend_from_slice(&t.data);
            e.pad(self.alignment);
        }
        w.write_all(&e.out)?;
        Ok(())
    }
}

/// Little-endian serializer that knows the version's length width.
struct Encoder {
    out: Vec<u8>,
    version: u32,
}

impl Encoder {
    fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    fn len(&mut self, v: u64, what: &str) -> Result<()> {
        if self.version == 1 {
            let v = u32::try_from(v)
                .map_err(|_| Error::NotRepresentable { version: 1, what: format!("{what} {v} exceeds u32") })?;
            self.u32(v);
        } else {
            self.u64(v);
        }
        Ok(())
    }

    fn pad(&mut self, alignment: u64) {
        let len = self.out.len() as u64;
        let target = len.div_ceil(alignment) * alignment;
        self.out.resize(target as usize, 0);
    }

    fn string(&mut self, s: &str) -> Result<()> {
        self.len(s.len() as u64, "string length")?;
        self.out.extend_from_slice(s.as_bytes());
        Ok(())
    }

    fn value(&mut self, v: &Value) -> Result<()> {
        match v {
            Value::U8(x) => self.out.push(*x),
            Value::I8(x) => self.out.push(*x as u8),
            Value::U16(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            Value::I16(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            Value::U32(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            Value::I32(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            Value::F32(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            Value::Bool(x) => self.out.push(u8::from(*x)),
            Value::String(s) => self.string(s)?,
            Value::Array(a) => self.array(a)?,
            Value::U64(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            Value::I64(x) => self.out.extend_from_slice(&x.to_le_bytes()),
            Value::F64(x) => self.out.extend_from_slice(&x.to_le_bytes()),
        }
        Ok(())
    }

    fn array(&mut self, a: &Array) -> Result<()> {
        self.u32(a.element_type() as u32);
        self.len(a.len() as u64, "array length")?;
        macro_rules! le {
            ($v:expr) => {
                for x in $v {
                    self.out.extend_from_slice(&x.to_le_bytes());
                }
            };
        }
        match a {
            Array::U8(v) => self.out.extend_from_slice(v),
            Array::I8(v) => le!(v),
            Array::U16(v) => le!(v),
            Array::I16(v) => le!(v),
            Array::U32(v) => le!(v),
            Array::I32(v) => le!(v),
            Array::F32(v) => le!(v),
            Array::U64(v) => le!(v),
            Array::I64(v) => le!(v),
            Array::F64(v) => le!(v),
            Array::Bool(v) => self.out.extend(v.iter().map(|&b| u8::from(b))),
            Array::String(v) => {
                for s in v {
                    self.string(s)?;
                }
            }
            Array::Array(v) => {
                for inner in v {
                    self.array(inner)?;
                }
            }
        }
        Ok(())
    }
}
