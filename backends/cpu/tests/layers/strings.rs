//! String tensors: the string operators, data movement on strings (through interned ids),
//! Equal, the refusal of arithmetic, and engine serialization of string constants.

use crate::common::*;
use kiln::{
    Builder, BuilderConfig, CaseChange, ElementwiseOp, Engine, ExecutionContext, GatherMode, HostTensor, LayerKind,
    Network, ShuffleParams, TextOp,
};
use kiln_cpu::CpuBackend;
use std::collections::HashMap;

fn texts(shape: &[usize], v: &[&str]) -> HostTensor {
    HostTensor::from_strings(shape.to_vec(), v.iter().map(|s| s.to_string()).collect()).unwrap()
}

fn normalize(case_change: CaseChange, case_sensitive: bool, stopwords: &[&str]) -> LayerKind {
    let stopwords = stopwords.iter().map(|s| s.to_string()).collect();
    LayerKind::Text(TextOp::Normalize { case_change, case_sensitive, stopwords })
}

#[test]
fn string_normalizer_drops_stopwords_and_changes_case() {
    let x = texts(&[4], &["monday", "tuesday", "Monday", "wednesday"]);
    let y = run1(normalize(CaseChange::Upper, false, &["monday"]), vec![In::Run(x.clone())]);
    assert_exact(&y, &texts(&[2], &["TUESDAY", "WEDNESDAY"]));
    // Case-sensitive: only the exact stopword goes, before the case change.
    let y = run1(normalize(CaseChange::Lower, true, &["monday"]), vec![In::Run(x)]);
    assert_exact(&y, &texts(&[3], &["tuesday", "monday", "wednesday"]));
}

#[test]
fn string_normalizer_leaves_one_empty_string_when_everything_is_dropped() {
    let x = texts(&[1, 2], &["monday", "monday"]);
    let y = run1(normalize(CaseChange::None, true, &["monday"]), vec![In::Run(x)]);
    assert_exact(&y, &texts(&[1, 1], &[""]));
}

#[test]
fn string_concat_broadcasts() {
    let a = texts(&[2], &["a", "ü"]);
    let b = texts(&[], &["!"]);
    let y = run1(LayerKind::Text(TextOp::Concat), vec![In::Run(a), In::Run(b)]);
    assert_exact(&y, &texts(&[2], &["a!", "ü!"]));
}

#[test]
fn string_split_pads_tokens_and_counts_them() {
    let x = texts(&[2], &["a b  c", "d"]);
    let out = run(LayerKind::Text(TextOp::Split { delimiter: None, max_split: None }), vec![In::Run(x)]);
    assert_exact(&out[0], &texts(&[2, 3], &["a", "b", "c", "d", "", ""]));
    assert_exact(&out[1], &i64s(&[2], &[3, 1]));
    let x = texts(&[1], &["a,b,,c"]);
    let kind = LayerKind::Text(TextOp::Split { delimiter: Some(",".into()), max_split: Some(2) });
    let out = run(kind, vec![In::Run(x)]);
    assert_exact(&out[0], &texts(&[1, 3], &["a", "b", ",c"]));
}

#[test]
fn regex_full_match_anchors_the_whole_string() {
    let x = texts(&[3], &["www.google.com", "www.facebook.com", "google.com"]);
    let kind = LayerKind::Text(TextOp::RegexFullMatch { pattern: r"www\.[\w.-]+\.\bcom\b".into() });
    let y = run1(kind, vec![In::Run(x)]);
    assert_exact(&y, &bools(&[3], &[true, true, false]));
    // An invalid pattern is refused when the layer is added (shape inference checks it).
    let kind = LayerKind::Text(TextOp::RegexFullMatch { pattern: "(".into() });
    let bad = format!("{:?}", try_run(kind, vec![In::Run(texts(&[1], &["x"]))]).unwrap_err());
    assert!(bad.contains("invalid"), "{bad}");
}

#[test]
fn strings_move_through_data_movement_layers() {
    let x = texts(&[2, 2], &["a", "b", "c", "d"]);
    let transpose = ShuffleParams { first_transpose: vec![1, 0], ..Default::default() };
    let y = run1(LayerKind::Shuffle(transpose), vec![In::Run(x.clone())]);
    assert_exact(&y, &texts(&[2, 2], &["a", "c", "b", "d"]));
    let y =
        run1(LayerKind::Concatenation { axis: 0 }, vec![In::Run(x.clone()), In::Const(texts(&[1, 2], &["e", "a"]))]);
    assert_exact(&y, &texts(&[3, 2], &["a", "b", "c", "d", "e", "a"]));
    let y = run1(
        LayerKind::Gather { mode: GatherMode::Default { axis: 1 } },
        vec![In::Run(x.clone()), In::Const(i64s(&[1], &[1]))],
    );
    assert_exact(&y, &texts(&[2, 1], &["b", "d"]));
    let y = run1(
        LayerKind::Select,
        vec![In::Run(bools(&[2], &[true, false])), In::Run(x.clone()), In::Const(texts(&[2], &["x", "y"]))],
    );
    assert_exact(&y, &texts(&[2, 2], &["a", "y", "c", "y"]));
}

#[test]
fn equal_compares_string_contents() {
    let a = texts(&[3], &["a", "b", "c"]);
    let b = texts(&[3], &["a", "x", "c"]);
    let y = run1(LayerKind::Elementwise { op: ElementwiseOp::Equal }, vec![In::Run(a), In::Run(b)]);
    assert_exact(&y, &bools(&[3], &[true, false, true]));
}

#[test]
fn arithmetic_on_strings_is_refused_at_build() {
    let a = texts(&[1], &["a"]);
    let message = format!(
        "{:?}",
        try_run(LayerKind::Elementwise { op: ElementwiseOp::Sum }, vec![In::Run(a.clone()), In::Run(a)]).unwrap_err()
    );
    assert!(message.contains("not defined on strings"), "{message}");
}

#[test]
fn string_constants_survive_engine_serialization() {
    let mut net = Network::new("strings");
    let x = net.add_input("x", kiln::DataType::String, kiln::Shape::fixed(&[2])).unwrap();
    let w = net.add_weights(texts(&[2], &["-é", ""]));
    let c = net.add_layer("c", LayerKind::Constant { weights: w }, vec![]).unwrap();
    let c = net.output(c, 0);
    let y = net.add_layer("cat", LayerKind::Text(TextOp::Concat), vec![Some(x), Some(c)]).unwrap();
    let y = net.output(y, 0);
    net.mark_output(y).unwrap();
    let backend = CpuBackend::new();
    let engine = Builder::new(&backend).build(&net, &BuilderConfig::default()).unwrap();
    let engine = Engine::deserialize(&engine.serialize()).unwrap();
    let ctx = ExecutionContext::new(engine, &backend).unwrap();
    let out = ctx.run(&HashMap::from([("x".to_string(), texts(&[2], &["a", "b"]))])).unwrap();
    assert_exact(out.values().next().unwrap(), &texts(&[2], &["a-é", "b"]));
}
