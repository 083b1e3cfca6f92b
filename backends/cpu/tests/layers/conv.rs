//! Convolution and Deconvolution: hand-computed cases and randomized cross-checks of the
//! im2col/col2im + GEMM kernels against direct loops.

use crate::common::*;
use kiln::{ConvolutionParams, DataType, DeconvolutionParams, HostTensor, LayerKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn conv_params(n: usize) -> ConvolutionParams {
    ConvolutionParams {
        groups: 1,
        strides: vec![1; n],
        dilations: vec![1; n],
        pre_padding: vec![0; n],
        post_padding: vec![0; n],
    }
}

fn deconv_params(n: usize) -> DeconvolutionParams {
    DeconvolutionParams {
        groups: 1,
        strides: vec![1; n],
        dilations: vec![1; n],
        pre_padding: vec![0; n],
        post_padding: vec![0; n],
        output_padding: vec![0; n],
    }
}

fn conv(p: ConvolutionParams, x: HostTensor, w: HostTensor, b: Option<HostTensor>) -> HostTensor {
    run1(LayerKind::Convolution(p), vec![In::Run(x), In::Const(w), b.map_or(In::Absent, In::Const)])
}

fn deconv(p: DeconvolutionParams, x: HostTensor, w: HostTensor, b: Option<HostTensor>) -> HostTensor {
    run1(LayerKind::Deconvolution(p), vec![In::Run(x), In::Const(w), b.map_or(In::Absent, In::Const)])
}

fn nine() -> Vec<f32> {
    (1..=9).map(|v| v as f32).collect()
}

#[test]
fn convolution_2d_with_bias() {
    let y =
        conv(conv_params(2), f32s(&[1, 1, 3, 3], &nine()), f32s(&[1, 1, 2, 2], &[1.0; 4]), Some(f32s(&[1], &[1.0])));
    assert_close(&y, DataType::F32, &[1, 1, 2, 2], &[13.0, 17.0, 25.0, 29.0], 0.0);
    let y =
        conv(conv_params(2), f16s(&[1, 1, 3, 3], &nine()), f16s(&[1, 1, 2, 2], &[1.0; 4]), Some(f16s(&[1], &[1.0])));
    assert_close(&y, DataType::F16, &[1, 1, 2, 2], &[13.0, 17.0, 25.0, 29.0], 0.0);
}

#[test]
fn convolution_padding_strides_and_dilations() {
    let p =
        ConvolutionParams { strides: vec![2, 2], pre_padding: vec![1, 1], post_padding: vec![1, 1], ..conv_params(2) };
    let y = conv(p, f32s(&[1, 1, 3, 3], &nine()), f32s(&[1, 1, 3, 3], &[1.0; 9]), None);
    assert_close(&y, DataType::F32, &[1, 1, 2, 2], &[12.0, 16.0, 24.0, 28.0], 0.0);
    // Asymmetric padding: one zero in front only.
    let p = ConvolutionParams { pre_padding: vec![1], ..conv_params(1) };
    let y = conv(p, f64s(&[1, 1, 4], &[1.0, 2.0, 3.0, 4.0]), f64s(&[1, 1, 2], &[1.0, 10.0]), None);
    assert_close(&y, DataType::F64, &[1, 1, 4], &[10.0, 21.0, 32.0, 43.0], 0.0);
    let p = ConvolutionParams { dilations: vec![2], ..conv_params(1) };
    let y = conv(p, f32s(&[1, 1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]), f32s(&[1, 1, 2], &[1.0, 1.0]), None);
    assert_close(&y, DataType::F32, &[1, 1, 3], &[4.0, 6.0, 8.0], 0.0);
}

#[test]
fn convolution_groups_and_empty_batch() {
    let p = ConvolutionParams { groups: 2, ..conv_params(2) };
    let y = conv(p.clone(), bf16s(&[1, 2, 1, 2], &[1.0, 2.0, 3.0, 4.0]), bf16s(&[2, 1, 1, 1], &[2.0, 3.0]), None);
    assert_close(&y, DataType::BF16, &[1, 2, 1, 2], &[2.0, 4.0, 9.0, 12.0], 0.0);
    let y = conv(p, f32s(&[0, 2, 1, 2], &[]), f32s(&[2, 1, 1, 1], &[2.0, 3.0]), Some(f32s(&[2], &[1.0, 1.0])));
    assert_close(&y, DataType::F32, &[0, 2, 1, 2], &[], 0.0);
}

#[test]
fn deconvolution_1d_strides_crops_and_output_padding() {
    let x = || f32s(&[1, 1, 3], &[1.0, 2.0, 3.0]);
    let w = || f32s(&[1, 1, 2], &[1.0, 1.0]);
    let y = deconv(DeconvolutionParams { strides: vec![2], ..deconv_params(1) }, x(), w(), None);
    assert_close(&y, DataType::F32, &[1, 1, 6], &[1.0, 1.0, 2.0, 2.0, 3.0, 3.0], 0.0);
    let y = deconv(deconv_params(1), x(), w(), None);
    assert_close(&y, DataType::F32, &[1, 1, 4], &[1.0, 3.0, 5.0, 3.0], 0.0);
    let y = deconv(DeconvolutionParams { pre_padding: vec![1], ..deconv_params(1) }, x(), w(), None);
    assert_close(&y, DataType::F32, &[1, 1, 3], &[3.0, 5.0, 3.0], 0.0);
    let p = DeconvolutionParams { strides: vec![2], output_padding: vec![1], ..deconv_params(1) };
    let y = deconv(p, x(), w(), Some(f32s(&[1], &[0.5])));
    assert_close(&y, DataType::F32, &[1, 1, 7], &[1.5, 1.5, 2.5, 2.5, 3.5, 3.5, 0.5], 0.0);
}

#[test]
fn deconvolution_groups() {
    let p = DeconvolutionParams { groups: 2, ..deconv_params(2) };
    let y = deconv(p, f16s(&[1, 2, 1, 1], &[1.0, 2.0]), f16s(&[2, 1, 1, 1], &[3.0, 4.0]), None);
    assert_close(&y, DataType::F16, &[1, 2, 1, 1], &[3.0, 8.0], 0.0);
}

/// Calls `f` with every multi-index of `shape`.
fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    let total: usize = shape.iter().product();
    let mut idx = vec![0; shape.len()];
    for _ in 0..total {
        f(&idx);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

fn flat(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
}

/// A random case: shapes, parameters and data.
struct Case {
    x_shape: Vec<usize>,
    w_shape: Vec<usize>,
    groups: usize,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pre: Vec<usize>,
    post: Vec<usize>,
    x: Vec<f32>,
    w: Vec<f32>,
    bias: Option<Vec<f32>>,
}

fn random_values(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
}

/// Direct convolution in f64.
fn naive_conv(c: &Case, out_spatial: &[usize]) -> Vec<f64> {
    let (n, ch, maps) = (c.x_shape[0], c.x_shape[1], c.w_shape[0]);
    let (cg, kg) = (ch / c.groups, maps / c.groups);
    let (in_sp, k_sp) = (&c.x_shape[2..], &c.w_shape[2..]);
    let mut out_shape = vec![n, maps];
    out_shape.extend_from_slice(out_spatial);
    let mut y = vec![0.0f64; out_shape.iter().product()];
    for_each_index(&out_shape, |o| {
        let (b, m) = (o[0], o[1]);
        let g = m / kg;
        let mut acc = c.bias.as_ref().map_or(0.0, |bias| bias[m] as f64);
        for ci in 0..cg {
            for_each_index(k_sp, |k| {
                let mut pos = vec![b, g * cg + ci];
                for d in 0..k.len() {
                    let i = (o[2 + d] * c.strides[d] + k[d] * c.dilations[d]) as i64 - c.pre[d] as i64;
                    if i < 0 || i >= in_sp[d] as i64 {
                        return;
                    }
                    pos.push(i as usize);
                }
                let mut widx = vec![m, ci];
                widx.extend_from_slice(k);
                acc += c.x[flat(&pos, &c.x_shape)] as f64 * c.w[flat(&widx, &c.w_shape)] as f64;
            });
        }
        y[flat(o, &out_shape)] = acc;
    });
    y
}

#[test]
fn convolution_matches_direct_loops_on_random_shapes() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut checked = 0;
    while checked < 40 {
        let spatial = 1 + checked % 3;
        let groups = rng.gen_range(1..=3);
        let (cg, kg) = (rng.gen_range(1..=3), rng.gen_range(1..=3));
        let mut x_shape = vec![rng.gen_range(1..=2), cg * groups];
        let mut w_shape = vec![kg * groups, cg];
        let mut case = Case {
            x_shape: vec![],
            w_shape: vec![],
            groups,
            strides: vec![],
            dilations: vec![],
            pre: vec![],
            post: vec![],
            x: vec![],
            w: vec![],
            bias: None,
        };
        let mut out_spatial = vec![];
        let mut fits = true;
        // Every fifth case is a 1×1 unit-stride unpadded kernel: the path without im2col.
        let pointwise = checked % 5 == 4;
        for _ in 0..spatial {
            let (n, k) = (rng.gen_range(1..=(if spatial == 3 { 5 } else { 8 })), rng.gen_range(1..=3));
            let (s, d, pre, post) =
                (rng.gen_range(1..=3), rng.gen_range(1..=2), rng.gen_range(0..=2), rng.gen_range(0..=2));
            let (k, s, pre, post) = if pointwise { (1, 1, 0, 0) } else { (k, s, pre, post) };
            let span = d * (k - 1) + 1;
            if n + pre + post < span {
                fits = false;
            } else {
                out_spatial.push((n + pre + post - span) / s + 1);
            }
            x_shape.push(n);
            w_shape.push(k);
            case.strides.push(s);
            case.dilations.push(d);
            case.pre.push(pre);
            case.post.push(post);
        }
        if !fits {
            continue;
        }
        case.x = random_values(&mut rng, x_shape.iter().product());
        case.w = random_values(&mut rng, w_shape.iter().product());
        case.bias = rng.gen_bool(0.5).then(|| random_values(&mut rng, w_shape[0]));
        case.x_shape = x_shape;
        case.w_shape = w_shape;
        let expected = naive_conv(&case, &out_spatial);
        let p = ConvolutionParams {
            groups,
            strides: case.strides.clone(),
            dilations: case.dilations.clone(),
            pre_padding: case.pre.clone(),
            post_padding: case.post.clone(),
        };
        let y = conv(
            p,
            f32s(&case.x_shape, &case.x),
            f32s(&case.w_shape, &case.w),
            case.bias.as_ref().map(|b| f32s(&[b.len()], b)),
        );
        let mut out_shape = vec![case.x_shape[0], case.w_shape[0]];
        out_shape.extend_from_slice(&out_spatial);
        assert_close(&y, DataType::F32, &out_shape, &expected, 1e-5);
        checked += 1;
    }
}

/// Direct transposed convolution in f64: every input element scatters through the kernel.
fn naive_deconv(c: &Case, out_spatial: &[usize]) -> Vec<f64> {
    let (n, ch, kg) = (c.x_shape[0], c.x_shape[1], c.w_shape[1]);
    let (cg, maps) = (ch / c.groups, kg * c.groups);
    let k_sp = &c.w_shape[2..];
    let mut out_shape = vec![n, maps];
    out_shape.extend_from_slice(out_spatial);
    let mut y = vec![0.0f64; out_shape.iter().product()];
    for_each_index(&c.x_shape, |i| {
        let (b, ci) = (i[0], i[1]);
        let g = ci / cg;
        for m in 0..kg {
            for_each_index(k_sp, |k| {
                let mut pos = vec![b, g * kg + m];
                for d in 0..k.len() {
                    let o = (i[2 + d] * c.strides[d] + k[d] * c.dilations[d]) as i64 - c.pre[d] as i64;
                    if o < 0 || o >= out_spatial[d] as i64 {
                        return;
                    }
                    pos.push(o as usize);
                }
                let mut widx = vec![ci, m];
                widx.extend_from_slice(k);
                y[flat(&pos, &out_shape)] += c.x[flat(i, &c.x_shape)] as f64 * c.w[flat(&widx, &c.w_shape)] as f64;
            });
        }
    });
    if let Some(bias) = &c.bias {
        for (j, v) in y.iter_mut().enumerate() {
            *v += bias[(j / out_spatial.iter().product::<usize>()) % maps] as f64;
        }
    }
    y
}

#[test]
fn deconvolution_matches_direct_loops_on_random_shapes() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for case_index in 0..30 {
        let spatial = 1 + case_index % 3;
        let groups = rng.gen_range(1..=3);
        let (cg, kg) = (rng.gen_range(1..=3), rng.gen_range(1..=3));
        let mut case = Case {
            x_shape: vec![rng.gen_range(1..=2), cg * groups],
            w_shape: vec![cg * groups, kg],
            groups,
            strides: vec![],
            dilations: vec![],
            pre: vec![],
            post: vec![],
            x: vec![],
            w: vec![],
            bias: None,
        };
        let mut out_padding = vec![];
        let mut out_spatial = vec![];
        for _ in 0..spatial {
            let (n, k) = (rng.gen_range(1..=4), rng.gen_range(1..=3));
            let (s, d) = (rng.gen_range(1..=3), rng.gen_range(1..=2));
            let op = rng.gen_range(0..s);
            let full = (n - 1) * s + d * (k - 1) + 1 + op;
            let pre = rng.gen_range(0..=full.min(2));
            let post = rng.gen_range(0..=(full - pre).min(2));
            case.x_shape.push(n);
            case.w_shape.push(k);
            case.strides.push(s);
            case.dilations.push(d);
            case.pre.push(pre);
            case.post.push(post);
            out_padding.push(op);
            out_spatial.push(full - pre - post);
        }
        case.x = random_values(&mut rng, case.x_shape.iter().product());
        case.w = random_values(&mut rng, case.w_shape.iter().product());
        case.bias = rng.gen_bool(0.5).then(|| random_values(&mut rng, kg * groups));
        let expected = naive_deconv(&case, &out_spatial);
        let p = DeconvolutionParams {
            groups,
            strides: case.strides.clone(),
            dilations: case.dilations.clone(),
            pre_padding: case.pre.clone(),
            post_padding: case.post.clone(),
            output_padding: out_padding,
        };
        let x64: Vec<f64> = case.x.iter().map(|&v| v as f64).collect();
        let w64: Vec<f64> = case.w.iter().map(|&v| v as f64).collect();
        let b64 = case.bias.as_ref().map(|b| f64s(&[b.len()], &b.iter().map(|&v| v as f64).collect::<Vec<_>>()));
        let y = deconv(p, f64s(&case.x_shape, &x64), f64s(&case.w_shape, &w64), b64);
        let mut out_shape = vec![case.x_shape[0], kg * groups];
        out_shape.extend_from_slice(&out_spatial);
        assert_close(&y, DataType::F64, &out_shape, &expected, 1e-12);
    }
}

#[test]
fn deconvolution_channels_must_split_into_groups() {
    let p = DeconvolutionParams { groups: 2, ..deconv_params(1) };
    let refused = try_run(
        LayerKind::Deconvolution(p),
        vec![In::Run(f32s(&[1, 3, 2], &[0.0; 6])), In::Const(f32s(&[3, 1, 1], &[1.0; 3])), In::Absent],
    );
    assert!(matches!(refused, Err(Failure::Network(_))), "{refused:?}");
}
