//! The C side of [`crate::export_plugins!`]: static library data and the `extern "C"`
//! thunks that call a [`Plugin`]. Every thunk catches panics and turns them (and `Err`s)
//! into a status plus a message in kiln's error buffer.

use crate::{CpuTensor, CpuTensorMut, Creator, CudaImage, DimExpr, ElementType, Field, Fields, Plugin, TensorDesc};
use kiln_plugin_abi as abi;
use std::ffi::{c_char, c_void, CStr, CString};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

/// Owns everything `kiln_plugin_library` points to.
#[derive(Debug)]
pub struct Library {
    _name: CString,
    _entries: Vec<CreatorEntry>,
    _creators: Vec<abi::kiln_plugin_creator>,
    raw: abi::kiln_plugin_library,
}

// SAFETY: built once and never mutated; the raw pointers point into the owned fields.
unsafe impl Send for Library {}
// SAFETY: as above.
unsafe impl Sync for Library {}

impl Library {
    pub fn new(name: &str, entries: Vec<CreatorEntry>) -> Library {
        let name = CString::new(name).unwrap_or_default();
        let creators: Vec<abi::kiln_plugin_creator> = entries.iter().map(CreatorEntry::raw).collect();
        let raw = abi::kiln_plugin_library {
            abi_version: abi::KILN_PLUGIN_ABI_VERSION,
            struct_size: std::mem::size_of::<abi::kiln_plugin_library>() as u32,
            library_name: name.as_ptr(),
            creator_count: creators.len() as i32,
            creators: creators.as_ptr(),
        };
        Library { _name: name, _entries: entries, _creators: creators, raw }
    }

    pub fn raw(&self) -> *const abi::kiln_plugin_library {
        &self.raw
    }
}

/// One creator's static strings and its create thunk.
#[derive(Debug)]
pub struct CreatorEntry {
    namespace: CString,
    name: CString,
    version: CString,
    spec_names: Vec<CString>,
    specs: Vec<abi::kiln_field_spec>,
    create: unsafe extern "C" fn(
        *mut c_void,
        *const abi::kiln_field,
        i32,
        *mut abi::kiln_plugin,
        *mut abi::kiln_error,
    ) -> i32,
}

impl CreatorEntry {
    pub fn of<C: Creator>() -> CreatorEntry {
        let text = |s: &str| CString::new(s).unwrap_or_default();
        let spec_list = C::field_specs();
        let spec_names: Vec<CString> = spec_list.iter().map(|(n, _)| text(n)).collect();
        let specs = spec_list
            .iter()
            .zip(&spec_names)
            .map(|((_, t), n)| abi::kiln_field_spec { name: n.as_ptr(), r#type: *t as i32 })
            .collect();
        CreatorEntry {
            namespace: text(C::NAMESPACE),
            name: text(C::NAME),
            version: text(C::VERSION),
            spec_names,
            specs,
            create: create::<C>,
        }
    }

    fn raw(&self) -> abi::kiln_plugin_creator {
        let _ = &self.spec_names;
        abi::kiln_plugin_creator {
            abi_version: abi::KILN_PLUGIN_ABI_VERSION,
            struct_size: std::mem::size_of::<abi::kiln_plugin_creator>() as u32,
            name: self.name.as_ptr(),
            version: self.version.as_ptr(),
            plugin_namespace: self.namespace.as_ptr(),
            fields: self.specs.as_ptr(),
            field_count: self.specs.len() as i32,
            self_: std::ptr::null_mut(),
            create: Some(self.create),
        }
    }
}

thread_local! {
    /// Whether this thread is inside a [`guarded`] call, whose panics become errors.
    static GUARDED: Cell<bool> = const { Cell::new(false) };
}

/// Makes the panic hook of this library's copy of std quiet for panics that [`guarded`]
/// turns into errors (kiln reports them once, as the error), and leaves every other panic
/// to the hook that was installed before.
fn quiet_guarded_panics() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !GUARDED.with(Cell::get) {
                previous(info);
            }
        }));
    });
}

/// Runs `body`, turning an `Err` or a panic into a status and a message.
fn guarded(err: *mut abi::kiln_error, body: impl FnOnce() -> Result<(), String>) -> abi::kiln_status {
    quiet_guarded_panics();
    let outer = GUARDED.with(|g| g.replace(true));
    let result = catch_unwind(AssertUnwindSafe(body));
    GUARDED.with(|g| g.set(outer));
    let message = match result {
        Ok(Ok(())) => return abi::KILN_OK,
        Ok(Err(m)) => m,
        Err(panic) => {
            let what =
                panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
            format!("the plugin panicked: {}", what.unwrap_or_else(|| "(no message)".into()))
        }
    };
    write_error(err, &message);
    abi::KILN_ERROR
}

fn write_error(err: *mut abi::kiln_error, message: &str) {
    if err.is_null() {
        return;
    }
    // SAFETY: kiln passes a valid error buffer of `capacity` bytes for this call.
    let err = unsafe { &mut *err };
    if err.message.is_null() || err.capacity == 0 {
        return;
    }
    let n = message.len().min(err.capacity as usize - 1);
    // SAFETY: n + 1 <= capacity bytes are written into kiln's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(message.as_ptr(), err.message.cast::<u8>(), n);
        *err.message.add(n) = 0;
    }
}

/// A slice kiln passes (`len` elements at `ptr`), empty when null.
///
/// # Safety
/// `ptr` must point to `len` valid elements for the call, or be null with `len` 0.
unsafe fn slice<'a, T>(ptr: *const T, len: i32) -> &'a [T] {
    // SAFETY: the caller's contract.
    unsafe { slice_n(ptr, len.max(0) as usize) }
}

/// [`slice`] with a `usize` length.
///
/// # Safety
/// As for [`slice`].
unsafe fn slice_n<'a, T>(ptr: *const T, len: usize) -> &'a [T] {
    if ptr.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(ptr, len) }
}

fn desc(d: &abi::kiln_tensor_desc) -> Result<TensorDesc, String> {
    let dtype = ElementType::from_code(d.dtype).ok_or_else(|| format!("unknown element type {}", d.dtype))?;
    let rank = usize::try_from(d.rank).ok().filter(|&r| r <= abi::KILN_MAX_RANK).ok_or("bad rank")?;
    Ok(TensorDesc { dtype, dims: d.dims[..rank].iter().map(|&x| usize::try_from(x).ok()).collect() })
}

fn descs(io: *const abi::kiln_tensor_desc, count: i32) -> Result<Vec<TensorDesc>, String> {
    // SAFETY: kiln passes `count` descriptors.
    unsafe { slice(io, count) }.iter().map(desc).collect()
}

pub(crate) fn typed<T>(bytes: &[u8], dtype: ElementType, want: ElementType) -> Result<&[T], String> {
    if dtype != want
        || bytes.len() % std::mem::size_of::<T>() != 0
        || bytes.as_ptr().align_offset(std::mem::align_of::<T>()) != 0
    {
        return Err(format!("the tensor is {dtype:?}, not {want:?}"));
    }
    // SAFETY: kiln's buffers hold elements of `dtype` (checked equal to T's type), aligned.
    Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast(), bytes.len() / std::mem::size_of::<T>()) })
}

pub(crate) fn typed_mut<T>(bytes: &mut [u8], dtype: ElementType, want: ElementType) -> Result<&mut [T], String> {
    if dtype != want
        || bytes.len() % std::mem::size_of::<T>() != 0
        || bytes.as_ptr().align_offset(std::mem::align_of::<T>()) != 0
    {
        return Err(format!("the tensor is {dtype:?}, not {want:?}"));
    }
    // SAFETY: as in `typed`, and the bytes are exclusively borrowed.
    Ok(unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast(), bytes.len() / std::mem::size_of::<T>()) })
}

fn read_fields(fields: *const abi::kiln_field, count: i32) -> Result<Fields, String> {
    // SAFETY: kiln passes `count` fields valid for this call.
    let raw = unsafe { slice(fields, count) };
    let mut out = Vec::new();
    for f in raw {
        if f.name.is_null() {
            return Err("a field has no name".into());
        }
        // SAFETY: a NUL-terminated name from kiln.
        let name = unsafe { CStr::from_ptr(f.name) }.to_string_lossy().into_owned();
        let n = f.length.max(0) as i32;
        // SAFETY: `length` elements of the field's type at `data`.
        let value = unsafe {
            match f.r#type {
                abi::KILN_FIELD_F32 => Field::F32(slice(f.data.cast(), n).to_vec()),
                abi::KILN_FIELD_F64 => Field::F64(slice(f.data.cast(), n).to_vec()),
                abi::KILN_FIELD_I32 => Field::I32(slice(f.data.cast(), n).to_vec()),
                abi::KILN_FIELD_I64 => Field::I64(slice(f.data.cast(), n).to_vec()),
                abi::KILN_FIELD_BYTES => Field::Bytes(slice(f.data.cast(), n).to_vec()),
                abi::KILN_FIELD_TEXT => {
                    Field::Text(String::from_utf8_lossy(slice(f.data.cast::<u8>(), n)).into_owned())
                }
                other => return Err(format!("field `{name}` has unknown type {other}")),
            }
        };
        out.push((name, value));
    }
    Ok(Fields(out))
}

/// The instance behind `self` pointers: the plugin plus the strings it last returned.
struct Instance<P> {
    plugin: P,
    wgsl: (CString, CString),
    cuda: (Vec<u8>, CString),
}

/// # Safety
/// `this` must be the pointer `create` stored.
unsafe fn instance<'a, P>(this: *mut c_void) -> &'a mut Instance<P> {
    // SAFETY: the caller's contract; kiln never calls one instance from two threads at once.
    unsafe { &mut *this.cast::<Instance<P>>() }
}

unsafe extern "C" fn create<C: Creator>(
    _creator: *mut c_void,
    fields: *const abi::kiln_field,
    count: i32,
    out: *mut abi::kiln_plugin,
    err: *mut abi::kiln_error,
) -> abi::kiln_status {
    guarded(err, || {
        if out.is_null() {
            return Err("no instance to fill".into());
        }
        let plugin = C::create(&read_fields(fields, count)?)?;
        let this = Box::into_raw(Box::new(Instance::<C::Plugin> {
            plugin,
            wgsl: (CString::default(), CString::default()),
            cuda: (Vec::new(), CString::default()),
        }));
        let mut raw = abi::kiln_plugin::empty();
        raw.self_ = this.cast();
        raw.num_outputs = Some(num_outputs::<C::Plugin>);
        raw.output_types = Some(output_types::<C::Plugin>);
        raw.output_shapes = Some(output_shapes::<C::Plugin>);
        raw.supports_format_combination = Some(supports::<C::Plugin>);
        raw.configure = Some(configure::<C::Plugin>);
        raw.workspace_size = Some(workspace_size::<C::Plugin>);
        raw.tactics = Some(tactics::<C::Plugin>);
        raw.timing_cache_id = Some(timing_cache_id::<C::Plugin>);
        raw.serialize = Some(serialize::<C::Plugin>);
        raw.enqueue_cpu = C::Plugin::RUNS_ON_CPU.then_some(enqueue_cpu::<C::Plugin> as _);
        raw.wgsl_kernel = C::Plugin::RUNS_ON_WGPU.then_some(wgsl_kernel::<C::Plugin> as _);
        raw.cuda_kernel = C::Plugin::RUNS_ON_CUDA.then_some(cuda_kernel::<C::Plugin> as _);
        raw.destroy = Some(destroy::<C::Plugin>);
        // SAFETY: kiln passes an instance struct to fill (checked non-null).
        unsafe { *out = raw };
        Ok(())
    })
}

unsafe extern "C" fn destroy<P: Plugin>(this: *mut c_void) {
    let _ = catch_unwind(|| {
        // SAFETY: `this` came from Box::into_raw in `create`; kiln destroys once.
        drop(unsafe { Box::from_raw(this.cast::<Instance<P>>()) });
    });
}

unsafe extern "C" fn num_outputs<P: Plugin>(this: *mut c_void, count: *mut i32, err: *mut abi::kiln_error) -> i32 {
    // SAFETY: kiln's pointers, valid for the call.
    guarded(err, || unsafe {
        *count = instance::<P>(this).plugin.num_outputs() as i32;
        Ok(())
    })
}

unsafe extern "C" fn output_types<P: Plugin>(
    this: *mut c_void,
    inputs: *const i32,
    n: i32,
    outputs: *mut i32,
    err: *mut abi::kiln_error,
) -> i32 {
    guarded(err, || {
        // SAFETY: kiln's pointers, valid for the call; `outputs` has num_outputs slots.
        let (p, codes) = unsafe { (&instance::<P>(this).plugin, slice(inputs, n)) };
        let types = codes
            .iter()
            .map(|&c| ElementType::from_code(c).ok_or(format!("unknown type {c}")))
            .collect::<Result<Vec<_>, _>>()?;
        let out = p.output_types(&types)?;
        if out.len() != p.num_outputs() {
            return Err(format!("output_types gave {} types for {} outputs", out.len(), p.num_outputs()));
        }
        for (i, t) in out.into_iter().enumerate() {
            // SAFETY: i < num_outputs, the slots kiln provides.
            unsafe { *outputs.add(i) = t as i32 };
        }
        Ok(())
    })
}

unsafe extern "C" fn output_shapes<P: Plugin>(
    this: *mut c_void,
    ranks: *const i32,
    n: i32,
    out: *mut abi::kiln_shape_exprs,
    err: *mut abi::kiln_error,
) -> i32 {
    guarded(err, || {
        // SAFETY: kiln's pointers, valid for the call.
        let (p, ranks, out) = unsafe { (&instance::<P>(this).plugin, slice(ranks, n), &mut *out) };
        let ranks: Vec<usize> = ranks.iter().map(|&r| r.max(0) as usize).collect();
        let shapes = p.output_shapes(&ranks)?;
        if shapes.len() > out.output_capacity.max(0) as usize {
            return Err(format!("{} output shapes for {} outputs", shapes.len(), out.output_capacity));
        }
        let mut nodes: Vec<abi::kiln_dim_expr> = Vec::new();
        for (o, dims) in shapes.iter().enumerate() {
            if dims.len() > abi::KILN_MAX_RANK {
                return Err(format!("output {o} has rank {}, over {}", dims.len(), abi::KILN_MAX_RANK));
            }
            for (d, e) in dims.iter().enumerate() {
                let root = push_expr(&mut nodes, e);
                // SAFETY: o < output_capacity and d < KILN_MAX_RANK: inside kiln's arrays.
                unsafe { *out.output_dims.add(o * abi::KILN_MAX_RANK + d) = root };
            }
            // SAFETY: o < output_capacity.
            unsafe { *out.output_ranks.add(o) = dims.len() as i32 };
        }
        if nodes.len() > out.node_capacity.max(0) as usize {
            return Err(format!("{} dim nodes exceed kiln's {}", nodes.len(), out.node_capacity));
        }
        for (i, node) in nodes.iter().enumerate() {
            // SAFETY: i < node_capacity.
            unsafe { *out.nodes.add(i) = *node };
        }
        out.node_count = nodes.len() as i32;
        Ok(())
    })
}

/// Appends `e`'s nodes (children first) and returns its index.
fn push_expr(nodes: &mut Vec<abi::kiln_dim_expr>, e: &DimExpr) -> i32 {
    let binary = |op: i32, a: &DimExpr, b: &DimExpr, nodes: &mut Vec<abi::kiln_dim_expr>| {
        let (a, b) = (push_expr(nodes, a), push_expr(nodes, b));
        abi::kiln_dim_expr { op, a, b, value: 0 }
    };
    let node = match e {
        DimExpr::Const(v) => abi::kiln_dim_expr { op: abi::KILN_DIM_CONST, a: 0, b: 0, value: *v },
        DimExpr::Input { input, axis } => {
            abi::kiln_dim_expr { op: abi::KILN_DIM_INPUT, a: *input as i32, b: *axis as i32, value: 0 }
        }
        DimExpr::Add(a, b) => binary(abi::KILN_DIM_ADD, a, b, nodes),
        DimExpr::Sub(a, b) => binary(abi::KILN_DIM_SUB, a, b, nodes),
        DimExpr::Mul(a, b) => binary(abi::KILN_DIM_MUL, a, b, nodes),
        DimExpr::FloorDiv(a, b) => binary(abi::KILN_DIM_FLOOR_DIV, a, b, nodes),
        DimExpr::CeilDiv(a, b) => binary(abi::KILN_DIM_CEIL_DIV, a, b, nodes),
        DimExpr::Max(a, b) => binary(abi::KILN_DIM_MAX, a, b, nodes),
        DimExpr::Min(a, b) => binary(abi::KILN_DIM_MIN, a, b, nodes),
    };
    nodes.push(node);
    nodes.len() as i32 - 1
}

unsafe extern "C" fn supports<P: Plugin>(
    this: *mut c_void,
    pos: i32,
    io: *const abi::kiln_tensor_desc,
    num_inputs: i32,
    num_outputs: i32,
    supported: *mut i32,
    err: *mut abi::kiln_error,
) -> i32 {
    guarded(err, || {
        let io = descs(io, num_inputs + num_outputs)?;
        // SAFETY: kiln's pointers, valid for the call.
        let p = unsafe { &instance::<P>(this).plugin };
        let ok = p.supports_format_combination(pos.max(0) as usize, &io, num_inputs.max(0) as usize);
        // SAFETY: kiln's out pointer.
        unsafe { *supported = ok as i32 };
        Ok(())
    })
}

unsafe extern "C" fn configure<P: Plugin>(
    this: *mut c_void,
    io: *const abi::kiln_tensor_desc,
    num_inputs: i32,
    num_outputs: i32,
    err: *mut abi::kiln_error,
) -> i32 {
    guarded(err, || {
        let io = descs(io, num_inputs + num_outputs)?;
        // SAFETY: kiln's pointer, valid for the call.
        unsafe { instance::<P>(this) }.plugin.configure(&io, num_inputs.max(0) as usize)
    })
}

unsafe extern "C" fn workspace_size<P: Plugin>(
    this: *mut c_void,
    io: *const abi::kiln_tensor_desc,
    num_inputs: i32,
    num_outputs: i32,
    bytes: *mut u64,
    err: *mut abi::kiln_error,
) -> i32 {
    guarded(err, || {
        let io = descs(io, num_inputs + num_outputs)?;
        // SAFETY: kiln's pointers, valid for the call.
        unsafe { *bytes = instance::<P>(this).plugin.workspace_size(&io, num_inputs.max(0) as usize) };
        Ok(())
    })
}

unsafe extern "C" fn tactics<P: Plugin>(
    this: *mut c_void,
    out: *mut u32,
    capacity: i32,
    count: *mut i32,
    err: *mut abi::kiln_error,
) -> i32 {
    guarded(err, || {
        // SAFETY: kiln's pointer, valid for the call.
        let list = unsafe { instance::<P>(this) }.plugin.tactics();
        if list.len() > capacity.max(0) as usize {
            return Err(format!("{} tactics exceed kiln's {capacity}", list.len()));
        }
        for (i, t) in list.iter().enumerate() {
            // SAFETY: i < capacity.
            unsafe { *out.add(i) = *t };
        }
        // SAFETY: kiln's out pointer.
        unsafe { *count = list.len() as i32 };
        Ok(())
    })
}

unsafe extern "C" fn timing_cache_id<P: Plugin>(
    this: *mut c_void,
    id: *mut c_char,
    capacity: u32,
    err: *mut abi::kiln_error,
) -> i32 {
    guarded(err, || {
        // SAFETY: kiln's pointer, valid for the call.
        let text = unsafe { instance::<P>(this) }.plugin.timing_cache_id();
        if text.len() + 1 > capacity as usize {
            return Err(format!("the timing-cache id is {} bytes, over kiln's {capacity}", text.len()));
        }
        // SAFETY: text.len() + 1 <= capacity bytes into kiln's buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), id.cast::<u8>(), text.len());
            *id.add(text.len()) = 0;
        }
        Ok(())
    })
}

unsafe extern "C" fn serialize<P: Plugin>(
    this: *mut c_void,
    sink: *const abi::kiln_field_sink,
    err: *mut abi::kiln_error,
) -> i32 {
    guarded(err, || {
        // SAFETY: kiln's pointers, valid for the call.
        let (p, sink) = unsafe { (&instance::<P>(this).plugin, &*sink) };
        let add = sink.add.ok_or("kiln gave no field sink")?;
        for (name, field) in p.serialize() {
            let name = CString::new(name).map_err(|_| "a field name contains NUL")?;
            let (ty, len, data): (i32, usize, *const c_void) = match &field {
                Field::F32(v) => (abi::KILN_FIELD_F32, v.len(), v.as_ptr().cast()),
                Field::F64(v) => (abi::KILN_FIELD_F64, v.len(), v.as_ptr().cast()),
                Field::I32(v) => (abi::KILN_FIELD_I32, v.len(), v.as_ptr().cast()),
                Field::I64(v) => (abi::KILN_FIELD_I64, v.len(), v.as_ptr().cast()),
                Field::Bytes(v) => (abi::KILN_FIELD_BYTES, v.len(), v.as_ptr().cast()),
                Field::Text(s) => (abi::KILN_FIELD_TEXT, s.len(), s.as_ptr().cast()),
            };
            let raw = abi::kiln_field { name: name.as_ptr(), r#type: ty, length: len as i64, data };
            // SAFETY: kiln's callback copies the field during the call; `raw` and its data live across it.
            unsafe { add(sink.host, &raw) };
        }
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)] // the C entry's signature
unsafe extern "C" fn enqueue_cpu<P: Plugin>(
    this: *mut c_void,
    tactic: u32,
    io: *const abi::kiln_tensor_desc,
    num_inputs: i32,
    num_outputs: i32,
    inputs: *const *const c_void,
    outputs: *const *mut c_void,
    workspace: *mut c_void,
    err: *mut abi::kiln_error,
) -> i32 {
    guarded(err, || {
        let io = descs(io, num_inputs + num_outputs)?;
        let (ni, no) = (num_inputs.max(0) as usize, num_outputs.max(0) as usize);
        let bytes_of = |d: &TensorDesc| -> Result<usize, String> {
            let n = d.volume().ok_or("an unknown dim at run time")?;
            Ok(n * element_size(d.dtype))
        };
        // SAFETY: kiln passes num_inputs input and num_outputs output pointers, each to a
        // buffer of its descriptor's size, valid and unaliased for the call.
        let (in_ptrs, out_ptrs) = unsafe { (slice(inputs, num_inputs), slice(outputs, num_outputs)) };
        let ins = io[..ni]
            .iter()
            .zip(in_ptrs)
            .map(|(d, &p)| {
                // SAFETY: as above.
                Ok(CpuTensor { desc: d.clone(), bytes: unsafe { slice_n(p.cast::<u8>(), bytes_of(d)?) } })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let mut outs = io[ni..ni + no]
            .iter()
            .zip(out_ptrs)
            .map(|(d, &p)| {
                let n = bytes_of(d)?;
                let bytes: &mut [u8] = if n == 0 || p.is_null() {
                    &mut []
                } else {
                    // SAFETY: as above; outputs are written only here.
                    unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), n) }
                };
                Ok(CpuTensorMut { desc: d.clone(), bytes })
            })
            .collect::<Result<Vec<_>, String>>()?;
        // SAFETY: kiln's pointer, valid for the call; the workspace is as large as asked.
        let p = unsafe { instance::<P>(this) };
        let size = p.plugin.workspace_size(&io, ni) as usize;
        let ws: &mut [u8] = if size == 0 || workspace.is_null() {
            &mut []
        } else {
            // SAFETY: kiln allocated workspace_size bytes.
            unsafe { std::slice::from_raw_parts_mut(workspace.cast::<u8>(), size) }
        };
        p.plugin.enqueue_cpu(tactic, &ins, &mut outs, ws)
    })
}

fn element_size(t: ElementType) -> usize {
    use ElementType as E;
    match t {
        E::U8 | E::I8 | E::Bool => 1,
        E::U16 | E::I16 | E::F16 | E::BF16 => 2,
        E::F32 | E::I32 | E::U32 => 4,
        E::I64 | E::U64 | E::F64 => 8,
    }
}

unsafe extern "C" fn wgsl_kernel<P: Plugin>(
    this: *mut c_void,
    io: *const abi::kiln_tensor_desc,
    num_inputs: i32,
    num_outputs: i32,
    out: *mut abi::kiln_wgsl_kernel,
    err: *mut abi::kiln_error,
) -> i32 {
    guarded(err, || {
        let io = descs(io, num_inputs + num_outputs)?;
        // SAFETY: kiln's pointers, valid for the call.
        let (inst, out) = unsafe { (instance::<P>(this), &mut *out) };
        let k = inst.plugin.wgsl_kernel(&io, num_inputs.max(0) as usize)?;
        inst.wgsl = (
            CString::new(k.source).map_err(|_| "NUL in WGSL")?,
            CString::new(k.entry_point).map_err(|_| "NUL in entry")?,
        );
        *out = abi::kiln_wgsl_kernel {
            source: inst.wgsl.0.as_ptr(),
            entry_point: inst.wgsl.1.as_ptr(),
            workgroups: k.workgroups,
        };
        Ok(())
    })
}

unsafe extern "C" fn cuda_kernel<P: Plugin>(
    this: *mut c_void,
    io: *const abi::kiln_tensor_desc,
    num_inputs: i32,
    num_outputs: i32,
    out: *mut abi::kiln_cuda_kernel,
    err: *mut abi::kiln_error,
) -> i32 {
    guarded(err, || {
        let io = descs(io, num_inputs + num_outputs)?;
        // SAFETY: kiln's pointers, valid for the call.
        let (inst, out) = unsafe { (instance::<P>(this), &mut *out) };
        let k = inst.plugin.cuda_kernel(&io, num_inputs.max(0) as usize)?;
        let (kind, image) = match k.image {
            CudaImage::Ptx(s) => (abi::KILN_CUDA_PTX, s.into_bytes()),
            CudaImage::Cubin(b) => (abi::KILN_CUDA_CUBIN, b),
            CudaImage::Source(s) => (abi::KILN_CUDA_SOURCE, s.into_bytes()),
        };
        inst.cuda = (image, CString::new(k.entry_point).map_err(|_| "NUL in entry")?);
        *out = abi::kiln_cuda_kernel {
            image_kind: kind,
            image: inst.cuda.0.as_ptr().cast(),
            image_size: inst.cuda.0.len() as u64,
            entry_point: inst.cuda.1.as_ptr(),
            grid: k.grid,
            block: k.block,
            shared_memory_bytes: k.shared_memory_bytes,
        };
        Ok(())
    })
}
