//! Small hand-built networks, one per pass, in the shapes exporters produce.

use kiln::{
    ActivationKind, ConvolutionParams, DataType, Dim, ElementwiseOp, GatherMode, HostTensor,
    LayerKind, MatrixOp, Network, ReduceOp, Shape, ShuffleParams, TensorData, TensorId, UnaryOp,
};

/// A network under construction with named layers.
pub struct G {
    pub net: Network,
}

impl G {
    pub fn new(name: &str) -> G {
        G {
            net: Network::new(name),
        }
    }

    pub fn input(&mut self, name: &str, dims: Vec<Dim>) -> TensorId {
        self.net
            .add_input(name, DataType::F32, Shape(dims))
            .expect("input")
    }

    pub fn fixed_input(&mut self, name: &str, dims: &[usize]) -> TensorId {
        self.net
            .add_input(name, DataType::F32, Shape::fixed(dims))
            .expect("input")
    }

    fn constant_tensor(&mut self, name: &str, value: HostTensor) -> TensorId {
        let w = self.net.add_weights(value);
        let id = self
            .net
            .add_layer(name, LayerKind::Constant { weights: w }, vec![])
            .expect("constant");
        self.net.output(id, 0)
    }

    /// A constant with deterministic, varied values.
    pub fn constant(&mut self, name: &str, dims: &[usize], scale: f32) -> TensorId {
        let n: usize = dims.iter().product();
        let values = (0..n)
            .map(|i| scale * (((i * 7 + 3) % 11) as f32 - 5.0) / 5.0)
            .collect();
        self.constant_tensor(
            name,
            HostTensor::from_f32(dims.to_vec(), values).expect("shape"),
        )
    }

    pub fn scalar(&mut self, name: &str, value: f32) -> TensorId {
        self.constant_tensor(
            name,
            HostTensor::from_f32(vec![], vec![value]).expect("shape"),
        )
    }

    pub fn ints(&mut self, name: &str, values: &[i64]) -> TensorId {
        self.constant_tensor(
            name,
            HostTensor::from_i64(vec![values.len()], values.to_vec()).expect("shape"),
        )
    }

    pub fn layer(&mut self, name: &str, kind: LayerKind, inputs: &[TensorId]) -> TensorId {
        let id = self
            .net
            .add_layer(name, kind, inputs.iter().map(|&t| Some(t)).collect())
            .expect("layer");
        self.net.output(id, 0)
    }

    pub fn binary(&mut self, name: &str, op: ElementwiseOp, a: TensorId, b: TensorId) -> TensorId {
        self.layer(name, LayerKind::Elementwise { op }, &[a, b])
    }

    pub fn unary(&mut self, name: &str, op: UnaryOp, x: TensorId) -> TensorId {
        self.layer(name, LayerKind::Unary { op }, &[x])
    }

    pub fn activation(&mut self, name: &str, kind: ActivationKind, x: TensorId) -> TensorId {
        self.layer(name, LayerKind::Activation { kind }, &[x])
    }

    pub fn output(mut self, t: TensorId, name: &str) -> Network {
        self.net.set_tensor_name(t, name).expect("name");
        self.net.mark_output(t).expect("output");
        self.net
    }
}

use ElementwiseOp as E;

/// `Shape → Gather → Concat → Reshape`, as PyTorch exports `x.view(x.size(0), -1)`, on
/// a fixed input and on one with a dynamic batch (only fixed dims fold there).
/// The legacy exporter's `x.view(x.size(0), x.size(1), -1)` and `transpose(1, 2).reshape(
/// N, -1)` on an input with a dynamic batch: reshape dims computed from `Shape` at run time.
pub fn dynamic_batch_views() -> Network {
    let mut g = G::new("dynamic_batch_views");
    let x = g.input(
        "x",
        vec![Dim::Named("batch".into()), Dim::Fixed(3), Dim::Fixed(2), Dim::Fixed(2)],
    );
    let shape = g.layer("shape", LayerKind::Shape, &[x]);
    let first_two = g.ints("first two", &[0, 1]);
    let kept = g.layer(
        "gather",
        LayerKind::Gather {
            mode: GatherMode::Default { axis: 0 },
        },
        &[shape, first_two],
    );
    let minus_one = g.ints("minus one", &[-1]);
    let dims = g.layer(
        "concat",
        LayerKind::Concatenation { axis: 0 },
        &[kept, minus_one],
    );
    let reshape = LayerKind::Shuffle(ShuffleParams {
        reshape: None,
        zero_is_placeholder: true,
        ..Default::default()
    });
    let view = g.layer("view", reshape, &[x, dims]);
    // Transposed to [3, batch, 4], the batch is no longer in place: it becomes the `-1`.
    let transposed_reshape = LayerKind::Shuffle(ShuffleParams {
        first_transpose: vec![1, 0, 2],
        reshape: None,
        zero_is_placeholder: true,
        ..Default::default()
    });
    let batch_index = g.ints("batch index", &[0]);
    let batch = g.layer(
        "batch",
        LayerKind::Gather {
            mode: GatherMode::Default { axis: 0 },
        },
        &[shape, batch_index],
    );
    let twelve = g.ints("twelve", &[12]);
    let flat_dims = g.layer(
        "flat dims",
        LayerKind::Concatenation { axis: 0 },
        &[batch, twelve],
    );
    let flat = g.layer("flat", transposed_reshape, &[view, flat_dims]);
    g.output(flat, "out")
}

pub fn shape_chain() -> Network {
    let mut g = G::new("shape_chain");
    let x = g.fixed_input("x", &[2, 3, 4]);
    let y = g.input(
        "y",
        vec![Dim::Named("batch".into()), Dim::Fixed(3), Dim::Fixed(4)],
    );
    let shape = g.layer("shape", LayerKind::Shape, &[x]);
    let first = g.ints("first", &[0]);
    let n = g.layer(
        "gather",
        LayerKind::Gather {
            mode: GatherMode::Default { axis: 0 },
        },
        &[shape, first],
    );
    let minus_one = g.ints("minus one", &[-1]);
    let dims = g.layer(
        "concat",
        LayerKind::Concatenation { axis: 0 },
        &[n, minus_one],
    );
    let reshape = LayerKind::Shuffle(ShuffleParams {
        reshape: None,
        zero_is_placeholder: true,
        ..Default::default()
    });
    let flat = g.layer("reshape", reshape.clone(), &[x, dims]);
    // For y: dim 2 (fixed 4) folds, the batch does not.
    let y_shape = g.layer("y shape", LayerKind::Shape, &[y]);
    let last = g.ints("last", &[2]);
    let four = g.layer(
        "y gather",
        LayerKind::Gather {
            mode: GatherMode::Default { axis: 0 },
        },
        &[y_shape, last],
    );
    let y_dims = g.layer(
        "y concat",
        LayerKind::Concatenation { axis: 0 },
        &[minus_one, four],
    );
    let y_flat = g.layer("y reshape", reshape, &[y, y_dims]);
    let y_sum = g.layer(
        "y sum",
        LayerKind::Reduce {
            op: ReduceOp::Sum,
            axes: vec![0, 1],
            keep_dims: false,
        },
        &[y_flat],
    );
    let x_sum = g.layer(
        "x sum",
        LayerKind::Reduce {
            op: ReduceOp::Sum,
            axes: vec![1],
            keep_dims: false,
        },
        &[flat],
    );
    let x_total = g.layer(
        "x total",
        LayerKind::Reduce {
            op: ReduceOp::Sum,
            axes: vec![0],
            keep_dims: false,
        },
        &[x_sum],
    );
    let both = g.binary("add", E::Sum, x_total, y_sum);
    g.output(both, "out")
}

/// An exported attention's scale taken from its input's shape with a dynamic batch
/// (`1/sqrt(x.size(-1))`: Shape, Slice of the last dim, Cast, Sqrt, Div), and a bias computed
/// from a constant alone (a Neg of it), which only full constant folding takes.
pub fn shape_scale() -> Network {
    let mut g = G::new("shape_scale");
    let x = g.input("x", vec![Dim::Named("batch".into()), Dim::Fixed(4), Dim::Fixed(16)]);
    let shape = g.layer("shape", LayerKind::Shape, &[x]);
    let (from, to) = (g.ints("from", &[-1]), g.ints("to", &[i64::MAX]));
    let last = g.layer("last dim", LayerKind::Slice, &[shape, from, to]);
    let d = g.layer("cast", LayerKind::Cast { to: DataType::F32 }, &[last]);
    let root = g.unary("sqrt", UnaryOp::Sqrt, d);
    let one = g.scalar("one", 1.0);
    let scale = g.binary("div", E::Div, one, root);
    let scaled = g.binary("scale", E::Prod, x, scale);
    let bias = g.constant("bias", &[16], 0.5);
    let negated = g.unary("neg", UnaryOp::Neg, bias);
    let biased = g.binary("add", E::Sum, scaled, negated);
    g.output(biased, "y")
}

/// A constant weight transposed at run time: the cpu backend folds the transpose.
pub fn constant_transpose() -> Network {
    let mut g = G::new("constant_transpose");
    let x = g.fixed_input("x", &[2, 3]);
    let w = g.constant("w", &[4, 3], 1.0);
    let transpose = ShuffleParams {
        first_transpose: vec![1, 0],
        ..Default::default()
    };
    let wt = g.layer("transpose", LayerKind::Shuffle(transpose), &[w]);
    let y = g.layer(
        "matmul",
        LayerKind::MatrixMultiply {
            op_a: MatrixOp::None,
            op_b: MatrixOp::None,
        },
        &[x, wt],
    );
    g.output(y, "y")
}

/// Identity, a cast to the same type, an identity transpose and a reshape of a reshape.
pub fn no_ops() -> Network {
    let mut g = G::new("no_ops");
    let x = g.fixed_input("x", &[2, 3, 4]);
    let a = g.layer("identity", LayerKind::Identity, &[x]);
    let b = g.layer("cast", LayerKind::Cast { to: DataType::F32 }, &[a]);
    let same = ShuffleParams {
        first_transpose: vec![0, 1, 2],
        ..Default::default()
    };
    let c = g.layer("transpose", LayerKind::Shuffle(same), &[b]);
    let r1 = ShuffleParams {
        reshape: Some(vec![6, 4]),
        ..Default::default()
    };
    let d = g.layer("reshape 1", LayerKind::Shuffle(r1), &[c]);
    let r2 = ShuffleParams {
        reshape: Some(vec![4, 6]),
        ..Default::default()
    };
    let e = g.layer("reshape 2", LayerKind::Shuffle(r2), &[d]);
    let f = g.activation("relu", ActivationKind::Relu, e);
    // Every element of axis 1 in order, as a [2, 3] index grid: a reshape to [4, 2, 3].
    let iota = g.ints("iota", &[0, 1, 2, 3, 4, 5]);
    let grid = ShuffleParams {
        reshape: Some(vec![2, 3]),
        ..Default::default()
    };
    let grid = g.layer("iota grid", LayerKind::Shuffle(grid), &[iota]);
    let gather = LayerKind::Gather {
        mode: GatherMode::Default { axis: 1 },
    };
    let y = g.layer("as strided", gather, &[f, grid]);
    g.output(y, "y")
}

/// A stacked q/k/v projection split by one constant index each, as the legacy exporter
/// writes `nn.MultiheadAttention`: scalar indices 0 and -1 (the axis goes) and the list [1]
/// (the axis stays), over a dynamic batch dim after the axis.
pub fn one_index_gathers() -> Network {
    let mut g = G::new("one_index_gathers");
    let x = g.input("x", vec![Dim::Fixed(3), Dim::Named("batch".into()), Dim::Fixed(4)]);
    let gather = || LayerKind::Gather {
        mode: GatherMode::Default { axis: 0 },
    };
    let zero = g.constant_tensor("index 0", HostTensor::from_i64(vec![], vec![0]).expect("scalar"));
    let last = g.constant_tensor("index -1", HostTensor::from_i64(vec![], vec![-1]).expect("scalar"));
    let one = g.ints("index [1]", &[1]);
    let q = g.layer("q", gather(), &[x, zero]);
    let v = g.layer("v", gather(), &[x, last]);
    let k = g.layer("k", gather(), &[x, one]);
    let k = g.layer("k squeezed", LayerKind::Shuffle(ShuffleParams { reshape: Some(vec![-1, 4]), ..Default::default() }), &[k]);
    let qk = g.binary("q + k", ElementwiseOp::Sum, q, k);
    let y = g.binary("q + k + v", ElementwiseOp::Prod, qk, v);
    g.output(y, "y")
}

/// Two "layers" each rebuilding the same mask from the same input with their own (equal)
/// constants, as exported transformers do, plus one computation that only looks alike (a
/// different constant).
pub fn repeated_mask() -> Network {
    let mut g = G::new("repeated_mask");
    let mask = g.fixed_input("mask", &[2, 4]);
    let x = g.fixed_input("x", &[2, 4]);
    let mut y = x;
    for (i, bias) in [(0, -1e4), (1, -1e4), (2, -2e4)] {
        let c = g.scalar(&format!("layer {i} bias"), bias);
        let m = g.binary(&format!("layer {i} mask"), E::Prod, mask, c);
        y = g.binary(&format!("layer {i} add"), E::Sum, y, m);
    }
    g.output(y, "y")
}

/// A transformer's query, key and value projections of one hidden state (matmul + bias each,
/// then a transpose), and a fourth projection of another input that must stay apart.
pub fn sibling_projections() -> Network {
    let mut g = G::new("sibling_projections");
    let x = g.fixed_input("x", &[2, 3, 8]);
    let other = g.fixed_input("other", &[2, 3, 8]);
    let mm = LayerKind::MatrixMultiply {
        op_a: MatrixOp::None,
        op_b: MatrixOp::None,
    };
    let mut outs = Vec::new();
    for (i, (name, input, n)) in [("q", x, 4), ("k", x, 4), ("v", x, 6), ("o", other, 4)].into_iter().enumerate() {
        let w = g.constant(&format!("{name} weights"), &[8, n], 0.3 + i as f32 * 0.1);
        let b = g.constant(&format!("{name} bias"), &[n], 0.5);
        let y = g.layer(&format!("{name} proj"), mm.clone(), &[input, w]);
        let y = g.binary(&format!("{name} bias add"), E::Sum, y, b);
        let t = ShuffleParams {
            first_transpose: vec![0, 2, 1],
            ..Default::default()
        };
        outs.push((name, g.layer(&format!("{name} transpose"), LayerKind::Shuffle(t), &[y])));
    }
    for (name, t) in outs {
        g.net.set_tensor_name(t, name).expect("name");
        g.net.mark_output(t).expect("output");
    }
    g.net
}

/// A layer no output needs.
pub fn dead_branch() -> Network {
    let mut g = G::new("dead_branch");
    let x = g.fixed_input("x", &[4]);
    let _unused = g.unary("unused exp", UnaryOp::Exp, x);
    let y = g.activation("relu", ActivationKind::Relu, x);
    g.output(y, "y")
}

/// conv → batch norm (scale, shift) → relu → conv → residual add → relu, and a fully
/// connected head (matmul + bias + relu).
pub fn conv_block() -> Network {
    let mut g = G::new("conv_block");
    let x = g.fixed_input("x", &[1, 2, 5, 5]);
    let params = ConvolutionParams {
        groups: 1,
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pre_padding: vec![1, 1],
        post_padding: vec![1, 1],
    };
    let w1 = g.constant("conv1 kernel", &[2, 2, 3, 3], 0.5);
    let b1 = g.constant("conv1 bias", &[2], 0.1);
    let c1 = g.layer(
        "conv1",
        LayerKind::Convolution(params.clone()),
        &[x, w1, b1],
    );
    let scale = g.constant("bn scale", &[2, 1, 1], 1.5);
    let shift = g.constant("bn shift", &[2, 1, 1], 0.2);
    let s = g.binary("bn mul", E::Prod, c1, scale);
    let t = g.binary("bn add", E::Sum, s, shift);
    let r1 = g.activation("relu1", ActivationKind::Relu, t);
    let w2 = g.constant("conv2 kernel", &[2, 2, 3, 3], 0.3);
    let c2 = g.layer("conv2", LayerKind::Convolution(params), &[r1, w2]);
    let res = g.binary("residual", E::Sum, x, c2);
    let r2 = g.activation("relu2", ActivationKind::Relu, res);
    let flat = g.layer(
        "flatten",
        LayerKind::Shuffle(ShuffleParams {
            reshape: Some(vec![1, 50]),
            ..Default::default()
        }),
        &[r2],
    );
    let fc_w = g.constant("fc weights", &[50, 3], 0.2);
    let fc_b = g.constant("fc bias", &[3], 0.1);
    let mm = g.layer(
        "fc",
        LayerKind::MatrixMultiply {
            op_a: MatrixOp::None,
            op_b: MatrixOp::None,
        },
        &[flat, fc_w],
    );
    let biased = g.binary("fc bias add", E::Sum, mm, fc_b);
    let y = g.activation("fc relu", ActivationKind::Relu, biased);
    g.output(y, "y")
}

/// sigmoid → · c → + d → tanh.
pub fn pointwise_chain() -> Network {
    let mut g = G::new("pointwise_chain");
    let x = g.fixed_input("x", &[2, 4]);
    let a = g.activation("sigmoid", ActivationKind::Sigmoid, x);
    let c = g.constant("c", &[4], 2.0);
    let b = g.binary("mul", E::Prod, a, c);
    let d = g.scalar("d", -0.5);
    let e = g.binary("sub", E::Sub, d, b);
    let f = g.activation("tanh", ActivationKind::Tanh, e);
    g.output(f, "y")
}

/// `exp(x - max) / sum(exp(x - max))` over the last axis.
pub fn softmax() -> Network {
    let mut g = G::new("softmax");
    let x = g.fixed_input("x", &[2, 5]);
    let max = g.layer(
        "max",
        LayerKind::Reduce {
            op: ReduceOp::Max,
            axes: vec![1],
            keep_dims: true,
        },
        &[x],
    );
    let sub = g.binary("sub", E::Sub, x, max);
    let exp = g.unary("exp", UnaryOp::Exp, sub);
    let sum = g.layer(
        "sum",
        LayerKind::Reduce {
            op: ReduceOp::Sum,
            axes: vec![1],
            keep_dims: true,
        },
        &[exp],
    );
    let y = g.binary("div", E::Div, exp, sum);
    g.output(y, "y")
}

/// LayerNorm as opset < 17 exporters write it, with gamma and beta.
pub fn layer_norm() -> Network {
    let mut g = G::new("layer_norm");
    let x = g.fixed_input("x", &[2, 3, 8]);
    let mean = g.layer(
        "mean",
        LayerKind::Reduce {
            op: ReduceOp::Mean,
            axes: vec![2],
            keep_dims: true,
        },
        &[x],
    );
    let d = g.binary("sub", E::Sub, x, mean);
    let two = g.scalar("two", 2.0);
    let sq = g.binary("pow", E::Pow, d, two);
    let var = g.layer(
        "var",
        LayerKind::Reduce {
            op: ReduceOp::Mean,
            axes: vec![2],
            keep_dims: true,
        },
        &[sq],
    );
    let eps = g.scalar("eps", 1e-5);
    let ve = g.binary("add eps", E::Sum, var, eps);
    let std = g.unary("sqrt", UnaryOp::Sqrt, ve);
    let n = g.binary("div", E::Div, d, std);
    let gamma = g.constant("gamma", &[8], 1.0);
    let beta = g.constant("beta", &[8], 0.5);
    let scaled = g.binary("mul gamma", E::Prod, n, gamma);
    let y = g.binary("add beta", E::Sum, scaled, beta);
    g.output(y, "y")
}

/// RMSNorm as HF exports it: `gamma * (x * rsqrt(mean(x²) + eps))`.
pub fn rms_norm() -> Network {
    let mut g = G::new("rms_norm");
    let x = g.fixed_input("x", &[2, 3, 8]);
    let two = g.scalar("two", 2.0);
    let sq = g.binary("pow", E::Pow, x, two);
    let var = g.layer(
        "mean",
        LayerKind::Reduce {
            op: ReduceOp::Mean,
            axes: vec![2],
            keep_dims: true,
        },
        &[sq],
    );
    let eps = g.scalar("eps", 1e-6);
    let ve = g.binary("add eps", E::Sum, var, eps);
    let root = g.unary("sqrt", UnaryOp::Sqrt, ve);
    let inv = g.unary("recip", UnaryOp::Recip, root);
    let n = g.binary("mul", E::Prod, x, inv);
    let gamma = g.constant("gamma", &[8], 1.0);
    let y = g.binary("mul gamma", E::Prod, gamma, n);
    g.output(y, "y")
}

/// GELU, erf form (`x · 0.5 · (1 + erf(x / √2))`, TorchScript's order) and tanh form.
pub fn gelu() -> Network {
    gelu_in(DataType::F32)
}

/// [`gelu`] with its input and constants in `dtype` (as the builder leaves them after lowering
/// precision, before the passes run: fp16's √2 is 1.4140625).
pub fn gelu_in(dtype: DataType) -> Network {
    let mut g = G::new("gelu");
    let x = g
        .net
        .add_input("x", dtype, Shape::fixed(&[2, 6]))
        .expect("input");
    let mut g = Typed(g, dtype);
    let sqrt2 = g.scalar("sqrt2", std::f32::consts::SQRT_2);
    let div = g.binary("div", E::Div, x, sqrt2);
    let erf = g.unary("erf", UnaryOp::Erf, div);
    let one = g.scalar("one", 1.0);
    let add = g.binary("add", E::Sum, erf, one);
    let mul = g.binary("mul", E::Prod, x, add);
    let half = g.scalar("half", 0.5);
    let erf_gelu = g.binary("mul half", E::Prod, mul, half);
    // tanh form on the result: 0.5·y·(1 + tanh(√(2/π)·(y + 0.044715·y³)))
    let y = erf_gelu;
    let three = g.scalar("three", 3.0);
    let cube = g.binary("t pow", E::Pow, y, three);
    let k = g.scalar("k", 0.044715);
    let kc = g.binary("t mul k", E::Prod, k, cube);
    let inner = g.binary("t add", E::Sum, y, kc);
    let c = g.scalar("c", (2.0 / std::f32::consts::PI).sqrt());
    let arg = g.binary("t mul c", E::Prod, inner, c);
    let th = g.activation("t tanh", ActivationKind::Tanh, arg);
    let one_t = g.scalar("t one", 1.0);
    let onep = g.binary("t add one", E::Sum, th, one_t);
    let half_t = g.scalar("t half", 0.5);
    let hy = g.binary("t mul half", E::Prod, half_t, y);
    let out = g.binary("t mul", E::Prod, hy, onep);
    g.0.output(out, "out")
}

/// A [`G`] whose scalars are of one float type.
struct Typed(G, DataType);

impl Typed {
    fn scalar(&mut self, name: &str, value: f32) -> TensorId {
        let data = match self.1 {
            DataType::F16 => TensorData::F16(vec![half::f16::from_f32(value)]),
            DataType::BF16 => TensorData::BF16(vec![half::bf16::from_f32(value)]),
            _ => TensorData::F32(vec![value]),
        };
        self.0
            .constant_tensor(name, HostTensor::new(vec![], data).expect("shape"))
    }
}

impl std::ops::Deref for Typed {
    type Target = G;
    fn deref(&self) -> &G {
        &self.0
    }
}

impl std::ops::DerefMut for Typed {
    fn deref_mut(&mut self) -> &mut G {
        &mut self.0
    }
}

/// `softmax(Q·Kᵀ / √d + mask) · V` with K transposed by a Shuffle.
pub fn attention() -> Network {
    let mut g = G::new("attention");
    let q = g.fixed_input("q", &[1, 2, 4, 8]);
    let k = g.fixed_input("k", &[1, 2, 4, 8]);
    let v = g.fixed_input("v", &[1, 2, 4, 8]);
    let mask = g.fixed_input("mask", &[1, 1, 1, 4]);
    let swap = ShuffleParams {
        first_transpose: vec![0, 1, 3, 2],
        ..Default::default()
    };
    let kt = g.layer("k transpose", LayerKind::Shuffle(swap), &[k]);
    let mm = LayerKind::MatrixMultiply {
        op_a: MatrixOp::None,
        op_b: MatrixOp::None,
    };
    let s = g.layer("qk", mm.clone(), &[q, kt]);
    let sqrt_d = g.scalar("sqrt d", 8f32.sqrt());
    let scaled = g.binary("scale", E::Div, s, sqrt_d);
    let masked = g.binary("mask add", E::Sum, scaled, mask);
    let p = g.layer("softmax", LayerKind::SoftMax { axis: 3 }, &[masked]);
    let o = g.layer("pv", mm, &[p, v]);
    g.output(o, "out")
}

/// Attention as PyTorch's scaled_dot_product_attention exports it: Q and Kᵀ each scaled by the
/// square root of the scale, and the probabilities guarded by `Where(IsNaN(p), 0, p)`.
pub fn sdpa_attention() -> Network {
    let mut g = G::new("sdpa attention");
    let q = g.fixed_input("q", &[1, 2, 4, 8]);
    let k = g.fixed_input("k", &[1, 2, 4, 8]);
    let v = g.fixed_input("v", &[1, 2, 4, 8]);
    let mask = g.fixed_input("mask", &[1, 1, 4, 4]);
    let swap = ShuffleParams {
        first_transpose: vec![0, 1, 3, 2],
        ..Default::default()
    };
    let kt = g.layer("k transpose", LayerKind::Shuffle(swap), &[k]);
    let root = g.scalar("root scale", 8f32.powf(-0.25));
    let qs = g.binary("q scale", E::Prod, q, root);
    let root_k = g.scalar("root scale k", 8f32.powf(-0.25));
    let ks = g.binary("k scale", E::Prod, kt, root_k);
    let mm = LayerKind::MatrixMultiply {
        op_a: MatrixOp::None,
        op_b: MatrixOp::None,
    };
    let s = g.layer("qk", mm.clone(), &[qs, ks]);
    let masked = g.binary("mask add", E::Sum, s, mask);
    let p = g.layer("softmax", LayerKind::SoftMax { axis: 3 }, &[masked]);
    let is_nan = g.layer("is nan", LayerKind::Unary { op: kiln::UnaryOp::IsNan }, &[p]);
    let zero = g.scalar("zero", 0.0);
    let guarded = g.layer("nan guard", LayerKind::Select, &[is_nan, zero, p]);
    let o = g.layer("pv", mm, &[guarded, v]);
    g.output(o, "out")
}

/// Swin's shifted-window attention: `G = 2 images × 3 windows` of 2 heads over 4 positions, a
/// bias per head, and a mask per window (0 or -100) added through a view that splits the
/// windows from the images. `quantized`: Q, K, V, the product and the probabilities each pass
/// through 8-bit levels and back, as onnxruntime's `quantize_static` writes them.
pub fn windowed_attention(quantized: bool) -> Network {
    let mut g = G::new(if quantized { "windowed attention q/dq" } else { "windowed attention" });
    let [images, windows, heads, n, d] = [2usize, 3, 2, 4, 8];
    let lead = images * windows;
    let mut levels = |g: &mut G, name: &str, x: TensorId, scale: f32| -> TensorId {
        if !quantized {
            return x;
        }
        let s = g.scalar(&format!("{name} scale"), scale);
        let zero = g.constant_tensor(&format!("{name} zero point"), HostTensor::scalar(TensorData::I8(vec![0])).expect("scalar"));
        let q = g.layer(&format!("{name} quantize"), LayerKind::Quantize { axis: None, to: DataType::I8 }, &[x, s, zero]);
        g.layer(&format!("{name} dequantize"), LayerKind::Dequantize { axis: None, to: None }, &[q, s, zero])
    };
    let q = g.fixed_input("q", &[lead, heads, n, d]);
    let k = g.fixed_input("k", &[lead, heads, n, d]);
    let v = g.fixed_input("v", &[lead, heads, n, d]);
    let (q, k, v) = (levels(&mut g, "q", q, 0.02), levels(&mut g, "k", k, 0.02), levels(&mut g, "v", v, 0.02));
    let swap = ShuffleParams { first_transpose: vec![0, 1, 3, 2], ..Default::default() };
    let kt = g.layer("k transpose", LayerKind::Shuffle(swap), &[k]);
    let mm = LayerKind::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    let s = g.layer("qk", mm.clone(), &[q, kt]);
    let s = levels(&mut g, "qk", s, 0.1);
    let bias = g.constant("bias", &[1, heads, n, n], 0.5);
    let biased = g.binary("bias add", E::Sum, s, bias);
    let split = g.layer("split windows", reshape(&[images as i64, windows as i64, heads as i64, n as i64, n as i64]), &[biased]);
    let cells = windows * n * n;
    // The mask is computed from constants, as Swin's is from the window geometry: the builder
    // evaluates it before the Q/DQ fusion to regroup the attention.
    let masked_out: Vec<f32> = (0..cells).map(|i| if (i * 5 + i / 7) % 3 == 0 { 1.0 } else { 0.0 }).collect();
    let masked_out = g.constant_tensor("masked out", HostTensor::from_f32(vec![n, n, windows], masked_out).expect("shape"));
    let windows_first = ShuffleParams { first_transpose: vec![2, 0, 1], ..Default::default() };
    let masked_out = g.layer("windows first", LayerKind::Shuffle(windows_first), &[masked_out]);
    let large = g.scalar("large negative", -100.0);
    let mask = g.binary("mask values", E::Prod, masked_out, large);
    let mask = g.layer("mask", reshape(&[1, windows as i64, 1, n as i64, n as i64]), &[mask]);
    let masked = g.binary("mask add", E::Sum, split, mask);
    let merged = g.layer("merge windows", reshape(&[-1, heads as i64, n as i64, n as i64]), &[masked]);
    let p = g.layer("softmax", LayerKind::SoftMax { axis: 3 }, &[merged]);
    let p = levels(&mut g, "probs", p, 1.0 / 127.0);
    let o = g.layer("pv", mm, &[p, v]);
    g.output(o, "out")
}

fn reshape(dims: &[i64]) -> LayerKind {
    LayerKind::Shuffle(ShuffleParams { reshape: Some(dims.to_vec()), ..Default::default() })
}

/// Deterministic input values for every network input.
pub fn inputs(net: &Network) -> std::collections::HashMap<String, HostTensor> {
    net.inputs()
        .iter()
        .enumerate()
        .map(|(k, &t)| {
            let d = net.tensor(t);
            let dims: Vec<usize> = d
                .shape
                .dims()
                .iter()
                .map(|d| d.fixed().unwrap_or(3))
                .collect();
            let n: usize = dims.iter().product();
            let values = (0..n)
                .map(|i| (((i * 13 + k * 5) % 17) as f32 - 8.0) / 4.0)
                .collect();
            (
                d.name.clone(),
                HostTensor::new(dims, TensorData::F32(values)).expect("shape"),
            )
        })
        .collect()
}

/// A padding by zero everywhere (a no-op, as Swin's window padding is for 224x224 images) and
/// one that pads.
pub fn zero_padding() -> Network {
    let mut g = G::new("zero_padding");
    let x = g.input("x", vec![Dim::Named("batch".into()), Dim::Fixed(3), Dim::Fixed(4)]);
    let pad = || LayerKind::Padding { mode: kiln::PaddingMode::Constant };
    let nothing = g.ints("pads 0", &[0, 0, 0, 0, 0, 0]);
    let some = g.ints("pads 1", &[0, 0, 1, 0, 0, 2]);
    let unchanged = g.layer("pad by nothing", pad(), &[x, nothing]);
    let padded = g.layer("pad", pad(), &[unchanged, some]);
    g.output(padded, "y")
}

/// Attention written as einsums (MaxViT's `bghid,bghjd->bghij`, then `bghij,bghjd->bghid`), a
/// product whose batch label comes second (`ibk,bkj->ibj`) and an equation that is not one
/// product (a label summed in one operand: stays an Einsum).
pub fn einsums() -> Network {
    let mut g = G::new("einsums");
    let batch = Dim::Named("batch".into());
    let q = g.input("q", vec![batch.clone(), Dim::Fixed(2), Dim::Fixed(5), Dim::Fixed(4)]);
    let k = g.input("k", vec![batch.clone(), Dim::Fixed(2), Dim::Fixed(6), Dim::Fixed(4)]);
    let v = g.input("v", vec![batch, Dim::Fixed(2), Dim::Fixed(6), Dim::Fixed(3)]);
    let einsum = |eq: &str| LayerKind::Einsum { equation: eq.into() };
    let scores = g.layer("scores", einsum("bhid,bhjd->bhij"), &[q, k]);
    let mixed = g.layer("mixed", einsum("bhij,bhjd->bhid"), &[scores, v]);
    let w = g.constant("w", &[5, 3, 7], 0.5);
    let projected = g.layer("project", einsum("bhid,ide->bhie"), &[mixed, w]);
    let x = g.constant("x", &[5, 2, 3], 0.25);
    let y = g.constant("y", &[2, 3, 4], 0.25);
    let side = g.layer("side", einsum("ibk,bkj->ibj"), &[x, y]);
    let z = g.constant("z", &[2, 4, 6], 0.25);
    let summed = g.layer("summed", einsum("ibj,bjk->ib"), &[side, z]);
    g.net.set_tensor_name(summed, "summed").expect("name");
    g.net.mark_output(summed).expect("output");
    g.output(projected, "out")
}

/// A chain of Shuffles from `shape` (each step's transposes and reshape dims), then a ReLU.
pub fn shuffle_chain(name: &str, shape: Vec<Dim>, steps: &[(Vec<usize>, Option<Vec<i64>>, Vec<usize>)]) -> Network {
    let mut g = G::new(name);
    let mut t = g.input("x", shape);
    for (k, (first, dims, second)) in steps.iter().enumerate() {
        let p = ShuffleParams { first_transpose: first.clone(), reshape: dims.clone(), second_transpose: second.clone(), zero_is_placeholder: true };
        t = g.layer(&format!("step {k}"), LayerKind::Shuffle(p), &[t]);
    }
    let y = g.activation("relu", ActivationKind::Relu, t);
    g.output(y, "y")
}

/// PyTorch's `mask.unsqueeze(1).unsqueeze(2)` as the legacy exporter writes it (a reshape
/// adding a trailing 1, then a transpose moving it), then a real transpose that must stay.
pub fn unsqueezes() -> Network {
    let mut g = G::new("unsqueezes");
    let x = g.fixed_input("x", &[2, 16]);
    let unsqueeze = |at: Vec<i64>, perm: Vec<usize>| ShuffleParams { reshape: Some(at), second_transpose: perm, zero_is_placeholder: true, ..Default::default() };
    let a = g.layer("unsqueeze 1", LayerKind::Shuffle(unsqueeze(vec![0, 0, 1], vec![0, 2, 1])), &[x]);
    let b = g.layer("unsqueeze 2", LayerKind::Shuffle(unsqueeze(vec![0, 0, 0, 1], vec![0, 1, 3, 2])), &[a]);
    let swap = ShuffleParams { first_transpose: vec![0, 1, 3, 2], ..Default::default() };
    let c = g.layer("swap", LayerKind::Shuffle(swap), &[b]);
    let y = g.activation("relu", ActivationKind::Relu, c);
    g.output(y, "y")
}
