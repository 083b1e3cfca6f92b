//! NVRTC: CUDA C++ source to CUBIN for one architecture (FFI module: `unsafe` lives here).
//!
//! CUBIN rather than PTX: NVRTC 13's PTX can be newer than the driver's JIT accepts, while
//! CUBIN for the device's exact architecture loads on any driver that supports the device.

use crate::probe;
use cudarc::nvrtc::{result, sys};
use std::ffi::{c_char, CString};
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CompileError {
    #[error("NVRTC is not available: {0}")]
    Unavailable(String),
    #[error("NVRTC failed to compile `{source_name}` for {arch}:\n{log}")]
    Failed { source_name: String, arch: String, log: String },
    #[error("NVRTC call {call} failed on `{source_name}`: {status}")]
    Call { source_name: String, call: &'static str, status: String },
}

/// Where the CUDA headers (`cuda_fp16.h`, `cuda_bf16.h`) are: `KILN_CUDA_INCLUDE`, else the
/// usual toolkit folder. NVRTC does not ship them built in.
pub fn include_dir() -> String {
    std::env::var("KILN_CUDA_INCLUDE").unwrap_or_else(|_| "/usr/local/cuda/include".into())
}

/// The options every kiln source compiles with for `arch`; with `KILN_CUDA_LINEINFO=1` also
/// `-lineinfo`, so Nsight Compute's source view maps stalls to kernel lines (no change to the
/// code generated; the kernel cache keys on the options).
pub fn options(arch: &str) -> Vec<String> {
    let mut options = vec![format!("--gpu-architecture={arch}"), format!("--include-path={}", include_dir()), "--std=c++17".to_string(), "-default-device".to_string()];
    if std::env::var("KILN_CUDA_LINEINFO").is_ok_and(|v| v == "1") {
        options.push("-lineinfo".to_string());
    }
    options
}

/// NVRTC's `(major, minor)` version, or `None` where NVRTC is missing.
pub fn version() -> Option<(i32, i32)> {
    probe::libraries().nvrtc_ready().ok()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is loaded (checked above); both are valid out-pointers.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }.result().ok()?;
    Some((major, minor))
}

/// Compiles one translation unit (`headers` are `(name, text)` pairs it may `#include`) for
/// `arch` such as "sm_90", returning the CUBIN image.
pub fn compile_cubin(source_name: &str, source: &str, headers: &[(&str, &str)], arch: &str) -> Result<Vec<u8>, CompileError> {
    probe::libraries().nvrtc_ready().map_err(CompileError::Unavailable)?;
    let call_err = |call: &'static str| {
        let source_name = source_name.to_string();
        move |e: result::NvrtcError| CompileError::Call { source_name, call, status: format!("{e:?}") }
    };
    let cstr = |s: &str| CString::new(s).map_err(|_| CompileError::Call { source_name: source_name.into(), call: "CString", status: "NUL byte in text".into() });
    let src = cstr(source)?;
    let name = cstr(source_name)?;
    let header_texts = headers.iter().map(|(_, t)| cstr(t)).collect::<Result<Vec<_>, _>>()?;
    let header_names = headers.iter().map(|(n, _)| cstr(n)).collect::<Result<Vec<_>, _>>()?;
    let text_ptrs: Vec<*const c_char> = header_texts.iter().map(|s| s.as_ptr()).collect();
    let name_ptrs: Vec<*const c_char> = header_names.iter().map(|s| s.as_ptr()).collect();
    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer is to a NUL-terminated string alive for this call; the arrays hold
    // `headers.len()` entries each; `prog` is a valid out-pointer.
    unsafe {
        sys::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            headers.len() as i32,
            text_ptrs.as_ptr(),
            name_ptrs.as_ptr(),
        )
        .result()
        .map_err(call_err("nvrtcCreateProgram"))?;
    }
    let options = options(arch);
    // SAFETY: `prog` was created above and is destroyed exactly once below.
    let compiled = unsafe { result::compile_program(prog, &options) };
    // SAFETY: `prog` is live.
    let log = unsafe { result::get_program_log(prog) }
        .map(|chars| {
            let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .unwrap_or_default();
    let image = match compiled {
        Err(_) => Err(CompileError::Failed { source_name: source_name.into(), arch: arch.into(), log }),
        Ok(()) => cubin(prog).map_err(call_err("nvrtcGetCUBIN")),
    };
    // SAFETY: `prog` is live and not used after this.
    let _ = unsafe { result::destroy_program(prog) };
    image
}

fn cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>, result::NvrtcError> {
    let mut size = 0usize;
    // SAFETY: `prog` holds a successfully compiled program; `size` is a valid out-pointer.
    unsafe { sys::nvrtcGetCUBINSize(prog, &mut size).result()? };
    let mut image = vec![0u8; size];
    // SAFETY: `image` has exactly the `size` bytes NVRTC asked for.
    unsafe { sys::nvrtcGetCUBIN(prog, image.as_mut_ptr() as *mut c_char).result()? };
    Ok(image)
}
