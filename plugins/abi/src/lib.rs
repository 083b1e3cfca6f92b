//! The `repr(C)` mirror of `include/kiln_plugin.h`: the only contract between kiln and
//! plugin libraries. Field for field the same as the header (a test compiles the header
//! and compares every struct's size and field offsets); see the header for the rules
//! of the boundary.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_void};

pub const KILN_PLUGIN_ABI_VERSION: u32 = 1;
pub const KILN_MAX_RANK: usize = 8;
/// The symbol a plugin library exports (`kiln_plugin_library_fn`).
pub const KILN_ENTRY_POINT: &str = "kiln_plugin_library_v1";
/// The header, for tools and tests that compile against it.
pub const HEADER: &str = include_str!("../include/kiln_plugin.h");

pub type kiln_status = i32;
pub const KILN_OK: kiln_status = 0;
pub const KILN_ERROR: kiln_status = 1;
pub const KILN_UNSUPPORTED: kiln_status = 2;

pub const KILN_FIELD_F32: i32 = 0;
pub const KILN_FIELD_F64: i32 = 1;
pub const KILN_FIELD_I32: i32 = 2;
pub const KILN_FIELD_I64: i32 = 3;
pub const KILN_FIELD_BYTES: i32 = 4;
pub const KILN_FIELD_TEXT: i32 = 5;

pub const KILN_DIM_CONST: i32 = 0;
pub const KILN_DIM_INPUT: i32 = 1;
pub const KILN_DIM_ADD: i32 = 2;
pub const KILN_DIM_SUB: i32 = 3;
pub const KILN_DIM_MUL: i32 = 4;
pub const KILN_DIM_FLOOR_DIV: i32 = 5;
pub const KILN_DIM_CEIL_DIV: i32 = 6;
pub const KILN_DIM_MAX: i32 = 7;
pub const KILN_DIM_MIN: i32 = 8;

pub const KILN_CUDA_PTX: i32 = 0;
pub const KILN_CUDA_CUBIN: i32 = 1;
pub const KILN_CUDA_SOURCE: i32 = 2;

/// Element type codes (ONNX TensorProto's).
pub mod dtype {
    pub const F32: i32 = 1;
    pub const U8: i32 = 2;
    pub const I8: i32 = 3;
    pub const U16: i32 = 4;
    pub const I16: i32 = 5;
    pub const I32: i32 = 6;
    pub const I64: i32 = 7;
    pub const BOOL: i32 = 9;
    pub const F16: i32 = 10;
    pub const F64: i32 = 11;
    pub const U32: i32 = 12;
    pub const U64: i32 = 13;
    pub const BF16: i32 = 16;
}

#[repr(C)]
#[derive(Debug)]
pub struct kiln_error {
    pub message: *mut c_char,
    pub capacity: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kiln_field {
    pub name: *const c_char,
    pub r#type: i32,
    pub length: i64,
    pub data: *const c_void,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kiln_field_spec {
    pub name: *const c_char,
    pub r#type: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct kiln_tensor_desc {
    pub dtype: i32,
    pub format: i32,
    pub rank: i32,
    pub dims: [i64; KILN_MAX_RANK],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct kiln_dim_expr {
    pub op: i32,
    pub a: i32,
    pub b: i32,
    pub value: i64,
}

#[repr(C)]
#[derive(Debug)]
pub struct kiln_shape_exprs {
    pub struct_size: u32,
    pub node_capacity: i32,
    pub node_count: i32,
    pub nodes: *mut kiln_dim_expr,
    pub output_capacity: i32,
    pub output_ranks: *mut i32,
    pub output_dims: *mut i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kiln_wgsl_kernel {
    pub source: *const c_char,
    pub entry_point: *const c_char,
    pub workgroups: [u32; 3],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kiln_cuda_kernel {
    pub image_kind: i32,
    pub image: *const c_void,
    pub image_size: u64,
    pub entry_point: *const c_char,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_memory_bytes: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct kiln_field_sink {
    pub host: *mut c_void,
    pub add: Option<unsafe extern "C" fn(host: *mut c_void, field: *const kiln_field)>,
}

type Io = *const kiln_tensor_desc;

#[repr(C)]
#[derive(Debug)]
pub struct kiln_plugin {
    pub abi_version: u32,
    pub struct_size: u32,
    pub self_: *mut c_void,
    pub num_outputs: Option<unsafe extern "C" fn(*mut c_void, *mut i32, *mut kiln_error) -> kiln_status>,
    pub output_types:
        Option<unsafe extern "C" fn(*mut c_void, *const i32, i32, *mut i32, *mut kiln_error) -> kiln_status>,
    pub output_shapes: Option<
        unsafe extern "C" fn(*mut c_void, *const i32, i32, *mut kiln_shape_exprs, *mut kiln_error) -> kiln_status,
    >,
    pub supports_format_combination:
        Option<unsafe extern "C" fn(*mut c_void, i32, Io, i32, i32, *mut i32, *mut kiln_error) -> kiln_status>,
    pub configure: Option<unsafe extern "C" fn(*mut c_void, Io, i32, i32, *mut kiln_error) -> kiln_status>,
    pub workspace_size:
        Option<unsafe extern "C" fn(*mut c_void, Io, i32, i32, *mut u64, *mut kiln_error) -> kiln_status>,
    pub tactics: Option<unsafe extern "C" fn(*mut c_void, *mut u32, i32, *mut i32, *mut kiln_error) -> kiln_status>,
    pub timing_cache_id: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, u32, *mut kiln_error) -> kiln_status>,
    pub serialize: Option<unsafe extern "C" fn(*mut c_void, *const kiln_field_sink, *mut kiln_error) -> kiln_status>,
    pub enqueue_cpu: Option<
        unsafe extern "C" fn(
            *mut c_void,
            u32,
            Io,
            i32,
            i32,
            *const *const c_void,
            *const *mut c_void,
            *mut c_void,
            *mut kiln_error,
        ) -> kiln_status,
    >,
    pub wgsl_kernel:
        Option<unsafe extern "C" fn(*mut c_void, Io, i32, i32, *mut kiln_wgsl_kernel, *mut kiln_error) -> kiln_status>,
    pub cuda_kernel:
        Option<unsafe extern "C" fn(*mut c_void, Io, i32, i32, *mut kiln_cuda_kernel, *mut kiln_error) -> kiln_status>,
    pub enqueue_cuda: Option<
        unsafe extern "C" fn(
            *mut c_void,
            u32,
            Io,
            i32,
            i32,
            *const *const c_void,
            *const *mut c_void,
            *mut c_void,
            *mut c_void,
            *mut kiln_error,
        ) -> kiln_status,
    >,
    pub destroy: Option<unsafe extern "C" fn(*mut c_void)>,
}

impl kiln_plugin {
    /// An empty instance for a creator to fill: version and size set, every entry NULL.
    pub fn empty() -> kiln_plugin {
        kiln_plugin {
            abi_version: KILN_PLUGIN_ABI_VERSION,
            struct_size: std::mem::size_of::<kiln_plugin>() as u32,
            self_: std::ptr::null_mut(),
            num_outputs: None,
            output_types: None,
            output_shapes: None,
            supports_format_combination: None,
            configure: None,
            workspace_size: None,
            tactics: None,
            timing_cache_id: None,
            serialize: None,
            enqueue_cpu: None,
            wgsl_kernel: None,
            cuda_kernel: None,
            enqueue_cuda: None,
            destroy: None,
        }
    }
}

#[repr(C)]
#[derive(Debug)]
pub struct kiln_plugin_creator {
    pub abi_version: u32,
    pub struct_size: u32,
    pub name: *const c_char,
    pub version: *const c_char,
    pub plugin_namespace: *const c_char,
    pub fields: *const kiln_field_spec,
    pub field_count: i32,
    pub self_: *mut c_void,
    pub create: Option<
        unsafe extern "C" fn(*mut c_void, *const kiln_field, i32, *mut kiln_plugin, *mut kiln_error) -> kiln_status,
    >,
}

#[repr(C)]
#[derive(Debug)]
pub struct kiln_plugin_library {
    pub abi_version: u32,
    pub struct_size: u32,
    pub library_name: *const c_char,
    pub creator_count: i32,
    pub creators: *const kiln_plugin_creator,
}

// SAFETY: a library description is immutable static data (the header's rules), so it
// may be shared between threads, as an exporting crate's `static` requires.
unsafe impl Sync for kiln_plugin_library {}
// SAFETY: as above, creators are static descriptions.
unsafe impl Sync for kiln_plugin_creator {}
// SAFETY: as above, field specs are static.
unsafe impl Sync for kiln_field_spec {}

pub type kiln_plugin_library_fn = unsafe extern "C" fn() -> *const kiln_plugin_library;
