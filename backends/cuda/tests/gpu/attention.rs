//! The fused attention kernel (kernels/attention.cu, opt-in: `KILN_CUDA_FLASH_ATTENTION=1`) and the
//! unfused path against the cpu oracle on the same cases.

use crate::common::{check, random, rng, In};
use kiln::{AttentionParams, DataType, LayerKind};

struct Case {
    q: &'static [usize],
    k: &'static [usize],
    v: &'static [usize],
    mask: Option<&'static [usize]>,
    key_transposed: bool,
}

const CASES: [Case; 7] = [
    // BERT-base's heads: 12 × 64, 128 tokens.
    Case { q: &[2, 12, 128, 64], k: &[2, 12, 128, 64], v: &[2, 12, 128, 64], mask: None, key_transposed: false },
    // A padding mask per batch over the keys, K transposed, rows and keys not multiples of the tiles.
    Case {
        q: &[2, 3, 100, 40],
        k: &[2, 3, 40, 100],
        v: &[2, 3, 100, 40],
        mask: Some(&[2, 1, 1, 100]),
        key_transposed: true,
    },
    // A mask shared by every batch and head, value dim differing from the key dim.
    Case { q: &[1, 4, 70, 64], k: &[1, 4, 33, 64], v: &[1, 4, 33, 24], mask: Some(&[70, 33]), key_transposed: false },
    // One leading dim; K and V shared by every head (broadcast).
    Case { q: &[5, 33, 16], k: &[1, 17, 16], v: &[1, 17, 16], mask: None, key_transposed: false },
    // No leading dims at all.
    Case { q: &[9, 8], k: &[65, 8], v: &[65, 8], mask: Some(&[9, 65]), key_transposed: false },
    // A mask broadcast along the keys (one value per query row).
    Case { q: &[1, 2, 20, 16], k: &[1, 2, 64, 16], v: &[1, 2, 64, 16], mask: Some(&[1, 1, 20, 1]), key_transposed: false },
    // Rows longer than the masked softmax keeps in registers (256).
    Case { q: &[1, 2, 20, 16], k: &[1, 2, 300, 16], v: &[1, 2, 300, 16], mask: Some(&[1, 1, 1, 300]), key_transposed: false },
];

fn run_cases(dtype: DataType, tolerance: f64, label: &str) {
    for (i, c) in CASES.iter().enumerate() {
        let mut r = rng(40 + i as u64);
        let mut inputs = vec![
            In::Run(random(&mut r, dtype, c.q)),
            In::Run(random(&mut r, dtype, c.k)),
            In::Run(random(&mut r, dtype, c.v)),
        ];
        if let Some(m) = c.mask {
            inputs.push(In::Run(random(&mut r, dtype, m)));
        }
        let d = c.q[c.q.len() - 1] as f32;
        let kind = LayerKind::Attention(AttentionParams {
            scale: d.sqrt(),
            key_transposed: c.key_transposed,
            scale_multiplies: false,
            zero_nan_rows: false,
        });
        check(&format!("attention {label} {dtype} case {i}"), kind, inputs, tolerance);
    }
}

#[test]
fn fused_and_unfused_attention_match_cpu_in_16_bits() {
    // Only this test sets the switch (one test, so the two settings never race each other); the
    // other attention tests pass on either path.
    std::env::set_var("KILN_CUDA_FLASH_ATTENTION", "1");
    run_cases(DataType::F16, 4e-3, "fused");
    run_cases(DataType::BF16, 3e-2, "fused");
    std::env::set_var("KILN_CUDA_FLASH_ATTENTION", "0");
    run_cases(DataType::F16, 4e-3, "unfused");
    std::env::remove_var("KILN_CUDA_FLASH_ATTENTION");
}

#[test]
fn fully_masked_rows_are_nan_or_zero_as_the_graph_says() {
    // Row 0 of the mask is -inf everywhere: NaN without the guard, zeros with it.
    let (sq, sk, d) = (40usize, 24usize, 32usize);
    for (dtype, tolerance) in [(DataType::F16, 4e-3), (DataType::F32, 1e-5)] {
        for zero_nan_rows in [false, true] {
            let mut r = rng(50);
            let mut mask = vec![0.0f32; sq * sk];
            mask[..sk].fill(f32::NEG_INFINITY);
            mask[sk + 3] = f32::NEG_INFINITY;
            let data = match dtype {
                DataType::F16 => kiln::TensorData::F16(mask.iter().map(|&x| half::f16::from_f32(x)).collect()),
                _ => kiln::TensorData::F32(mask),
            };
            let mask = kiln::HostTensor::new(vec![sq, sk], data).unwrap();
            let inputs = vec![
                In::Run(random(&mut r, dtype, &[2, sq, d])),
                In::Run(random(&mut r, dtype, &[2, sk, d])),
                In::Run(random(&mut r, dtype, &[2, sk, d])),
                In::Run(mask),
            ];
            let kind = LayerKind::Attention(AttentionParams {
                scale: 0.2,
                key_transposed: false,
                scale_multiplies: true,
                zero_nan_rows,
            });
            check(&format!("masked rows {dtype} zero_nan_rows={zero_nan_rows}"), kind, inputs, tolerance);
        }
    }
}
