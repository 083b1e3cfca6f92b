//! Every kernel name the launchers use, for the test that compiles each source and finds
//! every kernel in it (`tests/nvrtc_compile.rs`).

/// Every kernel name the backend launches, except casts (see [`cast_kernel`]).
pub fn expected_kernels() -> Vec<String> {
    const FLOATS: [&str; 3] = ["f32", "f16", "bf16"];
    let mut names: Vec<String> = Vec::new();
    for t in FLOATS {
        for op in ["binary", "binary_vec", "compare", "unary", "unary_vec", "chain", "chain_vec", "softmax", "softmax_masked", "reduce", "normalize", "rms_normalize", "normalize_affine", "conv2d"] {
            names.push(format!("{op}_{t}"));
        }
    }
    for t in ["i32", "i64"] {
        names.push(format!("binary_{t}"));
        names.push(format!("compare_{t}"));
    }
    names.push("logic_bool".into());
    names.extend(super::typed::kernel_names());
    for w in ["u8", "u16", "u32", "u64"] {
        for op in ["strided_copy", "transpose_tiled", "gather", "resize_nearest"] {
            names.push(format!("{op}_{w}"));
        }
    }
    names.push("strided_copy_u128".into());
    for w in ["u8", "u16", "u32", "u64"] {
        for op in ["select", "gather_elements", "gather_nd", "resize_gather"] {
            names.push(format!("{op}_{w}"));
        }
    }
    names.extend(["flash_attention_f16".to_string(), "flash_attention_bf16".to_string()]);
    for t in FLOATS {
        names.push(format!("resize_interp_{t}"));
        names.push(format!("prelu_{t}"));
    }
    for t in super::indexing::TYPED_SUFFIXES {
        for op in ["scatter_elements", "scatter_nd", "topk", "cumulative"] {
            if t != "bool" || op.starts_with("scatter") {
                names.push(format!("{op}_{t}"));
            }
        }
    }
    names.extend(super::FLOAT64_SUFFIXES.iter().map(|t| format!("grid_sample_{t}")));
    names.extend(super::pool::SUFFIXES.iter().map(|t| format!("pool_{t}")));
    names.extend(super::einsum::SUFFIXES.iter().map(|t| format!("einsum_{t}")));
    names.extend(super::FLOAT64_SUFFIXES.iter().map(|t| format!("deconv_{t}")));
    for t in super::FLOAT64_SUFFIXES {
        for op in ["dft", "col2im", "det", "lrn", "roi_align"] {
            names.push(format!("{op}_{t}"));
        }
    }
    names.extend(super::one_hot::WIDTHS.iter().map(|w| format!("one_hot_{w}")));
    for w in super::data_dependent::WIDTHS {
        names.push(format!("nonzero_count_{w}"));
        names.push(format!("nonzero_fill_{w}"));
    }
    names
}

/// The cast kernel from one storage type to another (`cast_i64_f32`), by dtype name.
pub fn cast_kernel(from: &str, to: &str) -> String {
    format!("cast_{from}_{to}")
}
