//! Every kernel the launchers use, each with the source its launcher names, for the test that
//! compiles each source and finds every kernel in it (`tests/nvrtc_compile.rs`).

use crate::sources::{Kernel, Source};

/// Every kernel the backend launches, except casts (see [`cast_kernel`]).
pub fn expected_kernels() -> Vec<Kernel> {
    const FLOATS: [&str; 3] = ["f32", "f16", "bf16"];
    const WIDTHS: [&str; 4] = ["u8", "u16", "u32", "u64"];
    let mut kernels: Vec<Kernel> = Vec::new();
    let mut add = |source: Source, names: &mut dyn Iterator<Item = String>| kernels.extend(names.map(|n| source.kernel(n)));
    let each = |ops: &'static [&'static str], types: &'static [&'static str]| {
        ops.iter().flat_map(move |op| types.iter().map(move |t| format!("{op}_{t}")))
    };
    add(Source::Elementwise, &mut each(&["binary", "binary_vec", "compare", "unary", "unary_vec"], &FLOATS));
    add(Source::Elementwise, &mut each(&["binary", "compare"], &["i32", "i64"]));
    add(Source::Elementwise, &mut ["logic_bool".to_string()].into_iter());
    add(Source::Reduce, &mut each(&["softmax", "softmax_masked", "softmax_masked_levels", "reduce", "reduce_columns", "reduce_column_runs", "reduce_column_partials", "reduce_column_run_partials", "reduce_column_partials_finish", "normalize", "rms_normalize", "normalize_affine", "normalize_affine_short", "row_chunk_stats", "normalize_chunks"], &FLOATS));
    add(Source::Spatial, &mut each(&["depthwise_nhwc", "depthwise_nhwc1"], &FLOATS));
    add(Source::Spatial, &mut each(&["conv2d"], &super::FLOAT64_SUFFIXES));
    for (k, s) in super::conv::ROW_KERNEL_SIZES.iter().flat_map(|k| super::conv::ROW_KERNEL_STRIDES.iter().map(move |s| (k, s))) {
        add(Source::Spatial, &mut FLOATS.iter().map(|t| format!("depthwise_nhwc_k{k}s{s}_{t}")));
    }
    add(Source::Typed, &mut super::typed::kernel_names().into_iter());
    add(Source::Copy, &mut each(&["strided_copy", "transpose_tiled", "gather", "resize_nearest"], &WIDTHS));
    add(Source::Copy, &mut ["strided_copy_u128".to_string()].into_iter());
    add(Source::Copy, &mut super::pointwise::VECTOR_CASTS.iter().map(|c| format!("{c}_x4")));
    add(Source::Select, &mut each(&["select"], &WIDTHS));
    add(Source::Select, &mut each(&["prelu"], &FLOATS));
    add(Source::Indexing, &mut each(&["gather_elements", "gather_nd"], &WIDTHS));
    add(Source::Resize, &mut each(&["resize_gather"], &WIDTHS));
    add(Source::Resize, &mut each(&["resize_interp"], &FLOATS));
    add(Source::Attention, &mut each(&["flash_attention", "flash_attention_levels"], &["f16", "bf16"]));
    add(Source::AttentionInt8, &mut each(&["attention_int8", "attention_int8_long", "attention_int8_levels", "attention_int8_long_levels", "attention_int8_rows", "attention_int8_long_rows", "attention_int8_levels_rows", "attention_int8_long_levels_rows"], &["f16", "bf16"]));
    add(Source::Int8FewChannels, &mut super::int8_few_channels::kernel_names().into_iter().map(String::from));
    add(Source::Int8Depthwise, &mut super::int8_depthwise::kernel_names().into_iter());
    for t in super::indexing::TYPED_SUFFIXES {
        add(Source::Indexing, &mut ["scatter_elements", "scatter_nd"].iter().map(|op| format!("{op}_{t}")));
        if t != "bool" {
            add(Source::Scan, &mut ["topk", "cumulative"].iter().map(|op| format!("{op}_{t}")));
        }
    }
    add(Source::GridSample, &mut each(&["grid_sample"], &super::FLOAT64_SUFFIXES));
    add(Source::Pool, &mut each(&["pool"], &super::pool::SUFFIXES));
    add(Source::Pool, &mut each(&["pool2d_nhwc"], &["f32", "f16", "bf16", "f32_x4", "f16_x8", "bf16_x8"]));
    add(Source::Einsum, &mut each(&["einsum"], &super::einsum::SUFFIXES));
    add(Source::Deconvolution, &mut each(&["deconv"], &super::FLOAT64_SUFFIXES));
    add(Source::Signal, &mut each(&["dft", "col2im", "det"], &super::FLOAT64_SUFFIXES));
    add(Source::Lrn, &mut each(&["lrn"], &super::FLOAT64_SUFFIXES));
    add(Source::RoiAlign, &mut each(&["roi_align"], &super::FLOAT64_SUFFIXES));
    add(Source::OneHot, &mut each(&["one_hot"], &super::one_hot::WIDTHS));
    add(Source::NonZero, &mut each(&["nonzero_count", "nonzero_fill"], &super::data_dependent::WIDTHS));
    add(Source::Timing, &mut ["spin_cycles".to_string()].into_iter());
    kernels.extend(super::int8_conv::kernels());
    kernels
}

/// The cast kernel from one storage type to another (`cast_i64_f32`), by dtype name.
pub fn cast_kernel(from: &str, to: &str) -> Kernel {
    Source::Copy.kernel(format!("cast_{from}_{to}"))
}
