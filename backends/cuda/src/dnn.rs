//! cuDNN convolutions and pooling (FFI module: `unsafe` lives here, in `device` and in `blas`).
//!
//! One cuDNN handle per device ([`DnnDevice`], the `Gpu`), bound to its stream. Descriptors and the heuristic's algorithm
//! list are built once per convolution shape and cached (a run builds nothing); workspaces come
//! from [`DnnDevice::alloc`] (stream-ordered, so the context's arena and graph capture cover them)
//! and nothing here synchronizes the host.
//!
//! Tensors are described either as packed NCHW(D) or, for tensor cores, as NHWC: the dims are
//! always given in NCHW order and only the strides differ, so one plan type serves both.

use crate::buffer::{DeviceBuffer, DeviceTensor};
use crate::error::{driver, GpuError};
use cudarc::cudnn::sys;
use cudarc::driver::{CudaContext, CudaStream};
use kiln::DataType;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// What cuDNN needs of the device it runs on; `Gpu` implements it, so this library sits
/// below the device rather than beside it.
pub trait DnnDevice {
    fn context(&self) -> &Arc<CudaContext>;
    fn stream(&self) -> &Arc<CudaStream>;
    /// Device bytes, stream-ordered (from the execution's arena when one serves it).
    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, GpuError>;
    /// Runs `f` with its allocations outside the current run's trace and arena.
    fn persistent<T>(&self, f: impl FnOnce() -> T) -> T;
}

/// The forward algorithms cuDNN's legacy API names, by their enum value (stable tactic ids).
pub const ALGORITHMS: [(u32, &str); 8] = [
    (0, "implicit_gemm"),
    (1, "implicit_precomp_gemm"),
    (2, "gemm"),
    (3, "direct"),
    (4, "fft"),
    (5, "fft_tiling"),
    (6, "winograd"),
    (7, "winograd_nonfused"),
];

/// FFT, FFT tiling, Winograd and nonfused Winograd: they compute in a transformed domain.
const TRANSFORM_ALGORITHMS: [u32; 4] = [4, 5, 6, 7];

/// The one algorithm that `cudnnConvolutionBiasActivationForward` runs with an identity
/// activation (cuDNN's documented restriction); with ReLU every algorithm is allowed.
const PRECOMP_GEMM: u32 = 1;

fn algo_enum(code: u32) -> Option<sys::cudnnConvolutionFwdAlgo_t> {
    use sys::cudnnConvolutionFwdAlgo_t as A;
    Some(match code {
        0 => A::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
        1 => A::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
        2 => A::CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
        3 => A::CUDNN_CONVOLUTION_FWD_ALGO_DIRECT,
        4 => A::CUDNN_CONVOLUTION_FWD_ALGO_FFT,
        5 => A::CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
        6 => A::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
        7 => A::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
        _ => return None,
    })
}

fn check(call: &'static str, status: sys::cudnnStatus_t) -> Result<(), GpuError> {
    status.result().map_err(|e| GpuError::Library { call, reason: format!("{e:?}") })
}

fn data_type(dtype: DataType) -> Result<sys::cudnnDataType_t, GpuError> {
    use sys::cudnnDataType_t as T;
    match dtype {
        DataType::F32 => Ok(T::CUDNN_DATA_FLOAT),
        DataType::F16 => Ok(T::CUDNN_DATA_HALF),
        DataType::BF16 => Ok(T::CUDNN_DATA_BFLOAT16),
        // Only as an INT8 convolution's input and filter (`ConvSpec::integer`).
        DataType::I8 => Ok(T::CUDNN_DATA_INT8),
        other => Err(GpuError::Unsupported(format!("cuDNN convolutions take f32, f16, bf16 and int8, not {other}"))),
    }
}

/// One convolution's shape and types: the cache key of its descriptors, and what the tactics
/// of a layer are listed for. Spatial vectors have 2 (1-D runs as 2-D with height 1) or 3 entries.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConvSpec {
    pub dtype: DataType,
    /// f32 convolutions may use TF32 tensor cores.
    pub tf32: bool,
    /// Input, output and residual are stored NHWC (filters too), else packed NCHW.
    pub nhwc: bool,
    /// Input dims N, C, spatial….
    pub x: Vec<usize>,
    /// Filter dims K, C / groups, spatial….
    pub w: Vec<usize>,
    /// Output dims N, K, spatial….
    pub y: Vec<usize>,
    pub pads: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub groups: usize,
}

impl ConvSpec {
    /// The spec of a kiln convolution on `x` by `w` into `y`, or why cuDNN cannot run it
    /// (asymmetric padding, rank, type).
    pub fn new(
        p: &kiln::ConvolutionParams,
        dtype: DataType,
        tf32: bool,
        x: &[usize],
        w: &[usize],
        y: &[usize],
    ) -> Result<ConvSpec, GpuError> {
        data_type(dtype)?;
        let spatial =
            x.len().checked_sub(2).filter(|s| (1..=3).contains(s)).ok_or("cuDNN convolves 1-D, 2-D and 3-D")?;
        if w.len() != x.len() || y.len() != x.len() {
            return Err(GpuError::Unsupported(format!("convolution of {x:?} by {w:?} into {y:?}")));
        }
        if p.pre_padding != p.post_padding {
            return Err(GpuError::Unsupported(format!("cuDNN pads symmetrically; {:?} before, {:?} after", p.pre_padding, p.post_padding)));
        }
        let per_axis = |v: &[usize], fill: usize, what: &str| -> Result<Vec<usize>, GpuError> {
            match v.len() {
                0 => Ok(vec![fill; spatial]),
                n if n == spatial => Ok(v.to_vec()),
                n => Err(GpuError::Unsupported(format!("{n} {what} for {spatial} spatial dims"))),
            }
        };
        let mut pads = per_axis(&p.pre_padding, 0, "pads")?;
        let mut strides = per_axis(&p.strides, 1, "strides")?;
        let mut dilations = per_axis(&p.dilations, 1, "dilations")?;
        let (mut x, mut w, mut y) = (x.to_vec(), w.to_vec(), y.to_vec());
        if spatial == 1 {
            for v in [&mut x, &mut w, &mut y] {
                v.insert(2, 1);
            }
            pads.insert(0, 0);
            strides.insert(0, 1);
            dilations.insert(0, 1);
        }
        let too_big = x.iter().chain(&w).chain(&y).any(|&d| d > i32::MAX as usize);
        if too_big || x.iter().product::<usize>() > i32::MAX as usize || y.iter().product::<usize>() > i32::MAX as usize
        {
            return Err("a tensor of over 2^31 elements".into());
        }
        Ok(ConvSpec { dtype, tf32, nhwc: false, x, w, y, pads, strides, dilations, groups: p.groups.max(1) })
    }

    /// An INT8 convolution (cuDNN's INT8_EXT_CONFIG): int8 input and filter stored NHWC, the
    /// exact int32 sum written as f32 NHWC; 2-D, one group, channels in multiples of 4.
    pub fn integer(p: &kiln::ConvolutionParams, x: &[usize], w: &[usize], y: &[usize]) -> Result<ConvSpec, GpuError> {
        if x.len() != 4 || p.groups > 1 || !x[1].is_multiple_of(4) || !w[0].is_multiple_of(4) {
            return Err(GpuError::Unsupported(format!("cuDNN's INT8 convolution takes 2-D, one group, channels in multiples of 4 (got {x:?} by {w:?})")));
        }
        Ok(ConvSpec { nhwc: true, ..ConvSpec::new(p, DataType::I8, false, x, w, y)? })
    }

    /// The type the output is written in: f32 for an INT8 convolution, else the input's.
    fn output_type(&self) -> DataType {
        if self.dtype == DataType::I8 { DataType::F32 } else { self.dtype }
    }

    pub fn with_nhwc(mut self, nhwc: bool) -> ConvSpec {
        self.nhwc = nhwc;
        self
    }
}

/// Element strides of `dims` (NCHW order) stored packed NCHW, or NHWC.
fn strides_of(dims: &[usize], nhwc: bool) -> Vec<i32> {
    let r = dims.len();
    let mut st = vec![0usize; r];
    if nhwc {
        // Memory order N, spatial…, C.
        st[1] = 1;
        let mut acc = dims[1];
        for d in (2..r).rev() {
            st[d] = acc;
            acc *= dims[d];
        }
        st[0] = acc;
    } else {
        let mut acc = 1;
        for d in (0..r).rev() {
            st[d] = acc;
            acc *= dims[d];
        }
    }
    st.into_iter().map(|s| s as i32).collect()
}

fn ints(v: &[usize]) -> Vec<i32> {
    v.iter().map(|&d| d as i32).collect()
}

macro_rules! descriptor {
    ($name:ident, $raw:ty, $create:ident, $destroy:ident) => {
        #[derive(Debug)]
        struct $name($raw);
        impl $name {
            fn new() -> Result<$name, GpuError> {
                let mut raw = std::ptr::null_mut();
                // SAFETY: `raw` is a valid out-pointer; cuDNN is loaded (probed before any Dnn).
                check(stringify!($create), unsafe { sys::$create(&mut raw) })?;
                Ok($name(raw))
            }
        }
        // SAFETY: a descriptor is written once, at creation, and afterwards only read by cuDNN
        // calls, which the owning Gpu serializes (one run at a time on its one stream).
        unsafe impl Send for $name {}
        // SAFETY: as above.
        unsafe impl Sync for $name {}
        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: created by `new` above and destroyed once, here.
                let _ = unsafe { sys::$destroy(self.0) };
            }
        }
    };
}

descriptor!(TensorDesc, sys::cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor);
descriptor!(FilterDesc, sys::cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor);
descriptor!(
    ConvDesc,
    sys::cudnnConvolutionDescriptor_t,
    cudnnCreateConvolutionDescriptor,
    cudnnDestroyConvolutionDescriptor
);
descriptor!(
    ActDesc,
    sys::cudnnActivationDescriptor_t,
    cudnnCreateActivationDescriptor,
    cudnnDestroyActivationDescriptor
);
descriptor!(PoolDesc, sys::cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor);

/// A 4-D NHWC descriptor by its format name, as cuDNN's INT8 configurations want it (they do
/// not infer the format from strides).
fn named_nhwc_desc(dtype: sys::cudnnDataType_t, dims: &[usize]) -> Result<TensorDesc, GpuError> {
    let d = TensorDesc::new()?;
    let [n, c, h, w] = <[usize; 4]>::try_from(dims).map_err(|_| GpuError::Unsupported(format!("an NHWC descriptor of {dims:?}")))?.map(|v| v as i32);
    // SAFETY: `d` is a live descriptor; the dims fit i32 (`ConvSpec::new` checks them).
    check("cudnnSetTensor4dDescriptor", unsafe { sys::cudnnSetTensor4dDescriptor(d.0, sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC, dtype, n, c, h, w) })?;
    Ok(d)
}

fn tensor_desc(dtype: DataType, dims: &[usize], nhwc: bool) -> Result<TensorDesc, GpuError> {
    let d = TensorDesc::new()?;
    let (dims_i, st) = (ints(dims), strides_of(dims, nhwc));
    // SAFETY: `dims_i` and `st` hold `dims.len()` entries each and outlive the call.
    check("cudnnSetTensorNdDescriptor", unsafe {
        sys::cudnnSetTensorNdDescriptor(d.0, data_type(dtype)?, dims.len() as i32, dims_i.as_ptr(), st.as_ptr())
    })?;
    Ok(d)
}

/// One convolution's descriptors and the algorithms cuDNN's heuristic offers, best first.
#[derive(Debug)]
struct ConvPlan {
    x: TensorDesc,
    w: FilterDesc,
    y: TensorDesc,
    /// Per-output-channel bias, dims 1×K×1×1(×1).
    bias: TensorDesc,
    conv: ConvDesc,
    relu: ActDesc,
    identity: ActDesc,
    /// (algorithm code, workspace bytes), heuristic order.
    ranked: Vec<(u32, usize)>,
}

impl ConvPlan {
    fn new(handle: sys::cudnnHandle_t, s: &ConvSpec) -> Result<ConvPlan, GpuError> {
        use sys::cudnnMathType_t as M;
        let dt = data_type(s.dtype)?;
        let (x, y) = if s.dtype == DataType::I8 {
            (named_nhwc_desc(dt, &s.x)?, named_nhwc_desc(data_type(s.output_type())?, &s.y)?)
        } else {
            (tensor_desc(s.dtype, &s.x, s.nhwc)?, tensor_desc(s.output_type(), &s.y, s.nhwc)?)
        };
        let mut bias_dims = vec![1usize; s.y.len()];
        bias_dims[1] = s.y[1];
        let bias = tensor_desc(s.output_type(), &bias_dims, false)?;
        let w = FilterDesc::new()?;
        let wd = ints(&s.w);
        let format = if s.nhwc {
            sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC
        } else {
            sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW
        };
        // SAFETY: `wd` holds `s.w.len()` entries and outlives the call.
        check("cudnnSetFilterNdDescriptor", unsafe {
            sys::cudnnSetFilterNdDescriptor(w.0, dt, format, wd.len() as i32, wd.as_ptr())
        })?;
        let conv = ConvDesc::new()?;
        let (pads, strides, dilations) = (ints(&s.pads), ints(&s.strides), ints(&s.dilations));
        // SAFETY: the three arrays hold `pads.len()` entries each and outlive the call.
        check("cudnnSetConvolutionNdDescriptor", unsafe {
            sys::cudnnSetConvolutionNdDescriptor(
                conv.0,
                pads.len() as i32,
                pads.as_ptr(),
                strides.as_ptr(),
                dilations.as_ptr(),
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                if s.dtype == DataType::I8 { sys::cudnnDataType_t::CUDNN_DATA_INT32 } else { sys::cudnnDataType_t::CUDNN_DATA_FLOAT },
            )
        })?;
        // SAFETY: `conv` is a live descriptor.
        check("cudnnSetConvolutionGroupCount", unsafe { sys::cudnnSetConvolutionGroupCount(conv.0, s.groups as i32) })?;
        // Exact f32 unless TF32 is allowed: DEFAULT_MATH would let cuDNN pick TF32 on its own.
        let math = match s.dtype {
            DataType::F32 if !s.tf32 => M::CUDNN_FMA_MATH,
            _ => M::CUDNN_TENSOR_OP_MATH,
        };
        // SAFETY: `conv` is a live descriptor.
        check("cudnnSetConvolutionMathType", unsafe { sys::cudnnSetConvolutionMathType(conv.0, math) })?;
        let act = |mode| -> Result<ActDesc, GpuError> {
            let a = ActDesc::new()?;
            // SAFETY: `a` is a live descriptor.
            check("cudnnSetActivationDescriptor", unsafe {
                sys::cudnnSetActivationDescriptor(a.0, mode, sys::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN, 0.0)
            })?;
            Ok(a)
        };
        let relu = act(sys::cudnnActivationMode_t::CUDNN_ACTIVATION_RELU)?;
        let identity = act(sys::cudnnActivationMode_t::CUDNN_ACTIVATION_IDENTITY)?;
        let mut plan = ConvPlan { x, w, y, bias, conv, relu, identity, ranked: Vec::new() };
        plan.ranked = plan.rank(handle, s.dtype == DataType::F32 && !s.tf32)?;
        Ok(plan)
    }

    /// The heuristic's algorithms that support this shape, each once, with their workspace
    /// sizes. (The math type that runs is the descriptor's, whatever math a result names.)
    /// `exact`: f32 without TF32, where the user asked for f32's accuracy: the FFT and
    /// Winograd transforms, whose rounding error is several times a direct sum's, are left
    /// out (on deep random-weight networks they tripled the error against float64).
    fn rank(&self, handle: sys::cudnnHandle_t, exact: bool) -> Result<Vec<(u32, usize)>, GpuError> {
        const MAX: usize = 16;
        // SAFETY: the perf structs are plain data that cuDNN overwrites; zeroed is a valid value.
        let mut perf: [sys::cudnnConvolutionFwdAlgoPerf_t; MAX] = unsafe { std::mem::zeroed() };
        let mut returned = 0i32;
        // SAFETY: every descriptor is live; `perf` has room for MAX results.
        check("cudnnGetConvolutionForwardAlgorithm_v7", unsafe {
            sys::cudnnGetConvolutionForwardAlgorithm_v7(
                handle,
                self.x.0,
                self.w.0,
                self.conv.0,
                self.y.0,
                MAX as i32,
                &mut returned,
                perf.as_mut_ptr(),
            )
        })?;
        let mut ranked: Vec<(u32, usize)> = Vec::new();
        for p in &perf[..(returned.max(0) as usize).min(MAX)] {
            let ok = p.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS;
            let code = p.algo as u32;
            if ok && !(exact && TRANSFORM_ALGORITHMS.contains(&code)) && !ranked.iter().any(|&(c, _)| c == code) {
                ranked.push((code, self.workspace(handle, code)?));
            }
        }
        if ranked.is_empty() {
            return Err("cuDNN offers no algorithm for this convolution".into());
        }
        Ok(ranked)
    }

    fn workspace(&self, handle: sys::cudnnHandle_t, code: u32) -> Result<usize, GpuError> {
        let algo = algo_enum(code).ok_or_else(|| format!("no cuDNN algorithm {code}"))?;
        let mut bytes = 0usize;
        // SAFETY: every descriptor is live; `bytes` is a valid out-pointer.
        check("cudnnGetConvolutionForwardWorkspaceSize", unsafe {
            sys::cudnnGetConvolutionForwardWorkspaceSize(
                handle,
                self.x.0,
                self.w.0,
                self.conv.0,
                self.y.0,
                algo,
                &mut bytes,
            )
        })?;
        Ok(bytes)
    }
}

/// What follows the convolution inside cuDNN: y = act(conv(x, w) + z + bias).
#[derive(Clone, Copy, Debug, Default)]
pub struct ConvEpilogue<'t> {
    pub bias: Option<&'t DeviceTensor>,
    /// A residual of the output's shape and layout.
    pub residual: Option<&'t DeviceTensor>,
    pub relu: bool,
    /// Zeros of the output's channels, for a layer without a bias that has a residual or ReLU:
    /// its bias where that lets cuDNN fuse them into the convolution's call.
    pub zeros: Option<&'t DeviceTensor>,
}

#[derive(Debug)]
struct PoolPlan {
    x: TensorDesc,
    y: TensorDesc,
    pool: PoolDesc,
}

/// A pooling window cuDNN runs: 2-D, symmetric padding, no dilation, floor-mode output.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolSpec {
    pub dtype: DataType,
    pub max: bool,
    pub exclude_padding: bool,
    pub x: Vec<usize>,
    pub y: Vec<usize>,
    pub window: Vec<usize>,
    pub pads: Vec<usize>,
    pub strides: Vec<usize>,
}

impl PoolSpec {
    /// The spec of a kiln pooling layer, or why cuDNN does not run it.
    pub fn new(p: &kiln::PoolingParams, dtype: DataType, x: &[usize], y: &[usize]) -> Result<PoolSpec, GpuError> {
        data_type(dtype)?;
        if x.len() != 4 || y.len() != 4 || p.window.len() != 2 {
            return Err("cuDNN pooling here is 2-D only".into());
        }
        if p.pre_padding != p.post_padding || p.dilations.iter().any(|&d| d != 1) {
            return Err("asymmetric padding or dilation".into());
        }
        let pads = if p.pre_padding.is_empty() { vec![0, 0] } else { p.pre_padding.clone() };
        let strides = if p.strides.is_empty() { vec![1, 1] } else { p.strides.clone() };
        // cuDNN computes floor-mode sizes; a ceil-mode layer runs only where both agree.
        for d in 0..2 {
            let span = x[2 + d] + 2 * pads[d];
            if span < p.window[d] || (span - p.window[d]) / strides[d] + 1 != y[2 + d] {
                return Err("the output size is not floor-mode".into());
            }
        }
        Ok(PoolSpec {
            dtype,
            max: p.kind == kiln::PoolingKind::Max,
            exclude_padding: p.average_count_excludes_padding,
            x: x.to_vec(),
            y: y.to_vec(),
            window: p.window.clone(),
            pads,
            strides,
        })
    }
}

/// A cuDNN handle on one stream and the plans of the shapes met so far.
#[derive(Debug)]
pub struct Dnn {
    handle: sys::cudnnHandle_t,
    convs: Mutex<HashMap<ConvSpec, Arc<ConvPlan>>>,
    pools: Mutex<HashMap<PoolSpec, Arc<PoolPlan>>>,
}

// SAFETY: the handle is used only through `&self` methods that enqueue on the Gpu's one
// stream; runs on a Gpu are serialized by its run lock, so calls are never concurrent.
unsafe impl Send for Dnn {}
// SAFETY: as above.
unsafe impl Sync for Dnn {}

impl Drop for Dnn {
    fn drop(&mut self) {
        self.convs.get_mut().unwrap_or_else(|p| p.into_inner()).clear();
        self.pools.get_mut().unwrap_or_else(|p| p.into_inner()).clear();
        // SAFETY: created by `Dnn::new` and destroyed once, after every plan.
        let _ = unsafe { sys::cudnnDestroy(self.handle) };
    }
}

impl Dnn {
    /// A handle on `gpu`'s stream; Err (never a panic) where cuDNN is absent or disabled.
    pub fn new(gpu: &impl DnnDevice) -> Result<Dnn, GpuError> {
        crate::probe::libraries().cudnn.clone()?;
        gpu.context().bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: `handle` is a valid out-pointer; the library is loaded (probed above) and the
        // Gpu's context is current on this thread (cudarc binds it on creation).
        check("cudnnCreate", unsafe { sys::cudnnCreate(&mut handle) })?;
        let dnn = Dnn { handle, convs: Mutex::default(), pools: Mutex::default() };
        // SAFETY: both handles are live; the stream outlives the Gpu that owns this Dnn.
        check("cudnnSetStream", unsafe { sys::cudnnSetStream(handle, gpu.stream().cu_stream() as sys::cudaStream_t) })?;
        Ok(dnn)
    }

    fn conv_plan(&self, spec: &ConvSpec) -> Result<Arc<ConvPlan>, GpuError> {
        let mut convs = self.convs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = convs.get(spec) {
            return Ok(p.clone());
        }
        let plan = Arc::new(ConvPlan::new(self.handle, spec)?);
        convs.insert(spec.clone(), plan.clone());
        Ok(plan)
    }

    /// The algorithms cuDNN's heuristic offers for `spec`, best first (tactic candidates).
    pub fn algorithms(&self, spec: &ConvSpec) -> Result<Vec<u32>, GpuError> {
        Ok(self.conv_plan(spec)?.ranked.iter().map(|&(c, _)| c).collect())
    }

    /// `y = epilogue(conv(x, w))` with algorithm `algo` (None: the heuristic's first).
    #[allow(clippy::too_many_arguments)]
    pub fn convolution(
        &self,
        gpu: &impl DnnDevice,
        spec: &ConvSpec,
        algo: Option<u32>,
        x: &DeviceTensor,
        w: &DeviceTensor,
        epilogue: ConvEpilogue,
        y: &DeviceTensor,
    ) -> Result<(), GpuError> {
        gpu.context().bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        let plan = self.conv_plan(spec)?;
        // An algorithm the heuristic does not offer for this shape (an engine built elsewhere)
        // runs as the heuristic's first: the result is the same function.
        let (code, ws_bytes) =
            algo.and_then(|c| plan.ranked.iter().find(|&&(r, _)| r == c).copied()).unwrap_or(plan.ranked[0]);
        let algo_e = algo_enum(code).ok_or_else(|| format!("no cuDNN algorithm {code}"))?;
        let workspace = gpu.alloc(ws_bytes)?;
        let (px, pw, py, pws) = (x.buf.ptr(), w.buf.ptr(), y.buf.ptr(), workspace.ptr());
        let (one, zero) = (1.0f32, 0.0f32);
        // The fused call takes ReLU after any algorithm, the identity only after
        // IMPLICIT_PRECOMP_GEMM; it needs a bias, so a layer without one gives zeros where
        // the call takes its epilogue (not for a residual the fused call cannot take).
        let takes_all = epilogue.relu || code == PRECOMP_GEMM;
        let bias = epilogue.bias.or(epilogue.zeros.filter(|_| takes_all));
        if let (true, Some(bias)) = (takes_all, bias) {
            let pb = bias.buf.ptr();
            // z = y with alpha2 = 0 when there is no residual (cuDNN allows z to alias y).
            let (pz, alpha2) = epilogue.residual.map_or((py, 0.0f32), |z| (z.buf.ptr(), 1.0));
            let act = if epilogue.relu { &plan.relu } else { &plan.identity };
            // SAFETY: every descriptor is live and matches its buffer's dims, type and layout
            // (the spec was built from these tensors); the workspace has the size cuDNN asked
            // for this algorithm; all buffers belong to this Gpu's context and stream.
            return check("cudnnConvolutionBiasActivationForward", unsafe {
                sys::cudnnConvolutionBiasActivationForward(
                    self.handle,
                    &one as *const f32 as *const c_void,
                    plan.x.0,
                    px as *const c_void,
                    plan.w.0,
                    pw as *const c_void,
                    plan.conv.0,
                    algo_e,
                    pws as *mut c_void,
                    ws_bytes,
                    &alpha2 as *const f32 as *const c_void,
                    plan.y.0,
                    pz as *const c_void,
                    plan.bias.0,
                    pb as *const c_void,
                    act.0,
                    plan.y.0,
                    py as *mut c_void,
                )
            });
        }
        // SAFETY: as above, without the epilogue's operands.
        check("cudnnConvolutionForward", unsafe {
            sys::cudnnConvolutionForward(
                self.handle,
                &one as *const f32 as *const c_void,
                plan.x.0,
                px as *const c_void,
                plan.w.0,
                pw as *const c_void,
                plan.conv.0,
                algo_e,
                pws as *mut c_void,
                ws_bytes,
                &zero as *const f32 as *const c_void,
                plan.y.0,
                py as *mut c_void,
            )
        })?;
        let add = |desc: &TensorDesc, t: &DeviceTensor| {
            // SAFETY: `desc` describes `t` (bias 1×K×1×1, or the output's own descriptor for a
            // residual); y is live and written by the convolution above on the same stream.
            check("cudnnAddTensor", unsafe {
                sys::cudnnAddTensor(
                    self.handle,
                    &one as *const f32 as *const c_void,
                    desc.0,
                    t.buf.ptr() as *const c_void,
                    &one as *const f32 as *const c_void,
                    plan.y.0,
                    py as *mut c_void,
                )
            })
        };
        if let Some(b) = epilogue.bias {
            add(&plan.bias, b)?;
        }
        if let Some(z) = epilogue.residual {
            add(&plan.y, z)?;
        }
        if epilogue.relu {
            // SAFETY: in place on y (cuDNN allows x == y for activations).
            check("cudnnActivationForward", unsafe {
                sys::cudnnActivationForward(
                    self.handle,
                    plan.relu.0,
                    &one as *const f32 as *const c_void,
                    plan.y.0,
                    py as *const c_void,
                    &zero as *const f32 as *const c_void,
                    plan.y.0,
                    py as *mut c_void,
                )
            })?;
        }
        Ok(())
    }

    fn pool_plan(&self, spec: &PoolSpec) -> Result<Arc<PoolPlan>, GpuError> {
        use sys::cudnnPoolingMode_t as P;
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = pools.get(spec) {
            return Ok(p.clone());
        }
        let pool = PoolDesc::new()?;
        let mode = match (spec.max, spec.exclude_padding) {
            (true, _) => P::CUDNN_POOLING_MAX_DETERMINISTIC,
            (false, true) => P::CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
            (false, false) => P::CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
        };
        let (win, pads, strides) = (ints(&spec.window), ints(&spec.pads), ints(&spec.strides));
        // SAFETY: the three arrays hold `win.len()` entries each and outlive the call.
        check("cudnnSetPoolingNdDescriptor", unsafe {
            sys::cudnnSetPoolingNdDescriptor(
                pool.0,
                mode,
                sys::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN,
                win.len() as i32,
                win.as_ptr(),
                pads.as_ptr(),
                strides.as_ptr(),
            )
        })?;
        let plan = Arc::new(PoolPlan {
            // N×C×H×W: channels-last inputs pool in kiln's NHWC kernel (ops::pool).
            x: tensor_desc(spec.dtype, &spec.x, false)?,
            y: tensor_desc(spec.dtype, &spec.y, false)?,
            pool,
        });
        pools.insert(spec.clone(), plan.clone());
        Ok(plan)
    }

    pub fn pooling(&self, gpu: &impl DnnDevice, spec: &PoolSpec, x: &DeviceTensor, y: &DeviceTensor) -> Result<(), GpuError> {
        gpu.context().bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        let plan = self.pool_plan(spec)?;
        let (one, zero) = (1.0f32, 0.0f32);
        // SAFETY: the descriptors describe x and y (built from their dims, type and layout);
        // both buffers belong to this Gpu's context and stream.
        check("cudnnPoolingForward", unsafe {
            sys::cudnnPoolingForward(
                self.handle,
                plan.pool.0,
                &one as *const f32 as *const c_void,
                plan.x.0,
                x.buf.ptr() as *const c_void,
                &zero as *const f32 as *const c_void,
                plan.y.0,
                y.buf.ptr() as *mut c_void,
            )
        })
    }
}

/// The algorithm's name as tactics show it.
pub fn algorithm_name(code: u32) -> &'static str {
    ALGORITHMS.iter().find(|(c, _)| *c == code).map_or("unknown", |(_, n)| n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::{ConvolutionParams, PoolingKind, PoolingParams};

    fn conv(strides: &[usize], pre: &[usize], post: &[usize]) -> ConvolutionParams {
        ConvolutionParams {
            groups: 1,
            strides: strides.to_vec(),
            dilations: vec![],
            pre_padding: pre.to_vec(),
            post_padding: post.to_vec(),
        }
    }

    #[test]
    fn one_d_convolutions_run_as_two_d_with_height_one() {
        let s = ConvSpec::new(&conv(&[2], &[1], &[1]), DataType::F16, false, &[2, 8, 31], &[12, 8, 3], &[2, 12, 16])
            .unwrap();
        assert_eq!((s.x, s.w, s.y), (vec![2, 8, 1, 31], vec![12, 8, 1, 3], vec![2, 12, 1, 16]));
        assert_eq!((s.pads, s.strides, s.dilations), (vec![0, 1], vec![1, 2], vec![1, 1]));
    }

    #[test]
    fn specs_refuse_what_cudnn_cannot_run() {
        let asymmetric = ConvSpec::new(
            &conv(&[1, 1], &[0, 1], &[1, 1]),
            DataType::F32,
            false,
            &[1, 2, 5, 5],
            &[2, 2, 3, 3],
            &[1, 2, 4, 5],
        );
        assert!(asymmetric.unwrap_err().to_string().contains("symmetric"));
        let int = ConvSpec::new(
            &conv(&[1, 1], &[0, 0], &[0, 0]),
            DataType::I32,
            false,
            &[1, 2, 5, 5],
            &[2, 2, 3, 3],
            &[1, 2, 3, 3],
        );
        assert!(int.unwrap_err().to_string().contains("f32, f16, bf16 and int8"));
        // INT8 runs 2-D, one group, channels in multiples of 4 (the 3-channel stem falls back).
        let stem = ConvSpec::integer(&conv(&[2, 2], &[3, 3], &[3, 3]), &[1, 3, 16, 16], &[8, 3, 7, 7], &[1, 8, 8, 8]);
        assert!(stem.unwrap_err().to_string().contains("multiples of 4"));
        let int8 = ConvSpec::integer(&conv(&[1, 1], &[1, 1], &[1, 1]), &[1, 8, 6, 6], &[4, 8, 3, 3], &[1, 4, 6, 6]).expect("int8 spec");
        assert!(int8.nhwc && int8.output_type() == DataType::F32);
        let four_d = ConvSpec::new(
            &conv(&[1; 4], &[0; 4], &[0; 4]),
            DataType::F32,
            false,
            &[1, 1, 3, 3, 3, 3],
            &[1, 1, 1, 1, 1, 1],
            &[1, 1, 3, 3, 3, 3],
        );
        assert!(four_d.is_err());
    }

    #[test]
    fn channels_last_strides_put_channels_innermost() {
        assert_eq!(strides_of(&[2, 3, 4, 5], false), vec![60, 20, 5, 1]);
        assert_eq!(strides_of(&[2, 3, 4, 5], true), vec![60, 1, 15, 3]);
        assert_eq!(strides_of(&[2, 3, 4, 5, 6], true), vec![360, 1, 90, 18, 3]);
    }

    #[test]
    fn pooling_runs_on_cudnn_only_where_its_output_size_agrees() {
        let p = |ceil: bool, pre: usize, post: usize| PoolingParams {
            kind: PoolingKind::Max,
            window: vec![3, 3],
            strides: vec![2, 2],
            dilations: vec![1, 1],
            pre_padding: vec![pre; 2],
            post_padding: vec![post; 2],
            ceil_mode: ceil,
            average_count_excludes_padding: false,
        };
        assert!(PoolSpec::new(&p(false, 1, 1), DataType::F16, &[1, 4, 112, 112], &[1, 4, 56, 56]).is_ok());
        // Ceil mode gives 57 here where cuDNN's floor gives 56.
        assert!(PoolSpec::new(&p(true, 1, 1), DataType::F16, &[1, 4, 112, 112], &[1, 4, 57, 57]).is_err());
        assert!(PoolSpec::new(&p(false, 0, 1), DataType::F16, &[1, 4, 112, 112], &[1, 4, 56, 56]).is_err());
    }

    #[test]
    fn algorithm_names_are_stable_tactic_names() {
        assert_eq!(algorithm_name(1), "implicit_precomp_gemm");
        assert_eq!(algorithm_name(7), "winograd_nonfused");
        assert!(ALGORITHMS.iter().all(|&(code, _)| algo_enum(code).is_some()));
        assert!(algo_enum(8).is_none());
    }
}
