//! cuBLASLt matrix products (FFI module: `unsafe` lives here and in `device`).
//!
//! kiln tensors are row-major and cuBLASLt is column-major, so `C = op(A)·op(B)` runs as
//! `Cᵀ = op(B)ᵀ·op(A)ᵀ`: the operands swap and every row-major matrix is read as its
//! column-major transpose, with no data movement.

use crate::device::GpuError;
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use kiln::DataType;
use std::ffi::c_void;
use std::sync::Arc;

const WORKSPACE_BYTES: usize = 32 << 20;

fn blas_err(call: &'static str) -> impl Fn(lt::CublasError) -> GpuError {
    move |e| GpuError::Driver { call, reason: format!("{e:?}") }
}

/// A cuBLASLt handle with its workspace, bound to one stream.
#[derive(Debug)]
pub struct Blas {
    handle: sys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
    stream: Arc<CudaStream>,
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
}

/// A cuBLASLt algorithm the heuristic offered (a tactic).
#[derive(Clone, Copy, Debug)]
pub struct Algo {
    algo: sys::cublasLtMatmulAlgo_t,
    pub workspace: usize,
}

/// Descriptors of one product, destroyed on drop.
struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: [sys::cublasLtMatrixLayout_t; 3],
}

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
        other => return Err(GpuError::UnsupportedDtype(other)),
    })
}

impl Plan {
    fn new(g: &Gemm) -> Result<Plan, GpuError> {
        let ty = data_type(g.dtype)?;
        let compute = if g.dtype == DataType::F32 && !g.tf32 {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        } else if g.dtype == DataType::F32 {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        };
        let desc = lt::create_matmul_desc(compute, sys::cudaDataType::CUDA_R_32F).map_err(blas_err("cublasLtMatmulDescCreate"))?;
        // Column-major view: first operand is B, second is A (see the module comment).
        let (first_t, second_t) = (g.trans_b as i32, g.trans_a as i32);
        let set = |attr, v: &i32| {
            // SAFETY: `desc` is live; `v` points to an i32, the attribute's type.
            unsafe { lt::set_matmul_desc_attribute(desc, attr, v as *const i32 as *const c_void, 4) }
                .map_err(blas_err("cublasLtMatmulDescSetAttribute"))
        };
        set(sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA, &first_t)?;
        set(sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB, &second_t)?;
        let (m, n, k) = (g.m, g.n, g.k);
        // Stored (rows, cols, ld) of each column-major operand, before its op.
        let first = if g.trans_b { (k, n, k) } else { (n, k, n) };
        let second = if g.trans_a { (m, k, m) } else { (k, m, k) };
        let out = (n, m, n);
        let mut layouts = [std::ptr::null_mut(); 3];
        for (i, ((rows, cols, ld), stride)) in [(first, g.stride_b), (second, g.stride_a), (out, g.stride_c)].into_iter().enumerate() {
            let l = lt::create_matrix_layout(ty, rows, cols, ld as i64).map_err(blas_err("cublasLtMatrixLayoutCreate"))?;
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
}

impl Blas {
    pub fn new(stream: Arc<CudaStream>) -> Result<Blas, GpuError> {
        let handle = lt::create_handle().map_err(blas_err("cublasLtCreate"))?;
        // SAFETY: the workspace is scratch space cuBLASLt writes before it reads.
        let workspace = unsafe { stream.alloc::<u8>(WORKSPACE_BYTES) }
            .map_err(|e| GpuError::OutOfMemory { bytes: WORKSPACE_BYTES, reason: format!("cuBLASLt workspace: {e:?}") })?;
        Ok(Blas { handle, workspace, stream })
    }

    /// Up to `count` algorithms cuBLASLt's heuristic ranks for `g`, best first.
    pub fn algorithms(&self, g: &Gemm, count: usize) -> Result<Vec<Algo>, GpuError> {
        let plan = Plan::new(g)?;
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

    /// Enqueues `c = alpha · op(a)·op(b)` with `algo` (the heuristic's first when None).
    pub fn matmul(&self, g: &Gemm, algo: Option<&Algo>, a: &CudaSlice<u8>, b: &CudaSlice<u8>, c: &CudaSlice<u8>) -> Result<(), GpuError> {
        let best;
        let algo = match algo {
            Some(a) => a,
            None => {
                best = self.algorithms(g, 1)?.into_iter().next().ok_or_else(|| GpuError::Driver {
                    call: "cublasLtMatmulAlgoGetHeuristic",
                    reason: format!("no algorithm for {g:?}"),
                })?;
                &best
            }
        };
        let plan = Plan::new(g)?;
        let alpha = g.alpha;
        let beta = 0.0f32;
        let (pa, _ga) = a.device_ptr(&self.stream);
        let (pb, _gb) = b.device_ptr(&self.stream);
        let (pc, _gc) = c.device_ptr(&self.stream);
        let (pw, _gw) = self.workspace.device_ptr(&self.stream);
        // SAFETY: `c` is written through its raw address only by this enqueued product (no Rust
        // reference observes it meanwhile); the caller sized `a`, `b`, `c` for the product `g` describes (the ops module
        // checks shapes against shape inference first); alpha/beta are f32 as the scale type
        // says; the workspace holds WORKSPACE_BYTES, the preference's limit.
        unsafe {
            lt::matmul(
                self.handle,
                plan.desc,
                &alpha as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
                pb as *const c_void,
                plan.layouts[0],
                pa as *const c_void,
                plan.layouts[1],
                pc as *const c_void,
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
