//! One layer on the device: the dispatch from a layer kind to its kernels, and which kinds
//! and types have kernels at all (what `check_support` asks).

use kiln::{invalid, DataType, GatherMode, HostTensor, KernelError, LayerKind, PostOp, ResizeMode, Shape};

/// What every op returns: device errors keep their kind (out of memory).
pub type KResult<T> = Result<T, KernelError>;
pub mod chain_reduce;
pub mod chain_source;
pub mod compute;
pub mod conv;
pub mod data_dependent;
pub mod deconv;
pub mod einsum;
pub mod flash;
pub mod sampling;
pub mod indexing;
pub mod int8_conv;
pub mod int8_gemm;
pub mod int8_few_channels;
pub mod int8_depthwise;
pub mod kernel_names;
pub mod scan;
pub mod layout;
pub mod lrn;
pub mod movement;
pub mod one_hot;
#[allow(unsafe_code)] // launches plugin kernels through the driver
pub mod plugin;
pub mod pointwise;
pub mod pool;
pub mod quant;
pub mod resize;
pub mod roi;
pub mod signal;
pub mod typed;

use crate::buffer::{Arg, DeviceTensor, Layout};
use crate::device::Gpu;
use crate::sources::Kernel;
use kiln::ir::infer::OutFact;
use kiln::ir::infer::{infer_layer, Fact};
use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// A tensor's value during a run: on the device, on the host (small shape tensors and the
/// layers computing them run there, as TensorRT's shape tensors do), or both (constants).
#[derive(Clone, Debug)]
pub struct Value {
    pub device: Option<DeviceTensor>,
    pub host: Option<Arc<HostTensor>>,
}

impl Value {
    pub fn device(t: DeviceTensor) -> Value {
        Value { device: Some(t), host: None }
    }

    pub fn host(t: Arc<HostTensor>) -> Value {
        Value { device: None, host: Some(t) }
    }

    pub fn meta(&self) -> (DataType, Vec<usize>) {
        match (&self.device, &self.host) {
            (Some(d), _) => (d.dtype, d.shape.clone()),
            (None, Some(h)) => (h.dtype(), h.shape().to_vec()),
            (None, None) => (DataType::F32, Vec::new()),
        }
    }
}

/// What one run's layers share: the device, the builder's choices, and the checks that kernels
/// flag on the device (read back once at the end of the run instead of after each layer).
#[derive(Debug)]
pub struct Ctx<'a> {
    pub gpu: &'a Gpu,
    pub tf32: bool,
    /// The tactic the builder chose for the layer being run: a cuBLASLt heuristic rank for
    /// products, a convolution choice (`compute::CONV_DIRECT`, `1 + cuDNN algorithm`) for
    /// convolutions; 0 is the heuristic's best either way.
    pub gemm_rank: Cell<usize>,
    /// Whether the layer being run may return a view (a transpose or slice not carried out:
    /// its readers take strides): see `exec::view_outputs`.
    pub view_output: Cell<bool>,
    /// The axis order the layer being run writes its output packed in, where its reader
    /// transposes it (see `exec::write_orders`); `None`: as the layer's kernels choose.
    pub write_order: RefCell<Option<Vec<usize>>>,
    pub pending_checks: RefCell<Vec<(DeviceTensor, String)>>,
}

impl<'a> Ctx<'a> {
    pub fn new(gpu: &'a Gpu, tf32: bool) -> Ctx<'a> {
        Ctx { gpu, tf32, gemm_rank: Cell::new(0), view_output: Cell::new(false), write_order: RefCell::new(None), pending_checks: RefCell::new(Vec::new()) }
    }

    pub fn arg(&self, t: &DeviceTensor) -> Arg {
        Arg::buffer(&t.buf)
    }

    pub fn launch_elements(&self, kernel: Kernel, n: usize, args: &[Arg]) -> KResult<()> {
        self.gpu.launch_elements(&kernel, n, args).map_err(KernelError::from)
    }

    /// Remembers an i32 flag a kernel sets on bad input; [`Ctx::finish`] reads them all.
    pub fn defer_check(&self, flag: DeviceTensor, message: String) {
        self.pending_checks.borrow_mut().push((flag, message));
    }

    /// Reads back every deferred flag (synchronizes); the first one set is the error.
    pub fn finish(&self) -> KResult<()> {
        for (flag, message) in self.pending_checks.borrow_mut().drain(..) {
            let host = self.gpu.download(&flag).map_err(KernelError::from)?;
            if host.to_i64_vec().is_some_and(|v| v.iter().any(|&x| x != 0)) {
                return Err(KernelError::Invalid(message));
            }
        }
        Ok(())
    }

    /// The value on the device, row-major (uploading a host value; converting a channels-last
    /// one: every kernel but cuDNN's reads row-major).
    pub fn dev(&self, v: &Value) -> KResult<DeviceTensor> {
        layout::to_row_major(self, &self.dev_any_layout(v)?)
    }

    /// The value on the device as stored, maybe channels-last (for the layers that know it).
    pub fn dev_any_layout(&self, v: &Value) -> KResult<DeviceTensor> {
        match (&v.device, &v.host) {
            (Some(d), _) => Ok(d.clone()),
            (None, Some(h)) => self.gpu.upload(h).map_err(KernelError::from),
            (None, None) => Err("a value is neither on the device nor on the host".into()),
        }
    }

    /// The value on the host (downloading a device value: synchronizes).
    pub fn host(&self, v: &Value) -> KResult<Arc<HostTensor>> {
        match (&v.host, &v.device) {
            (Some(h), _) => Ok(h.clone()),
            (None, Some(d)) => self.gpu.download(&layout::to_row_major(self, d)?).map(Arc::new).map_err(KernelError::from),
            (None, None) => Err("a value is neither on the device nor on the host".into()),
        }
    }
}

/// Kernel-name suffixes of the kernels that run every float type, f64 included.
pub const FLOAT64_SUFFIXES: [&str; 4] = ["f32", "f16", "bf16", "f64"];

/// The suffix of such a kernel for `dtype`, or why none runs `what` on it.
pub fn float64_suffix(dtype: DataType, what: &str) -> KResult<&'static str> {
    match dtype {
        DataType::F32 => Ok("f32"),
        DataType::F16 => Ok("f16"),
        DataType::BF16 => Ok("bf16"),
        DataType::F64 => Ok("f64"),
        other => Err(invalid!("{what} on {other} has no CUDA kernel")),
    }
}

pub use kiln::plan::strides::contiguous as contiguous_strides;

/// Numpy broadcast of two shapes.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> KResult<Vec<usize>> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let x = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
            let y = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
            match (x, y) {
                (x, y) if x == y => Ok(x),
                (1, y) => Ok(y),
                (x, 1) => Ok(x),
                _ => Err(invalid!("shapes {a:?} and {b:?} do not broadcast")),
            }
        })
        .collect()
}

/// The same strided view with fewer dims: size-1 dims dropped and each run of dims that is
/// contiguous in every one of the first `operands` operands merged into one, so kernels do
/// fewer divisions per element (a same-shape binary op becomes rank 1, a bias add rank 2).
pub fn coalesce(l: Layout, operands: usize) -> Layout {
    coalesce_joint(&[(l, operands)])[0]
}

/// [`coalesce`] over several layouts of one shape (that of the first) at once, so they stay
/// views of the same (merged) index space: each `(layout, operands it uses)`.
pub fn coalesce_joint(layouts: &[(Layout, usize)]) -> Vec<Layout> {
    let Some(&(first, _)) = layouts.first() else { return Vec::new() };
    let mut out: Vec<Layout> = layouts.iter().map(|(l, _)| Layout { offset: l.offset, ..Layout::default() }).collect();
    let mut rank = 0usize;
    for d in 0..first.rank.max(0) as usize {
        let n = first.shape[d];
        if n == 1 {
            continue;
        }
        let mergeable = rank > 0
            && layouts.iter().zip(&out).all(|((l, used), o)| (0..*used).all(|w| o.stride[w][rank - 1] == l.stride[w][d] * n));
        for ((l, used), o) in layouts.iter().zip(out.iter_mut()) {
            let at = if mergeable { rank - 1 } else { rank };
            o.shape[at] = if mergeable { o.shape[at] * n } else { n };
            for w in 0..*used {
                o.stride[w][at] = l.stride[w][d];
            }
        }
        if !mergeable {
            rank += 1;
        }
    }
    for o in &mut out {
        o.rank = rank as i32;
    }
    out
}

/// Strides reading each operand broadcast onto `out` (0 on broadcast axes), coalesced.
pub fn broadcast_layout(out: &[usize], operands: &[&[usize]]) -> KResult<Layout> {
    Ok(coalesce(broadcast_strides(out, operands)?, operands.len()))
}

/// Strides reading each operand broadcast onto `out` (0 on broadcast axes), one per dim of `out`.
pub fn broadcast_strides(out: &[usize], operands: &[&[usize]]) -> KResult<Layout> {
    if out.len() > 8 || operands.len() > 3 {
        return Err(invalid!("rank {} is over the CUDA kernels' limit of 8", out.len()));
    }
    let mut l = Layout { rank: out.len() as i32, ..Layout::default() };
    for (d, &n) in out.iter().enumerate() {
        l.shape[d] = n as i64;
    }
    for (which, shape) in operands.iter().enumerate() {
        for (d, stride) in kiln::ir::broadcast::strides(shape, out)?.into_iter().enumerate() {
            l.stride[which][d] = stride as i64;
        }
    }
    Ok(l)
}

/// Strides reading each operand, through its own strides (row-major, channels-last or any
/// view), broadcast onto `out` (0 on broadcast axes; dims align right), with the dims visited
/// in `order` (the output's memory order, e.g. channels-last; None: row-major). Not coalesced.
pub fn strided_layout(out: &[usize], operands: &[&DeviceTensor], order: Option<&[usize]>) -> KResult<Layout> {
    let strides: Vec<Vec<i64>> = operands.iter().map(|t| t.element_strides()).collect();
    let stored: Vec<(&[usize], &[i64])> = operands.iter().zip(&strides).map(|(t, s)| (&t.shape[..], &s[..])).collect();
    strided_walk(out, &stored, order)
}

/// [`strided_layout`] of operands given as (shape, element strides).
pub(crate) fn strided_walk(out: &[usize], operands: &[(&[usize], &[i64])], order: Option<&[usize]>) -> KResult<Layout> {
    if out.len() > 8 || operands.len() > 3 {
        return Err(invalid!("rank {} is over the CUDA kernels' limit of 8", out.len()));
    }
    let dims: Vec<usize> = order.map_or_else(|| (0..out.len()).collect(), <[usize]>::to_vec);
    let mut l = Layout { rank: out.len() as i32, ..Layout::default() };
    for (at, &d) in dims.iter().enumerate() {
        l.shape[at] = out[d] as i64;
    }
    for (which, &(shape, strides)) in operands.iter().enumerate() {
        let lead = out.len().checked_sub(shape.len()).ok_or_else(|| invalid!("{shape:?} does not broadcast to {out:?}"))?;
        for (at, &d) in dims.iter().enumerate() {
            l.stride[which][at] = match d.checked_sub(lead) {
                None => 0,
                Some(k) if shape[k] == out[d] => strides[k],
                Some(k) if shape[k] == 1 => 0,
                Some(_) => return Err(invalid!("{shape:?} does not broadcast to {out:?}")),
            };
        }
    }
    Ok(l)
}

/// Whether a pointwise op over `operands` writes its output of `out_shape` channels-last:
/// where an operand of that very shape is so (a squeeze-excitation scale [N,C,1,1] times an
/// NHWC activation stays NHWC), so an NHWC chain stays NHWC.
pub fn keeps_channels_last(operands: &[&DeviceTensor], out_shape: &[usize]) -> bool {
    operands.iter().any(|x| x.channels_last() && x.shape == out_shape)
}

/// A new tensor of `dtype` and `shape`, stored channels-last where asked.
pub fn empty_in_layout(cx: &Ctx, dtype: DataType, shape: &[usize], channels_last: bool) -> KResult<DeviceTensor> {
    let mut out = cx.gpu.empty(dtype, shape.to_vec()).map_err(KernelError::from)?;
    out.strides = channels_last.then(|| DeviceTensor::channels_last_strides(shape));
    Ok(out)
}

/// Fills `out` with zeros.
pub fn zeros(cx: &Ctx, out: DeviceTensor) -> KResult<DeviceTensor> {
    let bytes = crate::buffer::storage_size(out.dtype).map_err(KernelError::from)? * out.len();
    cx.gpu.zero(&out.buf, bytes).map_err(KernelError::from)?;
    Ok(out)
}

/// `n` zeros of `dtype`, on the device once per context (a shared constant table): the bias
/// of a layer that has none where a library (cuDNN, cuBLASLt) fuses its epilogue (ReLU, a
/// residual) only after a bias. Without it each step was a pass of its own over the output:
/// the dynamo exporter's ResNet-50, whose convolutions carry no bias, ran 1.6x slower.
pub(crate) fn zero_bias(cx: &Ctx, dtype: DataType, n: usize) -> KResult<DeviceTensor> {
    cx.gpu.constant_table(&HostTensor::zeros(dtype, vec![n])).map_err(KernelError::from)
}

/// Whether cuDNN is present to run a convolution the direct kernel cannot (3-D).
fn cudnn_convolves(p: &kiln::ConvolutionParams) -> bool {
    crate::probe::libraries().cudnn.is_ok() && p.strides.len() == 3 && p.pre_padding == p.post_padding
}

/// DequantizeLinear of `x`, which may be a view. A view that is not channels-last (a head
/// split's transpose) is read through its strides and written packed, its contiguous axis
/// innermost: no copy before, and attention's keys come out as the rows its product reads.
pub(crate) fn dequantize(cx: &Ctx, x: &DeviceTensor, scale: &DeviceTensor, zero: Option<&DeviceTensor>, axis: Option<usize>, to: Option<DataType>) -> KResult<DeviceTensor> {
    if let Some(order) = x.strides.as_deref().and_then(|st| typed::inner_contiguous_order(&x.shape, st)).filter(|_| !x.channels_last() && axis.is_none()) {
        if let Some(out) = typed::dequantize_view(cx, x, scale, zero, to, &order)? {
            return Ok(out);
        }
    }
    let x = memory_order_input(cx, x, scale.len() == 1, Permuted::LastAxisStrided)?;
    Ok(typed::dequantize(cx, &x, scale, zero, axis, to)?.with_strides_of(&x))
}

/// Why `kind` with inputs of `input_types` has no device implementation, if it has none.
pub fn unsupported(kind: &LayerKind, input_types: &[Option<DataType>], output_types: &[DataType]) -> Option<String> {
    use LayerKind as K;
    let t0 = input_types.first().copied().flatten();
    let float_in = t0.is_some_and(|t| matches!(t, DataType::F32 | DataType::F16 | DataType::BF16));
    let need_float = |what: &str| (!float_in).then(|| format!("{what} runs on f32, f16 and bf16 only, not {t0:?}"));
    match kind {
        K::Constant { .. } | K::Identity | K::Shape | K::Shuffle(_) | K::Concatenation { .. } | K::Slice | K::Expand => {
            t0.and_then(|t| crate::buffer::storage_size(t).err().map(|e| e.to_string())).map(|e| e.to_string())
        }
        K::Cast { to } => t0.and_then(|t| (!typed::stores(t) || !typed::stores(*to)).then(|| format!("no CUDA cast from {t} to {to}"))),
        K::CastNarrow { to, .. } => t0.and_then(|t| (!typed::stores(t) || !to.is_narrow_float()).then(|| format!("no CUDA CastNarrow from {t} to {to}"))),
        K::BitCast { to } => t0.and_then(|t| (!typed::stores(t) || !typed::stores(*to)).then(|| format!("no CUDA BitCast from {t} to {to}"))),
        K::Quantize { .. } | K::Dequantize { .. } => t0.and_then(|t| (!typed::stores(t)).then(|| format!("{} on {t} has no CUDA kernel", kind.type_name()))),
        K::Elementwise { op } => t0.and_then(|t| if typed::binary_supported(*op, t) { None } else { pointwise::binary_kernel(*op, t).err().map(|e| e.to_string()) }),
        K::Activation { .. } => need_float("Activation"),
        K::Unary { op } if t0.is_some_and(|t| typed::unary_supported(*op, t)) => None,
        K::Unary { op } => pointwise::unary_code(*op).is_none().then(|| format!("Unary {op:?} has no CUDA kernel")).or_else(|| need_float("Unary")),
        // Levels it dequantizes itself, to a float type (shape inference checks).
        K::Attention(p) if p.input_levels.is_some() => None,
        K::MatrixMultiply { .. } | K::SoftMax { .. } | K::Normalization { .. } | K::RmsNormalization { .. } | K::Attention(_) => {
            need_float(kind.type_name())
        }
        K::Reduce { op, .. } if t0 == Some(DataType::Bool) && !matches!(op, kiln::ReduceOp::Max | kiln::ReduceOp::Min) => {
            Some(format!("Reduce {op:?} is not defined on bool"))
        }
        K::Reduce { .. } if t0.is_some_and(typed::reduce_supported) => None,
        K::Reduce { .. } => need_float("Reduce"),
        // The direct kernel convolves f64 too (ConvInteger / QLinearConv's exact expansions).
        K::Convolution(p) if p.strides.len() <= 2 => t0.and_then(|t| float64_suffix(t, "Convolution").err().map(|e| e.to_string())),
        K::Convolution(p) if cudnn_convolves(p) => need_float("Convolution"),
        K::Convolution(p) => Some(format!("a {}-D convolution runs only through cuDNN (3-D, symmetric padding): no CUDA kernel for this one", p.strides.len())),
        K::Pooling(p) if p.window.len() > 8 => Some(format!("{}-D pooling has no CUDA kernel", p.window.len())),
        K::Pooling(p) => t0.and_then(|t| pool::suffix(p.kind, t).err().map(|e| e.to_string())),
        K::Deconvolution(_) => t0.and_then(|t| float64_suffix(t, "Deconvolution").err().map(|e| e.to_string())),
        K::Einsum { .. } if input_types.len() > einsum::MAX_OPERANDS => {
            Some(format!("Einsum of {} operands has no CUDA kernel (it takes up to {})", input_types.len(), einsum::MAX_OPERANDS))
        }
        K::Einsum { .. } => t0.and_then(|t| einsum::suffix(t).err().map(|e| e.to_string())),
        K::GridSample(_) => {
            let grid = input_types.get(1).copied().flatten();
            t0.and_then(|t| float64_suffix(t, "GridSample").err().map(|e| e.to_string())).or_else(|| grid.and_then(|t| float64_suffix(t, "GridSample").err().map(|e| e.to_string())))
        }
        K::Gather { mode: GatherMode::Default { .. } } => None,
        K::NonZero => t0.and_then(|t| data_dependent::nonzero_bits(t).err().map(|e| e.to_string())),
        // On host copies of its inputs (kiln core's plan::nms), any float type.
        K::NonMaxSuppression { .. } => need_float("NonMaxSuppression"),
        K::OneHot { .. } => one_hot::unsupported(t0, input_types.get(1).copied().flatten()),
        K::Lrn { .. } | K::Col2Im { .. } | K::Determinant | K::RoiAlign { .. } | K::Dft { .. } => {
            t0.and_then(|t| float64_suffix(t, kind.type_name()).err().map(|e| e.to_string()))
        }
        K::Resize(p) if p.mode == ResizeMode::Nearest => t0.and_then(|t| crate::buffer::storage_size(t).err().map(|e| e.to_string())).map(|e| e.to_string()),
        K::Resize(_) => need_float("Linear and cubic Resize"),
        K::Plugin(p) => crate::ops::plugin::unsupported(p),
        K::Fused(p) => {
            let anchor = p.anchor.kind();
            // Inputs read dequantized are f32 to the anchor, and so are the steps of a layer
            // that reads or writes levels.
            let mut seen = input_types[..p.anchor_inputs.min(input_types.len())].to_vec();
            for d in &p.dequantized {
                if let Some(t) = seen.get_mut(d.input) {
                    *t = Some(DataType::F32);
                }
            }
            let levels = !p.dequantized.is_empty() || p.epilogue.iter().any(|post| matches!(post, PostOp::Quantize { .. } | PostOp::Dequantize { .. }));
            let float = if levels { DataType::F32 } else { output_types.first().copied().unwrap_or(DataType::F32) };
            unsupported(&anchor, &seen, output_types).or_else(|| {
                p.epilogue.iter().find_map(|post| match post {
                    PostOp::Elementwise { op, .. } => pointwise::binary_kernel(*op, float).err().map(|e| e.to_string()),
                    PostOp::Unary(op) => pointwise::unary_code(*op).is_none().then(|| format!("Unary {op:?} has no CUDA kernel")),
                    PostOp::Activation(_) | PostOp::Dequantize { .. } | PostOp::Normalization { .. } => None,
                    PostOp::Quantize { to, .. } => (!matches!(to, DataType::I8 | DataType::U8)).then(|| format!("a fused QuantizeLinear to {to}")),
                    PostOp::Reduce { op, .. } => {
                        let reduces = matches!(float, DataType::F32 | DataType::F16 | DataType::BF16 | DataType::F64) || typed::reduce_supported(float);
                        (!reduces).then(|| format!("Reduce {op:?} on {float}"))
                    }
                })
            })
        }
        K::ParametricRelu => need_float("ParametricReLU"),
        K::Padding { .. } => t0.and_then(|t| crate::buffer::storage_size(t).err().map(|e| e.to_string())).map(|e| e.to_string()),
        K::Select => input_types.get(1).copied().flatten().and_then(|t| crate::buffer::storage_size(t).err().map(|e| e.to_string())).map(|e| e.to_string()),
        K::Fill { value } => crate::buffer::storage_size(value.dtype()).err().map(|e| e.to_string()).map(|e| e.to_string()),
        K::Gather { mode: GatherMode::Elements { .. } | GatherMode::Nd { .. } } => {
            t0.and_then(|t| crate::buffer::storage_size(t).err().map(|e| e.to_string())).map(|e| e.to_string())
        }
        K::Scatter { .. } => t0.and_then(|t| indexing::typed_suffix(t).err().map(|e| e.to_string())),
        K::TopK { .. } | K::CumulativeSum { .. } | K::CumulativeProduct { .. } => t0.and_then(|t| match indexing::typed_suffix(t) {
            Ok("bool") => Some(format!("{} on bool has no CUDA kernel", kind.type_name())),
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        }),
        // The interpreter runs loop and conditional boundaries (check_support skips them).
        kiln::control_boundary!() => None,
        // The layer driver checks assertions on the host.
        K::Assertion { .. } => None,
        K::Reformat { .. } | K::Unique { .. } | K::Text(_) => Some(format!("{} has no CUDA kernel yet", kind.type_name())),
        K::Quantized(_) => input_types[..input_types.len().min(2)]
            .iter()
            .flatten()
            .find(|&&t| !kiln::QuantizedParams::operand_type(t))
            .map(|t| format!("an integer layer takes int8, uint8 or float8 e4m3fn operands, not {t}")),
    }
}

/// Shape inference of a fused layer's anchor on concrete values: host values are known,
/// device values only by type and shape (no device read).
fn infer(kind: &LayerKind, inputs: &[Option<Value>]) -> KResult<Vec<OutFact>> {
    let metas: Vec<Option<(DataType, Shape)>> = inputs.iter().map(|v| v.as_ref().map(|v| { let (t, s) = v.meta(); (t, Shape::fixed(&s)) })).collect();
    let facts: Vec<Option<Fact>> = inputs
        .iter()
        .zip(&metas)
        .map(|(v, m)| v.as_ref().zip(m.as_ref()).map(|(v, (t, s))| Fact::new(*t, s, v.host.as_deref())))
        .collect();
    Ok(infer_layer(kind, &facts, &|_| None).map_err(|e| invalid!("shape inference: {}", e.rule))?)
}

/// Runs one device layer. `inputs` in slot order; `outs` is what shape inference expects.
pub fn run(cx: &Ctx, kind: &LayerKind, inputs: &[Option<Value>], outs: &[OutFact]) -> KResult<Vec<DeviceTensor>> {
    use LayerKind as K;
    let out_shape = |i: usize| -> KResult<Vec<usize>> {
        let f = outs.get(i).ok_or("shape inference gave no output")?;
        f.shape.dims().iter().map(|d| d.fixed()).collect::<Option<Vec<usize>>>().ok_or_else(|| invalid!("output shape {} is not concrete", f.shape))
    };
    let dev = |slot: usize| -> KResult<DeviceTensor> {
        cx.dev(inputs.get(slot).and_then(Option::as_ref).ok_or_else(|| invalid!("input {slot} is missing"))?)
    };
    let raw = |slot: usize| -> KResult<DeviceTensor> {
        cx.dev_any_layout(inputs.get(slot).and_then(Option::as_ref).ok_or_else(|| invalid!("input {slot} is missing"))?)
    };
    let opt_dev = |slot: usize| -> KResult<Option<DeviceTensor>> { inputs.get(slot).and_then(Option::as_ref).map(|v| cx.dev(v)).transpose() };
    let host = |slot: usize| -> KResult<Option<Arc<HostTensor>>> { inputs.get(slot).and_then(Option::as_ref).map(|v| cx.host(v)).transpose() };
    let out_dtype = |i: usize| outs.get(i).map_or(DataType::F32, |f| f.dtype);
    let one = |t: DeviceTensor| Ok(vec![t]);
    match kind {
        K::Identity => one(dev(0)?),
        // Elementwise in memory order: a channels-last input (an INT8 chain's Dequantize in an
        // FP16 build) keeps its layout.
        K::Cast { to } => {
            let x = memory_order_input(cx, &raw(0)?, true, Permuted::Never)?;
            one(pointwise::cast(cx, &x, *to)?.with_strides_of(&x))
        }
        K::CastNarrow { to, saturate, e8m0_rounding } => one(typed::cast(cx, &dev(0)?, *to, *saturate, *e8m0_rounding)?),
        K::BitCast { to } => one(typed::bit_cast(cx, &dev(0)?, *to)?),
        // Per-tensor Q/DQ is elementwise: a channels-last input (an INT8 convolution's output)
        // keeps its layout, so the next convolution reads it without a reformat.
        K::Quantize { axis, to } => one(quantize_laid_out(cx, &raw(0)?, &dev(1)?, opt_dev(2)?.as_ref(), *axis, *to)?),
        K::Dequantize { axis, to } => one(dequantize(cx, &raw(0)?, &dev(1)?, opt_dev(2)?.as_ref(), *axis, *to)?),
        // Pointwise layers read any layout and write NHWC where an input of the output's shape is so (`keeps_channels_last`).
        K::Elementwise { op } => one(pointwise::binary(cx, *op, &raw(0)?, &raw(1)?, out_dtype(0), &out_shape(0)?)?),
        K::Activation { kind } => one(pointwise::unary(cx, pointwise::activation_code(*kind), &raw(0)?, None)?),
        K::Unary { op } => {
            let x = raw(0)?;
            if typed::unary_supported(*op, x.dtype) {
                one(typed::unary(cx, *op, &layout::to_row_major(cx, &x)?)?)
            } else {
                one(pointwise::unary(cx, pointwise::unary_code(*op).ok_or("no kernel")?, &x, None)?)
            }
        }
        K::Shuffle(p) => one(movement::shuffle(cx, p, &raw(0)?, &out_shape(0)?)?),
        K::Slice => {
            let b = [host(1)?, host(2)?, host(3)?, host(4)?];
            one(movement::slice(cx, &raw(0)?, [b[0].as_deref(), b[1].as_deref(), b[2].as_deref(), b[3].as_deref()])?)
        }
        K::Expand => one(movement::expand(cx, &dev(0)?, &out_shape(0)?)?),
        K::Concatenation { axis } => {
            let parts = (0..inputs.len()).map(raw).collect::<Result<Vec<_>, _>>()?;
            one(movement::concatenation(cx, &parts.iter().collect::<Vec<_>>(), *axis, &out_shape(0)?)?)
        }
        K::Gather { mode: GatherMode::Default { axis } } => one(movement::gather(cx, &dev(0)?, &dev(1)?, *axis, &out_shape(0)?)?),
        K::Resize(p) => {
            let (roi, scales, sizes) = (host(1)?, host(2)?, host(3)?);
            one(resize::resize(cx, p, &dev(0)?, roi.as_deref(), scales.as_deref(), sizes.as_deref(), &out_shape(0)?)?)
        }
        K::MatrixMultiply { op_a, op_b } => one(compute::matmul(cx, &dev(0)?, *op_a, &dev(1)?, *op_b, 1.0, &out_shape(0)?)?),
        K::Convolution(p) => {
            let (out, _) = conv::convolution(cx, p, &raw(0)?, &dev(1)?, opt_dev(2)?.as_ref(), conv::ConvTail::default(), &out_shape(0)?)?;
            one(out)
        }
        K::Pooling(p) => one(compute::pooling(cx, p, &raw(0)?, &out_shape(0)?)?),
        K::GridSample(p) => one(sampling::grid_sample(cx, p, &dev(0)?, &dev(1)?, &out_shape(0)?)?),
        K::OneHot { axis } => {
            let depth = host(2)?.ok_or("OneHot's depth is missing")?;
            one(one_hot::one_hot(cx, &dev(0)?, &dev(1)?, &depth, *axis, &out_shape(0)?)?)
        }
        K::Lrn { window, alpha, beta, k } => one(lrn::lrn(cx, &dev(0)?, *window, *alpha, *beta, *k)?),
        K::Col2Im { strides, dilations, pads } => {
            let block = host(2)?.ok_or("Col2Im's block_shape is missing")?;
            one(signal::col2im(cx, &dev(0)?, &block, strides, dilations, pads, &out_shape(0)?)?)
        }
        K::Determinant => one(signal::determinant(cx, &dev(0)?)?),
        K::NonZero => one(data_dependent::nonzero(cx, &dev(0)?)?),
        K::NonMaxSuppression { center_point_box } => {
            let (boxes, scores) = (host(0)?.ok_or("boxes are missing")?, host(1)?.ok_or("scores are missing")?);
            let (limit, iou, score) = (host(2)?, host(3)?, host(4)?);
            let selected = kiln::plan::nms::non_max_suppression(
                &boxes,
                &scores,
                limit.as_deref(),
                iou.as_deref(),
                score.as_deref(),
                *center_point_box,
            )?;
            one(cx.gpu.upload(&selected).map_err(KernelError::from)?)
        }
        K::RoiAlign { .. } => one(roi::roi_align(cx, &dev(0)?, &dev(1)?, &dev(2)?, &kiln::plan::roi::RoiAlignSpec::of(kind)?)?),
        K::Dft { inverse, onesided } => {
            let scalar = |t: Arc<HostTensor>, what: &str| match t.to_i64_vec().as_deref() {
                Some([v]) => Ok(*v),
                _ => Err(invalid!("the DFT {what} must be one integer")),
            };
            let axis = scalar(host(1)?.ok_or("the DFT axis is missing")?, "axis")?;
            let length = host(2)?.map(|t| scalar(t, "length")).transpose()?;
            one(signal::dft(cx, &dev(0)?, length, axis, *inverse, *onesided, &out_shape(0)?)?)
        }
        K::Deconvolution(p) => one(deconv::deconvolution(cx, p, &dev(0)?, &dev(1)?, opt_dev(2)?.as_ref(), &out_shape(0)?)?),
        K::Einsum { equation } => {
            let operands = (0..inputs.len()).map(dev).collect::<Result<Vec<_>, _>>()?;
            one(einsum::einsum(cx, equation, &operands, &out_shape(0)?)?)
        }
        K::SoftMax { axis } => one(compute::softmax(cx, &dev(0)?, *axis, 1.0)?),
        K::Reduce { op, axes, .. } => {
            let axes = match host(1)? {
                Some(t) => kiln::plan::reduce::run_time_axes(&t.to_i64_vec().ok_or("reduce axes must be integers")?, raw(0)?.shape.len())?,
                None => axes.clone(),
            };
            one(compute::reduce(cx, *op, &raw(0)?, &axes, &out_shape(0)?)?)
        }
        K::Normalization { axes, epsilon, num_groups } => {
            one(compute::normalization(cx, &dev(0)?, opt_dev(1)?.as_ref(), opt_dev(2)?.as_ref(), axes, *epsilon, *num_groups, false)?)
        }
        K::RmsNormalization { axes, epsilon } => one(compute::normalization(cx, &dev(0)?, opt_dev(1)?.as_ref(), None, axes, *epsilon, 1, true)?),
        K::Attention(p) => one(compute::attention(cx, p, &raw(0)?, &raw(1)?, &raw(2)?, opt_dev(3)?.as_ref(), &out_shape(0)?)?),
        K::Plugin(p) => crate::ops::plugin::run(cx, p, inputs, outs),
        K::Fused(p) => one(fused(cx, p, inputs, outs)?),
        K::ParametricRelu => one(indexing::prelu(cx, &dev(0)?, &dev(1)?, &out_shape(0)?)?),
        K::Padding { mode } => {
            let pads = host(1)?.ok_or("Padding's pads are missing")?;
            one(resize::padding(cx, *mode, &dev(0)?, &pads, opt_dev(2)?.as_ref(), &out_shape(0)?)?)
        }
        K::Select => one(indexing::select(cx, &dev(0)?, &dev(1)?, &dev(2)?, &out_shape(0)?)?),
        K::Fill { value } => one(indexing::fill(cx, value, &out_shape(0)?)?),
        K::Gather { mode: GatherMode::Elements { axis } } => one(indexing::gather_elements(cx, &dev(0)?, &dev(1)?, *axis)?),
        K::Gather { mode: GatherMode::Nd { batch_dims } } => one(indexing::gather_nd(cx, &dev(0)?, &dev(1)?, *batch_dims, &out_shape(0)?)?),
        K::Scatter { mode, reduction } => one(indexing::scatter(cx, *mode, *reduction, &dev(0)?, &dev(1)?, &dev(2)?)?),
        K::TopK { largest, axis, .. } => {
            let (values, indices) = scan::top_k(cx, &dev(0)?, *axis, *largest, &out_shape(0)?)?;
            Ok(vec![values, indices])
        }
        K::CumulativeSum { exclusive, reverse } | K::CumulativeProduct { exclusive, reverse } => {
            let axis = host(1)?.ok_or("the running sum's axis is missing")?;
            let axis = axis.to_i64_vec().and_then(|v| v.first().copied()).ok_or("the running sum's axis must be one integer")?;
            let product = matches!(kind, K::CumulativeProduct { .. });
            one(scan::cumulative(cx, &dev(0)?, axis, *exclusive, *reverse, product)?)
        }
        // The layer driver serves constants, shapes and assertions; the interpreter runs the
        // boundaries.
        K::Constant { .. }
        | K::Shape
        | K::Assertion { .. }
        | kiln::control_boundary!() => Err(invalid!("{} has no device kernel: the layer driver runs it", kind.type_name())),
        K::Quantized(p) => one(quant::quantized(cx, p, inputs, &out_shape(0)?, out_dtype(0))?),
        K::Reformat { .. } | K::Unique { .. } | K::Text(_) => {
            Err(KernelError::Unsupported(format!("{} has no CUDA kernel yet", kind.type_name())))
        }
    }
}

/// Whether `t`'s buffer starts at a multiple of `lanes` elements: what a kernel reading or
/// writing `lanes` elements per access needs.
pub fn lane_aligned(cx: &Ctx, t: &DeviceTensor, lanes: usize) -> bool {
    crate::buffer::storage_size(t.dtype).is_ok_and(|size| cx.gpu.ptr(&t.buf).is_multiple_of((lanes * size) as u64))
}

/// Which transposed views [`memory_order_input`] keeps.
#[derive(Clone, Copy)]
enum Permuted {
    Never,
    Always,
    LastAxisStrided,
}

/// A QuantizeLinear as the layer runs it: written in the order its reader transposes it to
/// where the executor set one (attention's context into the head merge's order: the transpose
/// then copies nothing), else, per tensor, in `x`'s own packed layout (`memory_order_input`).
fn quantize_laid_out(cx: &Ctx, x: &DeviceTensor, scale: &DeviceTensor, zero_point: Option<&DeviceTensor>, axis: Option<usize>, to: DataType) -> KResult<DeviceTensor> {
    let order = cx.write_order.borrow().clone();
    if let Some(order) = order.filter(|_| axis.is_none()) {
        if let Some(out) = typed::quantize_view(cx, x, scale, zero_point, to, &order)? {
            return Ok(out);
        }
    }
    let x = memory_order_input(cx, x, scale.len() == 1, Permuted::Always)?;
    Ok(typed::quantize(cx, &x, scale, zero_point, axis, to)?.with_strides_of(&x))
}

/// An input of a layer that is the same on every element (a Cast, a per-tensor Quantize /
/// Dequantize) as its kernel may read it: as stored when packed channels-last, or in another
/// order of its axes where `permuted` allows; row-major otherwise. The output takes the same
/// layout, so a reader that wants rows copies them after the layer instead of before.
fn memory_order_input(cx: &Ctx, x: &DeviceTensor, same_on_every_element: bool, permuted: Permuted) -> KResult<DeviceTensor> {
    let keep_permuted = match permuted {
        Permuted::Never => false,
        // A QuantizeLinear's output is narrower than its input: its rows copy for less after.
        Permuted::Always => x.packed_permutation(),
        // A DequantizeLinear's output is wider: only a view whose last axis is not contiguous
        // (attention's transposed keys) costs more to copy before, as a transpose of bytes.
        Permuted::LastAxisStrided => x.packed_permutation() && x.strides.as_ref().and_then(|s| s.last()).is_some_and(|&s| s != 1),
    };
    match same_on_every_element && (x.channels_last() || keep_permuted) {
        true => Ok(x.clone()),
        false => layout::to_row_major(cx, x),
    }
}

/// The anchor, then each epilogue step on the running value (unary steps in place).
fn fused(cx: &Ctx, p: &kiln::FusedParams, inputs: &[Option<Value>], outs: &[OutFact]) -> KResult<DeviceTensor> {
    // A pointwise anchor is the chain's first step (an identity none): the whole layer is one
    // pass, a reduction ending it included.
    let first = match p.anchor {
        kiln::FusedAnchor::Identity => Some(None),
        _ => pointwise_anchor(p, inputs).map(Some),
    };
    let reduction = match p.epilogue.last() {
        Some(&PostOp::Reduce { op, axes, .. }) => {
            let out = outs.first().ok_or("no output fact")?;
            let shape = out.shape.dims().iter().map(|d| d.fixed()).collect::<Option<Vec<_>>>().ok_or("the reduction's shape is not concrete")?;
            Some((op, axes.axes(), shape))
        }
        _ => None,
    };
    if let Some(first) = first {
        let x = cx.dev_any_layout(inputs.first().and_then(Option::as_ref).ok_or("the anchor's input is missing")?)?;
        let steps: Vec<PostOp> = first.into_iter().chain(p.epilogue.iter().copied()).collect();
        let reduced_shape = reduction.as_ref().map(|(_, _, shape)| &shape[..]);
        if let Some(out) = fused_chain(cx, &p.dequantized, &steps, &x, Some(0), inputs, reduced_shape)? {
            return check_epilogue(out, outs);
        }
    }
    if let kiln::FusedAnchor::Pooling(pool) = &p.anchor {
        if let Some(out) = pooled_levels(cx, pool, p, inputs, outs)? {
            return check_epilogue(out, outs);
        }
    }
    // Elsewhere an island ending in a reduction runs, then the reduction of its result.
    if let Some((op, axes, shape)) = reduction {
        let island = kiln::FusedParams { epilogue: p.epilogue[..p.epilogue.len() - 1].to_vec(), ..p.clone() };
        let island_outs = infer(&LayerKind::Fused(island.clone()), inputs)?;
        let running = fused(cx, &island, inputs, &island_outs)?;
        return check_epilogue(compute::reduce(cx, op, &running, &axes, &shape)?, outs);
    }
    // Elsewhere, inputs read dequantized are dequantized first, as the unfused graph did.
    let dequantized = dequantize_inputs(cx, p, inputs)?;
    let inputs = &dequantized[..];
    let anchor_inputs = inputs.get(..p.anchor_inputs).ok_or("fewer inputs than the anchor takes")?;
    let anchor_kind = p.anchor.kind();
    let anchor_outs = infer(&anchor_kind, anchor_inputs)?;
    let (mut running, consumed) = match (&p.anchor, p.epilogue.first()) {
        // A product then `+ bias`, `+ residual` and ReLU, each optional, in that order:
        // cuBLASLt's epilogue (the bias one row, the residual of the product's shape as its C,
        // beta = 1). cuBLASLt takes them only after a bias: a product without one adds zeros.
        (kiln::FusedAnchor::MatrixMultiply { op_a, op_b }, Some(PostOp::Elementwise { op: kiln::ElementwiseOp::Sum, .. } | PostOp::Activation(kiln::ActivationKind::Relu))) => {
            let shape = anchor_outs.first().ok_or("no anchor output")?.shape.dims().iter().map(|d| d.fixed()).collect::<Option<Vec<_>>>().ok_or("the product's shape is not concrete")?;
            let (a, b) = (cx.dev(anchor_inputs.first().and_then(Option::as_ref).ok_or("input 0 is missing")?)?, cx.dev(anchor_inputs.get(1).and_then(Option::as_ref).ok_or("input 1 is missing")?)?);
            let sum_operand = |i: usize| match p.epilogue.get(i) {
                Some(PostOp::Elementwise { op: kiln::ElementwiseOp::Sum, operand, .. }) => Ok(Some(cx.dev(operand_value(inputs, *operand)?)?)),
                _ => Ok::<_, KernelError>(None),
            };
            let columns = shape.last().copied().unwrap_or(0);
            let is_residual = |t: &DeviceTensor| t.shape == shape && t.dtype == a.dtype;
            let (bias, residual) = match sum_operand(0)? {
                Some(t) if is_residual(&t) && !compute::is_one_row(&t, columns) => (None, Some(t)),
                Some(t) => (Some(t), sum_operand(1)?.filter(is_residual)),
                None => (None, None),
            };
            let next = usize::from(bias.is_some()) + usize::from(residual.is_some());
            let relu = matches!(p.epilogue.get(next), Some(PostOp::Activation(kiln::ActivationKind::Relu)));
            let taken = next + usize::from(relu);
            let bias = match (bias, taken) {
                (Some(t), _) => Some(t),
                (None, 0) => None,
                (None, _) => Some(zero_bias(cx, a.dtype, columns)?),
            };
            let (out, fused) = compute::matmul_epilogue(cx, cx.gemm_rank.get(), &a, *op_a, &b, *op_b, 1.0, &shape, bias.as_ref().map(|t| (t, relu)), residual.as_ref())?;
            (out, if fused { taken } else { 0 })
        }
        // A convolution (+ bias) then as much of the epilogue as its kernel takes in.
        (kiln::FusedAnchor::Convolution(cp), _) => {
            let fact = anchor_outs.first().ok_or("no anchor output")?;
            let shape = fact.shape.dims().iter().map(|d| d.fixed()).collect::<Option<Vec<_>>>().ok_or("the convolution's shape is not concrete")?;
            let slot = |i: usize| anchor_inputs.get(i).and_then(Option::as_ref).ok_or_else(|| invalid!("input {i} is missing"));
            let x = cx.dev_any_layout(slot(0)?)?;
            let w = cx.dev(slot(1)?)?;
            let bias = anchor_inputs.get(2).and_then(Option::as_ref).map(|v| cx.dev(v)).transpose()?;
            let (tail_steps, residual) = conv_tail_steps(cx, &p.epilogue, inputs, &shape, fact.dtype)?;
            let tail = conv::ConvTail { before: tail_steps[0], residual: residual.as_ref(), after: tail_steps[1] };
            let (out, consumed) = conv::convolution(cx, cp, &x, &w, bias.as_ref(), tail, &shape)?;
            // The rest of the epilogue runs kiln's pointwise kernels, in the output's layout.
            (out, consumed)
        }
        _ => (run(cx, &anchor_kind, anchor_inputs, &anchor_outs)?.into_iter().next().ok_or("the anchor gave no output")?, 0),
    };
    // (`inputs` are dequantized by now.)
    if let Some(out) = fused_chain(cx, &[], &p.epilogue[consumed..], &running, None, inputs, None)? {
        running = out;
    } else {
        for post in &p.epilogue[consumed..] {
            running = step(cx, post, running, inputs)?;
        }
    }
    check_epilogue(running, outs)
}

/// The fused layer's inputs with those it reads dequantized replaced by DequantizeLinear's output.
fn dequantize_inputs(cx: &Ctx, p: &kiln::FusedParams, inputs: &[Option<Value>]) -> KResult<Vec<Option<Value>>> {
    let mut out = inputs.to_vec();
    for d in &p.dequantized {
        let x = inputs.get(d.input).cloned().flatten().ok_or_else(|| invalid!("dequantized input {} is missing", d.input))?;
        out[d.input] = Some(Value::device(per_tensor_step(cx, &LayerKind::Dequantize { axis: None, to: None }, x, inputs, d.scale, d.zero)?));
    }
    Ok(out)
}

/// A per-tensor Quantize or Dequantize of `x` with the fused layer's inputs `scale` and `zero`,
/// on its own kernel.
fn per_tensor_step(cx: &Ctx, kind: &LayerKind, x: Value, inputs: &[Option<Value>], scale: usize, zero: Option<usize>) -> KResult<DeviceTensor> {
    let slot = |i: usize| operand_value(inputs, i).cloned();
    let ins = [Some(x), Some(slot(scale)?), zero.map(slot).transpose()?];
    let facts = infer(kind, &ins)?;
    run(cx, kind, &ins, &facts)?.into_iter().next().ok_or_else(|| invalid!("{} gave no output", kind.type_name()))
}

/// A per-tensor scale and zero point known on the host, as f32 (levels and zero points of
/// 8-bit types are exact in f32); `None` where either is not.
fn host_scale_and_zero(inputs: &[Option<Value>], scale: usize, zero: Option<usize>) -> Option<(f32, f32)> {
    let host = |i: usize| inputs.get(i)?.as_ref()?.host.clone();
    let one = |h: Arc<HostTensor>| {
        let v = h.to_f64_vec();
        (v.len() == 1).then(|| v[0] as f32)
    };
    let s = host(scale).filter(|h| h.dtype() == DataType::F32).and_then(one)?;
    Some((s, zero.map_or(Some(0.0), |z| host(z).and_then(one))?))
}

/// The leading epilogue steps a convolution kernel may take in (see `conv::ConvTail`): an
/// activation, a residual of the output's own shape and type, and an activation after that
/// residual; each `None` where the epilogue does not start so.
fn conv_tail_steps(
    cx: &Ctx,
    epilogue: &[PostOp],
    inputs: &[Option<Value>],
    shape: &[usize],
    dtype: DataType,
) -> KResult<([Option<kiln::ActivationKind>; 2], Option<DeviceTensor>)> {
    let activation = |i: usize| match epilogue.get(i) {
        Some(PostOp::Activation(kind)) => Some(*kind),
        _ => None,
    };
    let before = activation(0);
    let at = usize::from(before.is_some());
    let residual = match epilogue.get(at) {
        Some(PostOp::Elementwise { op: kiln::ElementwiseOp::Sum, operand, .. }) => {
            Some(cx.dev_any_layout(operand_value(inputs, *operand)?)?).filter(|z| z.shape == shape && z.dtype == dtype)
        }
        _ => None,
    };
    let after = residual.as_ref().and_then(|_| activation(at + 1));
    Ok(([before, after], residual))
}

fn check_epilogue(running: DeviceTensor, outs: &[OutFact]) -> KResult<DeviceTensor> {
    if let Some(f) = outs.first() {
        if f.dtype != running.dtype || f.shape.rank() != running.shape.len() {
            return Err(invalid!("the epilogue produced {}{:?}, inference expects {}{}", running.dtype, running.shape, f.dtype, f.shape));
        }
    }
    Ok(running)
}

/// The value of a Fused layer's input `operand` (an epilogue step's operand).
fn operand_value(inputs: &[Option<Value>], operand: usize) -> KResult<&Value> {
    inputs.get(operand).and_then(Option::as_ref).ok_or_else(|| invalid!("operand {operand} is missing"))
}

/// A pointwise anchor as the chain's first step (its input 0 is the running value).
fn pointwise_anchor(p: &kiln::FusedParams, inputs: &[Option<Value>]) -> Option<PostOp> {
    let first = match p.anchor {
        kiln::FusedAnchor::Activation(kind) => PostOp::Activation(kind),
        kiln::FusedAnchor::Unary(op) => PostOp::Unary(op),
        kiln::FusedAnchor::Elementwise(op) if p.anchor_inputs == 2 && inputs.get(1).is_some_and(Option::is_some) => {
            PostOp::Elementwise { op, operand: 1, running_first: true }
        }
        _ => return None,
    };
    Some(first)
}

/// Two or more pointwise steps as one `chain_*` pass (one step is enough where the layer reads
/// or writes 8-bit levels), or `None` where the chain kernel does not apply (then each step
/// runs on its own). `running_input`: the layer input `running` is; `dequantized`: the inputs
/// read dequantized; `reduced_shape`: the layer's output shape (inference's), where the steps
/// end in a reduction.
fn fused_chain(
    cx: &Ctx,
    dequantized: &[kiln::DequantizedInput],
    steps: &[PostOp],
    running: &DeviceTensor,
    running_input: Option<usize>,
    inputs: &[Option<Value>],
    reduced_shape: Option<&[usize]>,
) -> KResult<Option<DeviceTensor>> {
    // A reduction ends the chain (an island's last step): the island's values are reduced as
    // they are computed (`chain_reduce`), never written.
    let (steps, reduction) = match (steps.split_last(), reduced_shape) {
        (Some((&PostOp::Reduce { op, axes, .. }, island)), Some(shape)) => (island, Some((op, axes, shape))),
        (Some((PostOp::Reduce { .. }, _)), None) => return Ok(None),
        _ => (steps, None),
    };
    let quantized = |post: &PostOp| matches!(post, PostOp::Quantize { .. } | PostOp::Dequantize { .. });
    if steps.len() < 2 && dequantized.is_empty() && !steps.iter().any(quantized) && reduction.is_none() {
        return Ok(None);
    }
    let Some((x_dequantize, chain)) = chain_steps(cx, dequantized, steps, running, running_input, inputs)? else { return Ok(None) };
    let Some((op, axes, shape)) = reduction else { return pointwise::chain(cx, running, x_dequantize, &chain) };
    chain_reduce::chain_reduce(cx, running, x_dequantize, &chain, &chain_reduce::Reduction { op, axes: &axes.axes(), shape })
}

/// The chain kernel's form of pointwise `steps` on `running`: how the running value is read
/// (dequantized, with host parameters, where the layer reads its input `running_input` so, or
/// where the first step dequantizes 8-bit levels) and each step; `None` where a step has no
/// chain form (parameters not on the host, a unary op without a code, a reduction).
type ChainOf = (Option<(f32, f32)>, Vec<pointwise::ChainStep>);
fn chain_steps(cx: &Ctx, dequantized: &[kiln::DequantizedInput], steps: &[PostOp], running: &DeviceTensor, running_input: Option<usize>, inputs: &[Option<Value>]) -> KResult<Option<ChainOf>> {
    // Where a read is dequantized: `Some(None)` not, `Some(Some(..))` with host parameters,
    // `None` with parameters not on the host (no chain).
    let dequantize_of = |input: usize| match dequantized.iter().find(|d| d.input == input) {
        None => Some(None),
        Some(d) => host_scale_and_zero(inputs, d.scale, d.zero).map(Some),
    };
    let Some(mut x_dequantize) = running_input.map_or(Some(None), dequantize_of) else { return Ok(None) };
    let mut steps = steps;
    if let (None, Some((&PostOp::Dequantize { scale, zero }, rest))) = (x_dequantize, steps.split_first()) {
        if running.dtype.is_8bit_integer() {
            if let Some(read) = host_scale_and_zero(inputs, scale, zero) {
                (x_dequantize, steps) = (Some(read), rest);
            }
        }
    }
    let mut chain = Vec::with_capacity(steps.len());
    for post in steps {
        chain.push(match *post {
            PostOp::Activation(kind) => pointwise::ChainStep::Unary(pointwise::activation_code(kind)),
            PostOp::Unary(op) => match pointwise::unary_code(op) {
                Some(code) => pointwise::ChainStep::Unary(code),
                None => return Ok(None),
            },
            PostOp::Elementwise { op, operand, running_first } => {
                let other = cx.dev_any_layout(operand_value(inputs, operand)?)?;
                let Some(dequantize) = dequantize_of(operand) else { return Ok(None) };
                pointwise::ChainStep::Binary { op, operand: other, running_first, dequantize }
            }
            PostOp::Quantize { to, scale, zero } => match host_scale_and_zero(inputs, scale, zero) {
                Some((scale, zero)) => pointwise::ChainStep::Quantize { to, scale, zero },
                None => return Ok(None),
            },
            PostOp::Dequantize { scale, zero } => match host_scale_and_zero(inputs, scale, zero) {
                Some((scale, zero)) => pointwise::ChainStep::Dequantize { scale, zero },
                None => return Ok(None),
            },
            PostOp::Normalization { epsilon, scale, bias, .. } => {
                let (scale, bias) = (cx.dev_any_layout(operand_value(inputs, scale)?)?, cx.dev_any_layout(operand_value(inputs, bias)?)?);
                pointwise::ChainStep::Normalize { scale, bias, epsilon }
            }
            // Only as the last step (`fused_chain` splits it off).
            PostOp::Reduce { .. } => return Ok(None),
        });
    }
    Ok(Some((x_dequantize, chain)))
}

/// A max pooling of 8-bit levels heading a fused layer ([`kiln::FusedAnchor::Pooling`]) whose
/// epilogue maps each level to another (dequantize, ReLU, quantize: `passes::quantized_chain`):
/// the map as a table of the 256 levels (the chain program's `chain_table_fill`), looked up in
/// the pooling kernel after each maximum. `None` where the kernel or the table does not apply:
/// the pooling runs, then the epilogue.
fn pooled_levels(cx: &Ctx, pool: &kiln::PoolingParams, p: &kiln::FusedParams, inputs: &[Option<Value>], outs: &[OutFact]) -> KResult<Option<DeviceTensor>> {
    let x = cx.dev_any_layout(inputs.first().and_then(Option::as_ref).ok_or("the pooling's input is missing")?)?;
    if !p.dequantized.is_empty() || !x.channels_last() {
        return Ok(None);
    }
    let Some((Some(read), steps)) = chain_steps(cx, &[], &p.epilogue, &x, None, inputs)? else { return Ok(None) };
    let Some(built) = pointwise::build(&x, Some(read), &steps)? else { return Ok(None) };
    let Some(source) = chain_source::chain_kernel(&built.program).filter(|_| built.program.table_entries() == Some(256)) else { return Ok(None) };
    let table = pointwise::level_table(cx, &source, &built.params, 256)?;
    let out = outs.first().ok_or("no output fact")?;
    let shape = out.shape.dims().iter().map(|d| d.fixed()).collect::<Option<Vec<_>>>().ok_or("the pooling's shape is not concrete")?;
    pool::max_pooling_mapped(cx, pool, &x, &shape, (&table, built.program.out))
}

/// One epilogue step on its own kernel.
fn step(cx: &Ctx, post: &PostOp, running: DeviceTensor, inputs: &[Option<Value>]) -> KResult<DeviceTensor> {
    Ok({
        match *post {
            PostOp::Quantize { scale, zero, .. } | PostOp::Dequantize { scale, zero } => per_tensor_step(cx, &post.kind(), Value::device(running), inputs, scale, zero)?,
            PostOp::Normalization { axis, epsilon, scale, bias } => {
                let (scale, bias) = (cx.dev(operand_value(inputs, scale)?)?, cx.dev(operand_value(inputs, bias)?)?);
                compute::normalization(cx, &layout::to_row_major(cx, &running)?, Some(&scale), Some(&bias), &[axis], epsilon, 1, false)?
            }
            PostOp::Activation(kind) => pointwise::unary(cx, pointwise::activation_code(kind), &running, Some(&running))?,
            PostOp::Unary(op) => pointwise::unary(cx, pointwise::unary_code(op).ok_or("no kernel")?, &running, Some(&running))?,
            PostOp::Reduce { .. } => return Err(invalid!("a reduction runs after its island, not as one step of it")),
            PostOp::Elementwise { op, operand, running_first } => {
                let other = cx.dev_any_layout(operand_value(inputs, operand)?)?;
                let shape = broadcast_shape(&running.shape, &other.shape)?;
                let dtype = if op.is_comparison() { DataType::Bool } else { running.dtype };
                if running_first {
                    pointwise::binary(cx, op, &running, &other, dtype, &shape)?
                } else {
                    pointwise::binary(cx, op, &other, &running, dtype, &shape)?
                }
            }
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::{broadcast_layout, broadcast_strides, coalesce};
    use crate::buffer::Layout;

    /// `operand_offset` of kernels/common.cuh.
    pub(crate) fn offset(l: &Layout, which: usize, mut i: i64) -> i64 {
        let mut off = l.offset[which];
        for d in (0..l.rank as usize).rev() {
            off += (i % l.shape[d]) * l.stride[which][d];
            i /= l.shape[d];
        }
        off
    }

    fn check_same_offsets(full: &Layout, operands: usize) {
        let merged = coalesce(*full, operands);
        let n: i64 = full.shape[..full.rank as usize].iter().product();
        for i in 0..n {
            for w in 0..operands {
                assert_eq!(offset(full, w, i), offset(&merged, w, i), "element {i}, operand {w}: {full:?} vs {merged:?}");
            }
        }
    }

    #[test]
    fn a_channels_last_walk_reads_every_operand_through_its_strides() {
        use super::{coalesce, contiguous_strides, strided_walk};
        use crate::buffer::DeviceTensor;
        let out = [2usize, 3, 4, 5];
        let (a, b, c) = (DeviceTensor::channels_last_strides(&out), contiguous_strides(&[3, 1, 1]), contiguous_strides(&out));
        let order = DeviceTensor::channels_last_order(4);
        let operands: [(&[usize], &[i64]); 3] = [(&out, &a), (&[3, 1, 1], &b), (&out, &c)];
        let l = coalesce(strided_walk(&out, &operands, Some(&order)).unwrap(), 3);
        // Walking the output in NHWC order: element i is (n, h, w, ch) packed.
        for i in 0..(2 * 3 * 4 * 5) as i64 {
            let (ch, w, h, n) = (i % 3, (i / 3) % 5, (i / 15) % 4, i / 60);
            assert_eq!(offset(&l, 0, i), i, "a is stored as walked");
            assert_eq!(offset(&l, 1, i), ch, "b broadcasts per channel");
            assert_eq!(offset(&l, 2, i), ((n * 3 + ch) * 4 + h) * 5 + w, "c is row-major");
        }
        assert_eq!(l.stride[0][l.rank as usize - 1], 1, "a's innermost stride lets it load vectors");
    }

    #[test]
    fn coalescing_keeps_every_offset() {
        let cases: [(&[usize], &[&[usize]]); 5] = [
            (&[2, 3, 4, 5], &[&[2, 3, 4, 5], &[2, 3, 4, 5]]),
            (&[2, 3, 4, 5], &[&[2, 3, 4, 5], &[5]]),
            (&[2, 3, 1, 5], &[&[2, 1, 1, 5], &[3, 1, 1]]),
            (&[4, 1, 6], &[&[1], &[4, 1, 6], &[4, 1, 1]]),
            (&[1, 1], &[&[1], &[1, 1]]),
        ];
        for (out, operands) in cases {
            check_same_offsets(&broadcast_strides(out, operands).unwrap(), operands.len());
        }
        // A transposed copy (0, 2, 1, 3) with an offset on each side.
        let mut l = Layout { rank: 4, offset: [3, 7, 0], ..Layout::default() };
        let (shape, input, output) = ([2i64, 3, 4, 5], [60i64, 5, 15, 1], [60i64, 20, 5, 1]);
        l.shape[..4].copy_from_slice(&shape);
        l.stride[0][..4].copy_from_slice(&input);
        l.stride[1][..4].copy_from_slice(&output);
        check_same_offsets(&l, 2);
    }

    #[test]
    fn coalescing_merges_what_it_can() {
        assert_eq!(broadcast_layout(&[2, 3, 4, 5], &[&[2, 3, 4, 5], &[2, 3, 4, 5]]).unwrap().rank, 1);
        let bias = broadcast_layout(&[8, 128, 768], &[&[8, 128, 768], &[768]]).unwrap();
        assert_eq!((bias.rank, &bias.shape[..2]), (2, &[1024i64, 768][..]));
        assert_eq!(broadcast_layout(&[1, 1], &[&[1], &[1, 1]]).unwrap().rank, 0);
    }
}
