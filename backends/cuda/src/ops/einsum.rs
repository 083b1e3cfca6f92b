//! Einsum on the device (`kernels/einsum.cu`): the equation is resolved on the host with
//! kiln's own parser ([`EinsumSpec`]) into strided index spaces, and one thread per output
//! element sums the operands' product over the contracted labels in double, in kiln-cpu's order.

use kiln::{invalid, DataType, KernelError};
use crate::ops::KResult;
use super::{coalesce, contiguous_strides, Ctx};
use crate::buffer::{Arg, DeviceTensor, Layout};
use kiln::ir::infer::EinsumSpec;
use crate::sources::Source;

/// Kernel-name suffixes of `einsum_*`.
pub const SUFFIXES: [&str; 6] = ["f32", "f16", "bf16", "f64", "i32", "i64"];

/// The operand count the kernel takes (its layouts hold three stride rows).
pub const MAX_OPERANDS: usize = 3;

/// The suffix of the kernel for `dtype`, or why none runs it.
pub fn suffix(dtype: DataType) -> KResult<&'static str> {
    match dtype {
        DataType::F32 => Ok("f32"),
        DataType::F16 => Ok("f16"),
        DataType::BF16 => Ok("bf16"),
        DataType::F64 => Ok("f64"),
        DataType::I32 => Ok("i32"),
        DataType::I64 => Ok("i64"),
        other => Err(invalid!("Einsum on {other} has no CUDA kernel")),
    }
}

/// The two index spaces of `einsum.cu`: the output's dims and the contracted labels', each
/// with every operand's strides along them; `terms` products per output element.
#[derive(Debug)]
pub struct Plan {
    pub out: Layout,
    pub red: Layout,
    pub terms: usize,
}

/// A layout over `dims` (length, stride of each operand), or an error past the kernel's rank.
fn layout_of(dims: &[(usize, Vec<i64>)], what: &str) -> KResult<Layout> {
    if dims.len() > 8 {
        return Err(invalid!("Einsum with {} {what} is over the CUDA kernel's limit of 8", dims.len()));
    }
    let mut l = Layout { rank: dims.len() as i32, ..Layout::default() };
    for (d, (len, strides)) in dims.iter().enumerate() {
        l.shape[d] = *len as i64;
        for (k, &s) in strides.iter().enumerate() {
            l.stride[k][d] = s;
        }
    }
    Ok(l)
}

/// Resolves `equation` over operands of `shapes` into the kernel's index spaces, checking
/// the output shape inference gave.
pub fn plan(equation: &str, shapes: &[&[usize]], out_shape: &[usize]) -> KResult<Plan> {
    if shapes.is_empty() || shapes.len() > MAX_OPERANDS {
        return Err(invalid!("Einsum of {} operands: the CUDA kernel takes 1 to {MAX_OPERANDS}", shapes.len()));
    }
    let ranks: Vec<usize> = shapes.iter().map(|s| s.len()).collect();
    let spec = EinsumSpec::parse(equation, &ranks)?;
    // Label lengths as kiln-cpu takes them: the largest occurrence, 1s broadcast.
    let mut sizes = vec![1usize; spec.num_labels];
    for (labels, shape) in spec.operands.iter().zip(shapes) {
        for (&l, &d) in labels.iter().zip(shape.iter()) {
            if d != 1 && sizes[l] != 1 && sizes[l] != d {
                return Err(invalid!("Einsum `{equation}`: a label has lengths {} and {d}", sizes[l]));
            }
            sizes[l] = sizes[l].max(d);
        }
    }
    let expected: Vec<usize> = spec.output.iter().map(|&l| sizes[l]).collect();
    if expected != out_shape {
        return Err(invalid!("Einsum `{equation}`: output shape {expected:?} differs from {out_shape:?}"));
    }
    if (1..spec.output.len()).any(|i| spec.output[..i].contains(&spec.output[i])) {
        return Err(invalid!("Einsum `{equation}` repeats an output label"));
    }
    // Per label, each operand's element stride: 0 along broadcast dims, summed over repeats.
    let mut strides = vec![vec![0i64; shapes.len()]; spec.num_labels];
    for (k, (labels, shape)) in spec.operands.iter().zip(shapes).enumerate() {
        for ((&l, &d), s) in labels.iter().zip(shape.iter()).zip(contiguous_strides(shape)) {
            if d != 1 {
                strides[l][k] += s;
            }
        }
    }
    let out_dims: Vec<(usize, Vec<i64>)> = spec.output.iter().map(|&l| (sizes[l], strides[l].clone())).collect();
    // Contracted: labels some operand uses and the output does not, in label order.
    let contracted: Vec<(usize, Vec<i64>)> = (0..spec.num_labels)
        .filter(|l| !spec.output.contains(l) && spec.operands.iter().any(|o| o.contains(l)))
        .map(|l| (sizes[l], strides[l].clone()))
        .collect();
    let terms = contracted.iter().map(|(n, _)| n).product();
    // Merging dims keeps every offset and the contracted space's order.
    let out = coalesce(layout_of(&out_dims, "output dims")?, shapes.len());
    let red = coalesce(layout_of(&contracted, "contracted labels")?, shapes.len());
    Ok(Plan { out, red, terms })
}

/// Evaluates `equation` over `operands` (one type) onto `out_shape`.
pub fn einsum(
    cx: &Ctx,
    equation: &str,
    operands: &[DeviceTensor],
    out_shape: &[usize],
) -> KResult<DeviceTensor> {
    let dtype = operands.first().ok_or("Einsum needs at least one operand")?.dtype;
    if let Some(other) = operands.iter().find(|t| t.dtype != dtype) {
        return Err(invalid!("Einsum operands are {dtype} and {}", other.dtype));
    }
    let suffix = suffix(dtype)?;
    let shapes: Vec<&[usize]> = operands.iter().map(|t| t.shape.as_slice()).collect();
    let plan = plan(equation, &shapes, out_shape)?;
    let out = cx.gpu.empty(dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let n = out.len();
    if n == 0 {
        return Ok(out);
    }
    let operand = |k: usize| operands.get(k).map_or(Arg::NULL, |t| cx.arg(t));
    let args = [
        Arg::I64(n as i64),
        Arg::I64(plan.terms as i64),
        Arg::Layout(plan.out),
        Arg::Layout(plan.red),
        Arg::I32(operands.len() as i32),
        operand(0),
        operand(1),
        operand(2),
        cx.arg(&out),
    ];
    cx.launch_elements(Source::Einsum.kernel(format!("einsum_{suffix}")), n, &args)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::tests::offset;

    /// The kernel's arithmetic on the host, in f64.
    fn evaluate(equation: &str, operands: &[(&[usize], Vec<f64>)], out_shape: &[usize]) -> Vec<f64> {
        let shapes: Vec<&[usize]> = operands.iter().map(|(s, _)| *s).collect();
        let p = plan(equation, &shapes, out_shape).unwrap();
        let n: usize = out_shape.iter().product();
        (0..n as i64)
            .map(|i| {
                (0..p.terms as i64)
                    .map(|j| {
                        operands
                            .iter()
                            .enumerate()
                            .map(|(k, (_, v))| v[(offset(&p.out, k, i) + offset(&p.red, k, j)) as usize])
                            .product::<f64>()
                    })
                    .sum()
            })
            .collect()
    }

    fn iota(n: usize) -> Vec<f64> {
        (0..n).map(|i| i as f64 + 1.0).collect()
    }

    #[test]
    fn batch_matmul_contracts_the_shared_label() {
        let (a, b) = (iota(2 * 2 * 3), iota(2 * 3 * 2));
        let got = evaluate("bij,bjk->bik", &[(&[2, 2, 3], a.clone()), (&[2, 3, 2], b.clone())], &[2, 2, 2]);
        let mut want = vec![0.0; 8];
        for bt in 0..2 {
            for i in 0..2 {
                for k in 0..2 {
                    want[bt * 4 + i * 2 + k] = (0..3).map(|j| a[bt * 6 + i * 3 + j] * b[bt * 6 + j * 2 + k]).sum();
                }
            }
        }
        assert_eq!(got, want);
        assert_eq!(plan("bij,bjk->bik", &[&[2, 2, 3], &[2, 3, 2]], &[2, 2, 2]).unwrap().terms, 3);
    }

    #[test]
    fn transpose_diagonal_sum_and_scalar() {
        let x = iota(6);
        assert_eq!(evaluate("ij->ji", &[(&[2, 3], x.clone())], &[3, 2]), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        assert_eq!(evaluate("ij->i", &[(&[2, 3], x.clone())], &[2]), vec![6.0, 15.0]);
        assert_eq!(evaluate("ij->", &[(&[2, 3], x)], &[]), vec![21.0]);
        let m = iota(2 * 3 * 3);
        // The batched diagonal: a repeated label's strides add up.
        assert_eq!(evaluate("...ii->...i", &[(&[2, 3, 3], m)], &[2, 3]), vec![1.0, 5.0, 9.0, 10.0, 14.0, 18.0]);
        assert_eq!(evaluate("i,i", &[(&[3], iota(3)), (&[3], iota(3))], &[]), vec![14.0]);
    }

    #[test]
    fn broadcast_ones_and_three_operands() {
        // b broadcasts its length-1 batch.
        let got = evaluate("bij,bjk->bik", &[(&[2, 1, 2], iota(4)), (&[1, 2, 1], vec![1.0, 10.0])], &[2, 1, 1]);
        assert_eq!(got, vec![21.0, 43.0]);
        let got = evaluate("i,j,k->ijk", &[(&[2], iota(2)), (&[1], vec![3.0]), (&[2], iota(2))], &[2, 1, 2]);
        assert_eq!(got, vec![3.0, 6.0, 6.0, 12.0]);
    }

    #[test]
    fn bad_equations_are_errors() {
        assert!(plan("ij,jk->ik", &[&[2, 3], &[4, 2]], &[2, 2]).is_err());
        assert!(plan("ij->ij", &[&[2, 3]], &[3, 2]).is_err());
        assert!(plan("ij->ii", &[&[2, 2]], &[2, 2]).is_err());
        assert!(plan("i,i,i,i", &[&[2], &[2], &[2], &[2]], &[]).is_err());
        assert!(plan("i$->i", &[&[2, 2]], &[2]).is_err());
    }
}
