//! Generated pointwise chains: the CUDA source of one kernel per chain program (its steps,
//! operand count and type), compiled on first use and kept in the kernel cache. An interpreted
//! chain (the step's op read from memory) is issue- and latency-bound: every operand load
//! waits on the step before it, and measured 7x its memory time on ConvNeXt-V2's GRN; with the
//! ops fixed the compiler issues every load up front and folds each op's switch.

use crate::sources::Source;
use kiln::DataType;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::{Mutex, OnceLock};

/// One step of a chain on the running value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step {
    /// `unary_float(code, x, alpha, beta)` (kernels/unary.cuh's codes).
    Unary { code: i32, alpha: f32, beta: f32 },
    /// `binary_float(code, running, operand)`, or `(operand, running)` when not
    /// `running_first` (kernels/binary.cuh's codes); `operand` numbers the chain's operands.
    Binary { code: i32, operand: usize, running_first: bool },
}

/// The C type of a float storage type the chain kernels take.
fn c_type(dtype: DataType) -> Option<&'static str> {
    match dtype {
        DataType::F32 => Some("float"),
        DataType::F16 => Some("__half"),
        DataType::BF16 => Some("__nv_bfloat16"),
        _ => None,
    }
}

/// An f32 as a bit-exact C expression.
fn float(v: f32) -> String {
    format!("__int_as_float(0x{:08x})", v.to_bits())
}

/// The source of `chain` (one element per thread step) and `chain_vec` (one 16-byte vector):
/// `(unsigned runs, ChainLayout l, const T* s0 … s{operands}, T* out)`, slot 0 the running
/// input; `None` for a type the kernels do not take.
pub fn chain_source(dtype: DataType, steps: &[Step], operands: usize) -> Option<String> {
    let t = c_type(dtype)?;
    let slots = operands + 1;
    let mut s = String::new();
    let params: Vec<String> = (0..slots).map(|k| format!("const {t}* s{k}")).collect();
    let args: Vec<String> = (0..slots).map(|k| format!("s{k}")).collect();
    let _ = writeln!(s, "// A kiln pointwise chain: {} steps, {operands} operands, {t}.", steps.len());
    let _ = writeln!(s, "#include \"chain.cuh\"\n");
    let _ = writeln!(s, "template <int V>");
    let _ = writeln!(s, "__device__ __forceinline__ void body(unsigned runs, const ChainLayout& l, {}, {t}* out) {{", params.join(", "));
    let _ = writeln!(s, "    for (unsigned r = blockIdx.x * blockDim.x + threadIdx.x; r < runs; r += gridDim.x * blockDim.x) {{");
    let _ = writeln!(s, "        const unsigned i = r * V;");
    let _ = writeln!(s, "        unsigned c[CHAIN_RANK];");
    let _ = writeln!(s, "        chain_coords(l, i, c);");
    for k in 0..slots {
        let _ = writeln!(s, "        float v{k}[V];");
        let _ = writeln!(s, "        chain_load<V>(l, {k}, i, c, s{k}, v{k});");
    }
    let _ = writeln!(s, "#pragma unroll");
    let _ = writeln!(s, "        for (int k = 0; k < V; ++k) {{");
    let _ = writeln!(s, "            float f = v0[k];");
    for step in steps {
        let line = match *step {
            Step::Unary { code, alpha, beta } => format!("f = unary_float({code}, f, {}, {});", float(alpha), float(beta)),
            Step::Binary { code, operand, running_first: true } => format!("f = binary_float({code}, f, v{}[k]);", operand + 1),
            Step::Binary { code, operand, running_first: false } => format!("f = binary_float({code}, v{}[k], f);", operand + 1),
        };
        let _ = writeln!(s, "            {line}");
    }
    let _ = writeln!(s, "            v0[k] = f;");
    let _ = writeln!(s, "        }}");
    let _ = writeln!(s, "        store_run<V>(out + i, v0);");
    let _ = writeln!(s, "    }}");
    let _ = writeln!(s, "}}\n");
    for (name, width) in [("chain", "1".to_string()), ("chain_vec", format!("Vec16<{t}>::N"))] {
        let _ = writeln!(s, "extern \"C\" __global__ void __launch_bounds__(256) {name}(unsigned runs, ChainLayout l, {}, {t}* out) {{", params.join(", "));
        let _ = writeln!(s, "    body<{width}>(runs, l, {}, out);", args.join(", "));
        let _ = writeln!(s, "}}");
    }
    Some(s)
}

/// A step as plain bits, so that a program can key a map (f32 has no `Eq` or `Hash`).
type StepBits = (bool, i32, u32, u32, usize, bool);

fn step_bits(step: &Step) -> StepBits {
    match *step {
        Step::Unary { code, alpha, beta } => (true, code, alpha.to_bits(), beta.to_bits(), 0, false),
        Step::Binary { code, operand, running_first } => (false, code, 0, 0, operand, running_first),
    }
}

/// The generated source of a chain program ([`chain_source`]), written, hashed and registered
/// once per program and process: an interpreted run launches one chain per fused layer, and
/// would otherwise write and hash a kernel's text at every launch.
pub fn chain_kernel(dtype: DataType, steps: &[Step], operands: usize) -> Option<Source> {
    type Key = (DataType, usize, Vec<StepBits>);
    static KERNELS: OnceLock<Mutex<HashMap<Key, Source>>> = OnceLock::new();
    let key: Key = (dtype, operands, steps.iter().map(step_bits).collect());
    let kernels = KERNELS.get_or_init(Default::default);
    if let Some(&source) = kernels.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Some(source);
    }
    let source = Source::generated(chain_source(dtype, steps, operands)?);
    kernels.lock().unwrap_or_else(|p| p.into_inner()).insert(key, source);
    Some(source)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_becomes_straight_line_code_with_its_ops_fixed() {
        let steps = [
            Step::Binary { code: 0, operand: 0, running_first: true },
            Step::Unary { code: 17, alpha: 0.0, beta: 1.5 },
            Step::Binary { code: 3, operand: 1, running_first: false },
        ];
        let text = chain_source(DataType::F16, &steps, 2).expect("f16 chains");
        assert!(text.contains("f = binary_float(0, f, v1[k]);"), "{text}");
        assert!(text.contains("f = unary_float(17, f, __int_as_float(0x00000000), __int_as_float(0x3fc00000));"), "{text}");
        assert!(text.contains("f = binary_float(3, v2[k], f);"), "{text}");
        assert!(text.contains("const __half* s2") && !text.contains("s3"), "three slots: {text}");
        assert!(text.contains("void __launch_bounds__(256) chain_vec(") && text.contains("body<Vec16<__half>::N>"), "{text}");
        assert_eq!(chain_source(DataType::I32, &steps, 2), None);
        assert_eq!(chain_source(DataType::F16, &steps, 2), Some(text), "the same program, the same text (one cached kernel)");
    }

    #[test]
    fn a_program_names_one_kernel_and_any_difference_another() {
        let steps = [Step::Binary { code: 2, operand: 0, running_first: true }, Step::Unary { code: 8, alpha: 0.0, beta: 6.0 }];
        let source = chain_kernel(DataType::F32, &steps, 1).expect("f32 chains");
        assert_eq!(chain_kernel(DataType::F32, &steps, 1), Some(source));
        let clip5 = [steps[0], Step::Unary { code: 8, alpha: 0.0, beta: 5.0 }];
        assert_ne!(chain_kernel(DataType::F32, &clip5, 1), Some(source), "another bound");
        assert_ne!(chain_kernel(DataType::BF16, &steps, 1), Some(source), "another type");
        assert_eq!(chain_kernel(DataType::I32, &steps, 1), None);
    }
}
