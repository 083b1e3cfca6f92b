//! The register-tiled matrix-product kernel, generated as WGSL for each tile shape and
//! element type (the tactics of a MatrixMultiply).
//!
//! A 16×16 workgroup computes a `16·thread_m × 16·thread_n` block of C; each invocation
//! keeps a `thread_m × thread_n` sub-block in vec4 registers (named variables, so no
//! driver ever spills an indexed array to local memory). A and B are read as vec4 from
//! device memory, staged `depth` deep in two workgroup-memory buffers (the next slice is
//! loaded into registers while the current one is multiplied: one barrier per slice).
//! Invocation (tx, ty) owns rows `64i + 4ty + r` and columns `64j + 4tx + c`, so the 16
//! invocations of a row read 16 consecutive vec4 of the B stage (no bank conflicts) and
//! the A stage reads are broadcasts.
//!
//! Every index is in bounds by construction (loads and stores outside M×N×K are guarded,
//! workgroup indices are bounded by the constants), so the pipelines are compiled without
//! runtime bounds checks ([`crate::device::Gpu::pipeline_trusted`]).
//!
//! Requirements (checked by [`GemmShape::fits`]): A is row-major M×K and B row-major K×N
//! (unit column stride, row stride K resp. N), K and N multiples of 4, batch offsets
//! multiples of 4. Bindings and params are those of `shaders/matmul.wgsl`:
//! `[M, N, K, batches, a_rs, a_cs, b_rs, b_cs, then (a_off, b_off) per batch]`.

use std::fmt::Write;
use std::collections::HashMap;

/// Element type of A, B and C in device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GemmStorage {
    F32,
    /// Packed halves (two per 32-bit word); needs SHADER_F16.
    F16,
}

/// Type the products are summed in (and the workgroup stage holds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Accumulate {
    F32,
    F16,
}

/// One variant of the kernel: tile shape, staging depth and types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmKernel {
    /// Rows of C per invocation (4 or 8).
    pub thread_m: u32,
    /// Columns of C per invocation (4 or 8).
    pub thread_n: u32,
    /// Depth of one staged K slice (a multiple of 4).
    pub depth: u32,
    pub storage: GemmStorage,
    pub accumulate: Accumulate,
}

/// The f32 tile variants offered as tactics, largest first.
pub const F32_TACTICS: [GemmKernel; 4] = [
    GemmKernel::f32(8, 8, 8),
    GemmKernel::f32(8, 8, 16),
    GemmKernel::f32(4, 8, 16),
    GemmKernel::f32(4, 4, 16),
];

/// Workgroup side (invocations): the kernel runs 16×16 = 256 invocations.
const SIDE: u32 = 16;

impl GemmKernel {
    pub const fn f32(thread_m: u32, thread_n: u32, depth: u32) -> GemmKernel {
        GemmKernel { thread_m, thread_n, depth, storage: GemmStorage::F32, accumulate: Accumulate::F32 }
    }

    pub const fn f16(thread_m: u32, thread_n: u32, depth: u32, accumulate: Accumulate) -> GemmKernel {
        GemmKernel { thread_m, thread_n, depth, storage: GemmStorage::F16, accumulate }
    }

    pub fn block_m(&self) -> u32 {
        SIDE * self.thread_m
    }

    pub fn block_n(&self) -> u32 {
        SIDE * self.thread_n
    }

    /// Whether the variant is well formed: 4 or 8 per invocation each way, and each stage
    /// filled by whole vec4 loads of all 256 invocations.
    pub fn is_valid(&self) -> bool {
        let per_thread = |t: u32| t == 4 || t == 8;
        let stage_vecs = |block: u32| block * self.depth / 4;
        per_thread(self.thread_m)
            && per_thread(self.thread_n)
            && self.depth % 4 == 0
            && self.depth > 0
            && stage_vecs(self.block_m()) % (SIDE * SIDE) == 0
            && stage_vecs(self.block_n()) % (SIDE * SIDE) == 0
    }

    /// Pipeline cache key (and tactic name).
    pub fn name(&self) -> String {
        let ty = |s: GemmStorage| match s {
            GemmStorage::F32 => "f32",
            GemmStorage::F16 => "f16",
        };
        let acc = match self.accumulate {
            Accumulate::F32 => "f32",
            Accumulate::F16 => "f16",
        };
        format!(
            "gemm_{}x{}_d{}_{}_acc{}",
            self.block_m(),
            self.block_n(),
            self.depth,
            ty(self.storage),
            acc
        )
    }

    /// Workgroups for an `m × n` product over `batches` matrices.
    pub fn groups(&self, m: u32, n: u32, batches: u32) -> [u32; 3] {
        [n.div_ceil(self.block_n()), m.div_ceil(self.block_m()), batches]
    }

    /// Bytes of workgroup memory the kernel declares.
    pub fn workgroup_bytes(&self) -> u32 {
        let elem = if self.accumulate == Accumulate::F16 { 2 } else { 4 };
        2 * self.depth * (self.block_m() + self.block_n()) * elem
    }

    /// The WGSL source (entry point `main`).
    pub fn source(&self) -> String {
        let s = match self.storage {
            GemmStorage::F32 => "f32",
            GemmStorage::F16 => "f16",
        };
        let acc = match self.accumulate {
            Accumulate::F32 => "f32",
            Accumulate::F16 => "f16",
        };
        let (bm, bn, bk) = (self.block_m(), self.block_n(), self.depth);
        let (tm4, tn4) = (self.thread_m / 4, self.thread_n / 4);
        let (stage_a, stage_b) = (bk * bm / 4, bk * bn / 4);
        let (slots_a, slots_b) = (stage_a / (SIDE * SIDE), stage_b / (SIDE * SIDE));
        let mut w = String::new();
        let f16 = self.storage == GemmStorage::F16 || self.accumulate == Accumulate::F16;
        if f16 {
            w.push_str("enable f16;\n");
        }
        let _ = writeln!(w, "// kiln {} (generated by kiln_wgpu::gemm)", self.name());
        // A and B read-write: they may share an arena buffer with C (see crate::shaders::
        // tensor_bindings_read_write).
        let _ = writeln!(
            w,
            "@group(0) @binding(0) var<storage, read> params: array<u32>;\n\
             @group(0) @binding(1) var<storage, read_write> a: array<vec4<{s}>>;\n\
             @group(0) @binding(2) var<storage, read_write> b: array<vec4<{s}>>;\n\
             @group(0) @binding(3) var<storage, read_write> c: array<vec4<{s}>>;\n\
             var<workgroup> sa: array<vec4<{acc}>, {}>;\n\
             var<workgroup> sb: array<vec4<{acc}>, {}>;\n",
            2 * stage_a,
            2 * stage_b
        );
        w.push_str(
            "@compute @workgroup_size(16, 16)\n\
             fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,\n\
             \x20       @builtin(local_invocation_index) li: u32) {\n\
             \x20   let m = params[0];\n\
             \x20   let n = params[1];\n\
             \x20   let k = params[2];\n\
             \x20   let k4 = k / 4u;\n\
             \x20   let n4 = n / 4u;\n\
             \x20   let batch = wid.z;\n\
             \x20   let a_rs4 = params[4] / 4u;\n\
             \x20   let b_rs4 = params[6] / 4u;\n\
             \x20   let a_base = params[8u + 2u * batch] / 4u;\n\
             \x20   let b_base = params[9u + 2u * batch] / 4u;\n\
             \x20   let tx = lid.x;\n\
             \x20   let ty = lid.y;\n",
        );
        let _ = writeln!(w, "    let row0 = wid.y * {bm}u;\n    let col04 = wid.x * {}u;", bn / 4);
        let _ = writeln!(w, "    let tiles = (k + {}u) / {bk}u;", bk - 1);
        let zero = format!("vec4<{acc}>()");
        for i in 0..self.thread_m {
            for j in 0..tn4 {
                let _ = writeln!(w, "    var c{i}_{j} = {zero};");
            }
        }
        for slot in 0..slots_a {
            let _ = writeln!(w, "    var ra{slot} = {zero};");
        }
        for slot in 0..slots_b {
            let _ = writeln!(w, "    var rb{slot} = {zero};");
        }
        // Loads of slice `kb` (first K index) into the staging registers.
        let load = |w: &mut String, kb: &str| {
            for slot in 0..slots_a {
                let _ = writeln!(
                    w,
                    "        {{ let e = li + {}u; let r = row0 + e / {}u; let q = {kb} / 4u + e % {}u;\n\
                     \x20         ra{slot} = {zero};\n\
                     \x20         if (r < m && q < k4) {{ ra{slot} = vec4<{acc}>(a[a_base + r * a_rs4 + q]); }} }}",
                    slot * SIDE * SIDE,
                    bk / 4,
                    bk / 4
                );
            }
            for slot in 0..slots_b {
                let _ = writeln!(
                    w,
                    "        {{ let e = li + {}u; let kr = {kb} + e / {}u; let q = col04 + e % {}u;\n\
                     \x20         rb{slot} = {zero};\n\
                     \x20         if (kr < k && q < n4) {{ rb{slot} = vec4<{acc}>(b[b_base + kr * b_rs4 + q]); }} }}",
                    slot * SIDE * SIDE,
                    bn / 4,
                    bn / 4
                );
            }
        };
        // Stores of the staging registers into stage buffer `buf` (A transposed: K-major).
        let store = |w: &mut String, buf: &str| {
            for slot in 0..slots_a {
                let _ = writeln!(
                    w,
                    "        {{ let e = li + {}u; let r = e / {}u; let q = e % {}u;\n\
                     \x20         let at = {buf} * {stage_a}u + q * {}u + r / 4u;",
                    slot * SIDE * SIDE,
                    bk / 4,
                    bk / 4,
                    4 * bm / 4
                );
                for comp in 0..4 {
                    let _ = writeln!(w, "          sa[at + {}u][r % 4u] = ra{slot}[{comp}];", comp * bm / 4);
                }
                w.push_str("        }\n");
            }
            for slot in 0..slots_b {
                let _ = writeln!(
                    w,
                    "        {{ let e = li + {}u; sb[{buf} * {stage_b}u + e] = rb{slot}; }}",
                    slot * SIDE * SIDE
                );
            }
        };
        w.push_str("    {\n");
        load(&mut w, "0u");
        store(&mut w, "0u");
        w.push_str("    }\n    workgroupBarrier();\n");
        w.push_str("    for (var t = 0u; t < tiles; t++) {\n        let cur = t & 1u;\n");
        w.push_str("        let more = t + 1u < tiles;\n        if (more) {\n");
        load(&mut w, &format!("(t + 1u) * {bk}u"));
        w.push_str("        }\n");
        let _ = writeln!(w, "        let sa0 = cur * {stage_a}u + ty;\n        let sb0 = cur * {stage_b}u + tx;");
        for kk in 0..bk {
            // One block per step: its a/b names are local to it.
            w.push_str("        {\n");
            for i in 0..tm4 {
                let _ = writeln!(w, "        let a{i} = sa[sa0 + {}u];", kk * bm / 4 + SIDE * i);
            }
            for j in 0..tn4 {
                let _ = writeln!(w, "        let b{j} = sb[sb0 + {}u];", kk * bn / 4 + SIDE * j);
            }
            for i in 0..tm4 {
                for r in 0..4 {
                    let row = 4 * i + r;
                    for j in 0..tn4 {
                        let comp = ["x", "y", "z", "w"][r as usize];
                        let _ = writeln!(
                            w,
                            "        c{row}_{j} = fma(vec4<{acc}>(a{i}.{comp}), b{j}, c{row}_{j});"
                        );
                    }
                }
            }
            w.push_str("        }\n");
        }
        w.push_str("        if (more) {\n");
        store(&mut w, "(1u - cur)");
        w.push_str("        }\n        workgroupBarrier();\n    }\n");
        // Guarded stores of the sub-block.
        for i in 0..tm4 {
            for r in 0..4 {
                let row = 4 * i + r;
                let _ = writeln!(w, "    {{ let r = row0 + {}u + 4u * ty; if (r < m) {{", 64 * i + r);
                for j in 0..tn4 {
                    let _ = writeln!(
                        w,
                        "        {{ let q = col04 + {}u + tx; if (q < n4) {{ c[(batch * m + r) * n4 + q] = vec4<{s}>(c{row}_{j}); }} }}",
                        SIDE * j
                    );
                }
                w.push_str("    } }\n");
            }
        }
        w.push_str("}\n");
        w
    }
}

/// The layout facts of one product that decide whether [`GemmKernel`] can run it.
#[derive(Clone, Copy, Debug)]
pub struct GemmShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a_row_stride: usize,
    pub a_col_stride: usize,
    pub b_row_stride: usize,
    pub b_col_stride: usize,
}

impl GemmShape {
    /// Row-major A and B, K and N multiples of 4 (so every vec4 is whole and aligned,
    /// and the batch offsets `i·M·K`, `i·K·N` are multiples of 4), and C within 2^32 words.
    pub fn fits(&self) -> bool {
        self.a_col_stride == 1
            && self.b_col_stride == 1
            && self.a_row_stride == self.k
            && self.b_row_stride == self.n
            && self.k % 4 == 0
            && self.n % 4 == 0
            && self.k > 0
    }
}

/// The variant used without a timed tactic: the 128×128 tile when both sides fill it,
/// else the 64×64 one.
pub fn default_kernel(m: usize, n: usize) -> GemmKernel {
    if m >= 128 && n >= 128 {
        F32_TACTICS[0]
    } else {
        F32_TACTICS[3]
    }
}

/// (M, N, K) → the variant an engine's tactic chose.
pub type GemmChoices = HashMap<(usize, usize, usize), GemmKernel>;

/// A product the gemm kernel can run: fixed shapes, float, both operands row-major.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Product {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batches: usize,
}
