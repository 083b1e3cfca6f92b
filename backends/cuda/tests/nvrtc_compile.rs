//! Compiles every kernel source for sm_80 and sm_90 with NVRTC (no GPU needed). Where NVRTC is
//! missing the test skips with a message, unless `KILN_REQUIRE_NVRTC=1` (CI sets it) makes
//! that a failure.

use kiln_cuda::ops::kernel_names::{cast_kernel, expected_kernels};
use kiln_cuda::sources::Source;
use kiln_cuda::{kernel_cache, probe};

fn nvrtc_or_skip() -> bool {
    match probe::libraries().nvrtc_ready() {
        Ok(()) => true,
        Err(reason) => {
            if std::env::var("KILN_REQUIRE_NVRTC").as_deref() == Ok("1") {
                panic!("KILN_REQUIRE_NVRTC=1 but NVRTC is missing: {reason}");
            }
            eprintln!("SKIPPED: no NVRTC: {reason}");
            false
        }
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    // A kernel's symbol is NUL-terminated in the CUBIN's string table.
    let mut n = needle.as_bytes().to_vec();
    n.push(0);
    haystack.windows(n.len()).any(|w| w == n.as_slice())
}

#[test]
fn every_kernel_compiles_to_cubin_for_sm80_and_sm90() {
    if !nvrtc_or_skip() {
        return;
    }
    for arch in ["sm_80", "sm_90"] {
        // Every source compiled afresh (no cache folder), in parallel.
        let images: Vec<(Source, Vec<u8>)> = kernel_cache::all(arch, None).unwrap_or_else(|e| panic!("{e}"));
        for (_, image) in &images {
            assert_eq!(&image[..4], b"\x7fELF", "{arch}: NVRTC returned something other than a CUBIN (ELF)");
        }
        let mut kernels = expected_kernels();
        kernels.extend([cast_kernel("i64", "f32"), cast_kernel("f32", "f16"), cast_kernel("bf16", "i64"), cast_kernel("bool", "f32")]);
        for kernel in kernels {
            let image = &images.iter().find(|(s, _)| *s == kernel.source).expect("compiled above").1;
            assert!(contains(image, &kernel.name), "{arch}: kernel `{}` is not in {}", kernel.name, kernel.source.file_name());
        }
        // The wgmma convolutions exist in sm_90's arch-specific images only.
        for kernel in kiln_cuda::ops::int8_conv::wgmma_kernels() {
            let image = &images.iter().find(|(s, _)| *s == kernel.source).expect("compiled above").1;
            assert_eq!(contains(image, &kernel.name), arch == "sm_90", "{arch}: `{}` in {}'s image", kernel.name, kernel.source.file_name());
        }
        let gemm = &images.iter().find(|(s, _)| *s == Source::Int8Gemm).expect("compiled above").1;
        for name in kiln_cuda::ops::int8_gemm::kernel_names() {
            assert_eq!(contains(gemm, name), arch == "sm_90", "{arch}: `{name}` in int8_gemm.cu's image");
        }
    }
}

#[test]
fn a_broken_kernel_reports_nvrtc_log() {
    if !nvrtc_or_skip() {
        return;
    }
    let err = kiln_cuda::nvrtc::compile_cubin("broken.cu", "extern \"C\" __global__ void k() { undefined_name = 1; }", &[], "sm_90")
        .expect_err("an undefined identifier must not compile");
    let text = err.to_string();
    assert!(text.contains("broken.cu") && text.contains("undefined_name"), "the error should carry NVRTC's log: {text}");
}

#[test]
fn a_compiled_kernel_is_kept_and_a_damaged_one_compiled_again() {
    if !nvrtc_or_skip() {
        return;
    }
    let folder = std::env::temp_dir().join(format!("kiln-nvrtc-cache-{}", std::process::id()));
    let (first, hit) = kernel_cache::cubin(Source::Timing, "sm_90", Some(&folder)).expect("compiled");
    assert!(!hit, "an empty folder has nothing to reuse");
    let path = folder.join(kernel_cache::file_name(Source::Timing, "sm_90"));
    assert_eq!(std::fs::read(&path).expect("kept"), first);
    let (again, hit) = kernel_cache::cubin(Source::Timing, "sm_90", Some(&folder)).expect("read");
    assert!(hit && again == first, "the second process reads the kept image");
    std::fs::write(&path, &first[..first.len() / 2]).expect("damaged");
    let (fresh, hit) = kernel_cache::cubin(Source::Timing, "sm_90", Some(&folder)).expect("compiled again");
    assert!(!hit && fresh == first, "a truncated image is compiled again");
    assert_eq!(std::fs::read(&path).expect("rewritten"), first);
    std::fs::remove_dir_all(&folder).expect("cleaned up");
}

#[test]
fn generated_chains_compile_with_every_op_for_sm80_and_sm90() {
    // One program per type running every arithmetic op code and the activations models fuse,
    // over the most operands a chain takes: what ops/pointwise.rs generates at run time.
    use kiln::DataType as T;
    use kiln_cuda::ops::chain_source::{chain_source, Program, Step};
    if !nvrtc_or_skip() {
        return;
    }
    let mut steps: Vec<Step> = [0, 1, 2, 3, 4, 5, 6, 15, 16, 17].iter().enumerate().map(|(k, &code)| Step::Binary { code, operand: k % 8, running_first: k % 2 == 0 }).collect();
    steps.extend([0, 1, 13, 17, 35].map(|code| Step::Unary { code, alpha: 0.5, beta: -1.0 }));
    let mut programs: Vec<Program> = [T::F32, T::F16, T::BF16].map(|dtype| Program::float(dtype, steps.clone(), 8)).to_vec();
    // Between quantized layers: int8 and uint8 levels read dequantized beside an f32 operand,
    // quantized, dequantized again, quantized to uint8 (the column table kernels too).
    programs.push(Program {
        slots: vec![T::I8, T::U8, T::F32],
        out: T::U8,
        steps: vec![
            Step::Binary { code: 0, operand: 0, running_first: true },
            Step::Binary { code: 2, operand: 1, running_first: false },
            Step::Quantize { param: 4, lo: -128, hi: 127 },
            Step::Dequantize { param: 6 },
            Step::Unary { code: 0, alpha: 0.0, beta: 0.0 },
            Step::Quantize { param: 8, lo: 0, hi: 255 },
        ],
        dequantized: vec![Some(0), Some(2), None],
        params: 10,
        reduce: None,
    });
    // A residual join between two 8-bit tensors: the table kernels too.
    programs.push(Program {
        slots: vec![T::I8, T::U8],
        out: T::I8,
        steps: vec![Step::Binary { code: 0, operand: 0, running_first: true }, Step::Unary { code: 0, alpha: 0.0, beta: 0.0 }, Step::Quantize { param: 4, lo: -128, hi: 127 }],
        dequantized: vec![Some(0), Some(2)],
        params: 6,
        reduce: None,
    });
    // A Q/DQ transformer's residual join, layer norm and quantization: a warp per row.
    programs.push(Program {
        slots: vec![T::I8, T::F32, T::I8, T::F32, T::F32],
        out: T::I8,
        steps: vec![
            Step::Binary { code: 0, operand: 0, running_first: true },
            Step::Binary { code: 0, operand: 1, running_first: true },
            Step::Normalize { scale: 2, bias: 3, epsilon: 1e-12, len: 768 },
            Step::Quantize { param: 4, lo: -128, hi: 127 },
        ],
        dequantized: vec![Some(0), None, Some(2), None, None],
        params: 6,
        reduce: None,
    });
    // A row program reading one slot in both passes (an operand before the norm and after it),
    // its float input, its uint8 levels stored by the row (a dynamo-exported BERT's islands read
    // one slot twice).
    programs.push(Program {
        slots: vec![T::F16, T::F32, T::I8, T::F32, T::F32],
        out: T::U8,
        steps: vec![
            Step::Binary { code: 0, operand: 0, running_first: true },
            Step::Binary { code: 0, operand: 1, running_first: true },
            Step::Normalize { scale: 2, bias: 3, epsilon: 1e-5, len: 384 },
            Step::Binary { code: 2, operand: 0, running_first: true },
            Step::Quantize { param: 2, lo: 0, hi: 255 },
        ],
        dequantized: vec![None, None, Some(0), None, None],
        params: 4,
        reduce: None,
    });
    // A Q/DQ CNN's head: two 8-bit tensors read dequantized, added, ReLU, averaged (an island
    // that ends in a reduction: the `chain_reduce_*` kernels alone), and an f16 one with a
    // float operand and no parameters.
    programs.push(Program {
        slots: vec![T::I8, T::U8],
        out: T::F32,
        steps: vec![Step::Binary { code: 0, operand: 0, running_first: true }, Step::Unary { code: 0, alpha: 0.0, beta: 0.0 }],
        dequantized: vec![Some(0), Some(2)],
        params: 4,
        reduce: Some(4),
    });
    programs.push(Program { reduce: Some(2), ..Program::float(T::F16, vec![Step::Unary { code: 1, alpha: 0.0, beta: 0.0 }, Step::Binary { code: 2, operand: 0, running_first: true }], 1) });
    for program in &programs {
        let what = format!("{:?} -> {}", program.slots, program.out);
        let text = chain_source(program).expect("types the chains take");
        let source = Source::generated(text);
        let reductions = ["chain_reduce_rows", "chain_reduce_columns", "chain_reduce_column_runs", "chain_reduce_column_partials", "chain_reduce_column_run_partials"];
        let names: &[&str] = match (program.normalizes(), program.table_entries()) {
            _ if program.reduce.is_some() => &reductions,
            (true, _) => &["chain_rows"],
            (false, Some(_)) => &["chain", "chain_vec", "chain_table_fill", "chain_table", "chain_table_vec"],
            (false, None) if program.column_table().is_some() => &["chain", "chain_vec", "chain_column_fill", "chain_columns"],
            (false, None) => &["chain", "chain_vec"],
        };
        for arch in ["sm_80", "sm_90"] {
            let (image, _) = kernel_cache::cubin(source, arch, None).unwrap_or_else(|e| panic!("{what} {arch}: {e}"));
            for &name in names {
                assert!(contains(&image, name), "{what} {arch}: `{name}` is not in the generated image");
            }
        }
    }
}
