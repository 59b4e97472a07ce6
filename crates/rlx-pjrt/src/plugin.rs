//! A loaded PJRT plugin, its client, executables and device buffers, as safe Rust values.
//!
//! Every handle owns its plugin object and destroys it on drop; every call goes through
//! `Plugin::call`, which turns a returned `PJRT_Error` into a `PjrtError` naming the function.

use crate::error::PjrtError;
use crate::ffi::{self, *};
use std::ffi::{c_char, c_void};
use std::path::{Path, PathBuf};
use std::ptr::{null, null_mut};
use std::sync::{Arc, Mutex, OnceLock};

/// The C API minor version whose struct layouts `ffi` was written from.
pub const HEADER_MINOR: i32 = 81;

/// A PJRT plugin library, initialized.
pub struct Plugin {
    api: *const PJRT_Api_Head,
    /// The file it was loaded from (or the library name the loader resolved).
    pub path: PathBuf,
    /// The plugin's C API version (major, minor).
    pub version: (i32, i32),
    _lib: libloading::Library,
}

// SAFETY: the PJRT C API is thread-safe; `api` points at a static table inside the library,
// which lives as long as `_lib`.
unsafe impl Send for Plugin {}
unsafe impl Sync for Plugin {}

impl Plugin {
    /// Loads a plugin file, checks its API version covers every function RLX calls, and runs
    /// `PJRT_Plugin_Initialize`.
    pub fn load(path: &Path) -> Result<Plugin, PjrtError> {
        let bad = |reason: String| PjrtError::Plugin { path: path.to_path_buf(), reason };
        // SAFETY: loading a shared library runs its initializers; a PJRT plugin is meant to be
        // loaded this way (JAX does the same with dlopen).
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| bad(e.to_string()))?;
        // SAFETY: `GetPjrtApi` is the plugin's entry point: `const PJRT_Api* GetPjrtApi()`.
        let api = unsafe {
            let get: libloading::Symbol<unsafe extern "C" fn() -> *const PJRT_Api_Head> =
                lib.get(b"GetPjrtApi\0").map_err(|e| bad(format!("not a PJRT plugin: {e}")))?;
            get()
        };
        if api.is_null() {
            return Err(bad("GetPjrtApi returned null".into()));
        }
        // SAFETY: non-null, points at the plugin's PJRT_Api, which starts with this head.
        let head = unsafe { &*api };
        let version = (head.pjrt_api_version.major_version, head.pjrt_api_version.minor_version);
        if version.0 != 0 {
            return Err(bad(format!(
                "C API major version {} (RLX speaks major version 0, written against 0.{HEADER_MINOR})",
                version.0
            )));
        }
        let plugin = Plugin { api, path: path.to_path_buf(), version, _lib: lib };
        for &slot in ffi::USED {
            if plugin.raw_fn(slot).is_none() {
                return Err(PjrtError::ApiVersion {
                    path: path.to_path_buf(),
                    major: version.0,
                    minor: version.1,
                    function: slot.name,
                    needed_minor: HEADER_MINOR,
                });
            }
        }
        plugin.call(PLUGIN_INITIALIZE, &mut PJRT_Plugin_Initialize_Args::new())?;
        Ok(plugin)
    }

    /// The function pointer in `slot`, when the plugin's table is long enough and sets it.
    fn raw_fn(&self, slot: Slot) -> Option<*const c_void> {
        // SAFETY: `api` is valid for `struct_size` bytes; the read is in bounds by the check.
        unsafe {
            if (*self.api).struct_size < slot.end() {
                return None;
            }
            let table = (self.api as *const u8).add(std::mem::size_of::<PJRT_Api_Head>()) as *const *const c_void;
            let f = *table.add(slot.index);
            (!f.is_null()).then_some(f)
        }
    }

    /// Calls the function in `slot` with `args` (whose type must be that function's argument
    /// struct: the callers in this crate pair them by name).
    pub(crate) fn call<A>(&self, slot: Slot, args: &mut A) -> Result<(), PjrtError> {
        let f = self.raw_fn(slot).expect("checked at load");
        // SAFETY: the slot holds `PJRT_Error* (*)(A*)`; `args` is a live, initialized struct.
        let err = unsafe {
            let f: Fun<A> = std::mem::transmute(f);
            f(args)
        };
        if err.is_null() { Ok(()) } else { Err(self.take_error(slot.name, err)) }
    }

    /// Reads and frees a returned error.
    fn take_error(&self, function: &'static str, err: *mut PJRT_Error) -> PjrtError {
        let mut m = PJRT_Error_Message_Args::new();
        m.error = err;
        let mut c = PJRT_Error_GetCode_Args::new();
        c.error = err;
        let mut d = PJRT_Error_Destroy_Args::new();
        d.error = err;
        // SAFETY: the three slots hold the functions of these argument types (checked at load);
        // the message is copied before the error is destroyed.
        unsafe {
            let msg: VoidFun<PJRT_Error_Message_Args> =
                std::mem::transmute(self.raw_fn(ERROR_MESSAGE).expect("checked"));
            msg(&mut m);
            let message = if m.message.is_null() {
                String::new()
            } else {
                String::from_utf8_lossy(std::slice::from_raw_parts(m.message as *const u8, m.message_size)).into_owned()
            };
            let code_fn: Fun<PJRT_Error_GetCode_Args> =
                std::mem::transmute(self.raw_fn(ERROR_GET_CODE).expect("checked"));
            let code_err = code_fn(&mut c);
            let code = if code_err.is_null() { c.code } else { 2 };
            let destroy: VoidFun<PJRT_Error_Destroy_Args> =
                std::mem::transmute(self.raw_fn(ERROR_DESTROY).expect("checked"));
            destroy(&mut d);
            let code = ffi::ERROR_CODE_NAMES.get(code as usize).copied().unwrap_or("UNKNOWN");
            PjrtError::Call { function, code, message }
        }
    }

    /// Waits for an event and frees it.
    pub(crate) fn await_event(&self, event: *mut PJRT_Event) -> Result<(), PjrtError> {
        if event.is_null() {
            return Ok(());
        }
        let mut a = PJRT_Event_Await_Args::new();
        a.event = event;
        let waited = self.call(EVENT_AWAIT, &mut a);
        let mut d = PJRT_Event_Destroy_Args::new();
        d.event = event;
        let destroyed = self.call(EVENT_DESTROY, &mut d);
        waited.and(destroyed)
    }
}

/// The paths `default_plugin` tries, in order: `RLX_PJRT_PLUGIN`, then libtpu (`TPU_LIBRARY_PATH`,
/// then the loader's search path).
pub fn plugin_candidates() -> Vec<PathBuf> {
    let cfg = rlx_driver::config();
    let mut v = vec![];
    if let Some(p) = &cfg.pjrt.plugin {
        v.push(p.clone());
        return v;
    }
    if let Some(p) = &cfg.pjrt.tpu_library {
        v.push(p.clone());
    }
    v.push(PathBuf::from("libtpu.so"));
    v
}

static DEFAULT_CLIENT: OnceLock<Result<Arc<Client>, PjrtError>> = OnceLock::new();

/// The process-wide client of the default plugin (see `plugin_candidates`), created on first use.
/// A plugin is initialized once per process, and XLA clients own thread pools, so every backend
/// instance shares this one.
pub fn default_client() -> Result<Arc<Client>, PjrtError> {
    DEFAULT_CLIENT
        .get_or_init(|| {
            let mut tried = vec![];
            for p in plugin_candidates() {
                let explicit = rlx_driver::config().pjrt.plugin.is_some();
                match Plugin::load(&p) {
                    Ok(plugin) => return Client::new(Arc::new(plugin)).map(Arc::new),
                    // A file that exists but is unusable is that error, not "not found".
                    Err(e @ (PjrtError::ApiVersion { .. } | PjrtError::Call { .. })) => return Err(e),
                    Err(e) if explicit || p.exists() => return Err(e),
                    Err(e) => tried.push(format!("{} ({e})", p.display())),
                }
            }
            Err(PjrtError::PluginNotFound { tried })
        })
        .clone()
}

/// A PJRT client on one plugin, running on its first addressable device.
pub struct Client {
    /// The plugin.
    pub plugin: Arc<Plugin>,
    raw: *mut PJRT_Client,
    device: *mut PJRT_Device,
    /// The platform name the plugin reports (`cpu`, `tpu`, `cuda`).
    pub platform: String,
    /// Serializes compiles: XLA's CPU compiler is itself multi-threaded, and two at once only
    /// compete for the same cores.
    compile_lock: Mutex<()>,
}

// SAFETY: PJRT clients are thread-safe by contract.
unsafe impl Send for Client {}
unsafe impl Sync for Client {}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Client({} via {}, C API {}.{})",
            self.platform,
            self.plugin.path.display(),
            self.plugin.version.0,
            self.plugin.version.1
        )
    }
}

impl Client {
    /// Creates a client with default options and picks its first addressable device.
    pub fn new(plugin: Arc<Plugin>) -> Result<Client, PjrtError> {
        let mut a = PJRT_Client_Create_Args::new();
        plugin.call(CLIENT_CREATE, &mut a)?;
        let raw = a.client;
        let mut n = PJRT_Client_PlatformName_Args::new();
        n.client = raw;
        let platform = match plugin.call(CLIENT_PLATFORM_NAME, &mut n) {
            // SAFETY: the name lives as long as the client and has the given length.
            Ok(()) if !n.platform_name.is_null() => unsafe {
                String::from_utf8_lossy(std::slice::from_raw_parts(n.platform_name as *const u8, n.platform_name_size))
                    .into_owned()
            },
            _ => "unknown".into(),
        };
        let mut d = PJRT_Client_AddressableDevices_Args::new();
        d.client = raw;
        let mut client = Client { plugin, raw, device: null_mut(), platform, compile_lock: Mutex::new(()) };
        client.plugin.call(CLIENT_ADDRESSABLE_DEVICES, &mut d)?;
        if d.num_addressable_devices == 0 || d.addressable_devices.is_null() {
            return Err(PjrtError::Plugin {
                path: client.plugin.path.clone(),
                reason: "the client has no addressable device".into(),
            });
        }
        // SAFETY: the list has `num_addressable_devices` entries and lives as long as the client.
        client.device = unsafe { *d.addressable_devices };
        Ok(client)
    }

    /// Compiles a StableHLO module (MLIR text).
    pub fn compile(self: &Arc<Self>, graph: &str, mlir: &str) -> Result<LoadedExecutable, PjrtError> {
        let format = b"mlir";
        let mut program = PJRT_Program::new();
        program.code = mlir.as_ptr() as *mut c_char;
        program.code_size = mlir.len();
        program.format = format.as_ptr() as *const c_char;
        program.format_size = format.len();
        let mut a = PJRT_Client_Compile_Args::new();
        a.client = self.raw;
        a.program = &program;
        a.compile_options = ffi::COMPILE_OPTIONS.as_ptr() as *const c_char;
        a.compile_options_size = ffi::COMPILE_OPTIONS.len();
        let _serial = self.compile_lock.lock().unwrap_or_else(|e| e.into_inner());
        match self.plugin.call(CLIENT_COMPILE, &mut a) {
            Ok(()) => LoadedExecutable::wrap(self, a.executable),
            Err(PjrtError::Call { message, .. }) => {
                let line = crate::error_line(&message, mlir);
                Err(PjrtError::Compile { graph: graph.into(), message, line })
            }
            Err(e) => Err(e),
        }
    }

    /// Loads an executable serialized by `LoadedExecutable::serialize` on the same plugin.
    pub fn deserialize(self: &Arc<Self>, bytes: &[u8]) -> Result<LoadedExecutable, PjrtError> {
        let mut a = PJRT_Executable_DeserializeAndLoad_Args::new();
        a.client = self.raw;
        a.serialized_executable = bytes.as_ptr() as *const c_char;
        a.serialized_executable_size = bytes.len();
        self.plugin.call(EXECUTABLE_DESERIALIZE_AND_LOAD, &mut a)?;
        LoadedExecutable::wrap(self, a.loaded_executable)
    }

    /// Copies host bytes (dense, row-major) into a new device buffer.
    pub fn upload(self: &Arc<Self>, bytes: &[u8], ty: i32, dims: &[i64]) -> Result<Buffer, PjrtError> {
        let mut a = PJRT_Client_BufferFromHostBuffer_Args::new();
        a.client = self.raw;
        // A zero-length buffer still needs a valid pointer.
        a.data = if bytes.is_empty() { [0u8; 8].as_ptr() as *const c_void } else { bytes.as_ptr() as *const c_void };
        a.type_ = ty;
        a.dims = if dims.is_empty() { [0i64].as_ptr() } else { dims.as_ptr() };
        a.num_dims = dims.len();
        a.host_buffer_semantics = HOST_BUFFER_IMMUTABLE_ONLY_DURING_CALL;
        a.device = self.device;
        self.plugin.call(CLIENT_BUFFER_FROM_HOST, &mut a)?;
        let buffer = Buffer { client: self.clone(), raw: a.buffer };
        self.plugin.await_event(a.done_with_host_buffer)?;
        Ok(buffer)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let mut a = PJRT_Client_Destroy_Args::new();
        a.client = self.raw;
        let _ = self.plugin.call(CLIENT_DESTROY, &mut a);
    }
}

/// A device buffer.
pub struct Buffer {
    client: Arc<Client>,
    raw: *mut PJRT_Buffer,
}

// SAFETY: PJRT buffers may be used from any thread.
unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Copies the buffer into `dst`, which must have exactly the buffer's byte size.
    pub fn download(&self, dst: &mut [u8]) -> Result<(), PjrtError> {
        let mut a = PJRT_Buffer_ToHostBuffer_Args::new();
        a.src = self.raw;
        a.dst = dst.as_mut_ptr() as *mut c_void;
        a.dst_size = dst.len();
        self.client.plugin.call(BUFFER_TO_HOST, &mut a)?;
        self.client.plugin.await_event(a.event)
    }

    /// The device bytes, copied to the host (`len` bytes).
    pub fn to_vec(&self, len: usize) -> Result<Vec<u8>, PjrtError> {
        let mut v = vec![0u8; len];
        self.download(&mut v)?;
        Ok(v)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let mut a = PJRT_Buffer_Destroy_Args::new();
        a.buffer = self.raw;
        let _ = self.client.plugin.call(BUFFER_DESTROY, &mut a);
    }
}

/// A compiled, loaded program.
pub struct LoadedExecutable {
    client: Arc<Client>,
    raw: *mut PJRT_LoadedExecutable,
    /// How many buffers `execute` returns.
    pub num_outputs: usize,
}

// SAFETY: PJRT executables may be executed from any thread.
unsafe impl Send for LoadedExecutable {}
unsafe impl Sync for LoadedExecutable {}

impl LoadedExecutable {
    fn wrap(client: &Arc<Client>, raw: *mut PJRT_LoadedExecutable) -> Result<LoadedExecutable, PjrtError> {
        let mut exe = LoadedExecutable { client: client.clone(), raw, num_outputs: 0 };
        let inner = exe.executable()?;
        let mut n = PJRT_Executable_NumOutputs_Args::new();
        n.executable = inner.0;
        let got = client.plugin.call(EXECUTABLE_NUM_OUTPUTS, &mut n);
        drop(inner);
        got?;
        exe.num_outputs = n.num_outputs;
        Ok(exe)
    }

    fn executable(&self) -> Result<InnerExecutable<'_>, PjrtError> {
        let mut g = PJRT_LoadedExecutable_GetExecutable_Args::new();
        g.loaded_executable = self.raw;
        self.client.plugin.call(LOADED_EXECUTABLE_GET_EXECUTABLE, &mut g)?;
        Ok(InnerExecutable(g.executable, &self.client.plugin))
    }

    /// Runs once on the client's device with these argument buffers; returns the outputs.
    pub fn execute(&self, args: &[&Buffer]) -> Result<Vec<Buffer>, PjrtError> {
        let arg_ptrs: Vec<*mut PJRT_Buffer> = args.iter().map(|b| b.raw).collect();
        let arg_list: *const *mut PJRT_Buffer = if arg_ptrs.is_empty() { null() } else { arg_ptrs.as_ptr() };
        let mut out_ptrs: Vec<*mut PJRT_Buffer> = vec![null_mut(); self.num_outputs];
        let out_list: *mut *mut PJRT_Buffer = out_ptrs.as_mut_ptr();
        let mut done: *mut PJRT_Event = null_mut();
        let mut options = PJRT_ExecuteOptions::new();
        let mut a = PJRT_LoadedExecutable_Execute_Args::new();
        a.executable = self.raw;
        a.options = &mut options;
        a.argument_lists = &arg_list;
        a.num_devices = 1;
        a.num_args = args.len();
        a.output_lists = &out_list;
        a.device_complete_events = &mut done;
        self.client.plugin.call(LOADED_EXECUTABLE_EXECUTE, &mut a)?;
        let outs: Vec<Buffer> = out_ptrs.into_iter().map(|raw| Buffer { client: self.client.clone(), raw }).collect();
        self.client.plugin.await_event(done)?;
        Ok(outs)
    }

    /// The compiled executable as bytes, for the disk cache (`Client::deserialize`).
    pub fn serialize(&self) -> Result<Vec<u8>, PjrtError> {
        let inner = self.executable()?;
        let mut s = PJRT_Executable_Serialize_Args::new();
        s.executable = inner.0;
        self.client.plugin.call(EXECUTABLE_SERIALIZE, &mut s)?;
        // SAFETY: the bytes live until the deleter runs on `serialized_executable`.
        let bytes = unsafe {
            let v = if s.serialized_bytes.is_null() {
                vec![]
            } else {
                std::slice::from_raw_parts(s.serialized_bytes as *const u8, s.serialized_bytes_size).to_vec()
            };
            if let Some(del) = s.serialized_executable_deleter {
                del(s.serialized_executable);
            }
            v
        };
        Ok(bytes)
    }
}

impl Drop for LoadedExecutable {
    fn drop(&mut self) {
        let mut a = PJRT_LoadedExecutable_Destroy_Args::new();
        a.executable = self.raw;
        let _ = self.client.plugin.call(LOADED_EXECUTABLE_DESTROY, &mut a);
    }
}

/// The `PJRT_Executable` behind a loaded one, freed on drop.
struct InnerExecutable<'a>(*mut PJRT_Executable, &'a Plugin);

impl Drop for InnerExecutable<'_> {
    fn drop(&mut self) {
        let mut a = PJRT_Executable_Destroy_Args::new();
        a.executable = self.0;
        let _ = self.1.call(EXECUTABLE_DESTROY, &mut a);
    }
}
