//! ONNX Loop, If and Scan, built in Rust, imported onto kiln's loops and conditionals and
//! run on the cpu backend against hand-computed results.

mod common;

use common::*;
use kiln::{BuilderConfig, ExecutionContext, HostTensor, TensorData};
use kiln_onnx::proto::attribute_proto::AttributeType;
use kiln_onnx::proto::{AttributeProto, GraphProto, ModelProto};
use std::collections::HashMap;

fn graph_attr(name: &str, g: Graph) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(GraphProto { name: Some(name.into()), ..g.graph }),
        ..Default::default()
    }
}

fn bool_scalar(v: bool) -> HostTensor {
    HostTensor::scalar(TensorData::Bool(vec![v])).unwrap()
}

/// Imports, builds and runs; the error text when any step fails.
fn try_run(model: &ModelProto, inputs: Vec<(&str, HostTensor)>) -> Result<HashMap<String, HostTensor>, String> {
    let net = kiln_onnx::import_bytes(&prost::Message::encode_to_vec(model), None).map_err(|e| e.to_string())?;
    let backend = kiln_cpu::CpuBackend::new();
    let engine = kiln::Builder::new(&backend).build(&net, &BuilderConfig::default()).map_err(|e| e.to_string())?;
    let ctx = ExecutionContext::new(engine, &backend).map_err(|e| e.to_string())?;
    let inputs = inputs.into_iter().map(|(n, t)| (n.to_string(), t)).collect();
    ctx.run(&inputs).map(|o| o.into_iter().collect()).map_err(|e| e.to_string())
}

/// `s = 0; for i in 0..M: s += i` with `s` carried and scanned.
#[test]
fn loop_with_trip_count_carries_and_scans() {
    let body = Graph::new()
        .input("i", I64, "")
        .input("cond", BOOL, "")
        .input("s_in", F32, "1")
        .node(node("Cast", &["i"], &["fi"]).int("to", F32 as i64))
        .node(node("Add", &["s_in", "fi"], &["s_out"]))
        .node(node("Identity", &["cond"], &["cond_out"]))
        .node(node("Identity", &["s_out"], &["scan"]))
        .output("cond_out")
        .output("s_out")
        .output("scan");
    let model = Graph::new()
        .input("M", I64, "")
        .input("s0", F32, "1")
        .init(tensor_raw("keep_going", &[], BOOL, vec![1]))
        .node(node("Loop", &["M", "keep_going", "s0"], &["s", "all"]).attr(graph_attr("body", body)))
        .output("s")
        .output("all")
        .model(13);
    let outs = try_run(&model, vec![("M", i64s(&[], &[4])), ("s0", f32s(&[1], &[0.]))]).unwrap();
    assert_close(&outs["s"], &[1], &[6.], 0.0);
    assert_close(&outs["all"], &[4, 1], &[0., 1., 3., 6.], 0.0);
    // Zero trips: the initial value and an empty scan.
    let outs = try_run(&model, vec![("M", i64s(&[], &[0])), ("s0", f32s(&[1], &[5.]))]).unwrap();
    assert_close(&outs["s"], &[1], &[5.], 0.0);
    assert_eq!(outs["all"].shape(), [0, 1]);
}

/// A while loop: no trip count, the body's condition output decides.
#[test]
fn loop_without_trip_count_runs_while_the_condition_holds() {
    let body = Graph::new()
        .input("i", I64, "")
        .input("cond", BOOL, "")
        .input("s_in", F32, "")
        .init(tensor_f32("three", &[], &[3.]))
        .init(tensor_f32("ten", &[], &[10.]))
        .node(node("Add", &["s_in", "three"], &["s_out"]))
        .node(node("Less", &["s_out", "ten"], &["cond_out"]))
        .output("cond_out")
        .output("s_out")
        .output("s_out");
    let model = Graph::new()
        .input("go", BOOL, "")
        .input("s0", F32, "")
        .node(node("Loop", &["", "go", "s0"], &["s", "all"]).attr(graph_attr("body", body)))
        .output("s")
        .output("all")
        .model(16);
    let outs = try_run(&model, vec![("go", bool_scalar(true)), ("s0", f32s(&[], &[1.]))]).unwrap();
    assert_close(&outs["s"], &[], &[10.], 0.0);
    assert_close(&outs["all"], &[3], &[4., 7., 10.], 0.0);
    let outs = try_run(&model, vec![("go", bool_scalar(false)), ("s0", f32s(&[], &[1.]))]).unwrap();
    assert_close(&outs["s"], &[], &[1.], 0.0);
}

/// A carried value that grows each iteration: imported with a dynamic dim.
#[test]
fn loop_carried_values_may_change_shape() {
    let body = Graph::new()
        .input("i", I64, "")
        .input("cond", BOOL, "")
        .input("acc_in", F32, "?")
        .init(tensor_i64("axes", &[1], &[0]))
        .node(node("Cast", &["i"], &["fi"]).int("to", F32 as i64))
        .node(node("Unsqueeze", &["fi", "axes"], &["item"]))
        .node(node("Concat", &["acc_in", "item"], &["acc_out"]).int("axis", 0))
        .node(node("Identity", &["cond"], &["cond_out"]))
        .output("cond_out")
        .output("acc_out");
    let model = Graph::new()
        .input("acc0", F32, "1")
        .init(tensor_i64("M", &[], &[3]))
        .node(node("Loop", &["M", "", "acc0"], &["acc"]).attr(graph_attr("body", body)))
        .output("acc")
        .model(13);
    let outs = try_run(&model, vec![("acc0", f32s(&[1], &[-1.]))]).unwrap();
    assert_close(&outs["acc"], &[4], &[-1., 0., 1., 2.], 0.0);
}

/// If whose else branch gathers out of range: it runs only when taken.
#[test]
fn if_runs_only_the_taken_branch() {
    let then_branch = Graph::new().node(node("Add", &["x", "x"], &["twice"])).output("twice");
    let else_branch = Graph::new()
        .init(tensor_i64("bad", &[3], &[7, 8, 9]))
        .node(node("Gather", &["x", "bad"], &["gathered"]))
        .output("gathered");
    let model = Graph::new()
        .input("c", BOOL, "")
        .input("x", F32, "3")
        .node(node("If", &["c"], &["y"]).attr(graph_attr("then_branch", then_branch)).attr(graph_attr("else_branch", else_branch)))
        .output("y")
        .model(13);
    let x = f32s(&[3], &[1., 2., 3.]);
    let outs = try_run(&model, vec![("c", bool_scalar(true)), ("x", x.clone())]).unwrap();
    assert_close(&outs["y"], &[3], &[2., 4., 6.], 0.0);
    let err = try_run(&model, vec![("c", bool_scalar(false)), ("x", x)]).unwrap_err();
    assert!(err.contains("Gather"), "{err}");
}

/// `sum_even` (seeds §11.5.2) as PyTorch exports it: an If in a Loop body, reading the
/// loop's values from the outer scope.
#[test]
fn if_nested_in_loop_sums_even_items() {
    let then_branch = Graph::new().node(node("Add", &["s_in", "item"], &["added"])).output("added");
    let else_branch = Graph::new().node(node("Identity", &["s_in"], &["kept"])).output("kept");
    let body = Graph::new()
        .input("i", I64, "")
        .input("cond", BOOL, "")
        .input("s_in", F32, "1")
        .init(tensor_f32("two", &[], &[2.]))
        .init(tensor_f32("zero", &[], &[0.]))
        .node(node("Gather", &["items", "i"], &["item"]))
        .node(node("Mod", &["item", "two"], &["rem"]).int("fmod", 1))
        .node(node("Equal", &["rem", "zero"], &["even"]))
        .node(node("If", &["even"], &["s_out"]).attr(graph_attr("then_branch", then_branch)).attr(graph_attr("else_branch", else_branch)))
        .node(node("Identity", &["cond"], &["cond_out"]))
        .output("cond_out")
        .output("s_out");
    let model = Graph::new()
        .input("items", F32, "5")
        .init(tensor_i64("M", &[], &[5]))
        .init(tensor_f32("s0", &[1], &[0.]))
        .init(tensor_raw("yes", &[], BOOL, vec![1]))
        .node(node("Loop", &["M", "yes", "s0"], &["s"]).attr(graph_attr("body", body)))
        .output("s")
        .model(13);
    let outs = try_run(&model, vec![("items", f32s(&[5], &[1., 2., 3., 4., 6.]))]).unwrap();
    assert_close(&outs["s"], &[1], &[12.], 0.0);
}

/// Scan 9+ with a reversed scan input and a reversed scan output.
#[test]
fn scan_with_directions() {
    let body = Graph::new()
        .input("s_in", F32, "2")
        .input("row", F32, "2")
        .node(node("Add", &["s_in", "row"], &["s_out"]))
        .node(node("Identity", &["s_out"], &["scanned"]))
        .output("s_out")
        .output("scanned");
    let model = Graph::new()
        .input("s0", F32, "2")
        .input("x", F32, "3,2")
        .node(
            node("Scan", &["s0", "x"], &["s", "ys"])
                .int("num_scan_inputs", 1)
                .ints("scan_input_directions", &[1])
                .ints("scan_output_directions", &[1])
                .attr(graph_attr("body", body)),
        )
        .output("s")
        .output("ys")
        .model(11);
    let outs = try_run(&model, vec![("s0", f32s(&[2], &[0., 0.])), ("x", f32s(&[3, 2], &[1., 2., 3., 4., 5., 6.]))]).unwrap();
    assert_close(&outs["s"], &[2], &[9., 12.], 0.0);
    assert_close(&outs["ys"], &[3, 2], &[9., 12., 8., 10., 5., 6.], 0.0);
}

/// Scan 9+ along axis 1, stacking the outputs along axis 1.
#[test]
fn scan_along_other_axes() {
    let body = Graph::new()
        .input("s_in", F32, "")
        .input("column", F32, "2")
        .node(node("ReduceSum", &["column"], &["colsum"]).int("keepdims", 0))
        .node(node("Add", &["s_in", "colsum"], &["s_out"]))
        .node(node("Identity", &["column"], &["copy"]))
        .output("s_out")
        .output("copy");
    let model = Graph::new()
        .input("s0", F32, "")
        .input("x", F32, "2,3")
        .node(
            node("Scan", &["s0", "x"], &["s", "ys"])
                .int("num_scan_inputs", 1)
                .ints("scan_input_axes", &[1])
                .ints("scan_output_axes", &[-1])
                .attr(graph_attr("body", body)),
        )
        .output("s")
        .output("ys")
        .model(16);
    let x = f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let outs = try_run(&model, vec![("s0", f32s(&[], &[0.])), ("x", x)]).unwrap();
    assert_close(&outs["s"], &[], &[21.], 0.0);
    assert_close(&outs["ys"], &[2, 3], &[1., 2., 3., 4., 5., 6.], 0.0);
}

/// Scan 8: a batch axis 0 and the sequence on axis 1.
#[test]
fn scan_8_runs_per_batch_entry() {
    let body = Graph::new()
        .input("s_in", F32, "1")
        .input("x_t", F32, "1")
        .node(node("Add", &["s_in", "x_t"], &["s_out"]))
        .node(node("Identity", &["s_out"], &["scanned"]))
        .output("s_out")
        .output("scanned");
    let model = Graph::new()
        .input("s0", F32, "2,1")
        .input("x", F32, "2,3,1")
        .node(node("Scan", &["", "s0", "x"], &["s", "ys"]).int("num_scan_inputs", 1).attr(graph_attr("body", body)))
        .output("s")
        .output("ys")
        .model(8);
    let x = f32s(&[2, 3, 1], &[1., 2., 3., 10., 20., 30.]);
    let outs = try_run(&model, vec![("s0", f32s(&[2, 1], &[0., 100.])), ("x", x)]).unwrap();
    assert_close(&outs["s"], &[2, 1], &[6., 160.], 0.0);
    assert_close(&outs["ys"], &[2, 3, 1], &[1., 3., 6., 110., 130., 160.], 0.0);
}

/// Scan 8 whose scanned input has no sequence axis (rank 1: only the batch axis), with
/// sequence lengths: an import error naming the axis (the fuzzer found it indexed past the
/// dims).
#[test]
fn scan_8_with_a_scanned_input_of_rank_one_is_an_error() {
    let body = Graph::new()
        .input("s_in", F32, "1")
        .input("x_t", F32, "")
        .node(node("Add", &["s_in", "x_t"], &["s_out"]))
        .output("s_out");
    let model = Graph::new()
        .input("lens", I32, "2")
        .input("s0", F32, "2,1")
        .input("x", F32, "2")
        .node(node("Scan", &["lens", "s0", "x"], &["s"]).int("num_scan_inputs", 1).attr(graph_attr("body", body)))
        .output("s")
        .model(8);
    let e = kiln_onnx::import_bytes(&prost::Message::encode_to_vec(&model), None).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("full sequence length: axis 0 of a rank-0 tensor"), "{e}");
}

/// ONNX allows branches of different shapes (the seeds do not): the output's differing
/// dims become dynamic and each branch gives its own.
#[test]
fn branch_outputs_of_different_shapes_make_a_dynamic_output() {
    let then_branch = Graph::new().init(tensor_f32("a", &[2], &[1., 2.])).node(node("Identity", &["a"], &["ta"])).output("ta");
    let else_branch = Graph::new().init(tensor_f32("b", &[3], &[1., 2., 3.])).node(node("Identity", &["b"], &["tb"])).output("tb");
    let model = Graph::new()
        .input("c", BOOL, "")
        .node(node("If", &["c"], &["y"]).attr(graph_attr("then_branch", then_branch)).attr(graph_attr("else_branch", else_branch)))
        .output("y")
        .model(13);
    assert_close(&try_run(&model, vec![("c", bool_scalar(true))]).unwrap()["y"], &[2], &[1., 2.], 0.0);
    assert_close(&try_run(&model, vec![("c", bool_scalar(false))]).unwrap()["y"], &[3], &[1., 2., 3.], 0.0);
}

/// torchvision's batched NMS as the legacy exporter writes it: one branch returns a fixed
/// empty `[0]` tensor, the other one sized by the data; neither fixes the output.
#[test]
fn a_fixed_empty_branch_and_a_dynamic_branch_make_a_dynamic_output() {
    let then_branch = Graph::new().init(tensor_i64("none", &[0], &[])).node(node("Identity", &["none"], &["empty"])).output("empty");
    let else_branch = Graph::new().node(node("Identity", &["x"], &["kept"])).output("kept");
    let model = Graph::new()
        .input("c", BOOL, "")
        .input("x", I64, "N")
        .node(node("If", &["c"], &["y"]).attr(graph_attr("then_branch", then_branch)).attr(graph_attr("else_branch", else_branch)))
        .output("y")
        .model(13);
    let x = i64s(&[3], &[4, 5, 6]);
    assert_i64(&try_run(&model, vec![("c", bool_scalar(false)), ("x", x.clone())]).unwrap()["y"], &[3], &[4, 5, 6]);
    assert_eq!(try_run(&model, vec![("c", bool_scalar(true)), ("x", x)]).unwrap()["y"].shape(), [0]);
}

/// A condition known at build time selects its branch during import; the other branch,
/// invalid for these shapes (a Reshape of 3 elements to 2), is never imported.
#[test]
fn if_with_a_build_time_condition_imports_only_the_taken_branch() {
    let then_branch = Graph::new().node(node("Add", &["x", "x"], &["twice"])).output("twice");
    let else_branch = Graph::new()
        .init(tensor_i64("two", &[1], &[2]))
        .node(node("Reshape", &["x", "two"], &["broken"]))
        .output("broken");
    let model = Graph::new()
        .input("x", F32, "3")
        .init(tensor_raw("c", &[], BOOL, vec![1]))
        .node(node("If", &["c"], &["y"]).attr(graph_attr("then_branch", then_branch)).attr(graph_attr("else_branch", else_branch)))
        .output("y")
        .model(13);
    let net = import(&model);
    assert!(net.layers().iter().all(|l| l.kind.type_name() != "IfConditionalOutput"), "{}", net.dump());
    assert_close(&try_run(&model, vec![("x", f32s(&[3], &[1., 2., 3.]))]).unwrap()["y"], &[3], &[2., 4., 6.], 0.0);
}

/// A loop appending to a list: `SequenceEmpty` before, `SequenceInsert` in the body and
/// `ConcatFromSequence` after, as PyTorch exports `outs.append(...)`; two items in the
/// sequence before the loop come first.
#[test]
fn loop_appending_to_a_sequence_stacks_the_appended_values() {
    let body = Graph::new()
        .input("i", I64, "")
        .input("cond", BOOL, "")
        .input("seq_in", F32, "")
        .node(node("Cast", &["i"], &["fi"]).int("to", F32 as i64))
        .node(node("Mul", &["fi", "x"], &["item"]))
        .node(node("SequenceInsert", &["seq_in", "item"], &["seq_out"]))
        .node(node("Identity", &["cond"], &["cond_out"]))
        .output("cond_out")
        .output("seq_out");
    let model = Graph::new()
        .input("M", I64, "")
        .input("x", F32, "2")
        .init(tensor_raw("keep_going", &[], BOOL, vec![1]))
        .node(node("SequenceConstruct", &["x", "x"], &["start"]))
        .node(node("Loop", &["M", "keep_going", "start"], &["seq"]).attr(graph_attr("body", body)))
        .node(node("ConcatFromSequence", &["seq"], &["stacked"]).int("axis", 0).int("new_axis", 1))
        .output("stacked")
        .model(17);
    let outs = try_run(&model, vec![("M", i64s(&[], &[3])), ("x", f32s(&[2], &[1., -2.]))]).unwrap();
    assert_close(&outs["stacked"], &[5, 2], &[1., -2., 1., -2., 0., 0., 1., -2., 2., -4.], 0.0);
}

#[test]
fn a_loop_reading_its_carried_sequence_is_refused() {
    let body = Graph::new()
        .input("i", I64, "")
        .input("cond", BOOL, "")
        .input("seq_in", F32, "")
        .node(node("SequenceLength", &["seq_in"], &["n"]))
        .node(node("Cast", &["n"], &["item"]).int("to", F32 as i64))
        .node(node("SequenceInsert", &["seq_in", "item"], &["seq_out"]))
        .node(node("Identity", &["cond"], &["cond_out"]))
        .output("cond_out")
        .output("seq_out");
    let model = Graph::new()
        .input("M", I64, "")
        .init(tensor_raw("keep_going", &[], BOOL, vec![1]))
        .node(node("SequenceEmpty", &[], &["start"]))
        .node(node("Loop", &["M", "keep_going", "start"], &["seq"]).attr(graph_attr("body", body)))
        .node(node("ConcatFromSequence", &["seq"], &["stacked"]).int("axis", 0))
        .output("stacked")
        .model(17);
    let err = try_run(&model, vec![("M", i64s(&[], &[3]))]).unwrap_err();
    assert!(err.contains("`seq_in` is read in the body"), "{err}");
}

#[test]
fn sequences_cannot_be_graph_outputs_or_tensor_op_inputs() {
    let model = Graph::new()
        .input("x", F32, "2")
        .node(node("SequenceConstruct", &["x", "x"], &["seq"]))
        .output("seq")
        .model(17);
    let err = try_run(&model, vec![("x", f32s(&[2], &[1., 2.]))]).unwrap_err();
    assert!(err.contains("graph output `seq` is a sequence"), "{err}");
    let model = Graph::new()
        .input("x", F32, "2")
        .node(node("SequenceConstruct", &["x", "x"], &["seq"]))
        .node(node("Relu", &["seq"], &["y"]))
        .output("y")
        .model(17);
    let err = try_run(&model, vec![("x", f32s(&[2], &[1., 2.]))]).unwrap_err();
    assert!(err.contains("input `seq`, a sequence"), "{err}");
}
