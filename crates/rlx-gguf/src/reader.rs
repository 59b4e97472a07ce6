//! GGUF parsing: header, metadata and tensor table, every read bounds-checked against the file.

use std::collections::HashMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::value::{Array, Value, ValueType};
use crate::{GgmlType, dequantize};

/// The GGUF magic, `GGUF` read as a little-endian u32.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment used when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most tensor dimensions ggml supports (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// Deepest array nesting the reader accepts.
pub const MAX_ARRAY_DEPTH: usize = 16;
/// The metadata key that sets the data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// One tensor's entry in the tensor table.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// Tensor name.
    pub name: String,
    /// Dimensions in ggml order: innermost (contiguous) first.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Data offset relative to the start of the data section.
    pub offset: u64,
    /// Total elements.
    pub n_elements: u64,
    /// Total bytes of packed data.
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Dimensions in row-major order: outermost first (numpy / PyTorch order).
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }
}

/// A parsed GGUF header: version, metadata and tensor table, with data-section layout.
#[derive(Debug, Clone)]
pub struct Gguf {
    version: u32,
    metadata: Vec<(String, Value)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

/// A bounds-checked little-endian reader over the file bytes.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    version: u32,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn truncated(&self, what: &'static str, needed: u64) -> Error {
        Error::Truncated { what, offset: self.pos as u64, needed, len: self.buf.len() as u64 }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.truncated(what, n as u64));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let bytes = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count or length: u32 in v1, u64 from v2 on.
    fn len_field(&mut self, what: &'static str) -> Result<u64> {
        if self.version == 1 { self.u32(what).map(u64::from) } else { self.u64(what) }
    }

    fn len_size(&self) -> usize {
        if self.version == 1 { 4 } else { 8 }
    }

    /// Checks that `count` items of at least `min_size` bytes each can fit in what is left.
    fn check_count(&self, count: u64, min_size: usize, what: &'static str) -> Result<usize> {
        let needed = count.saturating_mul(min_size as u64);
        if needed > self.remaining() as u64 {
            return Err(self.truncated(what, needed));
        }
        Ok(count as usize)
    }

    fn string(&mut self, what: &'static str) -> Result<String> {
        let len = self.len_field(what)?;
        let len = self.check_count(len, 1, what)?;
        let start = self.pos as u64;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| Error::InvalidUtf8 { offset: start })
    }

    fn value_type(&mut self) -> Result<ValueType> {
        let offset = self.pos as u64;
        let raw = self.u32("metadata value type")?;
        ValueType::from_id(raw).ok_or(Error::InvalidValueType { offset, raw })
    }

    fn bool(&mut self) -> Result<bool> {
        let offset = self.pos as u64;
        match self.take(1, "bool value")?[0] {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(Error::InvalidBool { offset, value }),
        }
    }

    fn value(&mut self, ty: ValueType, depth: usize) -> Result<Value> {
        const W: &str = "metadata value";
        Ok(match ty {
            ValueType::U8 => Value::U8(self.take(1, W)?[0]),
            ValueType::I8 => Value::I8(self.take(1, W)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(W)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(W)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(W)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(W)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(W)?)),
            ValueType::Bool => Value::Bool(self.bool()?),
            ValueType::String => Value::String(self.string("metadata string")?),
            ValueType::Array => Value::Array(self.array_value(depth + 1)?),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(W)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(W)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(W)?)),
        })
    }

    /// Reads `count` fixed-size scalars after checking that they all fit.
    fn scalars<T, const N: usize>(&mut self, count: u64, conv: fn([u8; N]) -> T) -> Result<Vec<T>> {
        let n = self.check_count(count, N, "metadata array elements")?;
        let bytes = self.take(n * N, "metadata array elements")?;
        Ok(bytes.chunks_exact(N).map(|c| conv(c.try_into().expect("chunk of N bytes"))).collect())
    }

    fn array_value(&mut self, depth: usize) -> Result<Array> {
        if depth > MAX_ARRAY_DEPTH {
            return Err(Error::NestingTooDeep { offset: self.pos as u64, max: MAX_ARRAY_DEPTH });
        }
        let ty = self.value_type()?;
        let count = self.len_field("metadata array length")?;
        Ok(match ty {
            ValueType::U8 => Array::U8(self.scalars(count, |b: [u8; 1]| b[0])?),
            ValueType::I8 => Array::I8(self.scalars(count, |b: [u8; 1]| b[0] as i8)?),
            ValueType::U16 => Array::U16(self.scalars(count, u16::from_le_bytes)?),
            ValueType::I16 => Array::I16(self.scalars(count, i16::from_le_bytes)?),
            ValueType::U32 => Array::U32(self.scalars(count, u32::from_le_bytes)?),
            ValueType::I32 => Array::I32(self.scalars(count, i32::from_le_bytes)?),
            ValueType::F32 => Array::F32(self.scalars(count, f32::from_le_bytes)?),
            ValueType::U64 => Array::U64(self.scalars(count, u64::from_le_bytes)?),
            ValueType::I64 => Array::I64(self.scalars(count, i64::from_le_bytes)?),
            ValueType::F64 => Array::F64(self.scalars(count, f64::from_le_bytes)?),
            ValueType::Bool => {
                let n = self.check_count(count, 1, "metadata array elements")?;
                Array::Bool((0..n).map(|_| self.bool()).collect::<Result<_>>()?)
            }
            ValueType::String => {
                let n = self.check_count(count, self.len_size(), "metadata string array")?;
                let mut out = Vec::with_capacity(n);
                for _ in 0..n {
                    out.push(self.string("metadata string")?);
                }
                Array::String(out)
            }
            ValueType::Array => {
                let n = self.check_count(count, 4 + self.len_size(), "nested metadata arrays")?;
                let mut out = Vec::with_capacity(n);
                for _ in 0..n {
                    out.push(self.array_value(depth + 1)?);
                }
                Array::Array(out)
            }
        })
    }

    fn tensor_info(&mut self) -> Result<TensorInfo> {
        let name = self.string("tensor name")?;
        let dims_offset = self.pos as u64;
        let n_dims = self.u32("tensor dimension count")?;
        if n_dims as usize > MAX_DIMS {
            return Err(Error::TooManyDims { tensor: name, offset: dims_offset, n_dims, max: MAX_DIMS });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(self.len_field("tensor dimension")?);
        }
        let type_offset = self.pos as u64;
        let raw = self.u32("tensor type")?;
        let Some(ty) = GgmlType::from_id(raw) else {
            return Err(Error::UnknownTensorType { tensor: name, offset: type_offset, raw });
        };
        let offset = self.u64("tensor data offset")?;
        let (n_elements, n_bytes) = tensor_size(&name, &dims, ty)?;
        Ok(TensorInfo { name, dims, ty, offset, n_elements, n_bytes })
    }
}

/// Element and byte counts of a tensor, checked for overflow and block alignment.
pub(crate) fn tensor_size(name: &str, dims: &[u64], ty: GgmlType) -> Result<(u64, u64)> {
    let overflow = || Error::SizeOverflow { tensor: name.to_string(), dims: dims.to_vec() };
    let n_elements = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).ok_or_else(overflow)?;
    let ne0 = dims.first().copied().unwrap_or(1);
    let block = ty.block_size();
    if ne0 % block as u64 != 0 {
        return Err(Error::BlockMismatch { tensor: name.to_string(), ty, ne0, block });
    }
    let n_bytes = ty.bytes_for(n_elements).ok_or_else(overflow)?;
    if usize::try_from(n_bytes).is_err() || usize::try_from(n_elements).is_err() {
        return Err(overflow());
    }
    Ok((n_elements, n_bytes))
}

/// Reads the alignment from metadata, defaulting to 32.
pub(crate) fn alignment_of(metadata: &[(String, Value)]) -> Result<u64> {
    let Some((_, v)) = metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let value = v.as_u64().ok_or_else(|| Error::WrongMetadataType {
        key: ALIGNMENT_KEY.to_string(),
        expected: "u32",
        found: v.value_type().name().to_string(),
    })?;
    if value == 0 || !value.is_power_of_two() || value > u64::from(u32::MAX) {
        return Err(Error::BadAlignment { value });
    }
    Ok(value)
}

impl Gguf {
    /// Parses the header, metadata and tensor table of GGUF bytes, and checks that every tensor's
    /// data lies inside `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let mut c = Cursor { buf: bytes, pos: 0, version: 0 };
        let magic: [u8; 4] = c.array("magic")?;
        if magic != GGUF_MAGIC {
            return Err(Error::BadMagic { found: magic });
        }
        let version = c.u32("version")?;
        match version {
            1..=3 => {}
            v if v.swap_bytes() <= 3 && v.swap_bytes() >= 1 => {
                return Err(Error::UnsupportedVersion { version, hint: " (a big-endian GGUF file)" });
            }
            _ => return Err(Error::UnsupportedVersion { version, hint: "" }),
        }
        c.version = version;
        let n_tensors = c.len_field("tensor count")?;
        let n_kv = c.len_field("metadata count")?;

        // Each key/value takes at least a key length, a type and one byte.
        let n_kv = c.check_count(n_kv, c.len_size() + 5, "metadata entries")?;
        let mut metadata = Vec::with_capacity(n_kv);
        let mut key_index = HashMap::with_capacity(n_kv);
        for _ in 0..n_kv {
            let key_offset = c.pos as u64;
            let key = c.string("metadata key")?;
            let ty = c.value_type()?;
            let value = c.value(ty, 0)?;
            if key_index.insert(key.clone(), metadata.len()).is_some() {
                return Err(Error::DuplicateKey { key, offset: key_offset });
            }
            metadata.push((key, value));
        }
        let alignment = alignment_of(&metadata)?;

        // Each tensor info takes at least a name length, a dim count, a type and an offset.
        let n_tensors = c.check_count(n_tensors, c.len_size() + 16, "tensor infos")?;
        let mut tensors = Vec::with_capacity(n_tensors);
        let mut tensor_index = HashMap::with_capacity(n_tensors);
        for _ in 0..n_tensors {
            let info = c.tensor_info()?;
            if tensor_index.insert(info.name.clone(), tensors.len()).is_some() {
                return Err(Error::DuplicateTensor { tensor: info.name });
            }
            tensors.push(info);
        }

        let end = c.pos as u64;
        let data_offset = end.div_ceil(alignment) * alignment;
        let len = bytes.len() as u64;
        for t in &tensors {
            if t.offset % alignment != 0 {
                return Err(Error::MisalignedTensor { tensor: t.name.clone(), offset: t.offset, alignment });
            }
            let start = data_offset.checked_add(t.offset);
            let stop = start.and_then(|s| s.checked_add(t.n_bytes));
            match (start, stop) {
                (Some(_), Some(stop)) if stop <= len => {}
                _ => {
                    return Err(Error::TensorOutOfBounds {
                        tensor: t.name.clone(),
                        start: start.unwrap_or(u64::MAX),
                        end: stop.unwrap_or(u64::MAX),
                        len,
                    });
                }
            }
        }
        Ok(Gguf { version, metadata, key_index, tensors, tensor_index, alignment, data_offset })
    }

    /// The format version (1, 2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Data alignment in bytes.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute file offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// All metadata entries, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// The value of a metadata key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// The tensor table, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor info of a named tensor.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// Absolute byte range of a tensor's data (already checked to lie inside the file).
    pub fn tensor_range(&self, info: &TensorInfo) -> std::ops::Range<usize> {
        let start = (self.data_offset + info.offset) as usize;
        start..start + info.n_bytes as usize
    }
}

/// Where a file's bytes live.
enum Storage {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

/// A GGUF file with its bytes (memory-mapped or owned); tensors are zero-copy views into them.
pub struct GgufFile {
    gguf: Gguf,
    storage: Storage,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile").field("gguf", &self.gguf).field("len", &self.bytes().len()).finish()
    }
}

impl GgufFile {
    /// Memory-maps and parses a GGUF file. The file must not be modified while it is open.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| Error::Io { path: path.display().to_string(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len == 0 {
            return Err(Error::Truncated { what: "magic", offset: 0, needed: 4, len: 0 });
        }
        // SAFETY: the map is read-only; the caller must not truncate or rewrite the file while open
        // (the same contract as every mmap-based model loader).
        let mmap = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let gguf = Gguf::parse(&mmap)?;
        Ok(GgufFile { gguf, storage: Storage::Mmap(mmap) })
    }

    /// Parses GGUF bytes held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        let gguf = Gguf::parse(&bytes)?;
        Ok(GgufFile { gguf, storage: Storage::Owned(bytes) })
    }

    /// The parsed header.
    pub fn gguf(&self) -> &Gguf {
        &self.gguf
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.storage {
            Storage::Mmap(m) => m,
            Storage::Owned(v) => v,
        }
    }

    /// A zero-copy view of a named tensor.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let info = self.gguf.tensor_info(name).ok_or_else(|| Error::TensorNotFound { name: name.to_string() })?;
        Ok(self.view(info))
    }

    /// Zero-copy views of every tensor, in file order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> {
        self.gguf.tensors().iter().map(|info| self.view(info))
    }

    fn view<'a>(&'a self, info: &'a TensorInfo) -> TensorView<'a> {
        TensorView { info, data: &self.bytes()[self.gguf.tensor_range(info)] }
    }
}

/// A tensor's info and its packed bytes, borrowed from the file.
#[derive(Debug, Clone, Copy)]
pub struct TensorView<'a> {
    /// The tensor's table entry.
    pub info: &'a TensorInfo,
    /// Its packed data, exactly `info.n_bytes` long.
    pub data: &'a [u8],
}

impl<'a> TensorView<'a> {
    /// The data as `f32` without copying, for F32 tensors whose bytes are 4-byte aligned in memory.
    pub fn as_f32(&self) -> Option<&'a [f32]> {
        if self.info.ty != GgmlType::F32 {
            return None;
        }
        bytemuck::try_cast_slice(self.data).ok()
    }

    /// Dequantizes (or converts) the tensor to `f32`.
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        dequantize(self.info.ty, self.data, self.info.n_elements as usize)
    }
}
