//! One-layer networks of Q/DQ fusion's integer layer (kiln::QuantizedParams) for the GPU
//! backends' tests against the cpu oracle (included by path from kiln-cuda's and kiln-wgpu's
//! tests). Per-channel weight scales near 1/2^k put many results at a rounding tie.

use kiln::{ConvolutionParams, DataType, HostTensor, LayerKind, Network, QuantizedAnchor, QuantizedParams as Q, Shape, TensorData};
use rand::{Rng, SeedableRng};

/// How a test layer's operands are quantized.
#[derive(Clone, Copy, Debug)]
pub enum Operands {
    /// x uint8 with zero point 128, weights with per-channel zero points.
    Asymmetric,
    /// int8 with zero points 0 (absent for the weights): the form INT8 tensor cores take.
    Symmetric,
    /// float8 e4m3fn x and weights, no zero points (FP8 tensor cores); float outputs only.
    Float8,
}

/// float8 e4m3fn values drawn uniformly from ±`magnitude`, rounded to the type.
pub fn fp8s(shape: &[usize], magnitude: f32, seed: u64) -> HostTensor {
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let values = (0..shape.iter().product::<usize>()).map(|_| kiln::F8E4M3FN::from_f32(r.gen_range(-magnitude..magnitude), true)).collect();
    HostTensor::new(shape.to_vec(), TensorData::F8E4M3FN(values)).expect("shape")
}

/// Uniform integers in `lo..hi` stored as `dtype` (u8, i8 or i32).
pub fn ints(shape: &[usize], dtype: DataType, lo: i32, hi: i32, seed: u64) -> HostTensor {
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let values: Vec<i32> = (0..shape.iter().product::<usize>()).map(|_| r.gen_range(lo..hi)).collect();
    let data = match dtype {
        DataType::U8 => TensorData::U8(values.iter().map(|&v| v as u8).collect()),
        DataType::I8 => TensorData::I8(values.iter().map(|&v| v as i8).collect()),
        _ => TensorData::I32(values),
    };
    HostTensor::new(shape.to_vec(), data).expect("shape")
}

fn scalar(dtype: DataType, v: f64) -> HostTensor {
    let data = match dtype {
        DataType::U8 => TensorData::U8(vec![v as u8]),
        DataType::I8 => TensorData::I8(vec![v as i8]),
        _ => TensorData::F32(vec![v as f32]),
    };
    HostTensor::new(vec![], data).expect("scalar")
}

/// A convolution anchor with symmetric padding.
pub fn conv(groups: usize, strides: &[usize], pads: &[usize]) -> QuantizedAnchor {
    QuantizedAnchor::Convolution(ConvolutionParams {
        groups,
        strides: strides.to_vec(),
        dilations: vec![1; strides.len()],
        pre_padding: pads.to_vec(),
        post_padding: pads.to_vec(),
    })
}

/// One integer layer: x (a network input) by constant weights with per-channel scales (one
/// scale where `channels` is 1), an int32 or float bias, a ReLU, into `output` (a float, or
/// int8 / uint8 with its scale and zero point). Returns the network and its feed.
#[allow(clippy::too_many_arguments)]
pub fn layer(anchor: QuantizedAnchor, operands: Operands, x: &[usize], w: &[usize], channels: usize, bias: Option<DataType>, relu: bool, output: DataType) -> (Network, Vec<HostTensor>) {
    layer_with(anchor, operands, x, w, channels, bias, relu, output, Extra::default())
}

/// What a test layer has beyond [`layer`]'s: a residual, a second quantization, a join.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extra<'a> {
    /// A residual of the output's shape (a network input, fed after x): f32 or f16, or int8 /
    /// uint8 with its scale and zero point (a dequantized skip connection).
    pub residual: Option<(DataType, &'a [usize])>,
    /// A second quantization of the levels (`QuantizedParams::then`): its ReLU and its type.
    pub then: Option<(bool, DataType)>,
    /// A join at the second quantization (a network input of the output's shape, fed last):
    /// its type, shape and scale.
    pub join: Option<(DataType, &'a [usize], f32)>,
    /// A per-channel table the levels are looked up in (`QuantizedParams::lookup`): its type.
    pub lookup: Option<DataType>,
    /// The second quantization's scale (32 where None: beside levels of 16, odd levels joined
    /// with a join at its zero point then fall on ties).
    pub then_scale: Option<f32>,
}

/// Levels looked up in a `[channels, 256]` table of `to` (random entries).
pub fn lookup(to: DataType) -> Extra<'static> {
    Extra { lookup: Some(to), ..Extra::default() }
}

/// A residual of `dtype` and the output's `shape`.
pub fn residual(dtype: DataType, shape: &[usize]) -> Extra<'_> {
    Extra { residual: Some((dtype, shape)), ..Extra::default() }
}

/// A second quantization (its ReLU and type) joining an 8-bit `dtype` tensor of the output's
/// `shape` and scale `scale`.
pub fn join(relu: bool, to: DataType, dtype: DataType, shape: &[usize], scale: f32) -> Extra<'_> {
    Extra { then: Some((relu, to)), join: Some((dtype, shape, scale)), ..Extra::default() }
}

/// [`join`] into a second quantization of scale `then_scale`.
pub fn join_into(relu: bool, to: DataType, dtype: DataType, shape: &[usize], scale: f32, then_scale: f32) -> Extra<'_> {
    Extra { then_scale: Some(then_scale), ..join(relu, to, dtype, shape, scale) }
}

/// [`layer`] with what `extra` adds (a residual, a second quantization, a join).
#[allow(clippy::too_many_arguments)]
pub fn layer_with(
    anchor: QuantizedAnchor,
    operands: Operands,
    x: &[usize],
    w: &[usize],
    channels: usize,
    bias: Option<DataType>,
    relu: bool,
    output: DataType,
    extra: Extra,
) -> (Network, Vec<HostTensor>) {
    let residual = extra.residual;
    let asymmetric = matches!(operands, Operands::Asymmetric);
    let float8 = matches!(operands, Operands::Float8);
    let x_type = if asymmetric { DataType::U8 } else { DataType::I8 };
    let mut slots: Vec<Option<HostTensor>> = vec![None; Q::SLOTS];
    let feed = match operands {
        Operands::Asymmetric => ints(x, DataType::U8, 0, 256, 1),
        Operands::Symmetric => ints(x, DataType::I8, -128, 128, 1),
        Operands::Float8 => fp8s(x, 300.0, 1),
    };
    slots[Q::W] = Some(if float8 { fp8s(w, 400.0, 2) } else { ints(w, DataType::I8, -127, 128, 2) });
    slots[Q::BIAS] = match bias {
        Some(DataType::I32) => Some(ints(&[channels], DataType::I32, -3000, 3000, 3)),
        Some(_) => Some(HostTensor::from_f32(vec![channels], (0..channels).map(|k| k as f32 * 0.37 - 1.0).collect()).expect("bias")),
        None => None,
    };
    slots[Q::X_SCALE] = Some(scalar(DataType::F32, 0.1));
    slots[Q::X_ZERO] = (!float8).then(|| scalar(x_type, if asymmetric { 128.0 } else { 0.0 }));
    slots[Q::W_SCALE] = Some(HostTensor::from_f32(vec![channels], (0..channels).map(|k| [0.05, 0.025, 0.1, 0.0125][k % 4]).collect()).expect("scales"));
    if asymmetric {
        slots[Q::W_ZERO] = Some(ints(&[channels], DataType::I8, -2, 3, 4));
    }
    if output.is_8bit_integer() {
        slots[Q::Y_SCALE] = Some(scalar(DataType::F32, 16.0));
        slots[Q::Y_ZERO] = Some(scalar(output, if output == DataType::U8 { 100.0 } else { -3.0 }));
    }
    let mut feeds = vec![feed];
    if let Some((dtype, shape)) = residual {
        feeds.push(match dtype {
            DataType::I8 => ints(shape, dtype, -128, 128, 5),
            DataType::U8 => ints(shape, dtype, 0, 256, 5),
            // Multiples of 0.75 up to 38: exact in f16 as in f32 (an FP16 build's skip connection).
            _ => {
                let values = (0..shape.iter().product::<usize>()).map(|i| (i * 37 % 101) as f32 * 0.75 - 37.0);
                let data = match dtype {
                    DataType::F16 => TensorData::F16(values.map(half::f16::from_f32).collect()),
                    _ => TensorData::F32(values.collect()),
                };
                HostTensor::new(shape.to_vec(), data).expect("residual")
            }
        });
        if dtype.is_8bit_integer() {
            slots[Q::RESIDUAL_SCALE] = Some(scalar(DataType::F32, 1.5));
            slots[Q::RESIDUAL_ZERO] = Some(scalar(dtype, if dtype == DataType::U8 { 120.0 } else { -7.0 }));
        }
    }
    let residual_feed = residual.map(|_| 1);
    if let Some((dtype, shape, scale)) = extra.join {
        feeds.push(ints(shape, dtype, if dtype == DataType::U8 { 0 } else { -128 }, if dtype == DataType::U8 { 256 } else { 128 }, 6));
        slots[Q::JOIN_SCALE] = Some(scalar(DataType::F32, f64::from(scale)));
        slots[Q::JOIN_ZERO] = Some(scalar(dtype, if dtype == DataType::U8 { 90.0 } else { 5.0 }));
    }
    let join_feed = extra.join.map(|_| feeds.len() - 1);
    let then = extra.then.map(|(relu, to)| {
        // Levels of scale 16 at scale 32: every odd one at a rounding tie; a zero point off 0.
        slots[Q::THEN_SCALE] = Some(scalar(DataType::F32, f64::from(extra.then_scale.unwrap_or(32.0))));
        slots[Q::THEN_ZERO] = Some(scalar(to, if to == DataType::U8 { 30.0 } else { -9.0 }));
        kiln::Requantization { relu, to }
    });
    if let Some(to) = extra.lookup {
        let (lo, hi) = if to == DataType::U8 { (0, 256) } else { (-128, 128) };
        slots[Q::LOOKUP] = Some(ints(&[channels, Q::LOOKUP_ROW], to, lo, hi, 7));
    }
    let mut net = Network::new("integer layer");
    let mut inputs = Vec::new();
    let input = |net: &mut Network, name: &str, feed: &HostTensor| Some(net.add_input(name, feed.dtype(), Shape::fixed(feed.shape())).expect(name));
    for (i, slot) in slots.into_iter().enumerate() {
        inputs.push(match (i, slot) {
            (Q::X, _) => input(&mut net, "x", &feeds[0]),
            (Q::RESIDUAL, _) if residual_feed.is_some() => input(&mut net, "r", &feeds[1]),
            (Q::JOIN, _) if join_feed.is_some() => input(&mut net, "j", &feeds[feeds.len() - 1]),
            (_, Some(t)) => {
                let w = net.add_weights(t);
                let layer = net.add_layer(&format!("const{i}"), LayerKind::Constant { weights: w }, vec![]).expect("constant");
                Some(net.output(layer, 0))
            }
            (_, None) => None,
        });
    }
    let layer = net.add_layer("layer", LayerKind::Quantized(Q { anchor, relu, output, then, lookup: extra.lookup }), inputs).expect("integer layer");
    net.mark_output(net.output(layer, 0)).expect("output");
    (net, feeds)
}

/// onnxruntime's Q/DQ fixture (uint8 activations, as `quantize_static` writes them) built for
/// `backend`: two integer layers, and the cpu backend's integers exactly. The checkout is
/// `KILN_REPO` on the GPU machine, where this build's paths do not exist.
pub fn check_qdq_fixture(backend: &dyn kiln::Backend) {
    let repo = std::env::var_os("KILN_REPO").map_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."), std::path::PathBuf::from);
    let net = kiln_onnx::import_file(&repo.join("engine/onnx/tests/data/qdq_conv_matmul_u8s8/model.onnx")).expect("import");
    let x = HostTensor::from_f32(vec![2, 3, 6, 6], (0..216).map(|i| ((i * 37 % 101) as f32 / 101.0 - 0.5) * 1.6).collect()).expect("x");
    let feeds = std::collections::HashMap::from([("x".to_string(), x)]);
    let run = |backend: &dyn kiln::Backend| {
        let engine = kiln::Builder::new(backend).build(&net, &kiln::BuilderConfig::default()).expect("build");
        let integer = engine.network().layers().iter().filter(|l| matches!(l.kind, LayerKind::Quantized(_))).count();
        assert_eq!(integer, 2, "{}: {}", backend.name(), engine.network().dump());
        kiln::ExecutionContext::new(engine, backend).expect("prepare").run(&feeds).expect("run")
    };
    let (got, want) = (run(backend), run(&kiln_cpu::CpuBackend::new()));
    for name in ["y1", "y2"] {
        assert_eq!(got[name].data(), want[name].data(), "{name}");
    }
}

/// onnxruntime's Q/DQ attention fixture (`qdq_models/mini_attention_s8`: int8 projections, bias
/// islands after their levels, attention on levels) built for `backend` with `config`: Q, K and
/// V merge into one integer product (each column its own output scale and level table) whose
/// slices the attention reads, and the output is the cpu backend's within `tolerance` (relative
/// L2: the attention's float arithmetic may sum in another order).
pub fn check_qdq_attention_fixture(backend: &dyn kiln::Backend, config: &kiln::BuilderConfig, tolerance: f64) {
    let repo = std::env::var_os("KILN_REPO").map_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."), std::path::PathBuf::from);
    let net = kiln_onnx::import_file(&repo.join("engine/onnx/tests/qdq_models/mini_attention_s8/model.onnx")).expect("import");
    let (batch, seq, hidden) = (2, 16, 32);
    let x = HostTensor::from_f32(vec![batch, seq, hidden], (0..batch * seq * hidden).map(|i| ((i * 37 % 101) as f32 / 101.0 - 0.5) * 3.2).collect()).expect("x");
    // The last three keys are padding, as BERT's extended mask.
    let mask = HostTensor::from_f32(vec![batch, 1, 1, seq], (0..batch * seq).map(|i| if i % seq >= seq - 3 { -10000.0 } else { 0.0 }).collect()).expect("mask");
    let feeds = std::collections::HashMap::from([("x".to_string(), x), ("mask".to_string(), mask)]);
    // The batch is dynamic: a profile pins it (a device backend times its tactics at it).
    let mut config = config.clone();
    let mut profile = kiln::OptimizationProfile::new();
    profile.set_dimensions("x", &[batch, seq, hidden], &[batch, seq, hidden], &[batch, seq, hidden]);
    profile.set_dimensions("mask", &[batch, 1, 1, seq], &[batch, 1, 1, seq], &[batch, 1, 1, seq]);
    config.profiles.push(profile);
    let run = |backend: &dyn kiln::Backend| {
        let engine = kiln::Builder::new(backend).build(&net, &config).unwrap_or_else(|e| panic!("{}: build: {e}", backend.name()));
        let merged = engine.network().layers().iter().filter(|l| matches!(l.kind, LayerKind::Quantized(_)) && l.name.contains(" | ")).count();
        assert_eq!(merged, 1, "{}: Q, K and V as one product: {}", backend.name(), engine.network().dump());
        kiln::ExecutionContext::new(engine, backend).expect("prepare").run(&feeds).expect("run").remove("y").expect("y").to_f64_vec()
    };
    let (got, want) = (run(backend), run(&kiln_cpu::CpuBackend::new()));
    let num: f64 = got.iter().zip(&want).map(|(a, b)| (a - b) * (a - b)).sum();
    let den: f64 = want.iter().map(|b| b * b).sum();
    let error = (num / den).sqrt();
    assert!(error <= tolerance, "{}: relative L2 {error} against the cpu backend", backend.name());
}
