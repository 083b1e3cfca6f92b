//! Einsum of one or two operands as one kernel (`shaders/einsum.wgsl`): every output
//! element sums the products over the summed labels, so transposes, diagonals, traces,
//! inner products and batched matrix products all run without a host round trip.

use super::sort::typed_instance;
use super::{count_word, output, strides, words8, KResult};
use crate::wgsl::Storage;
use crate::shaders::Instance;
use crate::value::{DeviceTensor, Recorder};
use kiln::ir::infer::EinsumSpec;

pub fn einsum_instance(s: Storage) -> Instance {
    typed_instance("einsum", format!("einsum/{}", s.wgsl()), format!("alias A = {};\n", s.wgsl()))
}

pub fn einsum(rec: &Recorder, equation: &str, ins: &[&DeviceTensor], shape: &[usize]) -> KResult<DeviceTensor> {
    let first = *ins.first().ok_or("Einsum needs at least one operand")?;
    if ins.len() > 2 {
        return Err(kiln::invalid!("the WGSL Einsum kernel takes one or two operands, not {}", ins.len()));
    }
    let storage = match Storage::of(first.dtype) {
        Some(s @ (Storage::F32 | Storage::I32)) if first.dtype != kiln::DataType::Bool => s,
        _ => return Err(kiln::invalid!("the WGSL Einsum kernel computes floats and signed integers, not {}", first.dtype)),
    };
    let ranks: Vec<usize> = ins.iter().map(|t| t.shape.len()).collect();
    let spec = EinsumSpec::parse(equation, &ranks)?;
    // Label lengths (broadcast 1s give way) and each operand's stride per label.
    let mut sizes = vec![1usize; spec.num_labels];
    let mut label_strides = vec![vec![0usize; spec.num_labels]; 2];
    for (k, (labels, t)) in spec.operands.iter().zip(ins).enumerate() {
        for ((&l, &d), s) in labels.iter().zip(&t.shape).zip(strides(&t.shape)) {
            if d != 1 && sizes[l] != 1 && sizes[l] != d {
                return Err(kiln::invalid!("Einsum `{equation}`: a label has lengths {} and {d}", sizes[l]));
            }
            sizes[l] = sizes[l].max(d);
            if d != 1 {
                label_strides[k][l] += s;
            }
        }
    }
    let out_sizes: Vec<usize> = spec.output.iter().map(|&l| sizes[l]).collect();
    if out_sizes != shape {
        return Err(kiln::invalid!("Einsum `{equation}`: output shape {out_sizes:?} differs from {shape:?}"));
    }
    let summed: Vec<usize> = (0..spec.num_labels)
        .filter(|l| !spec.output.contains(l) && spec.operands.iter().any(|o| o.contains(l)))
        .collect();
    let pick = |labels: &[usize], k: usize| labels.iter().map(|&l| label_strides[k][l]).collect::<Vec<_>>();
    let sum_sizes: Vec<usize> = summed.iter().map(|&l| sizes[l]).collect();
    let out = output(rec, first.dtype, shape)?;
    let mut params = vec![
        count_word(out.len())?,
        ins.len() as u32,
        spec.output.len() as u32,
        summed.len() as u32,
        count_word(sum_sizes.iter().product())?,
    ];
    for v in [out_sizes, pick(&spec.output, 0), pick(&spec.output, 1), sum_sizes, pick(&summed, 0), pick(&summed, 1)] {
        params.extend(words8(&v)?);
    }
    let b = ins.get(1).unwrap_or(&first);
    rec.dispatch_1d(&einsum_instance(storage), &params, &[&first.buffer, &b.buffer, &out.buffer], out.len())
        .map_err(kiln::KernelError::from)?;
    super::pointwise::narrow(rec, out)
}

/// Every Einsum instantiation, for naga validation.
pub fn instantiations() -> Vec<Instance> {
    vec![einsum_instance(Storage::F32), einsum_instance(Storage::I32)]
}
