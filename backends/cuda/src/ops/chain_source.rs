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
    /// QuantizeLinear per tensor: `saturate(round_half_even(x / q[param]) + q[param + 1])`
    /// into `[lo, hi]` (NaN to 0), as kernels/typed.cu's quant_quantize_8bit.
    Quantize { param: usize, lo: i32, hi: i32 },
    /// DequantizeLinear per tensor: `(x - q[param + 1]) * q[param]`.
    Dequantize { param: usize },
    /// Layer normalization over the row (the last axis), then `· operand scale + operand bias`:
    /// a program with one runs a warp per row (`chain_rows`) and has no per-element kernels.
    /// `len`, the row's length, is fixed in the kernel: its runs unroll with no bounds checks.
    Normalize { scale: usize, bias: usize, epsilon: f32, len: u32 },
}

/// A chain's kernel: the storage type of each slot (slot 0 the running input, then each
/// operand), of the output, the steps, and per slot the float parameters (`q[p]` the scale,
/// `q[p + 1]` the zero point) it is read dequantized with, if it is; `params` float
/// parameters follow the output pointer. `reduce`: the Reduce op code (kernels/reduce.cuh) the
/// program's values are reduced by, for a chain that ends in a reduction (its kernels are then
/// the `chain_reduce_*` ones alone).
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub slots: Vec<DataType>,
    pub out: DataType,
    pub steps: Vec<Step>,
    pub dequantized: Vec<Option<usize>>,
    pub params: usize,
    pub reduce: Option<i32>,
}

impl Program {
    /// A chain of one float type throughout, nothing quantized.
    pub fn float(dtype: DataType, steps: Vec<Step>, operands: usize) -> Program {
        Program { slots: vec![dtype; operands + 1], out: dtype, steps, dequantized: vec![None; operands + 1], params: 0, reduce: None }
    }

    /// Elements per vector access: 16 bytes of the widest type the chain reads or writes. A
    /// reduction's runs count what it reads alone (its results are few): 16 levels a slot for
    /// a Q/DQ head, not 4.
    pub fn lanes(&self) -> Option<usize> {
        let written = if self.reduce.is_some() { None } else { Some(&self.out) };
        let widest = self.slots.iter().chain(written).map(|&t| c_type(t).map(|(_, size)| size)).collect::<Option<Vec<_>>>()?;
        Some(16 / widest.into_iter().max()?)
    }
}

/// The C type and size of a storage type the chain kernels take.
fn c_type(dtype: DataType) -> Option<(&'static str, usize)> {
    match dtype {
        DataType::F32 => Some(("float", 4)),
        DataType::F16 => Some(("__half", 2)),
        DataType::BF16 => Some(("__nv_bfloat16", 2)),
        DataType::I8 => Some(("signed char", 1)),
        DataType::U8 => Some(("unsigned char", 1)),
        _ => None,
    }
}

impl Program {
    /// Whether a step normalizes the rows: the program then runs as `chain_rows`.
    pub fn normalizes(&self) -> bool {
        self.steps.iter().any(|s| matches!(s, Step::Normalize { .. }))
    }
}

/// The most elements a row of `chain_rows` holds: runs of 4 per lane, at most 8 runs
/// (BERT-base's 768 and every hidden size to 1024).
pub const CHAIN_ROW_MAX: usize = 32 * 4 * 8;

/// An f32 as a bit-exact C expression.
fn float(v: f32) -> String {
    format!("__int_as_float(0x{:08x})", v.to_bits())
}

impl Program {
    /// The table kernels apply: every slot an 8-bit level read dequantized, at most two of
    /// them, and an 8-bit output, so the result is a function of at most 16 input bits.
    pub fn table_entries(&self) -> Option<usize> {
        if self.normalizes() || self.reduce.is_some() {
            return None;
        }
        let levels = |t: DataType| matches!(t, DataType::I8 | DataType::U8);
        let all_dequantized = self.dequantized.iter().all(Option::is_some) && self.dequantized.len() == self.slots.len();
        (self.slots.len() <= 2 && self.slots.iter().all(|&t| levels(t)) && levels(self.out) && all_dequantized).then(|| 1 << (8 * self.slots.len()))
    }
}

impl Program {
    /// The slot whose level the column table kernels look up, where they apply: the result is a
    /// function of one 8-bit level (read dequantized, every other slot a float, which the host
    /// checks varies along the columns only) and the column, the output 8-bit, no row
    /// normalization. The level may be any slot (a legacy export's `Add(bias, product)`
    /// runs on the bias).
    pub fn column_table(&self) -> Option<usize> {
        let levels = |t: DataType| matches!(t, DataType::I8 | DataType::U8);
        if self.normalizes() || self.reduce.is_some() || self.slots.len() < 2 || !levels(self.out) || self.table_entries().is_some() {
            return None;
        }
        let mut level_slots = (0..self.slots.len()).filter(|&k| levels(self.slots[k]));
        let slot = level_slots.next()?;
        (level_slots.next().is_none() && self.dequantized.get(slot).copied().flatten().is_some()).then_some(slot)
    }
}

/// The columns a block of `chain_columns` looks up (their tables in 8 KiB of shared memory),
/// 16 per thread: two threads read a row's 32-byte sector.
pub const COLUMN_TILE: usize = 32;

/// The source of `chain` (one element per thread step) and `chain_vec` (one vector of
/// [`Program::lanes`]): `(unsigned runs, ChainLayout l, const T0* s0 … , TO* out, float q0 …)`;
/// where [`Program::table_entries`] says, also `chain_table_fill`, which computes the program's
/// result for every input level (or pair of levels) into a table, and `chain_table` and
/// `chain_table_vec`, which copy the table into shared memory (that many bytes, dynamic) and
/// look every element up: a few instructions each where the conversions and the division took
/// tens.
/// `None` for a type the kernels do not take.
pub fn chain_source(program: &Program) -> Option<String> {
    let types = program.slots.iter().map(|&t| c_type(t).map(|(c, _)| c)).collect::<Option<Vec<_>>>()?;
    let (out, _) = c_type(program.out)?;
    let lanes = program.lanes()?;
    let mut s = String::new();
    let mut params: Vec<String> = types.iter().enumerate().map(|(k, t)| format!("const {t}* s{k}")).collect();
    params.push(format!("{out}* out"));
    let q_params: Vec<String> = (0..program.params).map(|j| format!("float q{j}")).collect();
    params.extend(q_params.iter().cloned());
    let mut args: Vec<String> = (0..types.len()).map(|k| format!("s{k}")).collect();
    args.push("out".into());
    let q_args: Vec<String> = (0..program.params).map(|j| format!("q{j}")).collect();
    args.extend(q_args.iter().cloned());
    let _ = writeln!(s, "// A kiln pointwise chain: {} steps, {} operands, {} -> {out}.", program.steps.len(), types.len() - 1, types.join(", "));
    let _ = writeln!(s, "#include \"chain.cuh\"");
    if program.reduce.is_some() {
        let _ = writeln!(s, "#include \"reduce.cuh\"");
    }
    s.push('\n');
    // One element: the slots' values (as stored), dequantized where the program says, then the
    // steps (those before a row normalization, and those after it in `after`).
    let mut element_params: Vec<String> = (0..types.len()).map(|k| format!("float x{k}")).collect();
    element_params.extend(q_params.iter().cloned());
    let split = program.steps.iter().position(|s| matches!(s, Step::Normalize { .. }));
    let (before, after) = program.steps.split_at(split.unwrap_or(program.steps.len()));
    step_function(&mut s, "element", "float f = x0;", &element_params, program, before);
    if program.reduce.is_some() {
        if split.is_some() {
            return None;
        }
        reduce_kernels(&mut s, &types, out, lanes, &q_params);
        return Some(s);
    }
    // A row program's last QuantizeLinear into 8 bits is the store's (`store_row_levels`).
    let (after, row_levels) = match after.split_last() {
        Some((&Step::Quantize { param, lo, hi }, rest)) if split.is_some() && matches!(program.out, DataType::I8 | DataType::U8) => {
            (rest, Some((param, lo, hi)))
        }
        _ => (after, None),
    };
    if split.is_some() {
        let mut after_params = vec!["float f".to_string()];
        after_params.extend(element_params.iter().cloned());
        step_function(&mut s, "after", "", &after_params, program, &after[1..]);
    }
    let element_args = |value: &dyn Fn(usize) -> String| {
        let mut a: Vec<String> = (0..types.len()).map(value).collect();
        a.extend(q_args.iter().cloned());
        a.join(", ")
    };
    if let Some(Step::Normalize { scale, bias, epsilon, len }) = split.map(|k| program.steps[k]) {
        // Each pass loads the slots its steps read (the others' values are dead: zeros).
        let k = split.unwrap_or(0);
        let read = |steps: &[Step], extra: &[usize]| {
            let mut slots: Vec<usize> = steps.iter().filter_map(|s| match *s {
                Step::Binary { operand, .. } => Some(operand + 1),
                _ => None,
            }).chain(extra.iter().copied()).collect();
            slots.sort_unstable();
            slots.dedup();
            slots
        };
        let passes = [read(&program.steps[..k], &[0]), read(&program.steps[k + 1..], &[scale + 1, bias + 1])];
        rows_kernel(&mut s, &types, &params, &element_args, &passes, (scale + 1, bias + 1, epsilon, len), row_levels);
        return Some(s);
    }
    let _ = writeln!(s, "template <int V>");
    let _ = writeln!(s, "__device__ __forceinline__ void body(unsigned runs, const ChainLayout& l, {}) {{", params.join(", "));
    s.push_str(RUN_LOOP);
    for k in 0..types.len() {
        let _ = writeln!(s, "        float v{k}[V];");
        let _ = writeln!(s, "        chain_load<V>(l, {k}, i, c, s{k}, v{k});");
    }
    let _ = writeln!(s, "#pragma unroll");
    let _ = writeln!(s, "        for (int k = 0; k < V; ++k) v0[k] = element({});", element_args(&|k| format!("v{k}[k]")));
    let _ = writeln!(s, "        store_run<V>(out + i, v0);");
    let _ = writeln!(s, "    }}");
    let _ = writeln!(s, "}}\n");
    entry_points(&mut s, "body", [("chain", 1), ("chain_vec", lanes)], 256, &params, &args);
    if let Some(entries) = program.table_entries() {
        // `chain_table_fill(unsigned char* levels, float q0 …)`: entry e, one per thread, is the
        // result for slot k's stored byte (e >> 8k) & 255. The table kernels take `levels` in
        // place of the float parameters, copy it into shared memory and look every element up.
        let level = |k: usize| format!("to_f(({})(unsigned char)(e >> {}))", types[k], 8 * k);
        let mut fill_params = vec!["unsigned char* levels".to_string()];
        fill_params.extend(q_params.iter().cloned());
        let _ = writeln!(s, "\nextern \"C\" __global__ void __launch_bounds__(256) chain_table_fill({}) {{", fill_params.join(", "));
        s.push_str(PROGRAMMATIC_ENTRY);
        let _ = writeln!(s, "    const int e = blockIdx.x * blockDim.x + threadIdx.x;");
        let _ = writeln!(s, "    if (e < {entries}) levels[e] = (unsigned char)from_f<{out}>(element({}));", element_args(&level));
        let _ = writeln!(s, "}}\n");
        let mut table_params: Vec<String> = types.iter().enumerate().map(|(k, t)| format!("const {t}* s{k}")).collect();
        table_params.push(format!("{out}* out"));
        table_params.push("const unsigned char* levels".into());
        let mut table_args: Vec<String> = (0..types.len()).map(|k| format!("s{k}")).collect();
        table_args.extend(["out".to_string(), "levels".to_string()]);
        let _ = writeln!(s, "template <int V>");
        let _ = writeln!(s, "__device__ __forceinline__ void table_body(unsigned runs, const ChainLayout& l, {}) {{", table_params.join(", "));
        let _ = writeln!(s, "    extern __shared__ uint4 table_words[];");
        let _ = writeln!(s, "    for (int w = threadIdx.x; w < {}; w += blockDim.x) table_words[w] = reinterpret_cast<const uint4*>(levels)[w];", entries / 16);
        let _ = writeln!(s, "    const unsigned char* table = reinterpret_cast<const unsigned char*>(table_words);");
        let _ = writeln!(s, "    __syncthreads();");
        s.push_str(RUN_LOOP);
        for k in 0..types.len() {
            let _ = writeln!(s, "        unsigned char b{k}[V];");
            let _ = writeln!(s, "        chain_load_bytes<V>(l, {k}, i, c, (const unsigned char*)s{k}, b{k});");
        }
        let index: Vec<String> = (0..types.len()).map(|k| if k == 0 { "b0[k]".to_string() } else { format!("b{k}[k] << {}", 8 * k) }).collect();
        let _ = writeln!(s, "        Run<unsigned char, V> o;");
        let _ = writeln!(s, "#pragma unroll");
        let _ = writeln!(s, "        for (int k = 0; k < V; ++k) o.v[k] = table[{}];", index.join(" | "));
        let _ = writeln!(s, "        *reinterpret_cast<Run<unsigned char, V>*>((unsigned char*)out + i) = o;");
        let _ = writeln!(s, "    }}");
        let _ = writeln!(s, "}}\n");
        entry_points(&mut s, "table_body", [("chain_table", 1), ("chain_table_vec", lanes)], TABLE_THREADS, &table_params, &table_args);
    }
    if let Some(level) = program.column_table() {
        column_kernels(&mut s, &types, level, out, &q_params, &element_args);
    }
    Some(s)
}

/// A chain that ends in a reduction (`Program::reduce`): its values at [o, k, c] of the
/// reduction's [outer, len, inner] view (`terms<V>`, each slot through its strides in `l`:
/// rank 3), reduced as kernels/reduce.cu reduces a stored tensor, never written:
/// `chain_reduce_rows(int op, ChainLayout l, slots…, out, q…)`, a warp per (outer, inner) row
/// (`reduce_row`), and `chain_reduce_column{s,_runs}{,_partials}(int op, i64 chunk, ChainLayout l,
/// slots…, out, q…)`, blocks of 32 columns (runs of `lanes`) × row-strided partials
/// (`columns_reduce`); the partials kernels write f32 partials of `chunk` rows each, which
/// reduce.cu's `reduce_column_partials_finish_*` takes.
fn reduce_kernels(s: &mut String, types: &[&str], out: &str, lanes: usize, q_params: &[String]) {
    let slot_params: Vec<String> = types.iter().enumerate().map(|(k, t)| format!("const {t}* s{k}")).collect();
    let slot_args: Vec<String> = (0..types.len()).map(|k| format!("s{k}")).collect();
    let q_args: Vec<String> = (0..q_params.len()).map(|j| format!("q{j}")).collect();
    let inputs = [slot_params.clone(), q_params.to_vec()].concat().join(", ");
    let input_args = [slot_args.clone(), q_args.clone()].concat().join(", ");
    let _ = writeln!(s, "template <int V>");
    let _ = writeln!(s, "__device__ __forceinline__ void terms(const ChainLayout& l, i64 o, i64 k, i64 c, {inputs}, float* v) {{");
    for k in 0..types.len() {
        let _ = writeln!(s, "    float v{k}[V];");
        let _ = writeln!(s, "    chain_reduce_load<V>(l, {k}, o, k, c, s{k}, v{k});");
    }
    let element_args: Vec<String> = (0..types.len()).map(|k| format!("v{k}[e]")).chain(q_args.iter().cloned()).collect();
    let _ = writeln!(s, "#pragma unroll");
    let _ = writeln!(s, "    for (int e = 0; e < V; ++e) v[e] = element({});", element_args.join(", "));
    let _ = writeln!(s, "}}\n");
    let signature = |result: &str| [slot_params.clone(), vec![format!("{result}* out")], q_params.to_vec()].concat().join(", ");
    let _ = writeln!(s, "extern \"C\" __global__ void __launch_bounds__(256) chain_reduce_rows(int op, ChainLayout l, {}) {{", signature(out));
    s.push_str(PROGRAMMATIC_ENTRY);
    let _ = writeln!(s, "    const i64 len = l.shape[1], inner = l.shape[2];");
    let _ = writeln!(s, "    const i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32;");
    let _ = writeln!(s, "    if (warp >= (i64)l.shape[0] * inner) return;");
    let _ = writeln!(s, "    const i64 o = warp / inner, c = warp % inner;");
    let _ = writeln!(s, "    const float acc = reduce_row(op, len, threadIdx.x % 32, [&](i64 k) {{ float v[1]; terms<1>(l, o, k, c, {input_args}, v); return v[0]; }});");
    let _ = writeln!(s, "    if (threadIdx.x % 32 == 0) out[warp] = from_f<{out}>(acc);");
    let _ = writeln!(s, "}}\n");
    let _ = writeln!(s, "template <int V, int ROWS, bool PARTIAL, typename R>");
    let _ = writeln!(s, "__device__ __forceinline__ void columns_body(int op, i64 chunk, const ChainLayout& l, {inputs}, R* out) {{");
    let _ = writeln!(s, "    columns_reduce<V, ROWS, PARTIAL, false>(op, l.shape[0], l.shape[1], l.shape[2], chunk, l.shape[1],");
    let _ = writeln!(s, "        [&](i64 o, i64 k, i64 c, float* v) {{ terms<V>(l, o, k, c, {input_args}, v); }}, [&](i64 at, const float* acc) {{ store_run<V>(out + at, acc); }});");
    let _ = writeln!(s, "}}\n");
    for (name, v, rows, partial) in [("chain_reduce_columns", 1, "COLUMN_ROWS", false), ("chain_reduce_column_runs", lanes, "COLUMN_RUN_ROWS", false), ("chain_reduce_column_partials", 1, "COLUMN_ROWS", true), ("chain_reduce_column_run_partials", lanes, "COLUMN_RUN_ROWS", true)] {
        let result = if partial { "float" } else { out };
        let _ = writeln!(s, "extern \"C\" __global__ void {name}(int op, i64 chunk, ChainLayout l, {}) {{", signature(result));
        s.push_str(PROGRAMMATIC_ENTRY);
        let _ = writeln!(s, "    columns_body<{v}, {rows}, {partial}>(op, chunk, l, {input_args}, out);");
        let _ = writeln!(s, "}}");
    }
}

/// The generated element function's arguments, given each slot's value expression.
type ElementArgs<'a> = &'a dyn Fn(&dyn Fn(usize) -> String) -> String;

/// `chain_column_fill(unsigned columns, ChainLayout l, unsigned char* table, other slots…, q…)`:
/// entry c·256 + b, one per thread, is the result for slot `level`'s stored byte b at column c
/// (each other slot read at l's offset plus c times its innermost stride). `chain_columns(unsigned
/// rows, unsigned columns, unsigned rows_per_block, const T* levels, out, const unsigned char*
/// table)`: a block copies the tables of COLUMN_TILE columns into shared memory and looks up
/// those columns of `rows_per_block` rows of the row-major levels, 16 bytes a thread.
fn column_kernels(s: &mut String, types: &[&str], level: usize, out: &str, q_params: &[String], element_args: ElementArgs) {
    let mut fill_params = vec!["unsigned columns".to_string(), "ChainLayout l".to_string(), "unsigned char* table".to_string()];
    fill_params.extend(types.iter().enumerate().filter(|&(k, _)| k != level).map(|(k, t)| format!("const {t}* s{k}")));
    fill_params.extend(q_params.iter().cloned());
    let value = |k: usize| match k {
        k if k == level => format!("to_f(({})(unsigned char)(e & 255))", types[k]),
        _ => format!("to_f(s{k}[l.offset[{k}] + c * l.stride[{k}][l.rank - 1]])"),
    };
    let _ = writeln!(s, "extern \"C\" __global__ void __launch_bounds__(256) chain_column_fill({}) {{", fill_params.join(", "));
    s.push_str(PROGRAMMATIC_ENTRY);
    let _ = writeln!(s, "    const unsigned e = blockIdx.x * blockDim.x + threadIdx.x, c = e >> 8;");
    let _ = writeln!(s, "    if (c < columns) table[e] = (unsigned char)from_f<{out}>(element({}));", element_args(&value));
    let _ = writeln!(s, "}}\n");
    let _ = writeln!(
        s,
        "extern \"C\" __global__ void __launch_bounds__(256) chain_columns(unsigned rows, unsigned columns, unsigned rows_per_block, const {}* levels, {out}* out, const unsigned char* table) {{",
        types[level]
    );
    s.push_str(PROGRAMMATIC_ENTRY);
    let _ = writeln!(s, "    chain_column_lookup<{COLUMN_TILE}>(rows, columns, rows_per_block, (const unsigned char*)levels, (unsigned char*)out, table);");
    let _ = writeln!(s, "}}");
}

/// `__device__ float name(params)`: `start`, every slot read dequantized where the program
/// says, then `steps` on the running value `f`.
fn step_function(s: &mut String, name: &str, start: &str, params: &[String], program: &Program, steps: &[Step]) {
    let _ = writeln!(s, "__device__ __forceinline__ float {name}({}) {{", params.join(", "));
    for k in 0..program.slots.len() {
        if let Some(p) = program.dequantized.get(k).copied().flatten() {
            let _ = writeln!(s, "    x{k} = __fmul_rn(__fsub_rn(x{k}, q{}), q{p});", p + 1);
        }
    }
    if !start.is_empty() {
        let _ = writeln!(s, "    {start}");
    }
    for step in steps {
        let line = match *step {
            Step::Unary { code, alpha, beta } => format!("f = unary_float({code}, f, {}, {});", float(alpha), float(beta)),
            Step::Binary { code, operand, running_first: true } => format!("f = binary_float({code}, f, x{});", operand + 1),
            Step::Binary { code, operand, running_first: false } => format!("f = binary_float({code}, x{}, f);", operand + 1),
            // The grid's invariants are the kernel's parameters: the compiler computes them once.
            Step::Quantize { param, lo, hi } => format!("f = level_on(grid_of(q{param}, q{}, {lo}.0f, {hi}.0f), f);", param + 1),
            Step::Dequantize { param } => format!("f = __fmul_rn(__fsub_rn(f, q{}), q{param});", param + 1),
            Step::Normalize { .. } => unreachable!("a row normalization splits the steps"),
        };
        let _ = writeln!(s, "    {line}");
    }
    let _ = writeln!(s, "    return f;");
    let _ = writeln!(s, "}}\n");
}

/// `chain_rows(unsigned rows, ChainLayout l, slots…, out, q…)`: a warp per row of `len` (at
/// most [`CHAIN_ROW_MAX`], a multiple of 4, fixed in the source) held in registers: `element` on each
/// value, the row's mean and variance (two passes over the registers, as kernels/reduce.cu's
/// normalize_affine), `(v − mean) · rstd · x{scale} + x{bias}`, then `after`. `passes`: the
/// slots the first pass and the second read.
///
/// The body is generated once and instantiated twice: `DIRECT` where every slot read is stored as
/// the output or repeats a row (a LayerNorm island's levels, residual, bias, gamma and beta), each
/// run's loads then a select of two addresses; else through `chain_row_load`'s branches and,
/// where a slot needs them, an element's coordinates. Measured on an H200 (BERT's islands, one
/// instantiation for all): 1,775 instructions a warp, most stalls waiting for instructions to be
/// fetched, the kernel's code 6,912 instructions with every layout's path inlined in every run.
/// At most 64 registers (`__launch_bounds__(256, 4)`): BERT's 4,096 rows are then one wave of
/// four blocks a multiprocessor, where the direct body alone would take 74 and three.
fn rows_kernel(
    s: &mut String,
    types: &[&str],
    params: &[String],
    element_args: ElementArgs,
    passes: &[Vec<usize>; 2],
    (scale, bias, epsilon, len): (usize, usize, f32, u32),
    levels: Option<(usize, i32, i32)>,
) {
    // A pass's runs and their loads: first the direct body's row of each slot the pass reads (a
    // run then adds its place, an immediate).
    let loads = |s: &mut String, pass: usize| {
        for &k in &passes[pass] {
            let _ = writeln!(s, "    const unsigned d{k}_{pass} = (l.row >> {k} & 1) ? l.offset[{k}] : row * len;");
        }
        s.push_str(ROW_RUN);
        let _ = writeln!(s, "            unsigned c[CHAIN_RANK];");
        let _ = writeln!(s, "            if (!DIRECT && coords{pass}) chain_coords(l, i, c);");
        for k in 0..types.len() {
            let _ = writeln!(s, "            float v{k}[4] = {{0.0f, 0.0f, 0.0f, 0.0f}};");
            if passes[pass].contains(&k) {
                let _ = writeln!(s, "            if (DIRECT) load_run<4>(s{k} + d{k}_{pass} + k, v{k});");
                let _ = writeln!(s, "            else chain_row_load<4>(l, {k}, i, k, c, s{k}, v{k});");
            }
        }
    };
    let _ = writeln!(s, "template <bool DIRECT>");
    let _ = writeln!(s, "__device__ __forceinline__ void chain_rows_body(unsigned row, unsigned lane, const ChainLayout& l, {}) {{", params.join(", "));
    let _ = writeln!(s, "    constexpr unsigned len = {len};\n    constexpr int RUNS = {};\n    float r[4 * RUNS];", len.div_ceil(128));
    for (pass, slots) in passes.iter().enumerate() {
        let mask: u32 = slots.iter().map(|&k| 1u32 << k).sum();
        let _ = writeln!(s, "    const bool coords{pass} = chain_rows_need_coords(l, {mask:#x});");
    }
    loads(s, 0);
    let _ = writeln!(s, "#pragma unroll");
    let _ = writeln!(s, "            for (int e = 0; e < 4; ++e) r[4 * j + e] = element({});", element_args(&|k| format!("v{k}[e]")));
    s.push_str(
        "        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) r[4 * j + e] = 0.0f;
        }
    }
    float sum = 0.0f;
#pragma unroll
    for (int e = 0; e < 4 * RUNS; ++e) sum += r[e];
    const float mean = warp_sum(sum) / (float)len;
    float squares = 0.0f;
#pragma unroll
    for (int e = 0; e < 4 * RUNS; ++e) {
        const float d = 4 * (lane + 32 * (e / 4)) < len ? r[e] - mean : 0.0f;
        squares += d * d;
    }
",
    );
    let _ = writeln!(s, "    const float rstd = rsqrtf(warp_sum(squares) / (float)len + {});", float(epsilon));
    loads(s, 1);
    let value = format!("after((r[4 * j + e] - mean) * rstd * v{scale}[e] + v{bias}[e], {})", element_args(&|k| format!("v{k}[e]")));
    match levels {
        // The values before their level stay in `r`; the row's levels are stored at once.
        Some((param, lo, hi)) => {
            let _ = writeln!(s, "#pragma unroll");
            let _ = writeln!(s, "            for (int e = 0; e < 4; ++e) r[4 * j + e] = {value};");
            s.push_str("        }\n    }\n");
            let _ = writeln!(s, "    store_row_levels<RUNS>(out + row * len, lane, len, r, grid_of(q{param}, q{}, {lo}.0f, {hi}.0f));", param + 1);
            s.push_str("}\n\n");
        }
        None => {
            let _ = writeln!(s, "            float o[4];");
            let _ = writeln!(s, "#pragma unroll");
            let _ = writeln!(s, "            for (int e = 0; e < 4; ++e) o[e] = {value};");
            let _ = writeln!(s, "            store_run<4>(out + i, o);");
            s.push_str("        }\n    }\n}\n\n");
        }
    }
    // Each parameter's name: the last word of its declaration.
    let names: Vec<&str> = params.iter().map(|p| p.rsplit([' ', '*']).next().unwrap_or(p)).collect();
    let read: u32 = passes.iter().flatten().map(|&k| 1u32 << k).sum();
    let _ = writeln!(s, "extern \"C\" __global__ void __launch_bounds__(256, 4) chain_rows(unsigned rows, ChainLayout l, {}) {{", params.join(", "));
    s.push_str(PROGRAMMATIC_ENTRY);
    s.push_str("    const unsigned row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;\n    if (row >= rows) return;\n");
    let direct = if compact_chains() { format!("!chain_rows_need_coords(l, {read:#x})") } else { "false".to_string() };
    let _ = writeln!(s, "    if ({direct}) chain_rows_body<true>(row, lane, l, {});", names.join(", "));
    let _ = writeln!(s, "    else chain_rows_body<false>(row, lane, l, {});", names.join(", "));
    s.push_str("}\n");
}

/// Whether chains are generated compact: `chain_rows` with its direct body where every slot
/// allows (Nsight found `chain_rows` waiting for instructions to be fetched). On unless
/// `KILN_CUDA_COMPACT_CHAINS=0`, for A/B timing (read once a process, like the sources it shapes).
fn compact_chains() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("KILN_CUDA_COMPACT_CHAINS").as_deref() != Ok("0"))
}

/// The start of a `chain_rows` pass over its row: run `j` of 4 at `k`, element `i` (slots are
/// read by `chain_row_load`, which finds an element's coordinates only where a slot needs them).
const ROW_RUN: &str = "#pragma unroll
    for (int j = 0; j < RUNS; ++j) {
        const unsigned k = 4 * (lane + 32 * j);
        if (k < len) {
            const unsigned i = row * len + k;
";

/// Every generated kernel's first statement: the host launches generated sources
/// programmatically (`Source::programmatic`), so each waits for the kernels before it here.
const PROGRAMMATIC_ENTRY: &str = "    grid_dependency_wait();\n";

/// The start of a body's grid-stride loop over runs of `V` output elements: element `i` and
/// its coordinates `c`.
const RUN_LOOP: &str = "    for (unsigned r = blockIdx.x * blockDim.x + threadIdx.x; r < runs; r += gridDim.x * blockDim.x) {
        const unsigned i = r * V;
        unsigned c[CHAIN_RANK];
        chain_coords(l, i, c);
";

/// The block size of `chain_table` and `chain_table_vec`. A pair's 64 KiB table lets two blocks
/// share a multiprocessor; at 256 threads their 16 warps kept too few loads in flight to stream
/// the operands (ResNet-50's skip connections ran at half the memory's rate).
pub const TABLE_THREADS: u32 = 512;

/// The kernels `name(unsigned runs, ChainLayout l, params…)`, each running `body<width>` in
/// blocks of `threads`.
fn entry_points(s: &mut String, body: &str, kernels: [(&str, usize); 2], threads: u32, params: &[String], args: &[String]) {
    for (name, width) in kernels {
        let _ = writeln!(s, "extern \"C\" __global__ void __launch_bounds__({threads}) {name}(unsigned runs, ChainLayout l, {}) {{", params.join(", "));
        s.push_str(PROGRAMMATIC_ENTRY);
        let _ = writeln!(s, "    {body}<{width}>(runs, l, {});", args.join(", "));
        let _ = writeln!(s, "}}");
    }
}

/// A program as plain bits, so that it can key a map (f32 has no `Eq` or `Hash`).
type ProgramBits = (Vec<DataType>, DataType, Vec<(u8, i32, u32, u32, usize, bool)>, Vec<Option<usize>>, usize, Option<i32>);

fn program_bits(p: &Program) -> ProgramBits {
    let steps = p
        .steps
        .iter()
        .map(|step| match *step {
            Step::Unary { code, alpha, beta } => (0, code, alpha.to_bits(), beta.to_bits(), 0, false),
            Step::Binary { code, operand, running_first } => (1, code, 0, 0, operand, running_first),
            Step::Quantize { param, lo, hi } => (2, 0, lo as u32, hi as u32, param, false),
            Step::Dequantize { param } => (3, 0, 0, 0, param, false),
            Step::Normalize { scale, bias, epsilon, len } => (4, bias as i32, epsilon.to_bits(), len, scale, false),
        })
        .collect();
    (p.slots.clone(), p.out, steps, p.dequantized.clone(), p.params, p.reduce)
}

/// The generated source of a chain program ([`chain_source`]), written, hashed and registered
/// once per program and process: an interpreted run launches one chain per fused layer, and
/// would otherwise write and hash a kernel's text at every launch.
pub fn chain_kernel(program: &Program) -> Option<Source> {
    static KERNELS: OnceLock<Mutex<HashMap<ProgramBits, Source>>> = OnceLock::new();
    let key = program_bits(program);
    let kernels = KERNELS.get_or_init(Default::default);
    if let Some(&source) = kernels.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Some(source);
    }
    let source = Source::generated(chain_source(program)?);
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
        let text = chain_source(&Program::float(DataType::F16, steps.to_vec(), 2)).expect("f16 chains");
        assert!(text.contains("f = binary_float(0, f, x1);"), "{text}");
        assert!(text.contains("f = unary_float(17, f, __int_as_float(0x00000000), __int_as_float(0x3fc00000));"), "{text}");
        assert!(text.contains("f = binary_float(3, x2, f);"), "{text}");
        assert!(text.contains("const __half* s2") && !text.contains("s3"), "three slots: {text}");
        assert!(text.contains("void __launch_bounds__(256) chain_vec(") && text.contains("body<8>"), "{text}");
        assert_eq!(chain_source(&Program::float(DataType::I32, steps.to_vec(), 2)), None);
        assert_eq!(chain_source(&Program::float(DataType::F16, steps.to_vec(), 2)), Some(text), "the same program, the same text (one cached kernel)");
    }

    #[test]
    fn programs_of_at_most_two_dequantized_levels_get_table_kernels() {
        let join = two_level_join();
        assert_eq!(join.table_entries(), Some(65536));
        let text = chain_source(&join).expect("8-bit chains");
        assert!(text.contains("void __launch_bounds__(512) chain_table_vec(") && text.contains("table[b0[k] | b1[k] << 8]"), "{text}");
        assert!(text.contains("levels[e] = (unsigned char)from_f<unsigned char>(element(to_f((signed char)(unsigned char)(e >> 0)), to_f((unsigned char)(unsigned char)(e >> 8)), q0"), "{text}");
        assert!(text.contains("chain_table_vec(unsigned runs, ChainLayout l, const signed char* s0, const unsigned char* s1, unsigned char* out, const unsigned char* levels)"), "{text}");
        let unary = Program { slots: vec![DataType::I8], dequantized: vec![Some(0)], params: 4, steps: vec![Step::Quantize { param: 2, lo: 0, hi: 255 }], ..join.clone() };
        assert_eq!(unary.table_entries(), Some(256));
        let float_operand = Program { slots: vec![DataType::I8, DataType::F32], dequantized: vec![Some(0), None], ..join.clone() };
        assert_eq!(float_operand.table_entries(), None, "an f32 operand has too many values");
        assert!(!chain_source(&float_operand).expect("chains").contains("chain_table"));
        let float_out = Program { out: DataType::F32, steps: vec![join.steps[0]], ..join.clone() };
        assert_eq!(float_out.table_entries(), None);
    }

    /// Generated sources are launched programmatically: each kernel's first statement waits
    /// for the kernels before it (elementwise, table, column table and row kernels alike).
    #[test]
    fn every_generated_kernel_waits_for_the_kernels_before_it() {
        assert!(Source::Generated(0).programmatic());
        let float = Program::float(DataType::F16, vec![Step::Binary { code: 0, operand: 0, running_first: true }], 1);
        let join = two_level_join();
        let column = island(vec![DataType::I8, DataType::F32], DataType::I8, vec![Some(0), None]);
        let mut kernels = 0;
        let head = Program { out: DataType::F32, steps: vec![join.steps[0]], reduce: Some(4), ..join.clone() };
        for program in [float, join, column, layer_norm_block(), head] {
            let text = chain_source(&program).expect("chains");
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate().filter(|(_, l)| l.contains("__global__")) {
                assert_eq!(lines.get(i + 1).map(|l| l.trim()), Some("grid_dependency_wait();"), "{line}");
                kernels += 1;
            }
        }
        assert!(kernels >= 14, "{kernels} kernels");
    }

    /// `Add(slot 0, slot 1) → QuantizeLinear` onto int8, the slots read dequantized as given: a
    /// product's bias island where one slot is a level and the other a float column.
    fn island(slots: Vec<DataType>, out: DataType, dequantized: Vec<Option<usize>>) -> Program {
        Program {
            slots,
            out,
            steps: vec![Step::Binary { code: 0, operand: 0, running_first: true }, Step::Quantize { param: 2, lo: -128, hi: 127 }],
            dequantized,
            params: 4,
            reduce: None,
        }
    }

    /// A skip connection's `DequantizeLinear ×2 → Add → QuantizeLinear`: two 8-bit levels.
    fn two_level_join() -> Program {
        Program {
            slots: vec![DataType::I8, DataType::U8],
            out: DataType::U8,
            steps: vec![Step::Binary { code: 0, operand: 0, running_first: true }, Step::Quantize { param: 4, lo: 0, hi: 255 }],
            dequantized: vec![Some(0), Some(2)],
            params: 6,
            reduce: None,
        }
    }

    /// A Q/DQ transformer's `DequantizeLinear ×2 → + bias → + residual → LayerNorm →
    /// QuantizeLinear`: a warp per row, the norm's affine operands read as slots.
    pub(crate) fn layer_norm_block() -> Program {
        Program {
            slots: vec![DataType::I8, DataType::F32, DataType::I8, DataType::F32, DataType::F32],
            out: DataType::I8,
            steps: vec![
                Step::Binary { code: 0, operand: 0, running_first: true },
                Step::Binary { code: 0, operand: 1, running_first: true },
                Step::Normalize { scale: 2, bias: 3, epsilon: 1e-12, len: 768 },
                Step::Quantize { param: 4, lo: -128, hi: 127 },
            ],
            dequantized: vec![Some(0), None, Some(2), None, None],
            params: 6,
            reduce: None,
        }
    }

    /// An island that ends in a reduction (a Q/DQ CNN's head: two levels dequantized, added,
    /// averaged) gets the reduction kernels alone, its values through `terms`, never stored;
    /// the table kernels do not apply to it though its slots are two levels.
    #[test]
    fn a_chain_ending_in_a_reduction_gets_the_reduction_kernels_alone() {
        let join = two_level_join();
        let head = Program { out: DataType::F32, steps: vec![join.steps[0]], reduce: Some(4), ..join.clone() };
        assert_eq!(head.table_entries(), None);
        let text = chain_source(&head).expect("reductions");
        assert!(text.contains("#include \"reduce.cuh\""), "{text}");
        assert!(text.contains("chain_reduce_rows(int op, ChainLayout l, const signed char* s0, const unsigned char* s1, float* out, float q0, float q1, float q2, float q3, float q4, float q5)"), "{text}");
        assert!(text.contains("chain_reduce_column_run_partials(int op, i64 chunk, ChainLayout l, const signed char* s0, const unsigned char* s1, float* out, float q0"), "{text}");
        assert!(text.contains("columns_body<16, COLUMN_RUN_ROWS, false>(op, chunk, l, s0, s1, q0, q1, q2, q3, q4, q5, out);"), "{text}");
        assert!(text.contains("v[e] = element(v0[e], v1[e], q0, q1, q2, q3, q4, q5);"), "{text}");
        assert!(!text.contains("chain_vec") && !text.contains("store_run<V>(out + i"), "{text}");
        assert!(!chain_source(&join).expect("chains").contains("reduce.cuh"), "other chains do not include the reductions");
        assert_ne!(program_bits(&head), program_bits(&Program { reduce: None, ..head.clone() }), "one kernel each");
    }

    #[test]
    fn one_level_and_column_operands_get_column_table_kernels() {
        let bias = island(vec![DataType::I8, DataType::F32], DataType::I8, vec![Some(0), None]);
        assert_eq!(bias.column_table(), Some(0));
        let text = chain_source(&bias).expect("8-bit chains");
        assert!(text.contains("chain_column_fill(unsigned columns, ChainLayout l, unsigned char* table, const float* s1, float q0, float q1, float q2, float q3)"), "{text}");
        assert!(text.contains("element(to_f((signed char)(unsigned char)(e & 255)), to_f(s1[l.offset[1] + c * l.stride[1][l.rank - 1]])"), "{text}");
        assert!(text.contains("chain_columns(unsigned rows, unsigned columns, unsigned rows_per_block, const signed char* levels, signed char* out, const unsigned char* table)"), "{text}");
        // `Add(bias, product)`: the level is the operand.
        let bias_first = island(vec![DataType::F32, DataType::U8], DataType::I8, vec![None, Some(0)]);
        assert_eq!(bias_first.column_table(), Some(1));
        let text = chain_source(&bias_first).expect("8-bit chains");
        assert!(text.contains("element(to_f(s0[l.offset[0] + c * l.stride[0][l.rank - 1]]), to_f((unsigned char)(unsigned char)(e & 255))"), "{text}");
        assert_eq!(island(vec![DataType::F16, DataType::F32], DataType::I8, vec![None, None]).column_table(), None, "no level");
        assert_eq!(island(vec![DataType::I8, DataType::F32], DataType::F16, vec![Some(0), None]).column_table(), None, "a float output");
        assert_eq!(island(vec![DataType::I8, DataType::U8], DataType::I8, vec![Some(0), Some(2)]).column_table(), None, "two levels: the table kernels");
        assert_eq!(island(vec![DataType::I8, DataType::U8, DataType::F32], DataType::I8, vec![Some(0), Some(2), None]).column_table(), None, "two levels and a float");
    }

    #[test]
    fn a_program_that_normalizes_rows_runs_a_warp_per_row() {
        let block = layer_norm_block();
        assert!(block.normalizes() && block.table_entries().is_none());
        let text = chain_source(&block).expect("8-bit chains");
        assert!(text.contains("chain_rows(unsigned rows, ChainLayout l, const signed char* s0, const float* s1, const signed char* s2"), "{text}");
        assert!(!text.contains("chain_vec"), "no per-element kernel: {text}");
        assert!(text.contains("const bool coords0 = chain_rows_need_coords(l, 0x7);") && text.contains("if (!DIRECT && coords0) chain_coords(l, i, c);"), "coordinates where a slot needs them: {text}");
        assert!(text.contains("chain_row_load<4>(l, 2, i, k, c, s2, v2);") && text.contains("chain_row_load<4>(l, 4, i, k, c, s4, v4);"), "{text}");
        assert!(text.contains("const unsigned d2_0 = (l.row >> 2 & 1) ? l.offset[2] : row * len;") && text.contains("if (DIRECT) load_run<4>(s2 + d2_0 + k, v2);"), "the direct body's loads: {text}");
        assert!(text.contains("if (!chain_rows_need_coords(l, 0x1f)) chain_rows_body<true>(row, lane, l, s0, s1, s2, s3, s4, out, q0, q1, q2, q3, q4, q5);"), "{text}");
        assert!(text.contains("constexpr unsigned len = 768;") && text.contains("constexpr int RUNS = 6;"), "the row's length fixed: {text}");
        assert!(text.contains("r[4 * j + e] = after((r[4 * j + e] - mean) * rstd * v3[e] + v4[e], v0[e]"), "the norm's operands are slots 3 and 4: {text}");
        assert!(text.contains("x2 = __fmul_rn(__fsub_rn(x2, q3), q2);"), "{text}");
        // The last QuantizeLinear is the store's: no level_on in `after`, the row stored at once.
        assert!(!text.contains("level_on") && text.contains("store_row_levels<RUNS>(out + row * len, lane, len, r, grid_of(q4, q5, -128.0f, 127.0f));"), "{text}");
        let float_out = Program { out: DataType::F32, steps: block.steps[..3].to_vec(), ..block.clone() };
        let text = chain_source(&float_out).expect("f32 output");
        assert!(!text.contains("store_row_levels") && text.contains("store_run<4>(out + i, o);"), "a float row is stored by runs: {text}");
        // A slot read before the norm and after it is addressed in each pass.
        let twice = Program { steps: vec![block.steps[0], block.steps[1], block.steps[2], Step::Binary { code: 2, operand: 0, running_first: true }, block.steps[3]], ..block.clone() };
        let text = chain_source(&twice).expect("8-bit chains");
        assert!(text.contains("const unsigned d1_0 = ") && text.contains("const unsigned d1_1 = ") && text.contains("load_run<4>(s1 + d1_1 + k, v1);"), "{text}");
        let other = Program { steps: vec![block.steps[0], block.steps[1], Step::Normalize { scale: 2, bias: 3, epsilon: 1e-5, len: 768 }, block.steps[3]], ..block.clone() };
        assert_ne!(chain_kernel(&other), chain_kernel(&block), "another epsilon, another kernel");
    }

    #[test]
    fn a_program_names_one_kernel_and_any_difference_another() {
        let steps = [Step::Binary { code: 2, operand: 0, running_first: true }, Step::Unary { code: 8, alpha: 0.0, beta: 6.0 }];
        let source = chain_kernel(&Program::float(DataType::F32, steps.to_vec(), 1)).expect("f32 chains");
        assert_eq!(chain_kernel(&Program::float(DataType::F32, steps.to_vec(), 1)), Some(source));
        let clip5 = [steps[0], Step::Unary { code: 8, alpha: 0.0, beta: 5.0 }];
        assert_ne!(chain_kernel(&Program::float(DataType::F32, clip5.to_vec(), 1)), Some(source), "another bound");
        assert_ne!(chain_kernel(&Program::float(DataType::BF16, steps.to_vec(), 1)), Some(source), "another type");
        assert_eq!(chain_kernel(&Program::float(DataType::I32, steps.to_vec(), 1)), None);
    }
}
