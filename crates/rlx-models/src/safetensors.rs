//! Memory-mapped safetensors files: the tensor table, and f32 views of F32/F16/BF16 tensors
//! checked against the shape a model needs. `from_bytes` reads the same from memory (the fuzz
//! target in ../fuzz feeds it).

use memmap2::Mmap;
use rlx_ir::{Error, Result};
use safetensors::{Dtype, SafeTensors, tensor::Metadata};
use std::borrow::Cow;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One entry of a safetensors header.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorEntry {
    /// Tensor name.
    pub name: String,
    /// Element type as the file spells it (`F32`, `BF16`, ...).
    pub dtype: String,
    /// Dims.
    pub shape: Vec<usize>,
    /// Byte range of the data, from the start of the file.
    pub offsets: (usize, usize),
}

/// The bytes of a safetensors file: a map of the file, or bytes already in memory.
pub type FileBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// A safetensors file mapped into memory; tensors are read lazily from the map.
pub struct SafetensorsFile {
    path: PathBuf,
    map: FileBytes,
    header_len: usize,
    meta: Metadata,
}

impl std::fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsFile").field("path", &self.path).field("bytes", &self.bytes().len()).finish()
    }
}

fn model_err(path: &Path, reason: impl std::fmt::Display) -> Error {
    Error::ModelFile { path: path.display().to_string(), reason: reason.to_string() }
}

impl SafetensorsFile {
    /// Maps `path` and parses its header (offsets and sizes are validated against the file).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|e| model_err(path, e))?;
        // SAFETY: the map is read-only; as with every mmap reader, the file must not be
        // truncated by another process while it is mapped.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| model_err(path, format!("mmap failed: {e}")))?;
        Self::from_shared(Arc::new(map), path)
    }

    /// Parses a safetensors file already in memory; `path` names it in errors.
    pub fn from_bytes(bytes: Vec<u8>, path: impl AsRef<Path>) -> Result<Self> {
        Self::from_shared(Arc::new(bytes), path.as_ref())
    }

    fn from_shared(map: FileBytes, path: &Path) -> Result<Self> {
        let (header_len, meta) = SafeTensors::read_metadata((*map).as_ref())
            .map_err(|e| model_err(path, format!("not a valid safetensors file: {e}")))?;
        Ok(SafetensorsFile { path: path.to_path_buf(), map, header_len, meta })
    }

    fn bytes(&self) -> &[u8] {
        (*self.map).as_ref()
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The free-form `__metadata__` map of the header, if any.
    pub fn metadata(&self) -> Vec<(String, String)> {
        let mut kv: Vec<(String, String)> =
            self.meta.metadata().iter().flatten().map(|(k, v)| (k.clone(), v.clone())).collect();
        kv.sort();
        kv
    }

    /// Every tensor, sorted by data offset.
    pub fn entries(&self) -> Vec<TensorEntry> {
        let base = 8 + self.header_len;
        let mut v: Vec<TensorEntry> = self
            .meta
            .tensors()
            .into_iter()
            .map(|(name, info)| TensorEntry {
                name,
                dtype: info.dtype.to_string(),
                shape: info.shape.clone(),
                offsets: (base + info.data_offsets.0, base + info.data_offsets.1),
            })
            .collect();
        v.sort_by(|a, b| a.offsets.cmp(&b.offsets).then_with(|| a.name.cmp(&b.name)));
        v
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.meta.tensors().len()
    }

    /// True when the file has no tensors.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a tensor of this name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.meta.info(name).is_some()
    }

    /// Checks that a tensor exists with shape `expected` and a float dtype, without reading it.
    pub fn check(&self, name: &str, expected: &[usize]) -> Result<&safetensors::tensor::TensorInfo> {
        let path = self.path.display().to_string();
        let info = self.meta.info(name).ok_or_else(|| Error::MissingTensor {
            path: path.clone(),
            name: name.into(),
            expected: expected.to_vec(),
            count: self.len(),
        })?;
        if info.shape != expected {
            return Err(Error::TensorShape {
                path,
                name: name.into(),
                expected: expected.to_vec(),
                got: info.shape.clone(),
                dtype: info.dtype.to_string(),
            });
        }
        if !matches!(info.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
            let reason =
                format!("tensor `{name}` has dtype {}; only F32, F16 and BF16 weights are supported", info.dtype);
            return Err(model_err(&self.path, reason));
        }
        Ok(info)
    }

    /// The map and the byte range of an F32 tensor stored 4-byte aligned, after checking its
    /// shape is `expected`: the bytes can be bound as a param without a copy. `None` for other
    /// dtypes or unaligned data.
    pub fn f32_bytes(&self, name: &str, expected: &[usize]) -> Result<Option<(FileBytes, Range<usize>)>> {
        let info = self.check(name, expected)?;
        let base = 8 + self.header_len;
        let range = base + info.data_offsets.0..base + info.data_offsets.1;
        let aligned = bytemuck_f32(&self.bytes()[range.clone()]).is_some();
        Ok((info.dtype == Dtype::F32 && aligned).then(|| (self.map.clone(), range)))
    }

    /// After `check`: the tensor's dtype and its byte range from the start of the file.
    pub fn checked_range(&self, name: &str, expected: &[usize]) -> Result<(Dtype, Range<usize>)> {
        let info = self.check(name, expected)?;
        let base = 8 + self.header_len;
        Ok((info.dtype, base + info.data_offsets.0..base + info.data_offsets.1))
    }

    /// The whole file's bytes (the memory map), shared: params may point into it.
    pub fn shared_bytes(&self) -> FileBytes {
        self.map.clone()
    }

    /// The whole file's bytes.
    pub fn file_bytes(&self) -> &[u8] {
        self.bytes()
    }

    /// The tensor's data as f32, converted from F32, F16 or BF16, after checking that its
    /// shape is `expected`. F32 data is borrowed from the map when aligned.
    pub fn f32_tensor(&self, name: &str, expected: &[usize]) -> Result<Cow<'_, [f32]>> {
        let info = self.check(name, expected)?;
        let base = 8 + self.header_len;
        let bytes = &self.bytes()[base + info.data_offsets.0..base + info.data_offsets.1];
        let halves = || bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]));
        Ok(match info.dtype {
            Dtype::F32 => match bytemuck_f32(bytes) {
                Some(s) => Cow::Borrowed(s),
                None => {
                    Cow::Owned(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
                }
            },
            Dtype::F16 => Cow::Owned(halves().map(|h| half::f16::from_bits(h).to_f32()).collect()),
            Dtype::BF16 => Cow::Owned(halves().map(|h| half::bf16::from_bits(h).to_f32()).collect()),
            d => return Err(model_err(&self.path, format!("tensor `{name}`: unsupported dtype {d}"))),
        })
    }
}

/// Reinterprets little-endian f32 bytes in place when the platform and alignment allow.
fn bytemuck_f32(bytes: &[u8]) -> Option<&[f32]> {
    if cfg!(target_endian = "big") || !bytes.len().is_multiple_of(4) || bytes.as_ptr().align_offset(4) != 0 {
        return None;
    }
    // SAFETY: the pointer is 4-aligned, the length a multiple of 4, every bit pattern is a valid
    // f32, and the slice borrows from `bytes`, so it lives no longer than the map.
    Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<f32>(), bytes.len() / 4) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::TensorView;

    fn write(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
        let views: Vec<(String, TensorView<'_>)> =
            tensors.iter().map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
        safetensors::serialize_to_file(views, None, path).unwrap();
    }

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("rlx-models-{}-{name}.safetensors", std::process::id()))
    }

    #[test]
    fn reads_f32_f16_bf16_and_reports_bad_tensors() {
        let p = tmp("dtypes");
        let vals = [1.5f32, -2.25, 0.0, 3.0];
        let f32b: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let f16b: Vec<u8> = vals.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect();
        let bf16b: Vec<u8> = vals.iter().flat_map(|v| half::bf16::from_f32(*v).to_le_bytes()).collect();
        let i64b: Vec<u8> = [1i64, 2].iter().flat_map(|v| v.to_le_bytes()).collect();
        write(
            &p,
            &[
                ("a", Dtype::F32, vec![2, 2], f32b),
                ("b", Dtype::F16, vec![4], f16b),
                ("c", Dtype::BF16, vec![1, 4], bf16b),
                ("ids", Dtype::I64, vec![2], i64b),
            ],
        );
        let f = SafetensorsFile::open(&p).unwrap();
        assert_eq!(f.len(), 4);
        assert_eq!(&*f.f32_tensor("a", &[2, 2]).unwrap(), &vals);
        assert_eq!(&*f.f32_tensor("b", &[4]).unwrap(), &vals);
        assert_eq!(&*f.f32_tensor("c", &[1, 4]).unwrap(), &vals);
        let e = f.f32_tensor("a", &[4]).unwrap_err();
        assert!(matches!(&e, Error::TensorShape { got, expected, .. } if got == &[2, 2] && expected == &[4]), "{e}");
        let e = f.f32_tensor("nope", &[3]).unwrap_err().to_string();
        assert!(e.contains("`nope`") && e.contains("[3]") && e.contains("4 tensors"), "{e}");
        let e = f.f32_tensor("ids", &[2]).unwrap_err().to_string();
        assert!(e.contains("I64"), "{e}");
        let names: Vec<String> = f.entries().into_iter().map(|e| e.name).collect();
        assert_eq!(names.len(), 4);
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn truncated_or_missing_files_are_errors() {
        let p = tmp("trunc");
        write(&p, &[("a", Dtype::F32, vec![2], vec![0u8; 8])]);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.truncate(bytes.len() - 3);
        std::fs::write(&p, &bytes).unwrap();
        let e = SafetensorsFile::open(&p).unwrap_err().to_string();
        assert!(e.contains("not a valid safetensors file"), "{e}");
        std::fs::remove_file(&p).unwrap();
        let e = SafetensorsFile::open(&p).unwrap_err().to_string();
        assert!(e.contains("trunc"), "{e}");
    }
}
