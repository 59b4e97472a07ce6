//! The parts of the PJRT C API (`xla/pjrt/c/pjrt_c_api.h`) that rlx-pjrt calls, written by hand
//! so the build needs no XLA headers, protoc or libclang.
//!
//! The API is append-only within major version 0: `PJRT_Api` is a list of function pointers in a
//! fixed order, and every argument struct starts with its own size so a plugin built against a
//! newer header can tell which fields its caller knows. The layouts below are those of API 0.81
//! for the fields used; a plugin's `PJRT_Api.struct_size` says which functions it has.
#![allow(missing_docs, non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

/// Opaque handles owned by the plugin.
pub enum PJRT_Error {}
pub enum PJRT_Client {}
pub enum PJRT_Device {}
pub enum PJRT_Buffer {}
pub enum PJRT_Event {}
pub enum PJRT_LoadedExecutable {}
pub enum PJRT_Executable {}
pub enum PJRT_SerializedExecutable {}

#[repr(C)]
pub struct PJRT_Api_Version {
    pub struct_size: usize,
    pub extension_start: *mut c_void,
    pub major_version: c_int,
    pub minor_version: c_int,
}

/// The head of `PJRT_Api`; the function pointers follow it (see `Slot`).
#[repr(C)]
pub struct PJRT_Api_Head {
    pub struct_size: usize,
    pub extension_start: *mut c_void,
    pub pjrt_api_version: PJRT_Api_Version,
}

/// A function of `PJRT_Api` by its position in the header (0 is `PJRT_Error_Destroy`), with
/// the API minor version that added it, for the error when a plugin is too old.
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    pub index: usize,
    pub name: &'static str,
}

impl Slot {
    /// The byte offset just past this function pointer in `PJRT_Api`.
    pub fn end(self) -> usize {
        std::mem::size_of::<PJRT_Api_Head>() + (self.index + 1) * std::mem::size_of::<usize>()
    }
}

macro_rules! slots {
    ($($id:ident $index:literal $name:literal;)*) => {
        $(pub const $id: Slot = Slot { index: $index, name: $name };)*
        /// Every function rlx-pjrt calls, for the check at load time.
        pub const USED: &[Slot] = &[$($id),*];
    };
}

slots! {
    ERROR_DESTROY 0 "PJRT_Error_Destroy";
    ERROR_MESSAGE 1 "PJRT_Error_Message";
    ERROR_GET_CODE 2 "PJRT_Error_GetCode";
    PLUGIN_INITIALIZE 3 "PJRT_Plugin_Initialize";
    EVENT_DESTROY 5 "PJRT_Event_Destroy";
    EVENT_AWAIT 8 "PJRT_Event_Await";
    CLIENT_CREATE 10 "PJRT_Client_Create";
    CLIENT_DESTROY 11 "PJRT_Client_Destroy";
    CLIENT_PLATFORM_NAME 12 "PJRT_Client_PlatformName";
    CLIENT_PLATFORM_VERSION 14 "PJRT_Client_PlatformVersion";
    CLIENT_ADDRESSABLE_DEVICES 16 "PJRT_Client_AddressableDevices";
    CLIENT_COMPILE 20 "PJRT_Client_Compile";
    CLIENT_BUFFER_FROM_HOST 22 "PJRT_Client_BufferFromHostBuffer";
    EXECUTABLE_DESTROY 40 "PJRT_Executable_Destroy";
    EXECUTABLE_NUM_OUTPUTS 44 "PJRT_Executable_NumOutputs";
    EXECUTABLE_SERIALIZE 49 "PJRT_Executable_Serialize";
    LOADED_EXECUTABLE_DESTROY 50 "PJRT_LoadedExecutable_Destroy";
    LOADED_EXECUTABLE_GET_EXECUTABLE 51 "PJRT_LoadedExecutable_GetExecutable";
    LOADED_EXECUTABLE_EXECUTE 55 "PJRT_LoadedExecutable_Execute";
    EXECUTABLE_DESERIALIZE_AND_LOAD 56 "PJRT_Executable_DeserializeAndLoad";
    BUFFER_DESTROY 58 "PJRT_Buffer_Destroy";
    BUFFER_TO_HOST 70 "PJRT_Buffer_ToHostBuffer";
}

/// Every PJRT function takes one argument struct.
pub type Fun<A> = unsafe extern "C" fn(*mut A) -> *mut PJRT_Error;
pub type VoidFun<A> = unsafe extern "C" fn(*mut A);

/// `PJRT_Error_Code`: absl status codes.
pub const ERROR_CODE_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// `PJRT_Buffer_Type` values used here.
pub mod buffer_type {
    pub const PRED: i32 = 1;
    pub const S8: i32 = 2;
    pub const S16: i32 = 3;
    pub const S32: i32 = 4;
    pub const S64: i32 = 5;
    pub const U8: i32 = 6;
    pub const U32: i32 = 8;
    pub const F16: i32 = 10;
    pub const F32: i32 = 11;
    pub const F64: i32 = 12;
    pub const BF16: i32 = 13;
    pub const C64: i32 = 14;
}

/// `PJRT_HostBufferSemantics_kImmutableOnlyDuringCall`: the plugin copies before returning.
pub const HOST_BUFFER_IMMUTABLE_ONLY_DURING_CALL: i32 = 0;

/// Every argument struct carries this many zero words past its known fields, and says so in
/// `struct_size`. Plugins reject a struct smaller than their own header's (even for fields the
/// caller never sets), so a caller written against 0.81 claims a larger size; the fields a newer
/// plugin reads there are zero, which the C API defines as "not set" (null, 0).
pub const PAD_WORDS: usize = 32;

macro_rules! args {
    ($(#[$m:meta])* $name:ident { $($field:ident : $ty:ty),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        pub struct $name {
            pub struct_size: usize,
            pub extension_start: *mut c_void,
            $(pub $field: $ty,)*
            /// Zeros standing for fields newer headers append (see `PAD_WORDS`).
            pub reserved: [u64; PAD_WORDS],
        }
        impl $name {
            /// All fields zero (null pointers, zero sizes) and `struct_size` set.
            pub fn new() -> Self {
                // SAFETY: every field is a pointer, integer or Option of a function pointer,
                // for which all-zero bytes are a valid value (null / 0 / None).
                let mut a: Self = unsafe { std::mem::zeroed() };
                a.struct_size = std::mem::size_of::<Self>();
                a
            }
        }
    };
}

args!(PJRT_Error_Destroy_Args { error: *mut PJRT_Error });
args!(PJRT_Error_Message_Args { error: *const PJRT_Error, message: *const c_char, message_size: usize });
args!(PJRT_Error_GetCode_Args { error: *const PJRT_Error, code: c_int });
args!(PJRT_Plugin_Initialize_Args {});
args!(PJRT_Event_Destroy_Args { event: *mut PJRT_Event });
args!(PJRT_Event_Await_Args { event: *mut PJRT_Event });
args!(PJRT_Client_Create_Args {
    create_options: *const c_void,
    num_options: usize,
    kv_get_callback: *const c_void,
    kv_get_user_arg: *mut c_void,
    kv_put_callback: *const c_void,
    kv_put_user_arg: *mut c_void,
    client: *mut PJRT_Client,
    kv_try_get_callback: *const c_void,
    kv_try_get_user_arg: *mut c_void,
});
args!(PJRT_Client_Destroy_Args { client: *mut PJRT_Client });
args!(PJRT_Client_PlatformName_Args {
    client: *mut PJRT_Client,
    platform_name: *const c_char,
    platform_name_size: usize,
});
args!(PJRT_Client_AddressableDevices_Args {
    client: *mut PJRT_Client,
    addressable_devices: *const *mut PJRT_Device,
    num_addressable_devices: usize,
});

args!(
    /// `PJRT_Program`: the code and its format (`mlir` here).
    PJRT_Program { code: *mut c_char, code_size: usize, format: *const c_char, format_size: usize }
);

args!(PJRT_Client_Compile_Args {
    client: *mut PJRT_Client,
    program: *const PJRT_Program,
    compile_options: *const c_char,
    compile_options_size: usize,
    executable: *mut PJRT_LoadedExecutable,
});
args!(PJRT_Client_BufferFromHostBuffer_Args {
    client: *mut PJRT_Client,
    data: *const c_void,
    type_: c_int,
    dims: *const i64,
    num_dims: usize,
    byte_strides: *const i64,
    num_byte_strides: usize,
    host_buffer_semantics: c_int,
    device: *mut PJRT_Device,
    memory: *mut c_void,
    device_layout: *mut c_void,
    done_with_host_buffer: *mut PJRT_Event,
    buffer: *mut PJRT_Buffer,
});
args!(PJRT_Executable_Destroy_Args { executable: *mut PJRT_Executable });
args!(PJRT_Executable_NumOutputs_Args { executable: *mut PJRT_Executable, num_outputs: usize });
args!(PJRT_Executable_Serialize_Args {
    executable: *const PJRT_Executable,
    serialized_bytes: *const c_char,
    serialized_bytes_size: usize,
    serialized_executable: *mut PJRT_SerializedExecutable,
    serialized_executable_deleter: Option<unsafe extern "C" fn(*mut PJRT_SerializedExecutable)>,
});
args!(PJRT_Executable_DeserializeAndLoad_Args {
    client: *mut PJRT_Client,
    serialized_executable: *const c_char,
    serialized_executable_size: usize,
    loaded_executable: *mut PJRT_LoadedExecutable,
    overridden_serialized_compile_options: *const c_char,
    overridden_serialized_compile_options_size: usize,
});
args!(PJRT_LoadedExecutable_Destroy_Args { executable: *mut PJRT_LoadedExecutable });
args!(PJRT_LoadedExecutable_GetExecutable_Args {
    loaded_executable: *mut PJRT_LoadedExecutable,
    executable: *mut PJRT_Executable,
});
args!(PJRT_ExecuteOptions {
    send_callbacks: *mut c_void,
    recv_callbacks: *mut c_void,
    num_send_ops: usize,
    num_recv_ops: usize,
    launch_id: c_int,
    non_donatable_input_indices: *const i64,
    num_non_donatable_input_indices: usize,
    context: *mut c_void,
    call_location: *const c_char,
    num_tasks: usize,
    task_ids: *mut c_int,
    incarnation_ids: *mut i64,
});
args!(PJRT_LoadedExecutable_Execute_Args {
    executable: *mut PJRT_LoadedExecutable,
    options: *mut PJRT_ExecuteOptions,
    argument_lists: *const *const *mut PJRT_Buffer,
    num_devices: usize,
    num_args: usize,
    output_lists: *const *mut *mut PJRT_Buffer,
    device_complete_events: *mut *mut PJRT_Event,
    execute_device: *mut PJRT_Device,
});
args!(PJRT_Buffer_Destroy_Args { buffer: *mut PJRT_Buffer });
args!(PJRT_Buffer_ToHostBuffer_Args {
    src: *mut PJRT_Buffer,
    host_layout: *mut c_void,
    dst: *mut c_void,
    dst_size: usize,
    event: *mut PJRT_Event,
});

/// A `CompileOptionsProto` with `executable_build_options { device_ordinal: -1, num_replicas: 1,
/// num_partitions: 1 }`, encoded by hand (no protoc). An empty proto CHECK-fails inside XLA.
pub const COMPILE_OPTIONS: [u8; 17] = [
    0x1a, 0x0f, // field 3 (executable_build_options), 15 bytes
    0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, // device_ordinal = -1
    0x20, 0x01, // num_replicas = 1
    0x28, 0x01, // num_partitions = 1
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// Offsets from the C header (x86_64 / aarch64 LP64).
    #[test]
    fn layouts_match_the_header() {
        assert_eq!(size_of::<PJRT_Api_Head>(), 40);
        assert_eq!(CLIENT_COMPILE.end(), 40 + 21 * 8);
        assert_eq!(offset_of!(PJRT_Client_Create_Args, client), 64);
        assert_eq!(size_of::<PJRT_Client_Create_Args>(), 88 + PAD_WORDS * 8);
        assert_eq!(offset_of!(PJRT_Client_BufferFromHostBuffer_Args, buffer), 112);
        assert_eq!(offset_of!(PJRT_LoadedExecutable_Execute_Args, execute_device), 72);
        assert_eq!(offset_of!(PJRT_ExecuteOptions, reserved), 112);
        assert_eq!(offset_of!(PJRT_Buffer_ToHostBuffer_Args, event), 48);
    }
}
