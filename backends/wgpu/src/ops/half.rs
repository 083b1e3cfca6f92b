//! f16 tensors stored as halves ([`Packing::Half`]) and the f32 words every other kernel
//! reads: the two conversions of the executor's generic widen/narrow path.

use super::{count_word, KResult};
use crate::shaders::Instance;
use crate::value::{DeviceTensor, Packing, Recorder};
use kiln::DataType;

/// Whether a layer has kernels taking f16 halves natively (the executor then skips its
/// generic widen/narrow path): the pointwise, SoftMax and (RMS) normalization f16
/// instantiations, and MatrixMultiply through the f16 GEMM; the last two widen operands
/// they cannot take themselves.
pub fn native(kind: &kiln::LayerKind) -> bool {
    use kiln::LayerKind as K;
    match kind {
        K::Elementwise { op } => Instance::binary_f16(*op).is_some(),
        K::Unary { op } => Instance::unary_f16(*op).is_some(),
        K::Activation { kind } => Instance::activation_f16(kind).is_some(),
        K::MatrixMultiply { .. } | K::SoftMax { .. } | K::Normalization { .. } | K::RmsNormalization { .. } => true,
        _ => false,
    }
}

/// `t` as f32 words (exact); word tensors come back as they are.
pub fn widen(rec: &Recorder, t: &DeviceTensor) -> KResult<DeviceTensor> {
    if t.packing == Packing::Word {
        return Ok(t.clone());
    }
    let out = rec.alloc(DataType::F16, &t.shape).map_err(kiln::KernelError::from)?;
    let n = t.len();
    rec.dispatch_1d(&Instance::f16_conversion(false), &[count_word(n)?], &[&t.buffer, &out.buffer], n)
        .map_err(kiln::KernelError::from)?;
    Ok(out)
}

/// The f16 word tensor `t` as halves, rounded to nearest even (infinity beyond the f16
/// range); tensors of other types or already halves come back as they are.
pub fn to_halves(rec: &Recorder, t: DeviceTensor) -> KResult<DeviceTensor> {
    if t.dtype != DataType::F16 || t.packing == Packing::Half {
        return Ok(t);
    }
    let out = rec.alloc_halves(&t.shape).map_err(kiln::KernelError::from)?;
    let n = t.len();
    // One invocation per pair of halves (one u32 written).
    rec.dispatch_1d(&Instance::f16_conversion(true), &[count_word(n)?], &[&t.buffer, &out.buffer], n.div_ceil(2))
        .map_err(kiln::KernelError::from)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;
    use kiln::{HostTensor, TensorData};

    /// The shared adapter when it has SHADER_F16; otherwise None, saying why.
    fn f16_gpu() -> Option<&'static crate::device::Gpu> {
        let gpu = match crate::device::shared() {
            Ok(gpu) => gpu,
            Err(e) => {
                eprintln!("SKIPPED: no wgpu adapter/driver: {e}");
                return None;
            }
        };
        if !gpu.features.contains(wgpu::Features::SHADER_F16) {
            eprintln!("SKIPPED: the adapter `{}` has no SHADER_F16", gpu.info.name);
            return None;
        }
        Some(gpu)
    }

    /// Odd-length special values: NaNs of both signs, -0, subnormals, infinities, the largest f16.
    fn special() -> HostTensor {
        let bits = [0x7e01u16, 0xfe00, 0x8000, 0x0001, 0x83ff, 0x7c00, 0xfc00, 0x7bff, 0x3c00];
        HostTensor::new(vec![9], TensorData::F16(bits.into_iter().map(f16::from_bits).collect())).expect("shape")
    }

    fn bits(t: &HostTensor) -> Vec<u16> {
        match t.data() {
            TensorData::F16(v) => v.iter().map(|h| h.to_bits()).collect(),
            other => panic!("not f16: {other:?}"),
        }
    }

    #[test]
    fn an_f16_tensor_holds_two_bytes_per_element() {
        let Some(gpu) = f16_gpu() else { return };
        let x = special();
        let rec = Recorder::new(gpu).with_half_storage(true);
        let halves = rec.upload(&x).expect("upload");
        assert_eq!(halves.packing, Packing::Half);
        assert_eq!(halves.buffer.size(), 20, "9 halves: 18 bytes rounded up to 4");
        assert_eq!(bits(&rec.read(&halves).expect("read")), bits(&x), "upload and download are bit-exact");
        let words = widen(&rec, &halves).expect("widen");
        assert_eq!((words.packing, words.buffer.size()), (Packing::Word, 36));
        let back = to_halves(&rec, words.clone()).expect("narrow");
        assert_eq!(back.buffer.size(), 20);
        // Through f32 words and back: exact but for NaN payloads, which may not survive.
        for (got, want) in bits(&rec.read(&back).expect("read")).iter().zip(bits(&x)) {
            let (g, w) = (f16::from_bits(*got), f16::from_bits(want));
            assert!(got == &want || (g.is_nan() && w.is_nan() && got >> 15 == want >> 15), "{want:#06x} -> {got:#06x}");
        }
        let off = Recorder::new(gpu).with_half_storage(false).upload(&x).expect("upload");
        assert_eq!((off.packing, off.buffer.size()), (Packing::Word, 36), "switched off: f32 words");
    }

    #[test]
    fn words_are_rounded_to_nearest_even_when_stored_as_halves() {
        let Some(gpu) = f16_gpu() else { return };
        let rec = Recorder::new(gpu).with_half_storage(true);
        // Ties to even, beyond the range to infinity, f16 subnormals.
        let values = [1.0 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-11), 65520.0, -1e6, 3.0 * 2f32.powi(-25), 0.1];
        let words = rec.upload(&HostTensor::from_f32(vec![values.len()], values.to_vec()).expect("shape")).expect("up");
        let words = DeviceTensor { dtype: kiln::DataType::F16, ..words };
        let got = bits(&rec.read(&to_halves(&rec, words).expect("narrow")).expect("read"));
        let want: Vec<u16> = values.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn pointwise_kernels_read_and_write_halves_natively() {
        let Some(gpu) = f16_gpu() else { return };
        use crate::ops::pointwise;
        use kiln::{ActivationKind, ElementwiseOp, LayerKind};
        assert!(native(&LayerKind::Elementwise { op: ElementwiseOp::Sum }));
        assert!(!native(&LayerKind::Reduce { op: kiln::ReduceOp::Sum, axes: vec![0], keep_dims: true }));
        let rec = Recorder::new(gpu).with_half_storage(true);
        let a: Vec<f16> = [1.0f32, 2049.0, -3.5, 65504.0, 0.1].into_iter().map(f16::from_f32).collect();
        let b: Vec<f16> = [2f32.powi(-11), 1.0, 0.25, 65504.0, 0.2].into_iter().map(f16::from_f32).collect();
        let up = |v: &[f16]| rec.upload(&HostTensor::new(vec![v.len()], TensorData::F16(v.to_vec())).unwrap()).unwrap();
        let (da, db) = (up(&a), up(&b));
        let sum = pointwise::binary(&rec, ElementwiseOp::Sum, &da, &db, &[5], kiln::DataType::F16).expect("sum");
        assert_eq!(sum.packing, Packing::Half, "the f16 kernel stores halves");
        // Computed in f32, rounded once to nearest even (65504 + 65504 overflows to infinity).
        let want: Vec<u16> = a.iter().zip(&b).map(|(x, y)| f16::from_f32(x.to_f32() + y.to_f32()).to_bits()).collect();
        assert_eq!(bits(&rec.read(&sum).expect("read")), want);
        let less = pointwise::binary(&rec, ElementwiseOp::Less, &da, &db, &[5], kiln::DataType::Bool).expect("less");
        assert_eq!(less.packing, Packing::Word, "bool stays a word");
        let relu = pointwise::activation(&rec, &ActivationKind::Relu, &da).expect("relu");
        assert_eq!(relu.packing, Packing::Half);
        let want: Vec<u16> = a.iter().map(|x| f16::from_f32(x.to_f32().max(0.0)).to_bits()).collect();
        assert_eq!(bits(&rec.read(&relu).expect("read")), want);
        let soft = crate::ops::reduce::softmax(&rec, &relu, 0).expect("softmax");
        assert_eq!(soft.packing, Packing::Half, "the f16 softmax stores halves");
        let probs = rec.read(&soft).expect("read").to_f64_vec();
        assert!((probs.iter().sum::<f64>() - 1.0).abs() < 1e-2 && probs[3] > 0.99, "softmax of halves: {probs:?}");
    }

    #[test]
    fn matmul_of_halves_runs_the_f16_gemm() {
        let Some(gpu) = f16_gpu() else { return };
        let rec = Recorder::new(gpu).with_half_storage(true);
        let (m, k, n) = (5, 8, 12);
        let av: Vec<f16> = (0..m * k).map(|i| f16::from_f32((i % 7) as f32 * 0.25 - 0.5)).collect();
        let bv: Vec<f16> = (0..k * n).map(|i| f16::from_f32((i % 5) as f32 * 0.5 - 1.0)).collect();
        let a = rec.upload(&HostTensor::new(vec![m, k], TensorData::F16(av.clone())).unwrap()).unwrap();
        let b = rec.upload(&HostTensor::new(vec![k, n], TensorData::F16(bv.clone())).unwrap()).unwrap();
        let none = kiln::MatrixOp::None;
        let c = crate::ops::linalg::matmul(&rec, &a, none, &b, none, &[m, n], kiln::DataType::F16).expect("mm");
        assert_eq!(c.packing, Packing::Half, "the f16 GEMM writes halves");
        // Small multiples of 1/4 and 1/2: every product and sum is exact in f32 and f16.
        let want: Vec<u16> = (0..m * n)
            .map(|i| {
                let (r, col) = (i / n, i % n);
                let dot: f32 = (0..k).map(|j| av[r * k + j].to_f32() * bv[j * n + col].to_f32()).sum();
                f16::from_f32(dot).to_bits()
            })
            .collect();
        assert_eq!(bits(&rec.read(&c).expect("read")), want);
    }
}
