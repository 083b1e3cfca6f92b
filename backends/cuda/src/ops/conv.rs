//! Convolutions: cuDNN's algorithms, kiln's NHWC depthwise kernel and its direct kernel, each a
//! tactic, with as much of the layer's epilogue as the chosen one takes in.

use kiln::{invalid, ActivationKind, ConvolutionParams, KernelError};
use crate::ops::KResult;
use super::{empty_in_layout, layout, movement, pointwise, Ctx};
use crate::buffer::{float_suffix, storage_size, Arg, DeviceTensor, Window};
use crate::sources::Source;

/// Spatial dims as (h, w) with 1-D as h = 1; parameters likewise.
fn two_d(v: &[usize], fill: usize) -> KResult<(usize, usize)> {
    match v {
        [w] => Ok((fill, *w)),
        [h, w] => Ok((*h, *w)),
        _ => Err(invalid!("only 1-D and 2-D windows run on CUDA, not {}-D", v.len())),
    }
}

/// What a convolution's tactic selects (carried in [`Ctx::gemm_rank`], one number per layer):
/// 0 is cuDNN's heuristic choice (the direct kernel without cuDNN), `1 + a` cuDNN algorithm
/// `a`, [`CONV_DIRECT`] kiln's direct kernel, [`CONV_DEPTHWISE`] kiln's NHWC depthwise kernel,
/// [`CONV_DEPTHWISE_ROWS`] its variant with the filter size and stride compiled in,
/// [`CONV_PATCH_GEMM`] a patch-embedding convolution as a matrix product.
pub const CONV_DIRECT: usize = 1000;
pub const CONV_DEPTHWISE: usize = 1001;
pub const CONV_DEPTHWISE_ROWS: usize = 1002;

/// [`CONV_PATCH_GEMM`]: a convolution over non-overlapping patches as one cuBLASLt product.
pub const CONV_PATCH_GEMM: usize = 1003;
/// The same product on cuSPARSELt, for 2:4 sparse filters (see `compute::sparse_product`).
pub const CONV_SPARSE_PATCH_GEMM: usize = 1004;

/// `CONV_MERGED_GROUPS + g`: a grouped convolution run by cuDNN as `g` groups, each merging
/// `groups / g` of the layer's with a block-diagonal filter (see [`merged_group_counts`]).
pub const CONV_MERGED_GROUPS: usize = 2000;
/// The most arithmetic a merge may multiply: narrow groups (RegNet's 8 to 24 channels,
/// ResNeXt's 4 to 32) use tensor cores poorly, and the same work done densely on more
/// channels can take less time; the builder's timing decides per layer.
const MERGE_MAX_FACTOR: usize = 32;

/// The filter sizes and strides kernels/spatial.cu compiles a row kernel for.
pub(crate) const ROW_KERNEL_SIZES: [usize; 3] = [3, 5, 7];
pub(crate) const ROW_KERNEL_STRIDES: [usize; 2] = [1, 2];
/// Output pixels of a row each thread of the row kernel makes (its template's R).
const ROW_PIXELS: usize = 4;

/// The epilogue steps after `conv + bias` a convolution kernel may take in, in this order,
/// each optional: an activation, a residual of the output's shape, an activation after it.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConvTail<'t> {
    pub before: Option<ActivationKind>,
    pub residual: Option<&'t DeviceTensor>,
    pub after: Option<ActivationKind>,
}

impl<'t> ConvTail<'t> {
    /// What a library epilogue after the bias (cuDNN's, cuBLASLt's) takes in: ReLU right after
    /// the bias, or a residual (when `usable`, its type and shape the output's) then maybe
    /// ReLU; anything else is left to the caller. `(residual, ReLU last, steps taken)`.
    fn library_epilogue(&self, usable: impl Fn(&DeviceTensor) -> bool) -> (Option<&'t DeviceTensor>, bool, usize) {
        let relu = |a: Option<ActivationKind>| a == Some(ActivationKind::Relu);
        match (self.before, self.residual.filter(|z| usable(z))) {
            (Some(a), _) => (None, relu(Some(a)), usize::from(relu(Some(a)))),
            (None, Some(z)) => (Some(z), relu(self.after), 1 + usize::from(relu(self.after))),
            (None, None) => (None, false, 0),
        }
    }
}

/// Whether kiln's depthwise kernel runs this convolution: 2-D, one filter per input channel
/// (groups = input channels = output channels), a float type.
pub fn is_depthwise(p: &ConvolutionParams, x_shape: &[usize], w_shape: &[usize]) -> bool {
    x_shape.len() == 4 && w_shape.len() == 4 && p.strides.len() == 2 && p.groups > 1 && p.groups == x_shape[1] && w_shape[0] == x_shape[1] && w_shape[1] == 1
}

/// The row kernels' `(K, S)` for a depthwise convolution they cover (kernels/depthwise.cuh: the
/// float ones and INT8's): a square K×K filter, equal strides S, dilation 1, whole runs of
/// `run` channels (a thread's), and an input and output whose offsets fit 32-bit indices.
pub fn depthwise_rows(p: &ConvolutionParams, x_shape: &[usize], w_shape: &[usize], run: usize) -> Option<(usize, usize)> {
    if !is_depthwise(p, x_shape, w_shape) || p.dilations.iter().any(|&d| d != 1) || run == 0 || x_shape[1] % run != 0 {
        return None;
    }
    // The output is no larger than the input plus its padding: bounding both by the padded
    // input keeps every offset below 2^31.
    let pad = |v: &[usize], i: usize| v.get(i).copied().unwrap_or(0);
    let padded: usize = x_shape[2..].iter().enumerate().map(|(i, d)| d + pad(&p.pre_padding, i) + pad(&p.post_padding, i)).product();
    if x_shape[0].saturating_mul(x_shape[1]).saturating_mul(padded) >= i32::MAX as usize {
        return None;
    }
    let (k, s) = (w_shape[2], p.strides[0]);
    (w_shape[3] == k && p.strides[1] == s && ROW_KERNEL_SIZES.contains(&k) && ROW_KERNEL_STRIDES.contains(&s)).then_some((k, s))
}

/// The group counts `g` a grouped 2-D convolution may run as ([`CONV_MERGED_GROUPS`]): its
/// [`group_merges`] where the layer is 2-D, not depthwise (those have kernels of their own)
/// and its filters split evenly over its groups.
pub fn merged_group_counts(p: &ConvolutionParams, x_shape: &[usize], w_shape: &[usize]) -> Vec<usize> {
    let groups = p.groups.max(1);
    if x_shape.len() != 4 || w_shape.len() != 4 || is_depthwise(p, x_shape, w_shape) || !w_shape[0].is_multiple_of(groups) {
        return Vec::new();
    }
    group_merges(groups).collect()
}

/// Every divisor `g` of `groups` below it that multiplies the arithmetic by at most
/// `MERGE_MAX_FACTOR` (1 is a dense convolution): what a merge tactic of a layer of `groups`
/// groups may name, whatever its shapes.
pub fn group_merges(groups: usize) -> impl Iterator<Item = usize> {
    (1..groups).filter(move |&g| groups.is_multiple_of(g) && groups / g <= MERGE_MAX_FACTOR)
}

/// Whether a convolution reads non-overlapping patches: 2-D, one group, the stride equal to
/// the filter, no padding or dilation (ViT's and Swin's patch embeddings, ConvNeXt's stem and
/// downsampling). Its input regrouped into rows of patches is one matrix product with the
/// filter as stored, whatever the image size (trailing rows and columns no patch covers are
/// not read).
pub fn is_patchify(p: &ConvolutionParams, x_shape: &[usize], w_shape: &[usize]) -> bool {
    x_shape.len() == 4
        && w_shape.len() == 4
        && p.groups <= 1
        && p.strides == w_shape[2..]
        && p.dilations.iter().all(|&d| d == 1)
        && p.pre_padding.iter().chain(&p.post_padding).all(|&q| q == 0)
}

/// `conv(x, w) + bias`, then as many of the `tail`'s steps (in order) as the tactic's kernel
/// takes in: the count says how many, the caller runs the rest.
pub fn convolution(
    cx: &Ctx,
    p: &ConvolutionParams,
    x: &DeviceTensor,
    w: &DeviceTensor,
    bias: Option<&DeviceTensor>,
    tail: ConvTail,
    out_shape: &[usize],
) -> KResult<(DeviceTensor, usize)> {
    let choice = cx.gemm_rank.get();
    if (choice == CONV_DEPTHWISE || choice == CONV_DEPTHWISE_ROWS) && is_depthwise(p, &x.shape, &w.shape) && float_suffix(x.dtype).is_ok() {
        return depthwise_convolution(cx, p, x, w, bias, tail, out_shape, choice == CONV_DEPTHWISE_ROWS);
    }
    if (choice == CONV_PATCH_GEMM || choice == CONV_SPARSE_PATCH_GEMM) && is_patchify(p, &x.shape, &w.shape) && float_suffix(x.dtype).is_ok() {
        return patch_convolution(cx, x, w, bias, tail, out_shape, choice == CONV_SPARSE_PATCH_GEMM);
    }
    if let Some(merged) = choice.checked_sub(CONV_MERGED_GROUPS).filter(|&g| merged_group_counts(p, &x.shape, &w.shape).contains(&g)) {
        if let Ok(dnn) = cx.gpu.dnn() {
            let w = cx.gpu.converted_weights(w, &format!("merged_groups_{merged}"), |t| merge_groups(cx, t, p.groups, merged))?;
            let p = ConvolutionParams { groups: merged, ..p.clone() };
            let spec = crate::dnn::ConvSpec::new(&p, x.dtype, cx.tf32, &x.shape, &w.shape, out_shape).map_err(KernelError::from)?;
            return cudnn_convolution(cx, dnn, spec, 0, x, &w, bias, tail, out_shape);
        }
    }
    if choice != CONV_DIRECT {
        if let Ok(dnn) = cx.gpu.dnn() {
            if let Ok(spec) = crate::dnn::ConvSpec::new(p, x.dtype, cx.tf32, &x.shape, &w.shape, out_shape) {
                return cudnn_convolution(cx, dnn, spec, choice, x, w, bias, tail, out_shape);
            }
        }
    }
    let x = layout::to_row_major(cx, x)?;
    Ok((direct_convolution(cx, p, &x, w, bias, out_shape)?, 0))
}

/// The filter `[K, C / groups, kh, kw]` of a grouped convolution as that of `merged` groups
/// `[K, C / merged, kh, kw]`: each merged group's filter block-diagonal, the original
/// group's taps on its own input channels and zeros on the others it now reads.
pub(super) fn merge_groups(cx: &Ctx, w: &DeviceTensor, groups: usize, merged: usize) -> KResult<DeviceTensor> {
    let (k, cin, taps) = (w.shape[0], w.shape[1], w.shape[2] * w.shape[3]);
    let (factor, k_per_group) = (groups / merged, k / groups);
    let row = (factor * cin * taps) as i64;
    let out = super::zeros(cx, cx.gpu.empty(w.dtype, vec![k, factor * cin, w.shape[2], w.shape[3]]).map_err(KernelError::from)?)?;
    // w as [merged, factor, k_per_group, cin, taps]; group `a` of a merged one writes its
    // output rows' input slot `a`.
    let shape = [merged, factor, k_per_group, cin, taps];
    let (k_i, cin_i, taps_i) = (k_per_group as i64, cin as i64, taps as i64);
    let source = super::contiguous_strides(&shape);
    let target = [factor as i64 * k_i * row, k_i * row + cin_i * taps_i, row, taps_i, 1];
    movement::copy_into(cx, w, &shape, &source, 0, &out, &target, 0)?;
    Ok(out)
}

/// cuDNN's algorithm `choice - 1` (0: its heuristic's first), with cuDNN's epilogue: bias,
/// then a residual and ReLU, or ReLU alone.
#[allow(clippy::too_many_arguments)]
fn cudnn_convolution(
    cx: &Ctx,
    dnn: &crate::dnn::Dnn,
    spec: crate::dnn::ConvSpec,
    choice: usize,
    x: &DeviceTensor,
    w: &DeviceTensor,
    bias: Option<&DeviceTensor>,
    tail: ConvTail,
    out_shape: &[usize],
) -> KResult<(DeviceTensor, usize)> {
    let algo = choice.checked_sub(1).map(|a| a as u32);
    // 16-bit 2-D convolutions run channels-last (tensor cores); input, filter and residual are
    // brought to the layout, the output stays in it.
    let nhwc = layout::prefers_channels_last(x.dtype, x.shape.len());
    let spec = spec.with_nhwc(nhwc);
    let x = &layout::in_layout(cx, x, nhwc)?;
    let w = &if nhwc { cx.gpu.converted_weights(w, "krsc", |t| layout::to_channels_last(cx, t))? } else { layout::to_row_major(cx, w)? };
    let out = empty_in_layout(cx, x.dtype, out_shape, nhwc)?;
    let bias_ok = bias.filter(|b| b.dtype == x.dtype && b.len() == out_shape[1]);
    if bias.is_some() && bias_ok.is_none() {
        return Err(invalid!("bias of {:?} for {} output channels", bias.map(|b| b.shape.clone()), out_shape[1]));
    }
    let (residual, relu_last, consumed) = tail.library_epilogue(|z| z.dtype == x.dtype && z.shape == out_shape);
    let residual = residual.map(|z| layout::in_layout(cx, z, nhwc)).transpose()?;
    if out.is_empty() {
        return Ok((out, consumed));
    }
    let zeros = match bias_ok.is_none() && (relu_last || residual.is_some()) {
        true => Some(super::zero_bias(cx, x.dtype, out_shape[1])?),
        false => None,
    };
    let epilogue = crate::dnn::ConvEpilogue { bias: bias_ok, residual: residual.as_ref(), relu: relu_last, zeros: zeros.as_ref() };
    dnn.convolution(cx.gpu, &spec, algo, x, w, epilogue, &out)?;
    Ok((out, consumed))
}

/// A patch convolution ([`is_patchify`]) as one product: the input copied once into rows of
/// patches `[n·oh·ow, c·kh·kw]` (the patch in the filter's order: `[c][kh][kw]` for a
/// row-major input and filter, `[kh][kw][c]` for a channels-last one with the filter re-laid
/// the same), times the filter's `[oc, c·kh·kw]` transposed, in cuBLASLt with bias, ReLU and
/// residual in its epilogue. The product's rows are the output's pixels: it is channels-last.
/// `sparse` runs it on cuSPARSELt where the patch keeps each group of four input channels of
/// one tap together (channels-last, or a 1×1 filter), as 2:4 filters group them.
#[allow(clippy::too_many_arguments)]
fn patch_convolution(cx: &Ctx, x: &DeviceTensor, w: &DeviceTensor, bias: Option<&DeviceTensor>, tail: ConvTail, out_shape: &[usize], sparse: bool) -> KResult<(DeviceTensor, usize)> {
    let (n, c) = (x.shape[0], x.shape[1]);
    let (oc, kh, kw) = (w.shape[0], w.shape[2], w.shape[3]);
    if out_shape.len() != 4 || out_shape[0] != n || out_shape[1] != oc || w.shape[1] != c || w.dtype != x.dtype || bias.is_some_and(|b| b.dtype != x.dtype || b.len() != oc) {
        return Err(invalid!("a patch convolution of {:?} by {:?} into {out_shape:?}", x.shape, w.shape));
    }
    // cuBLASLt takes the tail only after a bias (its residual is the product's C): a layer
    // without one adds zeros where that takes a step in.
    let (residual, relu_last, consumed) = tail.library_epilogue(|z| z.dtype == x.dtype && z.shape == out_shape);
    let bias = match bias {
        Some(b) => Some(b.reshaped(vec![oc])),
        None if consumed > 0 => Some(super::zero_bias(cx, x.dtype, oc)?),
        None => None,
    };
    let bias = bias.as_ref();
    let (oh, ow) = (out_shape[2], out_shape[3]);
    let [sn, sc, sh, sw] = <[i64; 4]>::try_from(x.element_strides()).map_err(|_| invalid!("a rank-4 input"))?;
    let (kh_i, kw_i) = (kh as i64, kw as i64);
    let channels_last = x.channels_last();
    let (patch_shape, patch_strides, filter) = if channels_last {
        let filter = cx.gpu.converted_weights(w, "krsc", |t| layout::to_channels_last(cx, t))?;
        ([n, oh, ow, kh, kw, c], [sn, kh_i * sh, kw_i * sw, sh, sw, sc], filter)
    } else {
        ([n, oh, ow, c, kh, kw], [sn, kh_i * sh, kw_i * sw, sc, sh, sw], layout::to_row_major(cx, w)?)
    };
    let rows = n * oh * ow;
    // Already rows of patches (a 1×1 filter on a channels-last input): read in place.
    let patches = if patch_strides[..] == super::contiguous_strides(&patch_shape)[..] { x.clone() } else { movement::gather_strided(cx, x, &patch_shape, &patch_strides, 0)? };
    let patches = patches.reshaped(vec![rows, c * kh * kw]);
    let filter = filter.reshaped(vec![oc, c * kh * kw]);
    let residual = residual.map(|z| Ok::<_, KernelError>(layout::to_channels_last(cx, z)?.reshaped(vec![rows, oc]))).transpose()?;
    // The layer's tactic number chose this path; the product itself runs cuBLASLt's
    // first-ranked algorithm, or cuSPARSELt.
    let grouped_channels = channels_last || kh * kw == 1;
    let rank = if sparse && grouped_channels { super::compute::SPARSE_GEMM } else { 0 };
    let (out, fused) = super::compute::matmul_epilogue(cx, rank, &patches, kiln::MatrixOp::None, &filter, kiln::MatrixOp::Transpose, 1.0, &[rows, oc], bias.map(|b| (b, relu_last)), residual.as_ref())?;
    if bias.is_some() && !fused {
        return Err(invalid!("cuBLASLt took no bias epilogue for a patch convolution into {out_shape:?}"));
    }
    Ok((DeviceTensor { strides: Some(DeviceTensor::channels_last_strides(out_shape)), ..out.reshaped(out_shape.to_vec()) }, consumed))
}

/// kiln's depthwise kernel on NHWC (kernels/spatial.cu), taking in the whole `tail`: the
/// output is channels-last. `rows` asks for the row kernel where [`depthwise_rows`] covers the
/// layer (the general kernel otherwise).
#[allow(clippy::too_many_arguments)]
fn depthwise_convolution(
    cx: &Ctx,
    p: &ConvolutionParams,
    x: &DeviceTensor,
    w: &DeviceTensor,
    bias: Option<&DeviceTensor>,
    tail: ConvTail,
    out_shape: &[usize],
    rows: bool,
) -> KResult<(DeviceTensor, usize)> {
    let suffix = float_suffix(x.dtype).map_err(KernelError::from)?;
    let channels = x.shape[1];
    if bias.is_some_and(|b| b.dtype != x.dtype || b.len() != channels) || w.dtype != x.dtype || out_shape.len() != 4 || out_shape[1] != channels {
        return Err(invalid!("a depthwise convolution of {:?} by {:?} into {out_shape:?}", x.shape, w.shape));
    }
    let element_bytes = storage_size(x.dtype).map_err(KernelError::from)?;
    let row_kernel = depthwise_rows(p, &x.shape, &w.shape, 16 / element_bytes).filter(|_| rows);
    let x = layout::to_channels_last(cx, x)?;
    // [C, 1, kh, kw] → [1, kh, kw, C]: each tap's channels contiguous; in f32 for the row
    // kernel, which would otherwise convert every tap in every thread.
    let w = match row_kernel {
        Some(_) => cx.gpu.converted_weights(w, "depthwise_rsc_f32", |t| pointwise::cast(cx, &movement::transpose(cx, t, &[1, 2, 3, 0])?, kiln::DataType::F32))?,
        None => cx.gpu.converted_weights(w, "depthwise_rsc", |t| movement::transpose(cx, t, &[1, 2, 3, 0]))?,
    };
    let z = tail.residual.map(|z| layout::to_channels_last(cx, z)).transpose()?;
    if z.as_ref().is_some_and(|z| z.dtype != x.dtype || z.shape != out_shape) {
        return Err(invalid!("a residual of {:?} for a depthwise output of {out_shape:?}", tail.residual.map(|z| z.shape.clone())));
    }
    let out = empty_in_layout(cx, x.dtype, out_shape, true)?;
    let vector = 16 / element_bytes;
    let pixels = out_shape[0] * out_shape[2] * out_shape[3];
    // Threads: one per run of channels and output pixel, or per ROW_PIXELS pixels of a row.
    let (name, threads) = match row_kernel {
        Some((k, s)) => (format!("depthwise_nhwc_k{k}s{s}"), out_shape[0] * out_shape[2] * out_shape[3].div_ceil(ROW_PIXELS) * (channels / vector)),
        None if channels % vector == 0 => ("depthwise_nhwc".into(), pixels * (channels / vector)),
        None => ("depthwise_nhwc1".into(), pixels * channels),
    };
    let win = depthwise_window(p, &x.shape, (w.shape[1], w.shape[2]), out_shape, bias.is_some())?;
    let code = |a: Option<ActivationKind>| a.map_or((-1, 0.0, 0.0), pointwise::activation_code);
    let ((c1, a1, b1), (c2, a2, b2)) = (code(tail.before), code(tail.after));
    let args = [
        Arg::Window(win),
        Arg::I32(c1),
        Arg::F32(a1),
        Arg::F32(b1),
        Arg::I32(c2),
        Arg::F32(a2),
        Arg::F32(b2),
        cx.arg(&x),
        cx.arg(&w),
        bias.map_or(Arg::NULL, |b| cx.arg(b)),
        z.as_ref().map_or(Arg::NULL, |z| cx.arg(z)),
        cx.arg(&out),
    ];
    cx.launch_elements(Source::Spatial.kernel(format!("{name}_{suffix}")), threads, &args)?;
    let consumed = usize::from(tail.before.is_some()) + usize::from(tail.residual.is_some()) + usize::from(tail.after.is_some());
    Ok((out, consumed))
}

/// The depthwise kernels' window: x `[n, c, h, w]`, the filter's `(kh, kw)`, out
/// `[n, c, oh, ow]`, and whether a bias is added.
pub(super) fn depthwise_window(p: &ConvolutionParams, x: &[usize], (kh, kw): (usize, usize), out: &[usize], bias: bool) -> KResult<Window> {
    let (sh, sw) = two_d(&p.strides, 1)?;
    let (dh, dw) = two_d(&p.dilations, 1)?;
    let (ph, pw) = two_d(&p.pre_padding, 0)?;
    if x.len() != 4 || out.len() != 4 {
        return Err(invalid!("a depthwise convolution of {x:?} into {out:?}"));
    }
    let d = |v: usize| v as i64;
    Ok(Window {
        n: d(x[0]),
        c: d(x[1]),
        h: d(x[2]),
        w: d(x[3]),
        oc: d(x[1]),
        oh: d(out[2]),
        ow: d(out[3]),
        kh: d(kh),
        kw: d(kw),
        sh: d(sh),
        sw: d(sw),
        dh: d(dh),
        dw: d(dw),
        ph: d(ph),
        pw: d(pw),
        groups: d(x[1]),
        kind: i32::from(bias),
        ..Window::default()
    })
}

/// kiln's own direct kernel (1-D and 2-D): the correctness baseline and the fallback.
fn direct_convolution(cx: &Ctx, p: &ConvolutionParams, x: &DeviceTensor, w: &DeviceTensor, bias: Option<&DeviceTensor>, out_shape: &[usize]) -> KResult<DeviceTensor> {
    // f64 too: the exact integer convolutions of ONNX's ConvInteger / QLinearConv expansions.
    let suffix = super::float64_suffix(x.dtype, "convolution")?;
    let r = x.shape.len();
    if r < 3 || w.shape.len() != r || out_shape.len() != r {
        return Err(invalid!("convolution of {:?} by {:?}", x.shape, w.shape));
    }
    let (h, wd) = two_d(&x.shape[2..], 1)?;
    let (kh, kw) = two_d(&w.shape[2..], 1)?;
    let (oh, ow) = two_d(&out_shape[2..], 1)?;
    let (sh, sw) = two_d(&p.strides, 1)?;
    let (dh, dw) = two_d(&p.dilations, 1)?;
    let (ph, pw) = two_d(&p.pre_padding, 0)?;
    let win = Window {
        n: x.shape[0] as i64,
        c: x.shape[1] as i64,
        h: h as i64,
        w: wd as i64,
        oc: out_shape[1] as i64,
        oh: oh as i64,
        ow: ow as i64,
        kh: kh as i64,
        kw: kw as i64,
        sh: sh as i64,
        sw: sw as i64,
        dh: dh as i64,
        dw: dw as i64,
        ph: ph as i64,
        pw: pw as i64,
        groups: p.groups.max(1) as i64,
        kind: bias.is_some() as i32,
        ..Window::default()
    };
    let out = cx.gpu.empty(x.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let bias_arg = bias.map_or(Arg::NULL, |b| cx.arg(b));
    cx.launch_elements(Source::Spatial.kernel(format!("conv2d_{suffix}")), out.len(), &[Arg::Window(win), cx.arg(x), cx.arg(w), bias_arg, cx.arg(&out)])?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::merged_group_counts;
    use kiln::ConvolutionParams;

    fn grouped(groups: usize) -> ConvolutionParams {
        ConvolutionParams { groups, strides: vec![1, 1], dilations: vec![1, 1], pre_padding: vec![1, 1], post_padding: vec![1, 1] }
    }

    #[test]
    fn grouped_convolutions_offer_each_merge_of_at_most_32x_the_work() {
        // RegNetY's 14 groups of 24: merged to 7, 2 or 1 group(s).
        assert_eq!(merged_group_counts(&grouped(14), &[128, 336, 14, 14], &[336, 24, 3, 3]), [1, 2, 7]);
        // 64 groups: one dense group would be 64x the arithmetic.
        assert_eq!(merged_group_counts(&grouped(64), &[8, 256, 7, 7], &[256, 4, 3, 3]), [2, 4, 8, 16, 32]);
        assert!(merged_group_counts(&grouped(32), &[8, 32, 7, 7], &[32, 1, 3, 3]).is_empty(), "depthwise has kernels of its own");
        assert!(merged_group_counts(&grouped(1), &[8, 32, 7, 7], &[32, 32, 3, 3]).is_empty(), "one group");
        assert!(merged_group_counts(&grouped(4), &[8, 32, 7], &[32, 8, 3]).is_empty(), "1-D");
    }
}
