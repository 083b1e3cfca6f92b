//! Inference for layers over spatial dims: convolution, deconvolution, pooling, resize.

use super::{rule, InferError, InferResult, Inputs, OutFact};
use crate::ir::layer::{ConvolutionParams, DeconvolutionParams, PoolingParams, ResizeParams};
use crate::ir::shape::{Dim, Shape};
use crate::ir::tensor::HostTensor;

fn check_lens(spatial: usize, lists: &[(&str, usize)]) -> InferResult<()> {
    for (name, len) in lists {
        if *len != spatial {
            return rule(None, format!("{name} has {len} entries but the input has {spatial} spatial dims"));
        }
    }
    Ok(())
}

fn positive(name: &str, values: &[usize]) -> InferResult<()> {
    if values.contains(&0) {
        return rule(None, format!("{name} must be positive, got {values:?}"));
    }
    Ok(())
}

/// The parameter rules convolution and deconvolution share: one entry per spatial dim,
/// positive strides and dilations, at least one group.
fn check_window_params(
    spatial: usize,
    groups: usize,
    strides: &[usize],
    dilations: &[usize],
    pre_padding: &[usize],
    post_padding: &[usize],
) -> InferResult<()> {
    check_lens(spatial, &[
        ("strides", strides.len()),
        ("dilations", dilations.len()),
        ("pre_padding", pre_padding.len()),
        ("post_padding", post_padding.len()),
    ])?;
    positive("strides", strides)?;
    positive("dilations", dilations)?;
    if groups == 0 {
        return rule(None, "groups must be at least 1");
    }
    Ok(())
}

/// Output length of a sliding window; `None` when the window does not fit.
pub fn window_output(
    input: usize,
    pre: usize,
    post: usize,
    window: usize,
    stride: usize,
    dilation: usize,
    ceil_mode: bool,
) -> Option<usize> {
    let padded = input + pre + post;
    let span = dilation * (window - 1) + 1;
    if padded < span {
        return None;
    }
    let steps = padded - span;
    let mut out = if ceil_mode { steps.div_ceil(stride) } else { steps / stride } + 1;
    // A window that would start entirely inside the end padding is dropped (ONNX/PyTorch).
    if ceil_mode && (out - 1) * stride >= input + pre {
        out -= 1;
    }
    Some(out)
}

pub(super) fn convolution(ins: &Inputs, p: &ConvolutionParams) -> InferResult<Vec<OutFact>> {
    ins.arity(2, 3)?;
    let x = ins.float(0)?;
    let w = ins.req(1)?;
    ins.same_type(0, 1)?;
    let rank = x.shape.rank();
    if rank < 3 {
        return rule(Some(0), format!("convolution input must be N×C×spatial, got {}", x.shape));
    }
    if w.shape.rank() != rank {
        return rule(Some(1), format!("kernel rank {} differs from input rank {rank}", w.shape.rank()));
    }
    let spatial = rank - 2;
    check_window_params(spatial, p.groups, &p.strides, &p.dilations, &p.pre_padding, &p.post_padding)?;
    let (xd, wd) = (x.shape.dims(), w.shape.dims());
    if let (Some(c), Some(cg)) = (xd[1].fixed(), wd[1].fixed()) {
        if cg.checked_mul(p.groups) != Some(c) {
            return rule(Some(1), format!(
                "input has {c} channels but the kernel expects {cg} × {} groups = {}",
                p.groups,
                cg as u128 * p.groups as u128
            ));
        }
    }
    if let Some(k) = wd[0].fixed() {
        if k % p.groups != 0 {
            return rule(Some(1), format!("{k} output maps do not split into {} groups", p.groups));
        }
    }
    check_bias(ins, &wd[0])?;
    let mut out = vec![xd[0].clone(), wd[0].clone()];
    for i in 0..spatial {
        out.push(match (xd[2 + i].fixed(), wd[2 + i].fixed()) {
            (Some(n), Some(k)) => {
                let len = window_output(n, p.pre_padding[i], p.post_padding[i], k, p.strides[i], p.dilations[i], false)
                    .ok_or_else(|| InferError {
                        input: Some(1),
                        rule: format!("kernel {} does not fit the padded input {}", w.shape, x.shape),
                    })?;
                Dim::Fixed(len)
            }
            _ => Dim::Unknown,
        });
    }
    Ok(vec![OutFact::new(x.dtype, Shape(out))])
}

fn check_bias(ins: &Inputs, maps: &Dim) -> InferResult<()> {
    if let Some(b) = ins.get(2) {
        ins.same_type(0, 2)?;
        if b.shape.rank() != 1 || b.shape.dims()[0].differs_from(maps) {
            return rule(Some(2), format!("bias must be 1-D with {maps} elements, got {}", b.shape));
        }
    }
    Ok(())
}

pub(super) fn deconvolution(ins: &Inputs, p: &DeconvolutionParams) -> InferResult<Vec<OutFact>> {
    ins.arity(2, 3)?;
    let x = ins.float(0)?;
    let w = ins.req(1)?;
    ins.same_type(0, 1)?;
    let rank = x.shape.rank();
    if rank < 3 || w.shape.rank() != rank {
        return rule(Some(1), format!("deconvolution needs N×C×spatial input and a kernel of equal rank, got {} and {}", x.shape, w.shape));
    }
    let spatial = rank - 2;
    check_window_params(spatial, p.groups, &p.strides, &p.dilations, &p.pre_padding, &p.post_padding)?;
    check_lens(spatial, &[("output_padding", p.output_padding.len())])?;
    let (xd, wd) = (x.shape.dims(), w.shape.dims());
    if xd[1].differs_from(&wd[0]) {
        return rule(Some(1), format!("input has {} channels but the kernel has {}", xd[1], wd[0]));
    }
    if let Some(c) = xd[1].fixed() {
        if c % p.groups != 0 {
            return rule(Some(0), format!("{c} input channels do not split into {} groups", p.groups));
        }
    }
    let maps = match wd[1].fixed().map(|k| k.checked_mul(p.groups)) {
        Some(Some(maps)) => Dim::Fixed(maps),
        Some(None) => return rule(Some(1), format!("{} × {} groups output maps overflow", wd[1], p.groups)),
        None => Dim::Unknown,
    };
    check_bias(ins, &maps)?;
    let mut out = vec![xd[0].clone(), maps];
    for i in 0..spatial {
        out.push(match (xd[2 + i].fixed(), wd[2 + i].fixed()) {
            (Some(n), Some(k)) => {
                let full = n
                    .saturating_sub(1)
                    .checked_mul(p.strides[i])
                    .zip(p.dilations[i].checked_mul(k.saturating_sub(1)))
                    .and_then(|(a, b)| a.checked_add(b)?.checked_add(p.output_padding[i])?.checked_add(1));
                let crop = p.pre_padding[i].checked_add(p.post_padding[i]);
                let (Some(full), Some(crop)) = (full, crop) else {
                    return rule(None, format!("the output length of spatial dim {i} overflows"));
                };
                if n == 0 {
                    Dim::Fixed(0)
                } else if crop > full {
                    return rule(None, format!("padding {crop} exceeds the output length {full}"));
                } else {
                    Dim::Fixed(full - crop)
                }
            }
            _ => Dim::Unknown,
        });
    }
    Ok(vec![OutFact::new(x.dtype, Shape(out))])
}

pub(super) fn pooling(ins: &Inputs, p: &PoolingParams) -> InferResult<Vec<OutFact>> {
    ins.arity(1, 1)?;
    let x = ins.req(0)?;
    if !(x.dtype.is_float() || x.dtype.is_integer()) {
        return rule(Some(0), format!("pooling is not defined on {}", x.dtype));
    }
    let rank = x.shape.rank();
    if rank < 3 {
        return rule(Some(0), format!("pooling input must be N×C×spatial, got {}", x.shape));
    }
    let spatial = rank - 2;
    check_lens(spatial, &[
        ("window", p.window.len()),
        ("strides", p.strides.len()),
        ("dilations", p.dilations.len()),
        ("pre_padding", p.pre_padding.len()),
        ("post_padding", p.post_padding.len()),
    ])?;
    positive("window", &p.window)?;
    positive("strides", &p.strides)?;
    positive("dilations", &p.dilations)?;
    let xd = x.shape.dims();
    let mut out = vec![xd[0].clone(), xd[1].clone()];
    for i in 0..spatial {
        out.push(match xd[2 + i].fixed() {
            Some(n) => Dim::Fixed(
                window_output(n, p.pre_padding[i], p.post_padding[i], p.window[i], p.strides[i], p.dilations[i], p.ceil_mode)
                    .ok_or_else(|| InferError {
                        input: Some(0),
                        rule: format!("window {:?} does not fit the padded input {}", p.window, x.shape),
                    })?,
            ),
            None => Dim::Unknown,
        });
    }
    Ok(vec![OutFact::new(x.dtype, Shape(out))])
}

pub(super) fn resize(ins: &Inputs, p: &ResizeParams) -> InferResult<Vec<OutFact>> {
    ins.arity(1, 4)?;
    let x = ins.req(0)?;
    let rank = x.shape.rank();
    let axes: Vec<usize> = match &p.axes {
        Some(a) => {
            for &ax in a {
                super::check_axis(ax, rank, Some(0))?;
            }
            a.clone()
        }
        None => (0..rank).collect(),
    };
    let scales = ins.get(2).filter(|f| f.shape.volume() != Some(0));
    let sizes = ins.get(3).filter(|f| f.shape.volume() != Some(0));
    let mut out: Vec<Dim> = x.shape.dims().to_vec();
    match (scales, sizes) {
        (Some(_), Some(_)) => return rule(Some(3), "give either scales or sizes, not both"),
        (None, None) => return rule(None, "resize needs scales or sizes"),
        (Some(s), None) => {
            if !s.dtype.is_float() || s.shape.rank() != 1 {
                return rule(Some(2), format!("scales must be a 1-D float tensor, got {} {}", s.dtype, s.shape));
            }
            let values = s.value.map(HostTensor::to_f64_vec);
            if let Some(v) = &values {
                if v.len() != axes.len() {
                    return rule(Some(2), format!("{} scales for {} axes", v.len(), axes.len()));
                }
                if v.iter().any(|&s| s <= 0.0 || !s.is_finite()) {
                    return rule(Some(2), format!("scales must be positive, got {v:?}"));
                }
            }
            for (j, &ax) in axes.iter().enumerate() {
                out[ax] = match (&values, x.shape.dims()[ax].fixed()) {
                    (Some(v), Some(n)) => Dim::Fixed((n as f64 * v[j]).floor() as usize),
                    _ => Dim::Unknown,
                };
            }
        }
        (None, Some(s)) => {
            let (_, values) = ins.index_list(3)?;
            if let Some(v) = &values {
                if v.len() != axes.len() {
                    return rule(Some(3), format!("{} sizes for {} axes", v.len(), axes.len()));
                }
                if v.iter().any(|&d| d < 0) {
                    return rule(Some(3), format!("sizes must not be negative, got {v:?}"));
                }
            }
            let _ = s;
            for (j, &ax) in axes.iter().enumerate() {
                out[ax] = values.as_ref().map_or(Dim::Unknown, |v| Dim::Fixed(v[j] as usize));
            }
        }
    }
    Ok(vec![OutFact::new(x.dtype, Shape(out))])
}
