//! Checkpoints: a `ParamStore` (params and optimizer state) in a safetensors file, with string
//! metadata (the model config as JSON).

use crate::module::ParamStore;
use rlx_ir::{DType, Error, HostTensor, Result, Shape};
use safetensors::tensor::{Dtype, TensorView};
use std::collections::HashMap;
use std::path::Path;

fn file_err(path: &Path, reason: impl Into<String>) -> Error {
    Error::ModelFile { path: path.display().to_string(), reason: reason.into() }
}

fn st_dtype(d: DType) -> Option<Dtype> {
    Some(match d {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::I8 => Dtype::I8,
        DType::U8 => Dtype::U8,
        _ => return None,
    })
}

fn rlx_dtype(d: Dtype) -> Option<DType> {
    [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::I8, DType::U8]
        .into_iter()
        .find(|&x| st_dtype(x) == Some(d))
}

/// Writes every tensor of `store` and the `metadata` pairs to `path`.
pub fn save(path: &Path, store: &ParamStore, metadata: &[(&str, String)]) -> Result<()> {
    let out = to_bytes(store, metadata, path)?;
    // Write then rename, so an interrupted save never leaves a truncated checkpoint.
    let tmp = path.with_extension("safetensors.tmp");
    std::fs::write(&tmp, out).map_err(|e| file_err(&tmp, e.to_string()))?;
    std::fs::rename(&tmp, path).map_err(|e| file_err(path, e.to_string()))
}

/// The bytes `save` writes; `path` names the file in errors.
pub fn to_bytes(store: &ParamStore, metadata: &[(&str, String)], path: &Path) -> Result<Vec<u8>> {
    let mut bytes = vec![];
    for (name, t) in store.iter() {
        let dt = st_dtype(t.dtype())
            .ok_or_else(|| file_err(path, format!("tensor `{name}`: dtype {} cannot be saved", t.dtype())))?;
        bytes.push((name.to_string(), dt, t.dims(), t.to_bytes()));
    }
    let mut views = vec![];
    for (name, dt, dims, b) in &bytes {
        let v = TensorView::new(*dt, dims.clone(), b).map_err(|e| file_err(path, format!("tensor `{name}`: {e}")))?;
        views.push((name.clone(), v));
    }
    let meta: HashMap<String, String> = metadata.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    safetensors::serialize(views, Some(meta)).map_err(|e| file_err(path, e.to_string()))
}

/// Reads every tensor and the metadata of a safetensors file.
pub fn load(path: &Path) -> Result<(ParamStore, HashMap<String, String>)> {
    let bytes = std::fs::read(path).map_err(|e| file_err(path, e.to_string()))?;
    from_bytes(&bytes, path)
}

/// `load` of a file already in memory; `path` names it in errors.
pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<(ParamStore, HashMap<String, String>)> {
    // One parse of the header (`SafeTensors::deserialize` would parse it again); it checks that
    // the tensors' byte ranges tile the data after it.
    let (header_len, meta) =
        safetensors::SafeTensors::read_metadata(bytes).map_err(|e| file_err(path, e.to_string()))?;
    let data = bytes.get(8 + header_len..).unwrap_or_default();
    let mut store = ParamStore::new();
    for (name, info) in meta.tensors() {
        let dt = rlx_dtype(info.dtype)
            .ok_or_else(|| file_err(path, format!("tensor `{name}`: dtype {:?} is not supported", info.dtype)))?;
        let (start, end) = info.data_offsets;
        let raw = data
            .get(start..end)
            .ok_or_else(|| file_err(path, format!("tensor `{name}`: bytes {start}..{end} are outside the file")))?;
        let t = HostTensor::from_bytes(Shape::new(&info.shape, dt), raw)?;
        store.insert(&name, t);
    }
    Ok((store, meta.metadata().clone().unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_tensors_and_metadata() {
        let dir = std::env::temp_dir().join(format!("rlx-nn-ckpt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.safetensors");
        let mut s = ParamStore::new();
        s.insert("w", HostTensor::from_f32(&[2, 3], &[1.0, -2.0, 3.5, 0.0, 1e-8, 7.0]).unwrap());
        s.insert("opt.count", HostTensor::from_f32(&[], &[3.0]).unwrap());
        save(&p, &s, &[("rlx.config", "{\"a\":1}".into())]).unwrap();
        let (back, meta) = load(&p).unwrap();
        assert_eq!(back, s);
        assert_eq!(meta.get("rlx.config").map(|s| s.as_str()), Some("{\"a\":1}"));
        std::fs::write(&p, b"not a checkpoint").unwrap();
        assert!(matches!(load(&p), Err(Error::ModelFile { .. })));
        std::fs::remove_dir_all(&dir).ok();
    }
}
