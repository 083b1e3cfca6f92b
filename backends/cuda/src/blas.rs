//! cuBLASLt matrix products (FFI module: `unsafe` lives here and in `device`).
//!
//! kiln tensors are row-major and cuBLASLt is column-major, so `C = op(A)·op(B)` runs as
//! `Cᵀ = op(B)ᵀ·op(A)ᵀ`: the operands swap and every row-major matrix is read as its
//! column-major transpose, with no data movement.

use crate::error::GpuError;
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;
use crate::buffer::DeviceBuffer;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use kiln::DataType;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

const WORKSPACE_BYTES: usize = 32 << 20;

fn blas_err(call: &'static str) -> impl Fn(lt::CublasError) -> GpuError {
    move |e| GpuError::Driver { call, reason: format!("{e:?}") }
}

/// A cuBLASLt handle with its workspace, bound to one stream, and the descriptors and best
/// algorithm of every product shape met so far (building them costs more host time than a
/// small product takes on the device).
#[derive(Debug)]
pub struct Blas {
    handle: sys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
    stream: Arc<CudaStream>,
    prepared: Mutex<HashMap<Key, Result<Arc<Prepared>, String>>>,
}

/// A product's shape and types: everything but `alpha`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    dtype: DataType,
    scaled: Option<Scaled>,
    tf32: bool,
    dims: [u64; 4],
    trans: [bool; 2],
    strides: [i64; 3],
    epilogue: Epilogue,
}

impl Key {
    fn of(g: &Gemm) -> Key {
        Key {
            dtype: g.dtype,
            scaled: g.scaled,
            tf32: g.tf32,
            dims: [g.m, g.n, g.k, g.batch],
            trans: [g.trans_a, g.trans_b],
            strides: [g.stride_a, g.stride_b, g.stride_c],
            epilogue: g.epilogue,
        }
    }
}

/// How many of the heuristic's algorithms a product offers as tactics.
pub const RANKED_ALGORITHMS: usize = 4;

/// Descriptors of one product shape and the heuristic's algorithms for it, best first.
#[derive(Debug)]
struct Prepared {
    plan: Plan,
    ranked: Vec<Algo>,
}

// SAFETY: the handle is only used through `&self` methods that enqueue on `stream`; cuBLASLt
// handles may be used from any thread as long as calls are not concurrent, which the owning
// executable guarantees by serializing runs.
unsafe impl Send for Blas {}
// SAFETY: as above.
unsafe impl Sync for Blas {}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: the handle was created by `Blas::new` and is destroyed once.
        let _ = unsafe { lt::destroy_handle(self.handle) };
    }
}

/// One row-major (batched) product `C[b] = alpha · op(A[b])·op(B[b])`, element strides per batch
/// (0 broadcasts an operand over the batch).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gemm {
    pub dtype: DataType,
    /// An FP8 product's scales and output ([`Scaled`]); None elsewhere (an FP8 product without
    /// it sums unscaled into f32).
    pub scaled: Option<Scaled>,
    /// f32 products may use TF32 tensor cores.
    pub tf32: bool,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub batch: u64,
    pub trans_a: bool,
    pub trans_b: bool,
    pub stride_a: i64,
    pub stride_b: i64,
    pub stride_c: i64,
    pub alpha: f32,
    /// What cuBLASLt applies to the product before storing it.
    pub epilogue: Epilogue,
}

/// How an FP8 (e4m3) product scales its sums on Hopper's FP8 tensor cores, and what it stores:
/// `C = (a_scale · op(A)) · (b_scale · op(B))` into `out` (f32, f16 or bf16). The scales are f32
/// in device memory ([`Blas::matmul_scaled`]): A's one value, B's one value or, `b_per_column`,
/// one per column of the output (cuBLASLt's outer-vector scaling of its first operand).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scaled {
    pub out: DataType,
    pub b_per_column: bool,
    /// A's scale as a vector too, one per output row (the same value repeated): cuBLASLt may
    /// refuse a scalar beside an outer vector.
    pub a_per_row: bool,
}

/// What a product reads besides its operands: the epilogue's bias, a residual added as C, an
/// FP8 product's scales (A's, B's).
#[derive(Clone, Copy, Default)]
struct Extras<'a> {
    bias: Option<&'a DeviceBuffer>,
    residual: Option<&'a DeviceBuffer>,
    scales: Option<(&'a DeviceBuffer, &'a DeviceBuffer)>,
}

/// cuBLASLt's `cublasLtMatmulMatrixScale_t` values kiln uses.
const SCALE_SCALAR_32F: u32 = 0;
const SCALE_OUTER_VEC_32F: u32 = 3;

/// A cuBLASLt epilogue: a bias over the output's columns (one value per `n`), then ReLU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Epilogue {
    #[default]
    None,
    Bias,
    ReluBias,
}

/// A cuBLASLt algorithm the heuristic offered (a tactic).
#[derive(Clone, Copy, Debug)]
pub struct Algo {
    algo: sys::cublasLtMatmulAlgo_t,
    pub workspace: usize,
}

/// Descriptors of one product, destroyed on drop.
#[derive(Debug)]
struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: [sys::cublasLtMatrixLayout_t; 3],
}

// SAFETY: the descriptors are host-side objects that are only read after creation, and every
// call using them goes through `Blas`, whose products are serialized by the owning executable.
unsafe impl Send for Plan {}
// SAFETY: as above.
unsafe impl Sync for Plan {}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: created in `Plan::new`, destroyed once.
        unsafe {
            let _ = lt::destroy_matmul_desc(self.desc);
            for l in self.layouts {
                let _ = lt::destroy_matrix_layout(l);
            }
        }
    }
}

fn data_type(dtype: DataType) -> Result<sys::cudaDataType, GpuError> {
    Ok(match dtype {
        DataType::F32 => sys::cudaDataType::CUDA_R_32F,
        DataType::F16 => sys::cudaDataType::CUDA_R_16F,
        DataType::BF16 => sys::cudaDataType::CUDA_R_16BF,
        DataType::I8 => sys::cudaDataType::CUDA_R_8I,
        DataType::F8E4M3FN => sys::cudaDataType::CUDA_R_8F_E4M3,
        other => return Err(GpuError::UnsupportedDtype(other)),
    })
}

/// Whether `g` is an 8-bit tensor-core product of `dtype` (INT8 IMMA: the exact int32 sums;
/// FP8: f32 sums). cuBLASLt runs those in its "TN" form only: both operands K-contiguous
/// (row-major `A[m, k]` and `B` stored `[n, k]`), k and n multiples of `multiple` (4 for INT8,
/// 16 for FP8), no epilogue, alpha 1.
fn eight_bit(g: &Gemm, dtype: DataType, multiple: u64) -> Result<bool, GpuError> {
    if g.dtype != dtype {
        return Ok(false);
    }
    if g.trans_a || !g.trans_b || !g.k.is_multiple_of(multiple) || !g.n.is_multiple_of(multiple) || g.epilogue != Epilogue::None || g.alpha != 1.0 {
        return Err(GpuError::Unsupported(format!(
            "a {dtype} product needs A [m, k] and B [n, k] with k and n multiples of {multiple}, no epilogue and alpha 1 (got {g:?})"
        )));
    }
    Ok(true)
}

impl Plan {
    fn new(g: &Gemm) -> Result<Plan, GpuError> {
        let ty = data_type(g.dtype)?;
        let int8 = eight_bit(g, DataType::I8, 4)?;
        let float8 = eight_bit(g, DataType::F8E4M3FN, 16)?;
        // INT8 products sum exactly in int32 and scale in int32 (alpha 1, beta 0); FP8 ones sum
        // in f32 into their `scaled` output type (f32 without one).
        let (out_ty, scale_ty) = if int8 {
            (sys::cudaDataType::CUDA_R_32I, sys::cudaDataType::CUDA_R_32I)
        } else if float8 {
            (data_type(g.scaled.map_or(DataType::F32, |s| s.out))?, sys::cudaDataType::CUDA_R_32F)
        } else {
            (ty, sys::cudaDataType::CUDA_R_32F)
        };
        let compute = if int8 {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32I
        } else if g.dtype == DataType::F32 && !g.tf32 {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        } else if g.dtype == DataType::F32 {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        };
        let desc = lt::create_matmul_desc(compute, scale_ty).map_err(blas_err("cublasLtMatmulDescCreate"))?;
        // Column-major view: first operand is B, second is A (see the module comment).
        let (first_t, second_t) = (g.trans_b as i32, g.trans_a as i32);
        let set = |attr, v: &i32| {
            // SAFETY: `desc` is live; `v` points to an i32, the attribute's type.
            unsafe { lt::set_matmul_desc_attribute(desc, attr, v as *const i32 as *const c_void, 4) }
                .map_err(blas_err("cublasLtMatmulDescSetAttribute"))
        };
        set(sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA, &first_t)?;
        set(sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB, &second_t)?;
        if let Some(s) = g.scaled.filter(|_| float8) {
            // cuBLASLt's first operand is kiln's B (see the module comment): its outer vector
            // runs along the output's columns.
            let mode = |vector: bool| if vector { SCALE_OUTER_VEC_32F as i32 } else { SCALE_SCALAR_32F as i32 };
            set(sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode(s.b_per_column))?;
            set(sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode(s.a_per_row))?;
        }
        if g.epilogue != Epilogue::None {
            let e = if g.epilogue == Epilogue::Bias { sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS } else { sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_BIAS };
            // SAFETY: `desc` is live; `e` is the attribute's type (a 32-bit enum).
            unsafe { lt::set_matmul_desc_attribute(desc, sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_EPILOGUE, &e as *const _ as *const c_void, std::mem::size_of_val(&e)) }
                .map_err(blas_err("cublasLtMatmulDescSetAttribute"))?;
        }
        let (m, n, k) = (g.m, g.n, g.k);
        // Stored (rows, cols, ld) of each column-major operand, before its op.
        let first = if g.trans_b { (k, n, k) } else { (n, k, n) };
        let second = if g.trans_a { (m, k, m) } else { (k, m, k) };
        let out = (n, m, n);
        let mut layouts = [std::ptr::null_mut(); 3];
        for (i, ((rows, cols, ld), stride)) in [(first, g.stride_b), (second, g.stride_a), (out, g.stride_c)].into_iter().enumerate() {
            let l = lt::create_matrix_layout(if i == 2 { out_ty } else { ty }, rows, cols, ld as i64).map_err(blas_err("cublasLtMatrixLayoutCreate"))?;
            layouts[i] = l;
            if g.batch > 1 {
                let count = g.batch as i32;
                // SAFETY: `l` is live; the values have the attributes' types (i32, i64).
                unsafe {
                    lt::set_matrix_layout_attribute(
                        l,
                        sys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                        &count as *const i32 as *const c_void,
                        4,
                    )
                    .map_err(blas_err("cublasLtMatrixLayoutSetAttribute"))?;
                    lt::set_matrix_layout_attribute(
                        l,
                        sys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                        &stride as *const i64 as *const c_void,
                        8,
                    )
                    .map_err(blas_err("cublasLtMatrixLayoutSetAttribute"))?;
                }
            }
        }
        Ok(Plan { desc, layouts })
    }

    /// Sets a device-pointer attribute of the descriptor (a bias or scale vector).
    fn set_pointer(&self, attr: sys::cublasLtMatmulDescAttributes_t, ptr: u64) -> Result<(), GpuError> {
        // SAFETY: `self.desc` is live and only used by the serialized calls of `Blas`; the
        // attribute's value is a device address (u64) that the caller keeps valid for the runs
        // that read it.
        unsafe { lt::set_matmul_desc_attribute(self.desc, attr, &ptr as *const u64 as *const c_void, 8) }.map_err(blas_err("cublasLtMatmulDescSetAttribute"))
    }
}

impl Blas {
    pub fn new(stream: Arc<CudaStream>) -> Result<Blas, GpuError> {
        let handle = lt::create_handle().map_err(blas_err("cublasLtCreate"))?;
        // SAFETY: the workspace is scratch space cuBLASLt writes before it reads.
        let workspace = unsafe { stream.alloc::<u8>(WORKSPACE_BYTES) }
            .map_err(|e| GpuError::OutOfMemory { bytes: WORKSPACE_BYTES, reason: format!("cuBLASLt workspace: {e:?}") })?;
        Ok(Blas { handle, workspace, stream, prepared: Mutex::new(HashMap::new()) })
    }

    /// The cached descriptors and best algorithm of `g`'s shape, or why cuBLASLt refuses it
    /// (also remembered: a refused form is not asked about again on every run).
    fn prepared(&self, g: &Gemm) -> Result<Arc<Prepared>, GpuError> {
        let key = Key::of(g);
        if let Some(known) = self.prepared.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return known.clone().map_err(GpuError::Unsupported);
        }
        let made = self.prepare(g);
        let remembered = made.as_ref().map(Arc::clone).map_err(ToString::to_string);
        self.prepared.lock().unwrap_or_else(|p| p.into_inner()).insert(key, remembered);
        made
    }

    fn prepare(&self, g: &Gemm) -> Result<Arc<Prepared>, GpuError> {
        let plan = Plan::new(g)?;
        if g.scaled.is_some() {
            // The heuristic may want the scale pointers set: the workspace stands in until a run
            // sets the real ones.
            let (pw, _gw) = self.workspace.device_ptr(&self.stream);
            plan.set_pointer(sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, pw)?;
            plan.set_pointer(sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, pw)?;
        }
        let ranked = self.heuristic(&plan, RANKED_ALGORITHMS)?;
        if ranked.is_empty() {
            return Err(GpuError::Driver { call: "cublasLtMatmulAlgoGetHeuristic", reason: format!("no algorithm for {g:?}") });
        }
        Ok(Arc::new(Prepared { plan, ranked }))
    }

    /// Whether cuBLASLt runs `g` (its descriptors and algorithms are then cached), or why not.
    pub fn ready(&self, g: &Gemm) -> Result<(), GpuError> {
        self.prepared(g).map(|_| ())
    }

    /// Up to `count` algorithms cuBLASLt's heuristic ranks for `g`, best first.
    pub fn algorithms(&self, g: &Gemm, count: usize) -> Result<Vec<Algo>, GpuError> {
        self.heuristic(&Plan::new(g)?, count)
    }

    fn heuristic(&self, plan: &Plan, count: usize) -> Result<Vec<Algo>, GpuError> {
        let pref = lt::create_matmul_pref().map_err(blas_err("cublasLtMatmulPreferenceCreate"))?;
        let ws = WORKSPACE_BYTES as u64;
        let mut results = vec![
            sys::cublasLtMatmulHeuristicResult_t {
                algo: sys::cublasLtMatmulAlgo_t { data: [0; 8] },
                workspaceSize: 0,
                state: sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS,
                wavesCount: 0.0,
                reserved: [0; 4],
            };
            count.max(1)
        ];
        let mut found = 0i32;
        // SAFETY: all descriptors are live; `results` has room for `count` entries; `found` is a
        // valid out-pointer; `pref` is destroyed right after.
        let status = unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const u64 as *const c_void,
                8,
            )
            .and_then(|()| {
                sys::cublasLtMatmulAlgoGetHeuristic(
                    self.handle,
                    plan.desc,
                    plan.layouts[0],
                    plan.layouts[1],
                    plan.layouts[2],
                    plan.layouts[2],
                    pref,
                    results.len() as i32,
                    results.as_mut_ptr(),
                    &mut found,
                )
                .result()
            })
        };
        // SAFETY: created above, destroyed once.
        let _ = unsafe { lt::destroy_matmul_pref(pref) };
        status.map_err(blas_err("cublasLtMatmulAlgoGetHeuristic"))?;
        Ok(results
            .into_iter()
            .take(found.max(0) as usize)
            .filter(|r| r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            .map(|r| Algo { algo: r.algo, workspace: r.workspaceSize })
            .collect())
    }

    /// Enqueues `c = alpha · op(a)·op(b)` with the heuristic's algorithm of rank `rank` (0 is
    /// its best; a rank past the algorithms it offers for this shape runs its last).
    pub fn matmul(&self, g: &Gemm, rank: usize, a: &DeviceBuffer, b: &DeviceBuffer, c: &DeviceBuffer) -> Result<(), GpuError> {
        self.enqueue(g, rank, a, b, Extras::default(), c)
    }

    /// An FP8 product `g` (with [`Scaled`]) scaled by `a_scale` and `b_scale`: f32 device
    /// values, one or (per `g.scaled`) one per output row / column.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_scaled(&self, g: &Gemm, rank: usize, a: &DeviceBuffer, b: &DeviceBuffer, a_scale: &DeviceBuffer, b_scale: &DeviceBuffer, c: &DeviceBuffer) -> Result<(), GpuError> {
        if g.scaled.is_none() {
            return Err(GpuError::Driver { call: "cublasLtMatmul", reason: "scales given to a product without Scaled".into() });
        }
        self.enqueue(g, rank, a, b, Extras { scales: Some((a_scale, b_scale)), ..Extras::default() }, c)
    }

    /// [`Blas::matmul`] with the bias vector (`n` values of the product's type) that `g`'s
    /// epilogue adds, and a `residual` of the output's layout added to the product first
    /// (cuBLASLt's `C` with beta = 1; the result still goes to `c`).
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_bias(
        &self,
        g: &Gemm,
        rank: usize,
        a: &DeviceBuffer,
        b: &DeviceBuffer,
        bias: Option<&DeviceBuffer>,
        residual: Option<&DeviceBuffer>,
        c: &DeviceBuffer,
    ) -> Result<(), GpuError> {
        self.enqueue(g, rank, a, b, Extras { bias, residual, scales: None }, c)
    }

    fn enqueue(&self, g: &Gemm, rank: usize, a: &DeviceBuffer, b: &DeviceBuffer, extras: Extras<'_>, c: &DeviceBuffer) -> Result<(), GpuError> {
        let Extras { bias, residual, scales } = extras;
        let prepared = self.prepared(g)?;
        let plan = &prepared.plan;
        if let Some((a_scale, b_scale)) = scales {
            // cuBLASLt's A is kiln's B and the other way round (see the module comment).
            let (pa, _ga) = a_scale.device_ptr(&self.stream);
            let (pb, _gb) = b_scale.device_ptr(&self.stream);
            plan.set_pointer(sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, pb)?;
            plan.set_pointer(sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, pa)?;
        }
        if (g.epilogue != Epilogue::None) != bias.is_some() {
            return Err(GpuError::Driver { call: "cublasLtMatmul", reason: "a bias epilogue needs exactly one bias vector".into() });
        }
        if let Some(bias) = bias {
            // `n` values, which the caller checked.
            let (pbias, _g) = bias.device_ptr(&self.stream);
            plan.set_pointer(sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER, pbias)?;
        }
        let algo = &prepared.ranked[rank.min(prepared.ranked.len() - 1)];
        // f32 scalars, or the int32 ones (1 and 0) of an INT8 product.
        let (alpha, beta) = (g.alpha, if residual.is_some() { 1.0f32 } else { 0.0 });
        let (alpha_i, beta_i) = (1i32, 0i32);
        let (alpha_p, beta_p): (*const c_void, *const c_void) = if g.dtype == DataType::I8 {
            (&alpha_i as *const i32 as *const c_void, &beta_i as *const i32 as *const c_void)
        } else {
            (&alpha as *const f32 as *const c_void, &beta as *const f32 as *const c_void)
        };
        let (pa, _ga) = a.device_ptr(&self.stream);
        let (pb, _gb) = b.device_ptr(&self.stream);
        let (pc, _gc) = c.device_ptr(&self.stream);
        let (pz, _gz) = residual.unwrap_or(c).device_ptr(&self.stream);
        let (pw, _gw) = self.workspace.device_ptr(&self.stream);
        // SAFETY: `c` is written through its raw address only by this enqueued product (no Rust
        // reference observes it meanwhile); the caller sized `a`, `b`, `c` (and the residual,
        // read as C in `c`'s layout) for the product `g` describes (the ops module
        // checks shapes against shape inference first); alpha/beta point to locals of the scale
        // type's kind (i32 for INT8, f32 otherwise) that outlive the call; the workspace holds WORKSPACE_BYTES, the preference's limit.
        unsafe {
            lt::matmul(
                self.handle,
                plan.desc,
                alpha_p,
                beta_p,
                pb as *const c_void,
                plan.layouts[0],
                pa as *const c_void,
                plan.layouts[1],
                pz as *const c_void,
                plan.layouts[2],
                pc as *mut c_void,
                plan.layouts[2],
                &algo.algo,
                pw as *mut c_void,
                WORKSPACE_BYTES,
                self.stream.cu_stream() as sys::cudaStream_t,
            )
        }
        .map_err(blas_err("cublasLtMatmul"))
    }
}
