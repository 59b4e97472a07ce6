//! The C ABI shim (`shim/shim.cpp`), loaded at run time, and `Array`, an owned MLX array.

use rlx_ir::{DType, Error, Result};
use std::ffi::{CString, c_char, c_void};
use std::sync::OnceLock;

#[repr(C)]
pub struct RawArray {
    _opaque: [u8; 0],
}

type Err = *mut c_char;

/// An opaque compiled function of the shim.
#[repr(C)]
pub struct RawCompiled {
    _opaque: [u8; 0],
}

/// The callback MLX calls while tracing a compiled function: inputs in, outputs handed over.
pub type TraceFn = unsafe extern "C" fn(*mut c_void, *const *mut RawArray, usize, *mut *mut RawArray, usize) -> i32;

/// The shim's functions.
pub struct Shim {
    free_error: unsafe extern "C" fn(Err),
    set_device: unsafe extern "C" fn(i32) -> Err,
    from_bytes: unsafe extern "C" fn(i32, *const i64, usize, *const c_void, usize, *mut *mut RawArray) -> Err,
    #[allow(clippy::type_complexity)]
    op: unsafe extern "C" fn(
        *const c_char,
        *const *mut RawArray,
        usize,
        *const i64,
        usize,
        *const f64,
        usize,
        i32,
        *mut *mut RawArray,
    ) -> Err,
    eval: unsafe extern "C" fn(*const *mut RawArray, usize) -> Err,
    to_bytes: unsafe extern "C" fn(*mut RawArray, *mut c_void, usize) -> Err,
    free: unsafe extern "C" fn(*mut RawArray),
    compile: unsafe extern "C" fn(TraceFn, *mut c_void, usize, *mut *mut RawCompiled) -> Err,
    call: unsafe extern "C" fn(*mut RawCompiled, *const *mut RawArray, usize, *mut *mut RawArray) -> Err,
    free_compiled: unsafe extern "C" fn(*mut RawCompiled),
    _lib: libloading::Library,
}

/// The shim, loaded once per process with the CPU as the default device; or why not.
pub fn shim() -> std::result::Result<&'static Shim, &'static str> {
    static SHIM: OnceLock<std::result::Result<Shim, String>> = OnceLock::new();
    SHIM.get_or_init(load).as_ref().map_err(|e| e.as_str())
}

fn load() -> std::result::Result<Shim, String> {
    let missing = env!("RLX_MLX_MISSING");
    let path = rlx_driver::config()
        .mlx
        .shim
        .as_ref()
        .map_or_else(|| env!("RLX_MLX_SHIM").to_string(), |p| p.display().to_string());
    if path.is_empty() {
        return Err(missing.to_string());
    }
    // SAFETY: the shim is our own library; loading it runs libmlx's static initializers.
    let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| format!("loading the MLX shim {path}: {e}"))?;
    // SAFETY: the symbols have these C signatures (shim/shim.cpp).
    let shim = unsafe {
        macro_rules! sym {
            ($name:literal) => {
                *lib.get($name).map_err(|e| format!("MLX shim {path}: {e}"))?
            };
        }
        Shim {
            free_error: sym!(b"rlx_mlx_free_error\0"),
            set_device: sym!(b"rlx_mlx_set_device\0"),
            from_bytes: sym!(b"rlx_mlx_from_bytes\0"),
            op: sym!(b"rlx_mlx_op\0"),
            eval: sym!(b"rlx_mlx_eval\0"),
            to_bytes: sym!(b"rlx_mlx_to_bytes\0"),
            free: sym!(b"rlx_mlx_free\0"),
            compile: sym!(b"rlx_mlx_compile\0"),
            call: sym!(b"rlx_mlx_call\0"),
            free_compiled: sym!(b"rlx_mlx_free_compiled\0"),
            _lib: lib,
        }
    };
    // The device is set explicitly: a CPU-only libmlx cannot make a GPU stream.
    let gpu = rlx_driver::config().mlx.gpu;
    // SAFETY: a plain call; the error string (if any) is freed by `check`.
    shim.check("set_device", unsafe { (shim.set_device)(gpu as i32) }).map_err(|e| e.to_string())?;
    Ok(shim)
}

impl Shim {
    fn check(&self, what: &str, e: Err) -> Result<()> {
        if e.is_null() {
            return Ok(());
        }
        // SAFETY: a NUL-terminated string from the shim, freed once here.
        let msg = unsafe { std::ffi::CStr::from_ptr(e) }.to_string_lossy().into_owned();
        unsafe { (self.free_error)(e) };
        Err(Error::eval(format!("mlx {what}"), msg))
    }

    /// A new array holding a copy of `bytes` (row-major, `dt`).
    pub fn upload(&'static self, dt: DType, dims: &[usize], bytes: &[u8]) -> Result<Array> {
        let shape: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let mut out = std::ptr::null_mut();
        // SAFETY: pointers to live slices with their lengths; the shim copies the bytes.
        let e = unsafe {
            (self.from_bytes)(dtype_code(dt), shape.as_ptr(), shape.len(), bytes.as_ptr().cast(), bytes.len(), &mut out)
        };
        self.check("from_bytes", e)?;
        Ok(Array { raw: out, shim: self })
    }

    /// One op of the shim's table (lazy: nothing runs until `eval`).
    pub fn op(&'static self, name: &str, ins: &[&Array], ints: &[i64], floats: &[f64], dt: DType) -> Result<Array> {
        let c = CString::new(name).map_err(|_| Error::eval("mlx op", "op name with NUL"))?;
        let raws: Vec<*mut RawArray> = ins.iter().map(|a| a.raw).collect();
        let mut out = std::ptr::null_mut();
        // SAFETY: live arrays and slices; the shim copies what it keeps.
        let e = unsafe {
            (self.op)(
                c.as_ptr(),
                raws.as_ptr(),
                raws.len(),
                ints.as_ptr(),
                ints.len(),
                floats.as_ptr(),
                floats.len(),
                dtype_code(dt),
                &mut out,
            )
        };
        self.check(name, e)?;
        Ok(Array { raw: out, shim: self })
    }

    /// Evaluates the arrays (and everything they depend on).
    pub fn eval(&self, arrs: &[&Array]) -> Result<()> {
        let raws: Vec<*mut RawArray> = arrs.iter().map(|a| a.raw).collect();
        // SAFETY: live arrays.
        self.check("eval", unsafe { (self.eval)(raws.as_ptr(), raws.len()) })
    }
}

impl Shim {
    /// `mx::compile` of `f` with `n_out` outputs; `user` must stay valid while the result lives.
    ///
    /// # Safety
    /// `f` must read `user` as the type its caller stored there and write `n_out` owned handles.
    pub unsafe fn compile(&'static self, f: TraceFn, user: *mut c_void, n_out: usize) -> Result<Compiled> {
        let mut out = std::ptr::null_mut();
        // SAFETY: per this function's contract.
        self.check("compile", unsafe { (self.compile)(f, user, n_out, &mut out) })?;
        Ok(Compiled { raw: out, n_out, shim: self })
    }
}

/// A compiled MLX function (freed, and erased from MLX's cache, on drop).
pub struct Compiled {
    raw: *mut RawCompiled,
    n_out: usize,
    shim: &'static Shim,
}

// SAFETY: the handle is only used through `&mut` of the executable that owns it.
unsafe impl Send for Compiled {}

impl Compiled {
    /// Calls it (lazily: the outputs still need `eval`).
    pub fn call(&self, ins: &[&Array]) -> Result<Vec<Array>> {
        let raws: Vec<*mut RawArray> = ins.iter().map(|a| a.raw).collect();
        let mut outs = vec![std::ptr::null_mut(); self.n_out];
        // SAFETY: live arrays; `outs` has room for `n_out` handles, which we then own.
        self.shim.check("compiled call", unsafe {
            (self.shim.call)(self.raw, raws.as_ptr(), raws.len(), outs.as_mut_ptr())
        })?;
        Ok(outs.into_iter().map(|raw| Array { raw, shim: self.shim }).collect())
    }
}

impl Drop for Compiled {
    fn drop(&mut self) {
        // SAFETY: created by the shim, freed once.
        unsafe { (self.shim.free_compiled)(self.raw) }
    }
}

/// An owned MLX array (freed on drop).
pub struct Array {
    raw: *mut RawArray,
    shim: &'static Shim,
}

// SAFETY: MLX arrays are reference-counted handles safe to move between threads; an executable
// uses its arrays from one thread at a time (`run` takes `&mut self`).
unsafe impl Send for Array {}

impl Array {
    /// A second handle to an array the shim lent us (not freed by us).
    ///
    /// # Safety
    /// `raw` must be a live handle from the shim.
    pub unsafe fn from_borrowed(shim: &'static Shim, raw: *mut RawArray) -> Result<Array> {
        let lent = std::mem::ManuallyDrop::new(Array { raw, shim });
        shim.op("identity", &[&lent], &[], &[], DType::F32)
    }

    /// Hands the handle over (the receiver frees it).
    pub fn into_raw(self) -> *mut RawArray {
        let raw = self.raw;
        std::mem::forget(self);
        raw
    }

    /// Copies the (evaluated) values out; `dst` must have exactly the array's byte size.
    pub fn download(&self, dst: &mut [u8]) -> Result<()> {
        // SAFETY: a live array and a writable buffer of the given length.
        self.shim.check("to_bytes", unsafe { (self.shim.to_bytes)(self.raw, dst.as_mut_ptr().cast(), dst.len()) })
    }
}

impl Drop for Array {
    fn drop(&mut self) {
        // SAFETY: created by the shim, freed once.
        unsafe { (self.shim.free)(self.raw) }
    }
}

/// The dtype codes of `shim.cpp`.
pub fn dtype_code(dt: DType) -> i32 {
    match dt {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::F64 => 3,
        DType::I8 => 4,
        DType::I16 => 5,
        DType::I32 => 6,
        DType::I64 => 7,
        DType::U8 => 8,
        DType::U32 => 9,
        DType::Bool => 10,
        DType::C64 => 11,
    }
}
