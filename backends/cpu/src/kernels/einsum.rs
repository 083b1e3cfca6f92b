//! Einsum (evaluated in f64 over every label combination, then converted back).

use super::{misc, tensor};
use crate::layout::strides;
use kiln::ir::infer::EinsumSpec;
use kiln::{DataType, HostTensor, TensorData};

pub fn einsum(equation: &str, inputs: &[&HostTensor], out_shape: &[usize]) -> Result<TensorData, String> {
    let first = inputs.first().ok_or("Einsum needs at least one operand")?;
    let dtype = first.dtype();
    if dtype == DataType::Bool {
        return Err("Einsum operands must be numeric, not bool".into());
    }
    let ranks: Vec<usize> = inputs.iter().map(|t| t.shape().len()).collect();
    let spec = EinsumSpec::parse(equation, &ranks)?;
    // Label lengths: the largest occurrence (inference checked that the rest agree or are
    // broadcast 1s); labels no operand uses have length 1.
    let mut sizes = vec![1usize; spec.num_labels];
    for (labels, t) in spec.operands.iter().zip(inputs) {
        for (&l, &d) in labels.iter().zip(t.shape()) {
            if d != 1 && sizes[l] != 1 && sizes[l] != d {
                return Err(format!("Einsum `{equation}`: a label has lengths {} and {d}", sizes[l]));
            }
            sizes[l] = sizes[l].max(d);
        }
    }
    let out_expected: Vec<usize> = spec.output.iter().map(|&l| sizes[l]).collect();
    if out_expected != out_shape {
        return Err(format!("Einsum `{equation}`: output shape {out_expected:?} differs from {out_shape:?}"));
    }
    // Per label, the element stride of each operand (0 along broadcast dims; repeated
    // labels — diagonals — add up) and of the output.
    let used: Vec<usize> = (0..spec.num_labels).filter(|&l| spec.operands.iter().any(|o| o.contains(&l))).collect();
    let mut operand_strides = vec![vec![0usize; spec.num_labels]; inputs.len()];
    for (k, (labels, t)) in spec.operands.iter().zip(inputs).enumerate() {
        for ((&l, &d), s) in labels.iter().zip(t.shape()).zip(strides(t.shape())) {
            if d != 1 {
                operand_strides[k][l] += s;
            }
        }
    }
    let mut out_strides = vec![0usize; spec.num_labels];
    for (&l, s) in spec.output.iter().zip(strides(out_shape)) {
        out_strides[l] = s;
    }
    let data: Vec<Vec<f64>> = inputs.iter().map(|t| t.to_f64_vec()).collect();
    let out_len: usize = out_shape.iter().product();
    let mut out = vec![0.0f64; out_len];
    let total: usize = used.iter().map(|&l| sizes[l]).product();
    let mut index = vec![0usize; used.len()];
    for _ in 0..total {
        let mut product = 1.0;
        for (k, values) in data.iter().enumerate() {
            let offset: usize = used.iter().zip(&index).map(|(&l, &i)| i * operand_strides[k][l]).sum();
            product *= values[offset];
        }
        let o: usize = used.iter().zip(&index).map(|(&l, &i)| i * out_strides[l]).sum();
        out[o] += product;
        for (pos, &l) in used.iter().enumerate().rev() {
            index[pos] += 1;
            if index[pos] < sizes[l] {
                break;
            }
            index[pos] = 0;
        }
    }
    let out = tensor(out_shape.to_vec(), TensorData::F64(out))?;
    misc::cast(&out, dtype)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(shape: Vec<usize>, v: Vec<f32>) -> HostTensor {
        HostTensor::new(shape, TensorData::F32(v)).unwrap()
    }

    #[test]
    fn matmul_diagonal_and_sum() {
        let a = f32s(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let b = f32s(vec![2, 2], vec![5.0, 6.0, 7.0, 8.0]);
        let y = einsum("ij,jk->ik", &[&a, &b], &[2, 2]).unwrap();
        assert_eq!(y, TensorData::F32(vec![19.0, 22.0, 43.0, 50.0]));
        assert_eq!(einsum("ii->i", &[&a], &[2]).unwrap(), TensorData::F32(vec![1.0, 4.0]));
        assert_eq!(einsum("ij->", &[&a], &[]).unwrap(), TensorData::F32(vec![10.0]));
        assert_eq!(einsum("ij", &[&a], &[2, 2]).unwrap(), TensorData::F32(vec![1.0, 2.0, 3.0, 4.0]));
        assert_eq!(einsum("ji", &[&a], &[2, 2]).unwrap(), TensorData::F32(vec![1.0, 3.0, 2.0, 4.0]));
        assert!(einsum("ij,jk->ik", &[&a, &b], &[2, 3]).is_err());
    }
}
