//! I/O formats (seed §6.6): the format/type table, the physical-shape convention, boundary
//! reformats with zero padding, and DIRECT_IO.

use crate::common::{build, config, layer_types, run};
use half::f16;
use kiln::ir::format::reformat;
use kiln::*;
use kiln_cpu::CpuBackend;

#[test]
fn the_format_table_is_the_seeds() {
    use DataType::{F16, F32, I32, I8};
    use TensorFormat as F;
    // (format, [INT32, FLOAT, HALF, INT8]) with "only for GPU" counted as supported.
    let table = [
        (F::Linear, [true, true, true, true]),
        (F::Chw2, [false, false, true, false]),
        (F::Chw4, [false, false, true, true]),
        (F::Hwc8, [false, false, true, false]),
        (F::Chw16, [false, false, true, false]),
        (F::Chw32, [false, true, true, true]),
        (F::Dhwc8, [false, false, true, false]),
        (F::Cdhw32, [false, false, true, true]),
        (F::Hwc, [false, true, false, false]),
        (F::Hwc16, [false, false, true, false]),
    ];
    assert_eq!(table.len(), TensorFormat::ALL.len());
    for (format, row) in table {
        for (dtype, allowed) in [I32, F32, F16, I8].into_iter().zip(row) {
            assert_eq!(format.allows(dtype), allowed, "{} / {dtype}", format.name());
        }
        assert_eq!(format.allows(DataType::BF16), format == F::Linear, "types outside the table are LINEAR only");
    }
    assert_eq!(TensorFormat::from_name("dhw8"), Some(F::Dhwc8));
    assert_eq!(F::Hwc16.bit(), 1 << 11, "mask bits are TensorRT's enum values");
}

fn one_input_network(dtype: DataType, dims: [usize; 4], formats: &[TensorFormat]) -> (Network, TensorId) {
    let mut net = Network::new("io");
    let x = net.add_input("x", dtype, dims).unwrap();
    let relu = net.add_activation(x, ActivationKind::Relu).unwrap();
    net.set_tensor_name(net.output(relu, 0), "z").unwrap();
    net.mark_output(net.output(relu, 0)).unwrap();
    net.set_allowed_formats(x, FormatMask::of(formats)).unwrap();
    (net, x)
}

#[test]
fn formats_that_do_not_take_the_type_are_refused() {
    for (dtype, format) in [(DataType::F32, TensorFormat::Chw4), (DataType::F16, TensorFormat::Hwc), (DataType::I32, TensorFormat::Chw32)] {
        let (net, _) = one_input_network(dtype, [1, 3, 2, 2], &[format]);
        let err = Builder::new(&CpuBackend::new()).build(&net, &config(&[])).unwrap_err();
        assert!(matches!(&err, BuildError::IoFormat(IoFormatError::NoFormatForType { tensor, .. }) if tensor == "x"), "{err:?}");
        assert!(err.to_string().contains(&format!("{} takes", format.name())), "{err}");
    }
    // A mask with one usable format builds with it.
    let (net, _) = one_input_network(DataType::F32, [1, 3, 2, 2], &[TensorFormat::Chw4, TensorFormat::Chw32]);
    let engine = build(&net, &[]).engine;
    assert_eq!(engine.network().tensor(engine.network().inputs()[0]).format, TensorFormat::Chw32);
}

#[test]
fn allowed_formats_apply_to_io_tensors_only_and_name_real_formats() {
    let (mut net, x) = one_input_network(DataType::F16, [1, 3, 2, 2], &[TensorFormat::Linear]);
    let relu_out = net.find_tensor("z").unwrap();
    net.set_allowed_formats(relu_out, FormatMask::of(&[TensorFormat::Hwc8])).unwrap();
    assert!(net.set_allowed_formats(x, FormatMask(0)).is_err(), "an empty mask");
    assert!(net.set_allowed_formats(x, FormatMask(1 << 9)).is_err(), "DLA_LINEAR is not a kiln format");
    let mut other = net.clone();
    let id = other.add_identity(relu_out).unwrap();
    assert!(other.set_allowed_formats(other.output(id, 0), FormatMask::default()).is_err());
}

#[test]
fn reformat_round_trips_and_pads_channels_with_zeros() {
    let logical = HostTensor::new(vec![2, 3, 2, 3], TensorData::F16((0..36).map(|i| f16::from_f32(i as f32 + 1.0)).collect())).unwrap();
    for format in TensorFormat::ALL.into_iter().filter(|f| f.spatial_rank() == 2) {
        let physical = reformat(&logical, TensorFormat::Linear, format, 3).unwrap();
        let expected = format.physical_shape(&Shape::fixed(&[2, 3, 2, 3])).unwrap().as_fixed().unwrap();
        assert_eq!(physical.shape(), expected.as_slice(), "{}", format.name());
        let padding = physical.len() - logical.len();
        let zeros = physical.to_f64_vec().iter().filter(|&&v| v == 0.0).count();
        assert_eq!(zeros, padding, "{}: every padded channel is zero and no data is", format.name());
        assert_eq!(reformat(&physical, format, TensorFormat::Linear, 3).unwrap(), logical, "{}", format.name());
    }
    // CHW4 of N×3×H×W is N×1×H×W×4 with channel c at the innermost index c.
    let chw4 = reformat(&logical, TensorFormat::Linear, TensorFormat::Chw4, 3).unwrap();
    assert_eq!(chw4.shape(), &[2, 1, 2, 3, 4]);
    let v = chw4.to_f64_vec();
    // Element (n=0, c=1, h=0, w=2) is logical index 1*6 + 2 = 8 → value 9.
    assert_eq!(v[(2) * 4 + 1], 9.0);
    // 3-D formats: [N, C, D, H, W].
    let volume = HostTensor::new(vec![1, 3, 2, 2, 2], TensorData::I8((0..24).map(|i| i as i8 + 1).collect())).unwrap();
    let cdhw32 = reformat(&volume, TensorFormat::Linear, TensorFormat::Cdhw32, 3).unwrap();
    assert_eq!(cdhw32.shape(), &[1, 1, 2, 2, 2, 32]);
    assert_eq!(reformat(&cdhw32, TensorFormat::Cdhw32, TensorFormat::Linear, 3).unwrap(), volume);
    let bad = HostTensor::zeros(DataType::F16, vec![1, 2, 2, 2, 4]);
    assert!(reformat(&bad, TensorFormat::Chw4, TensorFormat::Linear, 3).is_err(), "2 channel blocks cannot hold 3 channels");
}

/// Logical `[1, 3, 2, 2]` values with some negatives.
fn logical(c: usize, h: usize, w: usize) -> f32 {
    (c * 4 + h * 2 + w) as f32 - 5.0
}

#[test]
fn vectorized_inputs_and_outputs_are_reformatted_at_the_boundary() {
    let (mut net, _) = one_input_network(DataType::F16, [1, 3, 2, 2], &[TensorFormat::Chw4]);
    let z = net.find_tensor("z").unwrap();
    net.set_allowed_formats(z, FormatMask::of(&[TensorFormat::Hwc8])).unwrap();
    let engine = build(&net, &[]).engine;
    assert_eq!(layer_types(&engine), vec!["Reformat", "Activation", "Reformat"]);
    let n = engine.network();
    let x_desc = n.tensor(n.inputs()[0]);
    assert_eq!((x_desc.name.as_str(), x_desc.format, x_desc.shape.text()), ("x", TensorFormat::Chw4, "[1,1,2,2,4]".to_string()));
    let z_desc = n.tensor(n.outputs()[0]);
    assert_eq!((z_desc.name.as_str(), z_desc.format, z_desc.shape.text()), ("z", TensorFormat::Hwc8, "[1,2,2,8]".to_string()));
    // CHW4 input, built by hand: [n][c/4][h][w][c%4], channel 3 is padding (zero).
    let mut physical = vec![f16::ZERO; 16];
    for c in 0..3 {
        for h in 0..2 {
            for w in 0..2 {
                physical[(h * 2 + w) * 4 + c] = f16::from_f32(logical(c, h, w));
            }
        }
    }
    let input = HostTensor::new(vec![1, 1, 2, 2, 4], TensorData::F16(physical)).unwrap();
    let got = run(engine, &[("x", input)]);
    let z = &got["z"];
    assert_eq!(z.shape(), &[1, 2, 2, 8]);
    let v = z.to_f64_vec();
    for h in 0..2 {
        for w in 0..2 {
            for c in 0..8 {
                let expected = if c < 3 { logical(c, h, w).max(0.0) as f64 } else { 0.0 };
                assert_eq!(v[(h * 2 + w) * 8 + c], expected, "h{h} w{w} c{c}");
            }
        }
    }
}

#[test]
fn the_logical_shape_is_refused_for_a_vectorized_input() {
    let (net, _) = one_input_network(DataType::F16, [1, 3, 2, 2], &[TensorFormat::Chw4]);
    let context = ExecutionContext::new(build(&net, &[]).engine, &CpuBackend::new()).unwrap();
    let logical = HostTensor::zeros(DataType::F16, vec![1, 3, 2, 2]);
    let err = context.run(&[("x".to_string(), logical)].into_iter().collect()).unwrap_err();
    assert!(matches!(err, RunError::InputShape { .. }), "{err:?}");
}

#[test]
fn direct_io_fails_when_the_backend_needs_a_reformat() {
    let (net, _) = one_input_network(DataType::F16, [1, 3, 2, 2], &[TensorFormat::Chw4, TensorFormat::Chw16]);
    let err = Builder::new(&CpuBackend::new()).build(&net, &config(&[BuilderFlag::DirectIo])).unwrap_err();
    assert!(matches!(&err, BuildError::IoFormat(IoFormatError::DirectIo { tensor, .. }) if tensor == "x"), "{err:?}");
    assert!(err.to_string().contains("CHW4|CHW16") && err.to_string().contains("`cpu`"), "{err}");
    // LINEAR among the allowed formats: DIRECT_IO picks it, nothing is inserted.
    let (net, _) = one_input_network(DataType::F16, [1, 3, 2, 2], &[TensorFormat::Chw4, TensorFormat::Linear]);
    let engine = build(&net, &[BuilderFlag::DirectIo]).engine;
    assert_eq!(layer_types(&engine), vec!["Activation"]);
}

#[test]
fn vectorized_formats_need_a_fixed_channel_dim() {
    let mut net = Network::new("dynamic");
    let x = net.add_input("x", DataType::F16, Shape(vec![Dim::Fixed(1), Dim::Named("C".into()), Dim::Fixed(2), Dim::Fixed(2)])).unwrap();
    let relu = net.add_activation(x, ActivationKind::Relu).unwrap();
    net.mark_output(net.output(relu, 0)).unwrap();
    net.set_allowed_formats(x, FormatMask::of(&[TensorFormat::Chw4])).unwrap();
    let err = Builder::new(&CpuBackend::new()).build(&net, &config(&[])).unwrap_err();
    assert!(err.to_string().contains("channel dim") && err.to_string().contains("`x`"), "{err}");
}

#[test]
fn absurd_channel_counts_are_errors_not_overflows() {
    // Only a hostile engine file holds such a Reformat; loading must fail cleanly.
    let huge = Shape::fixed(&[1, usize::MAX, 2, 2]);
    assert!(TensorFormat::Hwc8.physical_shape(&huge).is_err());
    assert!(TensorFormat::Chw4.physical_shape(&huge).is_err(), "the padded buffer would not fit either");
    let physical = Shape::fixed(&[1, 2, 2, 8]);
    assert!(TensorFormat::Hwc8.logical_shape(&physical, usize::MAX).is_err());
    let x = HostTensor::zeros(DataType::F16, vec![1, 2, 2, 8]);
    assert!(reformat(&x, TensorFormat::Hwc8, TensorFormat::Linear, usize::MAX).is_err());
}
