//! The fused attention kernel (kernels/attention.cu, on unless `KILN_CUDA_FLASH_ATTENTION=0`) and
//! the unfused path against the cpu oracle on the same cases; BERT's head split and merge around
//! it (transposes left pending, read through strides).

use crate::common::{backend, check, one_layer, random, rng, worst_error, In};
use kiln::{AttentionParams, Backend, DataType, LayerKind, Network, Shape, ShuffleParams};

struct Case {
    q: &'static [usize],
    k: &'static [usize],
    v: &'static [usize],
    mask: Option<&'static [usize]>,
    key_transposed: bool,
}

const CASES: [Case; 8] = [
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
    // Rows of 128 keys (two a warp in the masked softmax), an odd count of them.
    Case { q: &[1, 3, 37, 32], k: &[1, 3, 128, 32], v: &[1, 3, 128, 32], mask: Some(&[1, 1, 1, 128]), key_transposed: false },
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
            product_levels: None,
            scores_levels: None,
            probs_levels: None,
            input_levels: None,
            output_levels: None,
        });
        check(&format!("attention {label} {dtype} case {i}"), kind, inputs, tolerance);
    }
}

/// `levels` values spaced `step` apart (the 8-bit levels a DequantizeLinear gives): exact in
/// 16 bits, their products exact in f32, so both backends see the same scores.
fn on_levels(r: &mut rand_chacha::ChaCha8Rng, dtype: DataType, shape: &[usize], levels: f32, step: f32) -> kiln::HostTensor {
    let t = random(r, DataType::F32, shape);
    let v: Vec<f32> = t.to_f64_vec().iter().map(|&x| (x as f32 * levels).round() * step).collect();
    let data = match dtype {
        DataType::F16 => kiln::TensorData::F16(v.iter().map(|&x| half::f16::from_f32(x)).collect()),
        _ => kiln::TensorData::BF16(v.iter().map(|&x| half::bf16::from_f32(x)).collect()),
    };
    kiln::HostTensor::new(shape.to_vec(), data).unwrap()
}

/// Attention in a Q/DQ network: levels on the product before its scale (onnxruntime's
/// `quantize_static` of `Q·Kᵀ / sqrt(d)`) or on the scaled scores (scale folded into Q and K),
/// and on the probabilities (int8 or uint8), under a padding mask.
///
/// The exponential differs between the backends in its last bits, so where f16 rounding puts a
/// probability on the edge of two levels the backends may pick different ones: each such
/// probability moves its row's outputs by the level's step times a value (under 1 here). A few
/// hundred such among case 0's 6.3 M probabilities make a relative L2 error of a few 1e-3:
/// `tolerance` bounds it at a few times that, far below what a wrong step gives, and no output
/// may be off by more than `flips` levels' worth.
fn run_level_cases(dtype: DataType, tolerance: f64, flips: f64) {
    let step = 1.0 / 127.0;
    use kiln::LevelGrid;
    let grid = |scale: f32, levels| Some(LevelGrid { scale, zero: 0, levels });
    for (i, (q, k, key_transposed, product, scores, probs)) in [
        ([2usize, 12, 128, 64], [2usize, 12, 64, 128], true, grid(0.37, DataType::I8), None, grid(1.0 / 127.0, DataType::I8)),
        ([1, 3, 100, 40], [1, 3, 100, 40], false, None, grid(0.043, DataType::I8), grid(1.0 / 255.0, DataType::U8)),
        ([2, 2, 20, 16], [2, 2, 300, 16], false, grid(0.21, DataType::I8), None, None),
        // Rows of 64 keys, four a warp, 198 of them (the last warp's last lanes have none).
        ([3, 2, 33, 16], [3, 2, 64, 16], false, grid(0.21, DataType::I8), None, grid(1.0 / 127.0, DataType::I8)),
        // Rows of 200 keys: 8 registers a lane.
        ([1, 2, 48, 32], [1, 2, 200, 32], false, grid(0.3, DataType::I8), None, grid(1.0 / 127.0, DataType::I8)),
    ]
    .into_iter()
    .enumerate()
    {
        let mut r = rng(70 + i as u64);
        let sk = if key_transposed { k[3] } else { k[2] };
        let v = [q[0], q[1], sk, q[3]];
        let mask = padding_mask(dtype, q[0], sk);
        let inputs = vec![
            In::Run(on_levels(&mut r, dtype, &q, 12.0, 0.25)),
            In::Run(on_levels(&mut r, dtype, &k, 12.0, 0.25)),
            In::Run(on_levels(&mut r, dtype, &v, 60.0, 1.0 / 64.0)),
            In::Run(mask),
        ];
        let kind = LayerKind::Attention(AttentionParams {
            scale: (q[3] as f32).sqrt(),
            key_transposed,
            scale_multiplies: false,
            zero_nan_rows: true,
            product_levels: product,
            scores_levels: scores,
            probs_levels: probs,
            input_levels: None,
            output_levels: None,
        });
        compare_on_levels(&format!("attention on levels {dtype} case {i}"), kind, inputs, tolerance, flips * step);
    }
}

/// An additive [batch, 1, 1, sk] mask whose last tenth of the keys are padding, as BERT's
/// extended mask writes them.
fn padding_mask(dtype: DataType, batch: usize, sk: usize) -> kiln::HostTensor {
    let mask: Vec<f32> = (0..batch * sk).map(|j| if j % sk >= sk * 9 / 10 { -10000.0 } else { 0.0 }).collect();
    let data = match dtype {
        DataType::F16 => kiln::TensorData::F16(mask.iter().map(|&x| half::f16::from_f32(x)).collect()),
        _ => kiln::TensorData::BF16(mask.iter().map(|&x| half::bf16::from_f32(x)).collect()),
    };
    kiln::HostTensor::new(vec![batch, 1, 1, sk], data).unwrap()
}

/// The layer on cuda against the cpu oracle: relative L2 within `tolerance`, no output off by
/// more than `worst`.
fn compare_on_levels(what: &str, kind: LayerKind, inputs: Vec<In>, tolerance: f64, worst: f64) {
    let Some(cuda) = backend() else { return };
    let (net, feeds) = one_layer(kind, inputs);
    let want = kiln_cpu::CpuBackend::new().prepare(&net).unwrap().execute(&feeds).unwrap();
    let got = cuda.prepare(&net).unwrap_or_else(|e| panic!("{what}: cuda prepare: {e}")).execute(&feeds);
    let got = got.unwrap_or_else(|e| panic!("{what}: cuda run: {e}"));
    let (g, w) = (got[0].to_f64_vec(), want[0].to_f64_vec());
    let l2 = (g.iter().zip(&w).map(|(a, b)| (a - b).powi(2)).sum::<f64>() / w.iter().map(|b| b * b).sum::<f64>()).sqrt();
    let off = worst_error(&got[0], &want[0]);
    assert!(l2 <= tolerance && off <= worst, "{what}: relative L2 {l2} (tolerance {tolerance}), worst {off} (at most {worst})");
}

/// 8-bit levels of `dtype` (int8 or uint8 about `zero`), `spread` levels either side.
fn levels(r: &mut rand_chacha::ChaCha8Rng, dtype: DataType, shape: &[usize], zero: i32, spread: f32) -> kiln::HostTensor {
    let v: Vec<i32> = random(r, DataType::F32, shape).to_f64_vec().iter().map(|&x| zero + (x as f32 * spread).round() as i32).collect();
    let data = match dtype {
        DataType::U8 => kiln::TensorData::U8(v.iter().map(|&x| x as u8).collect()),
        _ => kiln::TensorData::I8(v.iter().map(|&x| x as i8).collect()),
    };
    kiln::HostTensor::new(shape.to_vec(), data).unwrap()
}

/// Q, K and V given as levels (`AttentionParams::input_levels`, the DequantizeLinear of each
/// folded in) with the product's or scores' grid and the probabilities', under a padding mask:
/// head dims that take 16-byte loads of levels and one that does not (40), keys over several
/// tiles, K transposed, uint8 V about a zero point, and one float input beside levels.
fn run_input_level_cases(tolerance: f64) {
    use kiln::{InputLevels, LevelGrid};
    use DataType::{F16, I8, U8};
    let grid = |scale: f32, zero: i32, levels| Some(LevelGrid { scale, zero, levels });
    let cases = [
        // BERT-base's heads: all three int8, product and probabilities grids.
        ([2usize, 12, 128, 64], 128usize, false, [Some(I8), Some(I8), Some(I8)], grid(0.37, 0, I8), None, grid(1.0 / 127.0, 0, I8)),
        // Head dim 40 (byte loads), K transposed, uint8 V about 128, the scores' grid.
        ([1, 3, 100, 40], 100, true, [Some(I8), Some(I8), Some(U8)], None, grid(0.043, 0, I8), grid(1.0 / 255.0, 0, U8)),
        // 300 keys (five tiles), no probabilities grid, K as f16 beside levels.
        ([2, 2, 20, 16], 300, false, [Some(I8), None, Some(I8)], grid(0.21, 0, I8), None, None),
        // Levels and no grid inside: the inputs' dequantization only.
        ([1, 2, 70, 32], 64, false, [Some(I8), Some(I8), Some(I8)], None, None, None),
    ];
    for (i, (q, sk, key_transposed, types, product, scores, probs)) in cases.into_iter().enumerate() {
        let mut r = rng(90 + i as u64);
        let d = q[3];
        let k = if key_transposed { [q[0], q[1], d, sk] } else { [q[0], q[1], sk, d] };
        let v = [q[0], q[1], sk, d];
        let mut grids = [None; 3];
        let mut inputs = Vec::new();
        for (slot, (shape, ty)) in [q, k, v].into_iter().zip(types).enumerate() {
            inputs.push(In::Run(match ty {
                Some(U8) => {
                    grids[slot] = grid(1.0 / 32.0, 128, U8);
                    levels(&mut r, U8, &shape, 128, 100.0)
                }
                Some(_) => {
                    grids[slot] = grid(0.05, 0, I8);
                    levels(&mut r, I8, &shape, 0, 20.0)
                }
                None => random(&mut r, F16, &shape),
            }));
        }
        inputs.push(In::Run(padding_mask(F16, q[0], sk)));
        let kind = LayerKind::Attention(AttentionParams {
            scale: (d as f32).sqrt(),
            key_transposed,
            scale_multiplies: false,
            zero_nan_rows: true,
            product_levels: product,
            scores_levels: scores,
            probs_levels: probs,
            input_levels: Some(InputLevels { grids, to: F16 }),
            output_levels: None,
        });
        // A probability flipped to the next level moves an output by a step of 1/127 times V
        // (under 4 here): no output may be off by more than a few such steps.
        compare_on_levels(&format!("attention with input levels case {i}"), kind, inputs, tolerance, 6.0 * 4.0 / 127.0);
    }
}

/// Attention that `attention_int8` computes on the integer tensor cores (Q, K, V and the
/// probabilities on int8 grids about zero): 128 keys in registers (BERT-base's heads), fewer
/// than a tile, a ragged second tile with K transposed and a mask over every row (one row all
/// -inf, no NaN guard: its probabilities' level is 0), and 300 keys in two passes. Each case
/// must run on that kernel where `integer` says so, and match the cpu oracle as the other paths
/// do (probabilities on a level's edge may flip).
///
/// Q's and K's scales are powers of two, so the oracle's f16 dequantization is exact and its
/// products are the kernel's exact integer sums scaled: with a scale f16 rounds (0.05 is
/// 0.0500031 in f16) every product the oracle forms is off by that factor, and those within it
/// of an edge of the product's grid (step 0.37 here) land on the other level, a difference of
/// the oracle's rounding, not the kernel's.
fn run_integer_cases(integer: bool) {
    use kiln::{InputLevels, LevelGrid};
    use DataType::{F16, I8};
    let grid = |scale: f32| Some(LevelGrid { scale, zero: 0, levels: I8 });
    // (q, sk, dv, key_transposed, product grid, scores grid, full mask)
    let cases = [
        ([2usize, 12, 128, 64], 128usize, 64usize, false, grid(0.37), None, false),
        ([1, 2, 70, 16], 48, 64, false, None, None, false),
        ([2, 3, 100, 32], 100, 32, true, None, grid(0.043), true),
        ([1, 2, 70, 64], 300, 16, false, grid(0.21), None, false),
    ];
    for (i, (q, sk, dv, key_transposed, product, scores, full_mask)) in cases.into_iter().enumerate() {
        let mut r = rng(110 + i as u64);
        let d = q[3];
        let k = if key_transposed { [q[0], q[1], d, sk] } else { [q[0], q[1], sk, d] };
        let v = [q[0], q[1], sk, dv];
        let mut inputs = vec![
            In::Run(levels(&mut r, I8, &q, 0, 20.0)),
            In::Run(levels(&mut r, I8, &k, 0, 20.0)),
            In::Run(levels(&mut r, I8, &v, 0, 60.0)),
        ];
        let mask = match (full_mask, i) {
            (true, _) => {
                let (sq, n) = (q[2], q[2] * sk);
                let m: Vec<half::f16> = (0..n)
                    .map(|j| half::f16::from_f32(if j < sk { f32::NEG_INFINITY } else if (j * 7) % 11 == 0 { -10000.0 } else { 0.0 }))
                    .collect();
                Some(kiln::HostTensor::new(vec![sq, sk], kiln::TensorData::F16(m)).unwrap())
            }
            (false, 1) => None,
            (false, _) => Some(padding_mask(F16, q[0], sk)),
        };
        inputs.extend(mask.map(In::Run));
        // Each case writes floats, then its output's int8 levels (a QuantizeLinear folded in,
        // steps of 1/128: a flipped probability's 6·2/127 is at most 13 levels, and one more
        // where that crosses a rounding edge; at 1/32 case 2's small outputs, a few levels each,
        // put the oracle's one-level roundings of f16 probabilities above the relative L2 bound).
        for (output_levels, worst) in [(None, 6.0 * 2.0 / 127.0), (grid(1.0 / 128.0), 6.0 * 2.0 / 127.0 * 128.0 + 1.0)] {
            let kind = LayerKind::Attention(AttentionParams {
                scale: (d as f32).sqrt(),
                key_transposed,
                scale_multiplies: false,
                zero_nan_rows: !full_mask,
                product_levels: product,
                scores_levels: scores,
                probs_levels: grid(1.0 / 127.0),
                input_levels: Some(InputLevels { grids: [grid(1.0 / 16.0), grid(1.0 / 16.0), grid(1.0 / 32.0)], to: F16 }),
                output_levels,
            });
            let what = format!("attention on int8 levels case {i} (integer kernel {integer}, output levels {})", output_levels.is_some());
            let before = kiln_cuda::ops::flash::integer_attentions_enqueued();
            compare_on_levels(&what, kind, inputs.clone(), 1e-2, worst);
            let ran = kiln_cuda::ops::flash::integer_attentions_enqueued() > before;
            assert_eq!(ran, integer && backend().is_some(), "{what}: the integer kernel ran: {ran}");
        }
    }
}

#[test]
fn fused_and_unfused_attention_match_cpu_in_16_bits() {
    // Only this test sets the switches (one test, so the settings never race each other); the
    // other attention tests pass on either path.
    std::env::set_var("KILN_CUDA_FLASH_ATTENTION", "1");
    run_cases(DataType::F16, 4e-3, "fused");
    run_cases(DataType::BF16, 3e-2, "fused");
    // Attention on levels, fused (`flash_attention_levels`, off by default) then unfused.
    std::env::set_var("KILN_CUDA_FLASH_ATTENTION_LEVELS", "1");
    run_level_cases(DataType::F16, 1e-2, 6.0);
    run_input_level_cases(1e-2);
    std::env::remove_var("KILN_CUDA_FLASH_ATTENTION_LEVELS");
    run_level_cases(DataType::F16, 1e-2, 6.0);
    run_input_level_cases(1e-2);
    // Int8 levels on the integer kernel (the two-pass kernel writing floats where the output's
    // levels are asked for, quantized after), again with it writing the levels itself, then
    // (KILN_CUDA_INT8_ATTENTION=0) on the unfused path.
    run_integer_cases(true);
    std::env::set_var("KILN_CUDA_INT8_ATTENTION_LONG_LEVELS", "1");
    run_integer_cases(true);
    std::env::remove_var("KILN_CUDA_INT8_ATTENTION_LONG_LEVELS");
    std::env::set_var("KILN_CUDA_INT8_ATTENTION", "0");
    run_integer_cases(false);
    std::env::remove_var("KILN_CUDA_INT8_ATTENTION");
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
                product_levels: None,
                scores_levels: None,
                probs_levels: None,
                input_levels: None,
                output_levels: None,
            });
            check(&format!("masked rows {dtype} zero_nan_rows={zero_nan_rows}"), kind, inputs, tolerance);
        }
    }
}

/// Adds `reshape` then `transpose` Shuffles after `x` (BERT's head split / merge), returning the
/// output tensor.
fn reshape_transpose(net: &mut Network, x: kiln::TensorId, name: &str, dims: &[i64], perm: &[usize]) -> kiln::TensorId {
    let reshape = ShuffleParams { reshape: Some(dims.to_vec()), ..Default::default() };
    let r = net.add_layer(&format!("{name} reshape"), LayerKind::Shuffle(reshape), vec![Some(x)]).unwrap();
    let t = ShuffleParams { first_transpose: perm.to_vec(), ..Default::default() };
    let t = net.add_layer(&format!("{name} transpose"), LayerKind::Shuffle(t), vec![Some(net.output(r, 0))]).unwrap();
    net.output(t, 0)
}

#[test]
fn head_split_and_merge_around_attention_match_cpu_across_replays() {
    let Some(cuda) = backend() else { return };
    // (batch, sequence, heads, head dim): BERT's, rows not a multiple of the tiles, and a head
    // dim that is not a multiple of 8 (element loads through the strided views).
    for (dtype, tolerance, (b, s, h, d)) in [
        (DataType::F16, 4e-3, (2usize, 128usize, 12usize, 64usize)),
        (DataType::F16, 4e-3, (3, 77, 4, 32)),
        (DataType::BF16, 3e-2, (2, 70, 3, 36)),
    ] {
        let what = format!("head split/merge {dtype} b{b} s{s} h{h} d{d}");
        let mut net = Network::new("heads");
        let hidden = (h * d) as i64;
        let mut feeds = Vec::new();
        let mut r = rng(60);
        let mut input = |net: &mut Network, name: &str, shape: &[usize]| {
            let t = random(&mut r, dtype, shape);
            let id = net.add_input(name, dtype, Shape::fixed(shape)).unwrap();
            feeds.push(t);
            id
        };
        let (q, k, v) = (input(&mut net, "q", &[b, s, h * d]), input(&mut net, "k", &[b, s, h * d]), input(&mut net, "v", &[b, s, h * d]));
        let mask = input(&mut net, "mask", &[b, 1, 1, s]);
        let split = [b as i64, s as i64, h as i64, d as i64];
        let q = reshape_transpose(&mut net, q, "q", &split, &[0, 2, 1, 3]);
        let k = reshape_transpose(&mut net, k, "k", &split, &[0, 2, 3, 1]);
        let v = reshape_transpose(&mut net, v, "v", &split, &[0, 2, 1, 3]);
        let params = AttentionParams {
            scale: 1.0 / (d as f32).sqrt(),
            key_transposed: true,
            scale_multiplies: true,
            zero_nan_rows: true,
            product_levels: None,
            scores_levels: None,
            probs_levels: None,
            input_levels: None,
            output_levels: None,
        };
        let a = net.add_layer("attention", LayerKind::Attention(params), vec![Some(q), Some(k), Some(v), Some(mask)]).unwrap();
        let merged = ShuffleParams { first_transpose: vec![0, 2, 1, 3], ..Default::default() };
        let m = net.add_layer("merge transpose", LayerKind::Shuffle(merged), vec![Some(net.output(a, 0))]).unwrap();
        let flat = ShuffleParams { reshape: Some(vec![b as i64, s as i64, hidden]), ..Default::default() };
        let out = net.add_layer("merge reshape", LayerKind::Shuffle(flat), vec![Some(net.output(m, 0))]).unwrap();
        net.mark_output(net.output(out, 0)).unwrap();
        let want = kiln_cpu::CpuBackend::new().prepare(&net).unwrap().execute(&feeds).unwrap();
        let exe = cuda.prepare(&net).unwrap_or_else(|e| panic!("{what}: cuda prepare: {e}"));
        // Recorded, arena (captured), replayed: every mode reads the views the same way.
        for run in 0..3 {
            let got = exe.execute(&feeds).unwrap_or_else(|e| panic!("{what}: run {run}: {e}"));
            assert_eq!(got[0].shape(), want[0].shape(), "{what}");
            let err = worst_error(&got[0], &want[0]);
            assert!(err <= tolerance, "{what}: run {run} differs from the cpu oracle by {err} (tolerance {tolerance})");
        }
    }
}
