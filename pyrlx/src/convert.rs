//! Conversions between Python values (dtype names, numpy dtypes, ndarrays) and RLX types.
//! Arrays cross through numpy's `__array_struct__` capsule (readable under the abi3 limited API): contiguous
//! inputs are read in place and outputs are written straight into fresh numpy arrays.

use crate::errors::to_py;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyTuple};
use rlx::ir::{DType, Dim, Error, HostTensor, Shape};

/// Cached numpy entry points and the numpy dtype of each RLX dtype (bf16 needs ml_dtypes).
struct Numpy {
    ndarray: Py<PyAny>,
    empty: Py<PyAny>,
    asarray: Py<PyAny>,
    contiguous: Py<PyAny>,
    dtype: Py<PyAny>,
    dtypes: Vec<Option<Py<PyAny>>>,
}

static NUMPY: PyOnceLock<Numpy> = PyOnceLock::new();

fn numpy(py: Python<'_>) -> PyResult<&'static Numpy> {
    NUMPY.get_or_try_init(py, || {
        let np = py.import("numpy")?;
        let bf16 = py.import("ml_dtypes").and_then(|m| m.getattr("bfloat16")).ok();
        let mut dtypes = vec![];
        for dt in DType::ALL {
            let d = match dt {
                DType::BF16 => match &bf16 {
                    Some(t) => Some(np.getattr("dtype")?.call1((t,))?.unbind()),
                    None => None,
                },
                _ => Some(np.getattr("dtype")?.call1((numpy_name(dt),))?.unbind()),
            };
            dtypes.push(d);
        }
        Ok::<_, PyErr>(Numpy {
            ndarray: np.getattr("ndarray")?.unbind(),
            empty: np.getattr("empty")?.unbind(),
            asarray: np.getattr("asarray")?.unbind(),
            contiguous: np.getattr("ascontiguousarray")?.unbind(),
            dtype: np.getattr("dtype")?.unbind(),
            dtypes,
        })
    })
}

/// The numpy name of a dtype (`float32`, `bfloat16`, `bool`).
pub fn numpy_name(dt: DType) -> &'static str {
    match dt {
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::F64 => "float64",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U8 => "uint8",
        DType::U32 => "uint32",
        DType::Bool => "bool",
        DType::C64 => "complex64",
    }
}

/// A dtype from its RLX name (`f32`) or numpy name (`float32`).
pub fn dtype_from_name(s: &str) -> Option<DType> {
    DType::ALL.into_iter().find(|d| d.name() == s || numpy_name(*d) == s || (s == "bool_" && *d == DType::Bool))
}

fn unknown_dtype(what: &str) -> PyErr {
    let known: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
    PyValueError::new_err(format!(
        "unknown dtype `{what}`; RLX dtypes are [{}] (numpy names work too)",
        known.join(", ")
    ))
}

/// A dtype argument: an RLX or numpy name, a numpy dtype, or a scalar type (`np.float32`).
pub fn dtype_arg(obj: &Bound<'_, PyAny>) -> PyResult<DType> {
    if let Ok(s) = obj.downcast::<PyString>() {
        let s = s.to_cow()?;
        return dtype_from_name(&s).ok_or_else(|| unknown_dtype(&s));
    }
    let np = numpy(obj.py())?;
    let d = np.dtype.bind(obj.py()).call1((obj,)).map_err(|_| unknown_dtype(&obj.to_string()))?;
    let name: String = d.getattr("name")?.extract()?;
    dtype_from_name(&name).ok_or_else(|| unknown_dtype(&name))
}

/// The numpy dtype of an RLX dtype.
pub fn np_dtype(py: Python<'_>, dt: DType) -> PyResult<&'static Py<PyAny>> {
    let i = DType::ALL.iter().position(|d| *d == dt).unwrap_or(0);
    numpy(py)?.dtypes[i].as_ref().ok_or_else(|| {
        PyTypeError::new_err(format!("dtype {dt} needs the ml_dtypes package in Python: pip install ml_dtypes"))
    })
}

/// The RLX dtype of a numpy array's dtype object, native byte order only.
fn array_dtype(py: Python<'_>, d: &Bound<'_, PyAny>) -> PyResult<Option<DType>> {
    let np = numpy(py)?;
    for (i, cached) in np.dtypes.iter().enumerate() {
        if cached.as_ref().is_some_and(|c| c.bind(py).is(d)) {
            return Ok(Some(DType::ALL[i]));
        }
    }
    Ok(None)
}

/// A dims argument: ints, or strings for symbolic dims.
pub fn dims_arg(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Dim>> {
    if let Ok(n) = obj.extract::<usize>() {
        return Ok(vec![Dim::Fixed(n)]);
    }
    let mut out = vec![];
    for item in obj.try_iter()? {
        let item = item?;
        if let Ok(n) = item.extract::<usize>() {
            out.push(Dim::Fixed(n));
        } else if let Ok(s) = item.extract::<String>() {
            out.push(Dim::Sym(s));
        } else {
            return Err(PyTypeError::new_err(format!("a dim is an int or a symbol name (str), got {item}")));
        }
    }
    Ok(out)
}

/// Python form of a shape's dims: ints, and strings for symbols.
pub fn dims_py<'py>(py: Python<'py>, s: &Shape) -> PyResult<Bound<'py, PyTuple>> {
    let items: Vec<Bound<'py, PyAny>> = s
        .dims
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => n.into_pyobject(py).map(|v| v.into_any()).unwrap_or_else(|e| match e {}),
            Dim::Sym(n) => PyString::new(py, n).into_any(),
        })
        .collect();
    PyTuple::new(py, items)
}

/// A numpy array borrowed for reading: its contiguous bytes stay valid while `array` lives.
pub struct ArrayIn<'py> {
    /// The (possibly converted) array that owns the bytes.
    pub array: Bound<'py, PyAny>,
    /// Its dtype.
    pub dtype: DType,
    /// Its dims.
    pub dims: Vec<usize>,
    ptr: usize,
    nbytes: usize,
}

impl ArrayIn<'_> {
    /// The array's bytes (valid while `self` lives; nothing writes them during a run).
    pub fn bytes(&self) -> &[u8] {
        if self.nbytes == 0 {
            return &[];
        }
        // SAFETY: numpy reports a C-contiguous buffer of `nbytes` at `ptr`, kept alive by `array`.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.nbytes) }
    }
}

/// numpy's `PyArrayInterface` (the `__array_struct__` capsule): cheaper than the
/// `__array_interface__` dict and readable through the limited API.
#[repr(C)]
struct ArrayStruct {
    two: std::os::raw::c_int,
    nd: std::os::raw::c_int,
    typekind: std::os::raw::c_char,
    itemsize: std::os::raw::c_int,
    flags: std::os::raw::c_int,
    shape: *const isize,
    strides: *const isize,
    data: *mut std::ffi::c_void,
    descr: *mut pyo3::ffi::PyObject,
}

const C_CONTIGUOUS: std::os::raw::c_int = 0x1;
const NOT_SWAPPED: std::os::raw::c_int = 0x200;

/// Dims, C-contiguity (in native byte order) and data address of a numpy array.
fn array_struct(array: &Bound<'_, PyAny>) -> PyResult<(Vec<usize>, bool, usize)> {
    let cap = array.getattr(intern!(array.py(), "__array_struct__"))?;
    // SAFETY: numpy's capsule holds a PyArrayInterface, valid while `cap` lives; we copy out of it.
    unsafe {
        let p = pyo3::ffi::PyCapsule_GetPointer(cap.as_ptr(), std::ptr::null()) as *const ArrayStruct;
        if p.is_null() {
            return Err(PyErr::fetch(array.py()));
        }
        let s = &*p;
        if s.two != 2 || s.nd < 0 {
            return Err(PyTypeError::new_err("__array_struct__ is not a numpy array interface"));
        }
        let dims = (0..s.nd as usize).map(|i| *s.shape.add(i) as usize).collect();
        let ok = s.flags & C_CONTIGUOUS != 0 && s.flags & NOT_SWAPPED != 0;
        Ok((dims, ok, s.data as usize))
    }
}

/// Reads a value as a C-contiguous array: ndarrays of a known dtype in place (copying only a
/// non-contiguous or byte-swapped one), anything else through `numpy.asarray(obj, dtype=want)`.
pub fn array_in<'py>(obj: &Bound<'py, PyAny>, want: Option<DType>) -> PyResult<ArrayIn<'py>> {
    let py = obj.py();
    let np = numpy(py)?;
    let mut array = if obj.is_instance(np.ndarray.bind(py))? {
        obj.clone()
    } else {
        match want {
            Some(dt) => np.asarray.bind(py).call1((obj, np_dtype(py, dt)?))?,
            None => np.asarray.bind(py).call1((obj,))?,
        }
    };
    let d = array.getattr(intern!(py, "dtype"))?;
    let dtype = match array_dtype(py, &d)? {
        Some(dt) => dt,
        None => {
            // A dtype we know by name but in another byte order or object: convert once.
            let name: String = d.getattr("name")?.extract()?;
            let dt = dtype_from_name(&name).ok_or_else(|| unknown_dtype(&name))?;
            array = np.asarray.bind(py).call1((&array, np_dtype(py, dt)?))?;
            dt
        }
    };
    let (mut dims, contiguous, mut ptr) = array_struct(&array)?;
    if !contiguous {
        array = np.contiguous.bind(py).call1((&array,))?;
        (dims, _, ptr) = array_struct(&array)?;
    }
    let nbytes = dims.iter().product::<usize>() * dtype.size_bytes();
    Ok(ArrayIn { array, dtype, dims, ptr, nbytes })
}

/// Checks an array against a declared type; errors name the input or param.
pub fn check_array(a: &ArrayIn<'_>, kind: &'static str, name: &str, want: &Shape) -> PyResult<()> {
    if a.dtype != want.dtype {
        return Err(to_py(Error::DTypeMismatch { kind, name: name.into(), expected: want.dtype, got: a.dtype }));
    }
    if want.fixed_dims().as_deref() != Some(a.dims.as_slice()) {
        return Err(PyValueError::new_err(format!(
            "{kind} `{name}`: expected shape {want}, got an array of shape {:?} ({})",
            a.dims, a.dtype
        )));
    }
    Ok(())
}

/// A fresh, uninitialized numpy array of `shape` and the address of its bytes.
pub fn empty<'py>(py: Python<'py>, shape: &Shape) -> PyResult<(Bound<'py, PyAny>, usize)> {
    let np = numpy(py)?;
    let dims = shape.fixed_dims().ok_or_else(|| PyValueError::new_err(format!("output {shape} has dynamic dims")))?;
    let arr = np.empty.bind(py).call1((PyTuple::new(py, dims)?, np_dtype(py, shape.dtype)?.bind(py)))?;
    let (_, _, ptr) = array_struct(&arr)?;
    Ok((arr, ptr))
}

/// A host tensor from any array-like (numpy infers the dtype unless `want` is given).
pub fn host_tensor(obj: &Bound<'_, PyAny>, want: Option<DType>) -> PyResult<HostTensor> {
    let a = array_in(obj, want)?;
    let a = match want {
        Some(dt) if dt != a.dtype => {
            let np = numpy(obj.py())?;
            array_in(&np.asarray.bind(obj.py()).call1((&a.array, np_dtype(obj.py(), dt)?))?, Some(dt))?
        }
        _ => a,
    };
    HostTensor::from_bytes(Shape::new(&a.dims, a.dtype), a.bytes()).map_err(to_py)
}

/// A numpy array holding a host tensor's values.
pub fn host_to_numpy<'py>(py: Python<'py>, t: &HostTensor) -> PyResult<Bound<'py, PyAny>> {
    let (arr, ptr) = empty(py, &t.shape)?;
    let bytes = t.to_bytes();
    if !bytes.is_empty() {
        // SAFETY: `arr` was just allocated with exactly this many bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr as *mut u8, bytes.len()) };
    }
    Ok(arr)
}
