//! A ResNet-50-sized network (its convolution shapes with deterministic weights), to check
//! that the GEMM-based kernels run real models in seconds. Ignored by default:
//! `cargo test -p kiln-cpu --release -- --ignored --nocapture`.

use kiln::{
    ActivationKind, Builder, BuilderConfig, ConvolutionParams, DataType, ElementwiseOp, ExecutionContext, HostTensor,
    LayerKind, MatrixOp, Network, PoolingKind, PoolingParams, ReduceOp, Shape, TensorData, TensorId,
};
use kiln_cpu::CpuBackend;
use std::collections::HashMap;
use std::time::Instant;

struct Builder50 {
    net: Network,
    seed: u64,
}

impl Builder50 {
    /// Deterministic weights of He-like scale from a linear congruential sequence.
    fn weights(&mut self, shape: &[usize], fan_in: usize) -> TensorId {
        let n: usize = shape.iter().product();
        let scale = (2.0 / fan_in as f64).sqrt() as f32;
        let values = (0..n)
            .map(|_| {
                self.seed = self.seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((self.seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
            })
            .collect();
        let id = self.net.add_constant(shape, TensorData::F32(values)).unwrap();
        self.net.output(id, 0)
    }

    fn conv(&mut self, x: TensorId, maps: usize, k: usize, stride: usize, relu: bool) -> TensorId {
        let c = self.net.tensor(x).shape.dims()[1].fixed().unwrap();
        let w = self.weights(&[maps, c, k, k], c * k * k);
        let b = self.weights(&[maps], maps);
        let p = ConvolutionParams {
            groups: 1,
            strides: vec![stride; 2],
            dilations: vec![1; 2],
            pre_padding: vec![k / 2; 2],
            post_padding: vec![k / 2; 2],
        };
        let y = self.net.add_layer("", LayerKind::Convolution(p), vec![Some(x), Some(w), Some(b)]).unwrap();
        let y = self.net.output(y, 0);
        if !relu {
            return y;
        }
        let r = self.net.add_activation(y, ActivationKind::Relu).unwrap();
        self.net.output(r, 0)
    }

    fn bottleneck(&mut self, x: TensorId, width: usize, stride: usize, project: bool) -> TensorId {
        let a = self.conv(x, width, 1, 1, true);
        let b = self.conv(a, width, 3, stride, true);
        let c = self.conv(b, 4 * width, 1, 1, false);
        let shortcut = if project { self.conv(x, 4 * width, 1, stride, false) } else { x };
        let sum = self.net.add_elementwise(c, shortcut, ElementwiseOp::Sum).unwrap();
        let sum = self.net.output(sum, 0);
        let r = self.net.add_activation(sum, ActivationKind::Relu).unwrap();
        self.net.output(r, 0)
    }
}

#[test]
#[ignore = "timing check; run explicitly"]
fn resnet50_sized_network_runs_in_seconds() {
    let mut b = Builder50 { net: Network::new("resnet50-shaped"), seed: 1 };
    let x = b.net.add_input("image", DataType::F32, Shape::fixed(&[1, 3, 224, 224])).unwrap();
    let mut y = b.conv(x, 64, 7, 2, true);
    let pool = PoolingParams {
        kind: PoolingKind::Max,
        window: vec![3, 3],
        strides: vec![2, 2],
        dilations: vec![1, 1],
        pre_padding: vec![1, 1],
        post_padding: vec![1, 1],
        ceil_mode: false,
        average_count_excludes_padding: true,
    };
    let p = b.net.add_layer("", LayerKind::Pooling(pool), vec![Some(y)]).unwrap();
    y = b.net.output(p, 0);
    for (stage, (&blocks, &width)) in [3, 4, 6, 3].iter().zip(&[64, 128, 256, 512]).enumerate() {
        for i in 0..blocks {
            let stride = if i == 0 && stage > 0 { 2 } else { 1 };
            y = b.bottleneck(y, width, stride, i == 0);
        }
    }
    let g = b.net.add_reduce(y, ReduceOp::Mean, &[2, 3], false).unwrap();
    let g = b.net.output(g, 0);
    let w = b.weights(&[1000, 2048], 2048);
    let fc = b.net.add_matrix_multiply(g, MatrixOp::None, w, MatrixOp::Transpose).unwrap();
    let logits = b.net.output(fc, 0);
    b.net.set_tensor_name(logits, "logits").unwrap();
    b.net.mark_output(logits).unwrap();

    let backend = CpuBackend::new();
    let engine = Builder::new(&backend).build(&b.net, &BuilderConfig::default()).unwrap();
    let ctx = ExecutionContext::new(engine, &backend).unwrap();
    let image: Vec<f32> = (0..3 * 224 * 224).map(|i| ((i % 255) as f32 / 255.0) - 0.5).collect();
    let feeds = HashMap::from([("image".to_string(), HostTensor::from_f32(vec![1, 3, 224, 224], image).unwrap())]);
    let start = Instant::now();
    let out = ctx.run(&feeds).unwrap();
    let elapsed = start.elapsed();
    println!("ResNet-50-shaped forward pass: {elapsed:?}");
    let logits = &out["logits"];
    assert_eq!(logits.shape(), [1, 1000]);
    assert!(logits.to_f64_vec().iter().all(|v| v.is_finite()));
    assert!(elapsed.as_secs_f64() < 30.0, "took {elapsed:?}");
}
