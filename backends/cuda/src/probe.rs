//! Finds the CUDA libraries before any cudarc call: cudarc panics on a library it cannot
//! open, so every entry point of this crate asks here first and turns absence into an error.

use std::sync::OnceLock;

/// The driver, the runtime compiler and cuBLASLt, by the names the loader searches
/// (cudarc opens the same names through the same search).
pub const DRIVER: &str = "libcuda.so.1";
pub const NVRTC: &str = "libnvrtc.so.13";
pub const CUBLASLT: &str = "libcublasLt.so.13";
/// cuDNN 9: optional. Without it convolutions and pooling run kiln's direct kernels. cudarc
/// tries `libcudnn.so` first and then versioned names; `.so.9` is among them.
pub const CUDNN: &str = "libcudnn.so.9";
/// Set to `1` to run as if cuDNN were absent (tests of the fallback; A/B timing).
pub const DISABLE_CUDNN_ENV: &str = "KILN_CUDA_DISABLE_CUDNN";

/// Which libraries opened; computed once per process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Libraries {
    pub driver: Result<(), String>,
    pub nvrtc: Result<(), String>,
    pub cublaslt: Result<(), String>,
    /// Optional (see [`CUDNN`]); not part of [`Libraries::runtime_ready`].
    pub cudnn: Result<(), String>,
}

impl Libraries {
    /// Ok when NVRTC is present (all that compiling kernels needs), else why not.
    pub fn nvrtc_ready(&self) -> Result<(), String> {
        self.nvrtc.clone()
    }

    /// Ok when everything running a network needs is present, else each missing library.
    pub fn runtime_ready(&self) -> Result<(), String> {
        let missing: Vec<String> = [&self.driver, &self.nvrtc, &self.cublaslt]
            .into_iter()
            .filter_map(|r| r.as_ref().err().cloned())
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(missing.join("; "))
        }
    }
}

/// Opens each library once (and keeps it open, so cudarc's own open finds it loaded).
pub fn libraries() -> &'static Libraries {
    static LIBS: OnceLock<Libraries> = OnceLock::new();
    LIBS.get_or_init(|| Libraries { driver: open(DRIVER), nvrtc: open(NVRTC), cublaslt: open(CUBLASLT), cudnn: open_cudnn() })
}

fn open_cudnn() -> Result<(), String> {
    if std::env::var(DISABLE_CUDNN_ENV).as_deref() == Ok("1") {
        return Err(format!("cuDNN disabled by {DISABLE_CUDNN_ENV}=1"));
    }
    open(CUDNN)
}

fn open(name: &str) -> Result<(), String> {
    // SAFETY: these are NVIDIA's own libraries, whose initializers have no preconditions; the
    // handle is leaked on purpose so the library stays loaded for cudarc's later dlopen.
    match unsafe { libloading::Library::new(name) } {
        Ok(lib) => {
            std::mem::forget(lib);
            Ok(())
        }
        Err(e) => Err(format!("cannot open {name} ({e}); install it or add its folder to LD_LIBRARY_PATH")),
    }
}
