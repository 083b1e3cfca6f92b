//! kiln's CUDA sources (`/kernels/*.cu`), embedded in the crate and compiled by NVRTC for the
//! device's architecture. Kernels are named `{op}_{dtype}` (`binary_f32`, `cast_i64_f32`).

use crate::nvrtc::{compile_cubin, CompileError};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Headers every source may include, by the name it includes them as (the embedded texts;
/// [`headers`] gives the ones compiled).
pub const HEADERS: &[(&str, &str)] = &[
    ("common.cuh", include_str!("../../../kernels/common.cuh")),
    ("exact.cuh", include_str!("../../../kernels/exact.cuh")),
    ("unary.cuh", include_str!("../../../kernels/unary.cuh")),
    ("binary.cuh", include_str!("../../../kernels/binary.cuh")),
    ("chain.cuh", include_str!("../../../kernels/chain.cuh")),
    ("reduce.cuh", include_str!("../../../kernels/reduce.cuh")),
    ("mma.cuh", include_str!("../../../kernels/mma.cuh")),
    ("wgmma.cuh", include_str!("../../../kernels/wgmma.cuh")),
    ("tma.cuh", include_str!("../../../kernels/tma.cuh")),
    ("levels.cuh", include_str!("../../../kernels/levels.cuh")),
    ("attention.cuh", include_str!("../../../kernels/attention.cuh")),
    ("int8_conv.cuh", include_str!("../../../kernels/int8_conv.cuh")),
    ("depthwise.cuh", include_str!("../../../kernels/depthwise.cuh")),
];

/// A kernel as its launcher names it: the source that defines it, and its symbol.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    pub source: Source,
    pub name: String,
}

/// One translation unit: compiled into one module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// A kernel generated at run time ([`Source::generated`]), by its text's hash: compiled
    /// and loaded on first use.
    Generated(u64),
    Elementwise,
    Copy,
    Reduce,
    Spatial,
    /// Select (Where) and ParametricReLU: `select.cu`.
    Select,
    /// GatherElements / GatherND / ScatterElements / ScatterND: `indexing.cu`.
    Indexing,
    /// TopK and running sums/products along one axis: `scan.cu`.
    Scan,
    /// Resize from host-planned taps: `resize.cu`.
    Resize,
    /// Conversions between every kiln type, Quantize / Dequantize, and integer / f64 arithmetic.
    Typed,
    Attention,
    /// Attention on int8 levels, its products on the integer tensor cores: `attention_int8.cu`.
    AttentionInt8,
    /// kiln's INT8 implicit-GEMM convolution with the requantizing epilogue (int8_conv.cuh): its
    /// levels-only kernels, and the channel padding and folding, `int8_conv.cu`.
    Int8Conv,
    /// Its general epilogue's kernels on mma.sync: `int8_conv_general.cu`.
    Int8ConvGeneral,
    /// Its general epilogue's kernels on wgmma (sm_90a only): `int8_conv_wg_general.cu`.
    Int8ConvWgGeneral,
    /// kiln's warp-specialized INT8 matrix product (TMA, wgmma; sm_90a only): `int8_gemm.cu`.
    Int8Gemm,
    /// kiln's INT8 convolution of inputs of at most 4 channels (stems): `int8_few_channels.cu`.
    Int8FewChannels,
    /// kiln's INT8 depthwise convolution: `int8_depthwise.cu`.
    Int8Depthwise,
    /// GridSample in double, as kiln-cpu samples: `grid_sample.cu`.
    GridSample,
    /// Max / average pooling over any number of spatial axes, any numeric type: `pool.cu`.
    Pool,
    /// Einsum from host-resolved index spaces: `einsum.cu`.
    Einsum,
    /// Transposed convolution, direct: `deconv.cu`.
    Deconvolution,
    /// DFT, Col2Im and Determinant in double, as kiln-cpu: `signal.cu`.
    Signal,
    /// OneHot on raw element bytes: `one_hot.cu`.
    OneHot,
    /// Local response normalization across channels: `lrn.cu`.
    Lrn,
    /// RoiAlign (average and max): `roi_align.cu`.
    RoiAlign,
    /// NonZero's count and fill passes: `nonzero.cu`.
    NonZero,
    /// A device-side wait for timing measurements: `timing.cu`.
    Timing,
}

impl Source {
    pub const ALL: [Source; 27] = [
        Source::Elementwise,
        Source::Copy,
        Source::Reduce,
        Source::Spatial,
        Source::Select,
        Source::Indexing,
        Source::Scan,
        Source::Resize,
        Source::Typed,
        Source::Attention,
        Source::AttentionInt8,
        Source::Int8Conv,
        Source::Int8ConvGeneral,
        Source::Int8ConvWgGeneral,
        Source::Int8Gemm,
        Source::Int8FewChannels,
        Source::Int8Depthwise,
        Source::GridSample,
        Source::Pool,
        Source::Einsum,
        Source::Deconvolution,
        Source::Signal,
        Source::OneHot,
        Source::Lrn,
        Source::RoiAlign,
        Source::NonZero,
        Source::Timing,
    ];

    /// Registers generated kernel text and names its source (the same text, the same source).
    pub fn generated(text: String) -> Source {
        let hash = kiln::tactics::fnv1a64(text.as_bytes());
        generated_texts().lock().unwrap_or_else(|p| p.into_inner()).entry(hash).or_insert_with(|| text.into());
        Source::Generated(hash)
    }

    pub fn file_name(self) -> &'static str {
        match self {
            Source::Generated(_) => "generated.cu",
            Source::Elementwise => "elementwise.cu",
            Source::Copy => "copy.cu",
            Source::Reduce => "reduce.cu",
            Source::Spatial => "spatial.cu",
            Source::Select => "select.cu",
            Source::Indexing => "indexing.cu",
            Source::Scan => "scan.cu",
            Source::Resize => "resize.cu",
            Source::Typed => "typed.cu",
            Source::Attention => "attention.cu",
            Source::AttentionInt8 => "attention_int8.cu",
            Source::Int8Conv => "int8_conv.cu",
            Source::Int8ConvGeneral => "int8_conv_general.cu",
            Source::Int8ConvWgGeneral => "int8_conv_wg_general.cu",
            Source::Int8Gemm => "int8_gemm.cu",
            Source::Int8FewChannels => "int8_few_channels.cu",
            Source::Int8Depthwise => "int8_depthwise.cu",
            Source::GridSample => "grid_sample.cu",
            Source::Pool => "pool.cu",
            Source::Einsum => "einsum.cu",
            Source::Deconvolution => "deconv.cu",
            Source::Signal => "signal.cu",
            Source::OneHot => "one_hot.cu",
            Source::Lrn => "lrn.cu",
            Source::RoiAlign => "roi_align.cu",
            Source::NonZero => "nonzero.cu",
            Source::Timing => "timing.cu",
        }
    }

    fn embedded_text(self) -> Cow<'static, str> {
        let text = match self {
            Source::Generated(hash) => {
                let texts = generated_texts().lock().unwrap_or_else(|p| p.into_inner());
                return Cow::Owned(texts.get(&hash).map_or_else(String::new, |t| t.to_string()));
            }
            Source::Elementwise => include_str!("../../../kernels/elementwise.cu"),
            Source::Copy => include_str!("../../../kernels/copy.cu"),
            Source::Reduce => include_str!("../../../kernels/reduce.cu"),
            Source::Spatial => include_str!("../../../kernels/spatial.cu"),
            Source::Select => include_str!("../../../kernels/select.cu"),
            Source::Indexing => include_str!("../../../kernels/indexing.cu"),
            Source::Scan => include_str!("../../../kernels/scan.cu"),
            Source::Resize => include_str!("../../../kernels/resize.cu"),
            Source::Typed => include_str!("../../../kernels/typed.cu"),
            Source::Attention => include_str!("../../../kernels/attention.cu"),
            Source::AttentionInt8 => include_str!("../../../kernels/attention_int8.cu"),
            Source::Int8Conv => include_str!("../../../kernels/int8_conv.cu"),
            Source::Int8ConvGeneral => include_str!("../../../kernels/int8_conv_general.cu"),
            Source::Int8ConvWgGeneral => include_str!("../../../kernels/int8_conv_wg_general.cu"),
            Source::Int8Gemm => include_str!("../../../kernels/int8_gemm.cu"),
            Source::Int8FewChannels => include_str!("../../../kernels/int8_few_channels.cu"),
            Source::Int8Depthwise => include_str!("../../../kernels/int8_depthwise.cu"),
            Source::GridSample => include_str!("../../../kernels/grid_sample.cu"),
            Source::Pool => include_str!("../../../kernels/pool.cu"),
            Source::Einsum => include_str!("../../../kernels/einsum.cu"),
            Source::Deconvolution => include_str!("../../../kernels/deconv.cu"),
            Source::Signal => include_str!("../../../kernels/signal.cu"),
            Source::OneHot => include_str!("../../../kernels/one_hot.cu"),
            Source::Lrn => include_str!("../../../kernels/lrn.cu"),
            Source::RoiAlign => include_str!("../../../kernels/roi_align.cu"),
            Source::NonZero => include_str!("../../../kernels/nonzero.cu"),
            Source::Timing => include_str!("../../../kernels/timing.cu"),
        };
        Cow::Borrowed(text)
    }

    /// Whether this source's kernels are launched programmatically (programmatic dependent
    /// launch, sm_90 and later): each may be scheduled before the kernel before it in the stream
    /// has finished, so each calls kernels/common.cuh's `grid_dependency_wait` before it touches
    /// global memory (a test checks every kernel of these sources). The INT8 products, the
    /// integer attention and the generated chains: a Q/DQ transformer runs almost only these, a
    /// few microseconds a launch (BERT-base b32 Q/DQ on an H200: 1.507 -> 1.499 ms); the INT8
    /// convolutions (the depthwise one too) and the pooling: a Q/DQ CNN's other layers.
    pub fn programmatic(self) -> bool {
        matches!(
            self,
            Source::Int8Gemm
                | Source::AttentionInt8
                | Source::Int8Conv
                | Source::Int8ConvGeneral
                | Source::Int8ConvWgGeneral
                | Source::Int8FewChannels
                | Source::Int8Depthwise
                | Source::Pool
                | Source::Generated(_)
        )
    }

    /// The text compiled: the embedded one, or the file of the same name in
    /// [`KERNEL_DIR_ENV`]'s folder where that is set.
    pub fn text(self) -> Cow<'static, str> {
        match self {
            Source::Generated(_) => self.embedded_text(),
            _ => from_kernel_dir(self.file_name()).map_or_else(|| self.embedded_text(), Cow::Owned),
        }
    }

    /// Kernel `name` of this source.
    pub fn kernel(self, name: impl Into<String>) -> Kernel {
        Kernel { source: self, name: name.into() }
    }

    /// The target this source compiles for on a device of `arch`: the INT8 convolutions' sources
    /// and `int8_gemm.cu` take Hopper's arch-specific features (wgmma) on sm_90, whose `sm_90a`
    /// images load on any sm_90 device; every other source compiles for `arch` itself.
    pub fn target(self, arch: &str) -> String {
        match (self, arch) {
            (Source::Int8Conv | Source::Int8ConvGeneral | Source::Int8ConvWgGeneral | Source::Int8FewChannels | Source::Int8Gemm, "sm_90") => "sm_90a".to_string(),
            _ => arch.to_string(),
        }
    }

    /// Compiles this source to CUBIN for a device of `arch` ("sm_90"), as [`Source::target`] says.
    pub fn compile(self, arch: &str) -> Result<Vec<u8>, CompileError> {
        let headers = headers();
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, t)| (*n, t.as_ref())).collect();
        compile_cubin(self.file_name(), &self.text(), &headers, &self.target(arch))
    }
}

/// Names a folder whose `.cu` / `.cuh` files replace the embedded ones of the same name, for
/// trying a kernel change on a GPU machine without rebuilding kiln (`benches/gpu/kernel_ab.sh`
/// times variants side by side). The kernel cache keys images by the texts compiled, so
/// variants never share an image. A file the folder lacks stays embedded.
pub const KERNEL_DIR_ENV: &str = "KILN_CUDA_KERNEL_DIR";

/// The headers compiled with every source: [`HEADERS`], each replaced by its file in
/// [`KERNEL_DIR_ENV`]'s folder where that is set.
pub fn headers() -> Vec<(&'static str, Cow<'static, str>)> {
    HEADERS.iter().map(|&(name, text)| (name, from_kernel_dir(name).map_or(Cow::Borrowed(text), Cow::Owned))).collect()
}

/// `name`'s text from [`KERNEL_DIR_ENV`]'s folder, read once per process (every compile and
/// cache key sees the same text), or None where the variable is unset or the file absent.
fn from_kernel_dir(name: &'static str) -> Option<String> {
    static DIR: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    static TEXTS: OnceLock<Mutex<HashMap<&'static str, Option<String>>>> = OnceLock::new();
    let dir = DIR
        .get_or_init(|| {
            let dir = std::env::var_os(KERNEL_DIR_ENV).filter(|v| !v.is_empty()).map(std::path::PathBuf::from)?;
            tracing::warn!("{KERNEL_DIR_ENV}: CUDA kernel sources from {} where a file of the same name is there", dir.display());
            Some(dir)
        })
        .as_ref()?;
    let mut texts = TEXTS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    texts.entry(name).or_insert_with(|| std::fs::read_to_string(dir.join(name)).ok()).clone()
}

/// The text of every generated source this process made, by hash (a few kB each, one per
/// distinct generated kernel).
fn generated_texts() -> &'static Mutex<HashMap<u64, Arc<str>>> {
    static TEXTS: OnceLock<Mutex<HashMap<u64, Arc<str>>>> = OnceLock::new();
    TEXTS.get_or_init(Default::default)
}

#[cfg(test)]
mod tests {
    use super::Source;

    /// The body of each `__global__` function in `text` (macros' included): from the `{` after
    /// its parameters to the matching `}`.
    fn kernel_bodies(text: &str) -> Vec<&str> {
        let mut bodies = Vec::new();
        for (at, _) in text.match_indices("__global__") {
            let Some(open) = text[at..].find('{').map(|o| at + o) else { continue };
            let mut depth = 0usize;
            for (i, c) in text[open..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            bodies.push(&text[open..open + i + 1]);
                            break;
                        }
                    }
                    _ => {}
                }
            }
        }
        bodies
    }

    /// Every kernel of a programmatically launched source (its own text and the headers it
    /// includes that define kernels) waits for the kernels before it first: directly, or as the
    /// first statement of a template it runs.
    #[test]
    fn programmatic_sources_wait_before_touching_memory() {
        const TEMPLATES: [&str; 2] = ["int8_gemm_tma", "attention_int8"];
        let mut checked = 0;
        for source in Source::ALL.into_iter().filter(|s| s.programmatic()) {
            let own = source.embedded_text();
            let mut texts = vec![own.to_string()];
            for (name, text) in super::HEADERS {
                if own.contains(&format!("#include \"{name}\"")) && text.contains("__global__") {
                    texts.push(text.to_string());
                }
            }
            let text = texts.concat();
            let waiting: Vec<&str> = TEMPLATES
                .into_iter()
                .filter(|t| {
                    let Some(at) = text.find(&format!(" {t}(")) else { return false };
                    let first = text[at..].split_once('{').map(|(_, body)| body.trim_start()).unwrap_or("");
                    assert!(first.starts_with("grid_dependency_wait();"), "{t} does not wait first");
                    true
                })
                .collect();
            let bodies = kernel_bodies(&text);
            assert!(!bodies.is_empty(), "{source:?} has no kernels");
            for body in bodies {
                let runs_waiting = waiting.iter().any(|t| body.contains(&format!("{t}<")));
                assert!(runs_waiting || body.contains("grid_dependency_wait();"), "a kernel of {source:?} does not wait: {body}");
                checked += 1;
            }
        }
        assert!(checked >= 20, "{checked} kernels (a macro's count once)");
        assert!(!Source::Attention.programmatic() && !Source::Copy.programmatic());
    }

    /// Whether `text` or a header it includes (transitively) takes Hopper's arch-specific
    /// features: wgmma, or code behind `__CUDA_ARCH_FEAT_SM90_ALL`.
    fn arch_specific(text: &str) -> bool {
        text.contains("__CUDA_ARCH_FEAT_SM90_ALL")
            || text.contains("wgmma.")
            || super::HEADERS.iter().any(|(name, header)| text.contains(&format!("#include \"{name}\"")) && arch_specific(header))
    }

    /// A source with arch-specific code compiles for sm_90a on an sm_90 device, and only such a
    /// source: compiled for plain sm_90 its wgmma path is silently left out (the few-channel
    /// stem ran its mma.sync path so until session 60).
    #[test]
    fn sources_with_wgmma_compile_for_sm_90a() {
        let mut specific = 0;
        for source in Source::ALL {
            let wants = arch_specific(&source.embedded_text());
            specific += usize::from(wants);
            assert_eq!(source.target("sm_90") == "sm_90a", wants, "{source:?}");
            assert_eq!(source.target("sm_80"), "sm_80", "{source:?}");
        }
        assert!(specific >= 5, "{specific} sources with wgmma");
    }
}
