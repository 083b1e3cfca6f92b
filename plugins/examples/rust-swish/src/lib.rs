//! An example third-party plugin: `kiln.examples::Swish@1`, y = x · sigmoid(beta · x),
//! with cpu, wgpu (WGSL) and cuda (CUDA C++ for NVRTC) implementations. It uses only the
//! SDK; build it as a cdylib and load it with `--plugins` or `KILN_PLUGIN_PATH`.
//!
//! The plugin also has a test hook: a `panic_on_enqueue` field set to 1 makes its cpu
//! implementation panic, which kiln must report as an error (see the bad-plugin tests).

use kiln_plugin_sdk::{
    export_plugins, CpuTensor, CpuTensorMut, Creator, CudaImage, CudaKernel, DimExpr, ElementType, Field, FieldType,
    Fields, Plugin, TensorDesc, WgslKernel,
};

#[derive(Debug)]
pub struct Swish {
    beta: f32,
    panic_on_enqueue: bool,
}

const WGSL: &str = r#"
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
override beta: f32 = 1.0;
@compute @workgroup_size(256)
fn swish(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < arrayLength(&y)) {
        y[i] = x[i] / (1.0 + exp(-beta * x[i]));
    }
}
"#;

impl Plugin for Swish {
    const RUNS_ON_CPU: bool = true;
    const RUNS_ON_WGPU: bool = true;
    const RUNS_ON_CUDA: bool = true;

    fn num_outputs(&self) -> usize {
        1
    }

    fn output_types(&self, inputs: &[ElementType]) -> Result<Vec<ElementType>, String> {
        match inputs {
            [ElementType::F32] => Ok(vec![ElementType::F32]),
            other => Err(format!("Swish takes one f32 input, got {other:?}")),
        }
    }

    fn output_shapes(&self, input_ranks: &[usize]) -> Result<Vec<Vec<DimExpr>>, String> {
        Ok(vec![DimExpr::same_as_input(0, input_ranks[0])])
    }

    fn supports_format_combination(&self, pos: usize, io: &[TensorDesc], _num_inputs: usize) -> bool {
        io[pos].dtype == ElementType::F32
    }

    fn timing_cache_id(&self) -> String {
        format!("beta={}", self.beta)
    }

    fn serialize(&self) -> Vec<(String, Field)> {
        let mut fields = vec![("beta".to_string(), Field::F32(vec![self.beta]))];
        if self.panic_on_enqueue {
            fields.push(("panic_on_enqueue".into(), Field::I32(vec![1])));
        }
        fields
    }

    fn enqueue_cpu(
        &mut self,
        _tactic: u32,
        inputs: &[CpuTensor<'_>],
        outputs: &mut [CpuTensorMut<'_>],
        _workspace: &mut [u8],
    ) -> Result<(), String> {
        if self.panic_on_enqueue {
            panic!("Swish was asked to panic");
        }
        let x = inputs[0].f32()?;
        let y = outputs[0].f32_mut()?;
        for (y, &x) in y.iter_mut().zip(x) {
            *y = x / (1.0 + (-self.beta * x).exp());
        }
        Ok(())
    }

    fn wgsl_kernel(&self, io: &[TensorDesc], _num_inputs: usize) -> Result<WgslKernel, String> {
        let n = io[1].volume().ok_or("unknown output size")? as u32;
        let source = WGSL.replace("override beta: f32 = 1.0;", &format!("const beta: f32 = {:?};", self.beta));
        Ok(WgslKernel { source, entry_point: "swish".into(), workgroups: [n.div_ceil(256).max(1), 1, 1] })
    }

    fn cuda_kernel(&self, io: &[TensorDesc], _num_inputs: usize) -> Result<CudaKernel, String> {
        let n = io[1].volume().ok_or("unknown output size")? as u32;
        let source = format!(
            "extern \"C\" __global__ void swish(const float* x, float* y, unsigned long long n) {{\n\
             unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n\
             if (i < n) y[i] = x[i] / (1.0f + expf(-({:?}f) * x[i]));\n}}\n",
            self.beta
        );
        Ok(CudaKernel {
            image: CudaImage::Source(source),
            entry_point: "swish".into(),
            grid: [n.div_ceil(256).max(1), 1, 1],
            block: [256, 1, 1],
            shared_memory_bytes: 0,
        })
    }
}

#[derive(Debug)]
pub struct SwishCreator;

impl Creator for SwishCreator {
    const NAMESPACE: &'static str = "kiln.examples";
    const NAME: &'static str = "Swish";
    const VERSION: &'static str = "1";
    type Plugin = Swish;

    fn field_specs() -> Vec<(&'static str, FieldType)> {
        vec![("beta", FieldType::F32), ("panic_on_enqueue", FieldType::I32)]
    }

    fn create(fields: &Fields) -> Result<Swish, String> {
        let beta = fields.f32_or("beta", 1.0)?;
        if !beta.is_finite() {
            return Err(format!("beta must be finite, got {beta}"));
        }
        let panic_on_enqueue = matches!(fields.get("panic_on_enqueue"), Some(Field::I32(v)) if v.first() == Some(&1));
        Ok(Swish { beta, panic_on_enqueue })
    }
}

export_plugins!("kiln-example-swish", [SwishCreator]);
