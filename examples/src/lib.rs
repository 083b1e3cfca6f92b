//! Models that ship with kiln, built through the network-definition API.
//!
//! [`mnist_network`] is the network of TensorRT's sampleMNISTAPI. Its weights come from a
//! closed formula ([`sine_weights`]) instead of a trained checkpoint, so the model needs no
//! data files and `models/make_mnist.py` can write the identical network as ONNX
//! (`models/mnist.onnx`) for comparing kiln's importer and onnxruntime against this API path.
#![forbid(unsafe_code)]

// The Rust examples of docs/embedding.md run as this crate's doctests
// (`cargo test --workspace --doc -p kiln-examples`), so the guide cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../docs/embedding.md")]
mod embedding_guide {}

use kiln::{
    ActivationKind, DataType, Dim, ElementwiseOp, MatrixOp, Network, NetworkError, PoolingKind, PoolingParams, Shape,
    TensorData, TensorId,
};

/// Side of the square MNIST input image.
pub const IMAGE_SIDE: usize = 28;
/// Number of digit classes.
pub const CLASSES: usize = 10;

/// Deterministic weights: `w[i] = f32(2 / sqrt(fan_in) * sin(0.37 * i + seed))`, computed
/// in f64 and rounded once (so numpy reproduces it bit for bit in practice).
///
/// `sin` values have variance 1/2, so the `2 / sqrt(fan_in)` factor gives each weight a
/// variance of `2 / fan_in` (He initialization): activations stay of order one through the
/// layers instead of vanishing or exploding.
pub fn sine_weights(count: usize, fan_in: usize, seed: f64) -> Vec<f32> {
    let scale = 2.0 / (fan_in as f64).sqrt();
    (0..count).map(|i| (scale * (0.37 * i as f64 + seed).sin()) as f32).collect()
}

/// Every weights tensor of the MNIST network, in the layouts TensorRT's API takes.
#[derive(Clone, Debug, PartialEq)]
pub struct MnistWeights {
    /// `[20, 1, 5, 5]`
    pub conv1_kernel: Vec<f32>,
    /// `[20]`
    pub conv1_bias: Vec<f32>,
    /// `[50, 20, 5, 5]`
    pub conv2_kernel: Vec<f32>,
    /// `[50]`
    pub conv2_bias: Vec<f32>,
    /// `[500, 800]` (output-major, multiplied transposed)
    pub ip1_kernel: Vec<f32>,
    /// `[1, 500]`
    pub ip1_bias: Vec<f32>,
    /// `[10, 500]`
    pub ip2_kernel: Vec<f32>,
    /// `[10]`
    pub ip2_bias: Vec<f32>,
}

/// The MNIST weights; the seeds 1..=8 and fan-ins match `models/make_mnist.py`.
pub fn mnist_weights() -> MnistWeights {
    MnistWeights {
        conv1_kernel: sine_weights(20 * 25, 25, 1.0),
        conv1_bias: sine_weights(20, 25, 2.0),
        conv2_kernel: sine_weights(50 * 20 * 25, 20 * 25, 3.0),
        conv2_bias: sine_weights(50, 20 * 25, 4.0),
        ip1_kernel: sine_weights(500 * 800, 800, 5.0),
        ip1_bias: sine_weights(500, 800, 6.0),
        ip2_kernel: sine_weights(10 * 500, 500, 7.0),
        ip2_bias: sine_weights(10, 500, 8.0),
    }
}

/// TensorRT's sampleMNISTAPI network: input `data` f32 `[batch, 1, 28, 28]`, output `prob`
/// f32 `[batch, 10]` (softmax probabilities).
///
/// conv 5×5×20 → max-pool 2×2/2 → conv 5×5×50 → max-pool 2×2/2 → reshape `[batch, 800]`
/// → matrix multiply by the transposed `[500, 800]` constant → bias add → ReLU
/// → fully connected to 10 → softmax.
pub fn mnist_network(batch: usize) -> Result<Network, NetworkError> {
    mnist_network_for(Dim::Fixed(batch))
}

/// [`mnist_network`] with a dynamic batch: input `data` f32 `[N, 1, 28, 28]`, output
/// `prob` f32 `[N, 10]`; build it with an optimization profile for `data`.
pub fn mnist_network_dynamic_batch() -> Result<Network, NetworkError> {
    mnist_network_for(Dim::Named("N".into()))
}

fn mnist_network_for(batch: Dim) -> Result<Network, NetworkError> {
    let w = mnist_weights();
    let mut net = Network::new("mnist_api");
    let side = Dim::Fixed(IMAGE_SIDE);
    let data = net.add_input("data", DataType::F32, Shape(vec![batch, Dim::Fixed(1), side.clone(), side]))?;

    let conv1 =
        net.add_convolution(data, 20, &[5, 5], TensorData::F32(w.conv1_kernel), Some(TensorData::F32(w.conv1_bias)))?;
    let conv1 = net.output(conv1, 0);
    let pool1 = max_pool_2x2(&mut net, conv1)?;
    let conv2 =
        net.add_convolution(pool1, 50, &[5, 5], TensorData::F32(w.conv2_kernel), Some(TensorData::F32(w.conv2_bias)))?;
    let conv2 = net.output(conv2, 0);
    let pool2 = max_pool_2x2(&mut net, conv2)?;

    // -1 keeps the batch, fixed or dynamic.
    let flat = net.add_reshape(pool2, &[-1, 800])?;
    let ip1_kernel = net.add_constant(&[500, 800], TensorData::F32(w.ip1_kernel))?;
    let ip1 =
        net.add_matrix_multiply(net.output(flat, 0), MatrixOp::None, net.output(ip1_kernel, 0), MatrixOp::Transpose)?;
    let ip1_bias = net.add_constant(&[1, 500], TensorData::F32(w.ip1_bias))?;
    let ip1 = net.add_elementwise(net.output(ip1, 0), net.output(ip1_bias, 0), ElementwiseOp::Sum)?;
    let relu = net.add_activation(net.output(ip1, 0), ActivationKind::Relu)?;

    let ip2 = net.add_fully_connected(
        net.output(relu, 0),
        CLASSES,
        TensorData::F32(w.ip2_kernel),
        Some(TensorData::F32(w.ip2_bias)),
    )?;
    let prob = net.add_softmax(net.output(ip2, 0))?;
    let prob = net.output(prob, 0);
    net.set_tensor_name(prob, "prob")?;
    net.mark_output(prob)?;
    Ok(net)
}

/// Max pooling with a 2×2 window and stride 2, as in sampleMNISTAPI.
fn max_pool_2x2(net: &mut Network, input: TensorId) -> Result<TensorId, NetworkError> {
    let pool = net.add_pooling(input, PoolingKind::Max, &[2, 2])?;
    let params = PoolingParams {
        kind: PoolingKind::Max,
        window: vec![2, 2],
        strides: vec![2, 2],
        dilations: vec![1, 1],
        pre_padding: vec![0, 0],
        post_padding: vec![0, 0],
        ceil_mode: false,
        average_count_excludes_padding: true,
    };
    net.set_pooling_params(pool, params)?;
    Ok(net.output(pool, 0))
}

/// A synthetic handwritten "1" (28×28, values in [0, 1], row-major): a slightly slanted
/// stroke with a flag at the top. `models/make_mnist.py` draws the same image.
pub fn digit_one_image() -> Vec<f32> {
    let mut img = vec![0.0f32; IMAGE_SIDE * IMAGE_SIDE];
    for row in 4..24 {
        let col = 14 - (row - 4) / 8;
        img[row * IMAGE_SIDE + col] = 1.0;
        img[row * IMAGE_SIDE + col + 1] = 0.5;
    }
    for k in 0..4 {
        img[(7 - k) * IMAGE_SIDE + 11 + k] = 1.0;
    }
    img
}
