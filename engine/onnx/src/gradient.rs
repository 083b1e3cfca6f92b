//! `ai.onnx.preview.training::Gradient`: the gradient graph of `y` with respect to `xs`,
//! built at import time by reverse-mode differentiation over the forward nodes between them.
//!
//! The seed is a tensor of ones shaped like `y`, so a non-scalar `y` gives the gradient of
//! `sum(y)`, as the operator's definition says. Broadcast inputs get their gradient summed
//! back to their own shape. Shapes must be static (the reductions that undo broadcasting
//! are chosen here). Ops without a rule below are refused with an error naming them.

use crate::error::ImportError;
use crate::graph::{node_name, GraphImporter};
use crate::proto::NodeProto;
use crate::tensor::filled;
use kiln::{DataType, ElementwiseOp, LayerKind, MatrixOp, Network, ReduceOp, ShuffleParams, TensorId, UnaryOp};
use std::collections::{HashMap, HashSet};

pub(crate) const TRAINING_DOMAIN: &str = "ai.onnx.preview.training";

/// Whether `node` is the training domain's Gradient operator.
pub(crate) fn is_gradient(node: &NodeProto) -> bool {
    node.domain() == TRAINING_DOMAIN && node.op_type() == "Gradient"
}

/// Layers added for one Gradient node, named `gradient/step` after it.
struct Tape<'n> {
    net: &'n mut Network,
    node: String,
    steps: usize,
}

impl Tape<'_> {
    fn unsupported(&self, feature: String) -> ImportError {
        ImportError::UnsupportedFeature { node: self.node.clone(), op_type: "Gradient".into(), feature }
    }

    fn add(&mut self, kind: LayerKind, inputs: &[TensorId]) -> Result<TensorId, ImportError> {
        self.steps += 1;
        let name = format!("{}/d{}", self.node, self.steps);
        let layer = self
            .net
            .add_layer(&name, kind, inputs.iter().map(|&t| Some(t)).collect())
            .map_err(|source| ImportError::Network { node: self.node.clone(), source })?;
        Ok(self.net.output(layer, 0))
    }

    fn dims(&self, t: TensorId, what: &str) -> Result<Vec<usize>, ImportError> {
        let tensor = self.net.tensor(t);
        tensor.shape.as_fixed().ok_or_else(|| {
            self.unsupported(format!(
                "{what} `{}` of dynamic shape {} (shapes must be static)",
                tensor.name, tensor.shape
            ))
        })
    }

    fn dtype(&self, t: TensorId) -> DataType {
        self.net.tensor(t).dtype
    }

    fn constant(&mut self, dtype: DataType, dims: Vec<usize>, value: f64) -> Result<TensorId, ImportError> {
        let weights = self.net.add_weights(filled(dtype, dims, value));
        self.add(LayerKind::Constant { weights }, &[])
    }

    fn binary(&mut self, op: ElementwiseOp, a: TensorId, b: TensorId) -> Result<TensorId, ImportError> {
        self.add(LayerKind::Elementwise { op }, &[a, b])
    }

    fn unary(&mut self, op: UnaryOp, a: TensorId) -> Result<TensorId, ImportError> {
        self.add(LayerKind::Unary { op }, &[a])
    }

    fn reshape(&mut self, t: TensorId, dims: &[usize]) -> Result<TensorId, ImportError> {
        let reshape = Some(dims.iter().map(|&d| d as i64).collect());
        self.add(LayerKind::Shuffle(ShuffleParams { reshape, ..Default::default() }), &[t])
    }

    /// `g` (the gradient of a broadcast result) summed back to `target` dims.
    fn unbroadcast(&mut self, g: TensorId, target: &[usize]) -> Result<TensorId, ImportError> {
        let dims = self.dims(g, "gradient")?;
        if dims == target {
            return Ok(g);
        }
        if dims.len() < target.len() {
            return Err(self.unsupported(format!("a gradient of shape {dims:?} for an input of shape {target:?}")));
        }
        let lead = dims.len() - target.len();
        let axes: Vec<usize> =
            (0..dims.len()).filter(|&a| a < lead || (target[a - lead] == 1 && dims[a] != 1)).collect();
        let summed = if axes.is_empty() {
            g
        } else {
            self.add(LayerKind::Reduce { op: ReduceOp::Sum, axes, keep_dims: true }, &[g])?
        };
        self.reshape(summed, target)
    }

    /// The last two axes swapped.
    fn transpose_last(&mut self, t: TensorId) -> Result<TensorId, ImportError> {
        let rank = self.dims(t, "operand")?.len();
        let mut perm: Vec<usize> = (0..rank).collect();
        perm.swap(rank - 2, rank - 1);
        self.add(LayerKind::Shuffle(ShuffleParams { first_transpose: perm, ..Default::default() }), &[t])
    }

    fn matmul(&mut self, a: TensorId, op_a: MatrixOp, b: TensorId, op_b: MatrixOp) -> Result<TensorId, ImportError> {
        self.add(LayerKind::MatrixMultiply { op_a, op_b }, &[a, b])
    }
}

/// The forward values a node reads and writes, resolved to tensors.
struct Forward<'p> {
    node: &'p NodeProto,
    inputs: Vec<Option<TensorId>>,
    outputs: Vec<Option<TensorId>>,
}

/// Gradients of one forward node's inputs given `gy`, the gradient of its first output.
/// `None` marks an input the result does not depend on differentiably.
fn input_gradients(tape: &mut Tape, f: &Forward, gy: TensorId) -> Result<Vec<Option<TensorId>>, ImportError> {
    use ElementwiseOp as E;
    let op = f.node.op_type();
    let node = tape.node.clone();
    let input = |i: usize| {
        f.inputs.get(i).copied().flatten().ok_or_else(|| ImportError::InvalidModel {
            node: node.clone(),
            reason: format!("forward node `{}` ({op}) lacks input #{i}", f.node.name()),
        })
    };
    let y_out = f.outputs.first().copied().flatten();
    let y = || {
        y_out.ok_or_else(|| ImportError::UnsupportedFeature {
            node: node.clone(),
            op_type: "Gradient".into(),
            feature: format!("the derivative of `{op}` without its output"),
        })
    };
    Ok(match op {
        "Identity" => vec![Some(gy)],
        "Add" | "Sub" | "Mul" | "Div" => {
            let (a, b) = (input(0)?, input(1)?);
            let (a_dims, b_dims) = (tape.dims(a, "input")?, tape.dims(b, "input")?);
            let (ga, gb) = match op {
                "Add" => (gy, gy),
                "Sub" => (gy, tape.unary(UnaryOp::Neg, gy)?),
                "Mul" => (tape.binary(E::Prod, gy, b)?, tape.binary(E::Prod, gy, a)?),
                _ => {
                    // d(a/b)/db = -(a/b)/b = -y/b.
                    let ga = tape.binary(E::Div, gy, b)?;
                    let y_over_b = tape.binary(E::Div, y()?, b)?;
                    let scaled = tape.binary(E::Prod, gy, y_over_b)?;
                    (ga, tape.unary(UnaryOp::Neg, scaled)?)
                }
            };
            vec![Some(tape.unbroadcast(ga, &a_dims)?), Some(tape.unbroadcast(gb, &b_dims)?)]
        }
        "Neg" => vec![Some(tape.unary(UnaryOp::Neg, gy)?)],
        "Exp" => vec![Some(tape.binary(E::Prod, gy, y()?)?)],
        "Log" => vec![Some(tape.binary(E::Div, gy, input(0)?)?)],
        "Sqrt" => {
            // d sqrt(x) = 1 / (2 sqrt(x)).
            let two_y = tape.binary(E::Sum, y()?, y()?)?;
            vec![Some(tape.binary(E::Div, gy, two_y)?)]
        }
        "Relu" => {
            let x = input(0)?;
            let zero = tape.constant(tape.dtype(x), vec![], 0.0)?;
            let positive = tape.binary(E::Greater, x, zero)?;
            let mask = tape.add(LayerKind::Cast { to: tape.dtype(x) }, &[positive])?;
            vec![Some(tape.binary(E::Prod, gy, mask)?)]
        }
        "Sigmoid" | "Tanh" => {
            let y = y()?;
            let one = tape.constant(tape.dtype(y), vec![], 1.0)?;
            let local = if op == "Sigmoid" {
                let one_minus = tape.binary(E::Sub, one, y)?;
                tape.binary(E::Prod, y, one_minus)?
            } else {
                let square = tape.binary(E::Prod, y, y)?;
                tape.binary(E::Sub, one, square)?
            };
            vec![Some(tape.binary(E::Prod, gy, local)?)]
        }
        "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => {
            let x = input(0)?;
            let dims = tape.dims(x, "input")?;
            // Only the data input has a gradient; shapes and axes are integer parameters.
            let mut grads = vec![Some(tape.reshape(gy, &dims)?)];
            grads.resize(f.inputs.len(), None);
            grads
        }
        "Transpose" => {
            let x = input(0)?;
            let rank = tape.dims(x, "input")?.len();
            let attr = f.node.attribute.iter().find(|a| a.name() == "perm");
            let perm: Vec<usize> = match attr {
                Some(a) => a.ints.iter().map(|&p| p as usize).collect(),
                None => (0..rank).rev().collect(),
            };
            let mut inverse = vec![0; rank];
            for (i, &p) in perm.iter().enumerate() {
                *inverse.get_mut(p).ok_or_else(|| tape.unsupported(format!("Transpose perm {perm:?}")))? = i;
            }
            let params = ShuffleParams { first_transpose: inverse, ..Default::default() };
            vec![Some(tape.add(LayerKind::Shuffle(params), &[gy])?)]
        }
        "MatMul" => {
            let (a, b) = (input(0)?, input(1)?);
            let (a_dims, b_dims) = (tape.dims(a, "input")?, tape.dims(b, "input")?);
            if a_dims.len() < 2 || b_dims.len() < 2 {
                return Err(tape.unsupported("the derivative of MatMul with a 1-D operand".into()));
            }
            let ga = tape.matmul(gy, MatrixOp::None, b, MatrixOp::Transpose)?;
            let a_t = tape.transpose_last(a)?;
            let gb = tape.matmul(a_t, MatrixOp::None, gy, MatrixOp::None)?;
            vec![Some(tape.unbroadcast(ga, &a_dims)?), Some(tape.unbroadcast(gb, &b_dims)?)]
        }
        other => return Err(tape.unsupported(format!("the derivative of `{other}` (node `{}`)", f.node.name()))),
    })
}

impl GraphImporter<'_> {
    /// Imports Gradient node `node` (index `index` of `nodes`, the graph being imported).
    pub(crate) fn import_gradient(
        &mut self,
        nodes: &[NodeProto],
        index: usize,
        node: &NodeProto,
    ) -> Result<(), ImportError> {
        let name = node_name(node, index);
        let invalid = |reason: String| ImportError::InvalidModel { node: name.clone(), reason };
        let attr_strings = |key: &str| -> Result<Vec<String>, ImportError> {
            let attr = node.attribute.iter().find(|a| a.name() == key);
            let list =
                attr.map(
                    |a| if a.strings.is_empty() && a.s.is_some() { vec![a.s().to_vec()] } else { a.strings.clone() },
                );
            list.unwrap_or_default()
                .into_iter()
                .map(|s| String::from_utf8(s).map_err(|_| invalid(format!("attribute `{key}` is not UTF-8"))))
                .collect()
        };
        let xs = attr_strings("xs")?;
        let y_name =
            attr_strings("y")?.into_iter().next().ok_or_else(|| invalid("the attribute `y` is required".into()))?;
        if xs.is_empty() {
            return Err(invalid("the attribute `xs` is required".into()));
        }
        if node.output.len() != xs.len() {
            return Err(invalid(format!("{} outputs for {} entries of `xs`", node.output.len(), xs.len())));
        }
        let mut x_tensors = Vec::with_capacity(xs.len());
        for x in &xs {
            x_tensors.push(self.lookup(x)?.ok_or_else(|| invalid(format!("`xs` entry `{x}` is not a known value")))?);
        }
        let y = self.lookup(&y_name)?.ok_or_else(|| {
            invalid(format!("`y` (`{y_name}`) is not computed before the Gradient node (it must follow y's producers)"))
        })?;

        // Forward nodes on a path from xs to y, in execution order.
        let order = crate::graph::execution_order(nodes)?;
        let mut depends: HashSet<&str> = xs.iter().map(String::as_str).collect();
        let mut active: Vec<usize> = Vec::new();
        for &i in &order {
            let n = &nodes[i];
            if crate::gradient::is_gradient(n) || !n.input.iter().any(|v| depends.contains(v.as_str())) {
                continue;
            }
            active.push(i);
            depends.extend(n.output.iter().filter(|o| !o.is_empty()).map(String::as_str));
        }
        let mut needed: HashSet<&str> = HashSet::from([y_name.as_str()]);
        let mut path: Vec<usize> = Vec::new();
        for &i in active.iter().rev() {
            let n = &nodes[i];
            if n.output.iter().any(|o| needed.contains(o.as_str())) {
                path.push(i);
                needed.extend(n.input.iter().filter(|v| depends.contains(v.as_str())).map(String::as_str));
            }
        }

        let mut forwards = Vec::with_capacity(path.len());
        for &i in &path {
            let n = &nodes[i];
            let mut inputs = Vec::with_capacity(n.input.len());
            for v in &n.input {
                inputs.push(if v.is_empty() { None } else { self.lookup(v)? });
            }
            let outputs = n.output.iter().map(|o| self.values.get(o).copied()).collect();
            forwards.push(Forward { node: n, inputs, outputs });
        }

        let mut tape = Tape { net: &mut self.net, node: name.clone(), steps: 0 };
        let y_dims = tape.dims(y, "y")?;
        let seed = tape.constant(tape.dtype(y), y_dims, 1.0)?;
        let mut grads: HashMap<&str, TensorId> = HashMap::from([(y_name.as_str(), seed)]);
        for f in &forwards {
            if f.node.output.iter().skip(1).any(|o| grads.contains_key(o.as_str())) {
                return Err(tape.unsupported(format!(
                    "the derivative through a secondary output of `{}` (node `{}`)",
                    f.node.op_type(),
                    f.node.name()
                )));
            }
            let Some(&gy) = f.node.output.first().and_then(|o| grads.get(o.as_str())) else {
                continue;
            };
            let input_grads = input_gradients(&mut tape, f, gy)?;
            for (v, g) in f.node.input.iter().zip(input_grads) {
                let Some(g) = g.filter(|_| depends.contains(v.as_str())) else {
                    continue;
                };
                let total = match grads.get(v.as_str()) {
                    Some(&previous) => tape.binary(ElementwiseOp::Sum, previous, g)?,
                    None => g,
                };
                grads.insert(v.as_str(), total);
            }
        }

        let mut outputs = Vec::with_capacity(xs.len());
        for (x_name, &x) in xs.iter().zip(&x_tensors) {
            let g = match grads.get(x_name.as_str()) {
                Some(&g) => g,
                None => {
                    // y does not depend on x: the gradient is zero.
                    let dims = tape.dims(x, "x")?;
                    tape.constant(tape.dtype(x), dims, 0.0)?
                }
            };
            outputs.push(g);
        }
        for (out_name, g) in node.output.iter().zip(outputs) {
            if !out_name.is_empty() {
                self.bind(g, out_name, &name)?;
            }
        }
        Ok(())
    }
}
