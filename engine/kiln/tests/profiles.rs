//! Optimization profiles and memory planning at build time: profile validation, engine
//! file round trip, arena sizes at the profiles' max shapes, the workspace limit.

mod common;

use common::RecordOnlyBackend;
use kiln::engine::format::{self, EngineFileError};
use kiln::*;

fn dyn_shape(dims: &[Dim]) -> Shape {
    Shape(dims.to_vec())
}

fn n() -> Dim {
    Dim::Named("N".into())
}

/// `x [N,16] → relu → exp → abs → neg → y`: three intermediates in a chain.
fn chain_net() -> Network {
    let mut net = Network::new("chain");
    let x = net.add_input("x", DataType::F32, dyn_shape(&[n(), Dim::Fixed(16)])).unwrap();
    let a = net.add_activation(x, ActivationKind::Relu).unwrap();
    let b = net.add_unary(net.output(a, 0), UnaryOp::Exp).unwrap();
    let c = net.add_unary(net.output(b, 0), UnaryOp::Abs).unwrap();
    let d = net.add_unary(net.output(c, 0), UnaryOp::Neg).unwrap();
    net.set_tensor_name(net.output(d, 0), "y").unwrap();
    net.mark_output(net.output(d, 0)).unwrap();
    net
}

fn profile(min: usize, opt: usize, max: usize) -> OptimizationProfile {
    let mut p = OptimizationProfile::new();
    p.set_dimensions("x", &[min, 16], &[opt, 16], &[max, 16]);
    p
}

/// Builds without optimization: the memory-plan tests count the chain's intermediates,
/// which fusion would merge into one layer.
fn build(net: &Network, config: &BuilderConfig) -> Result<Engine, BuildError> {
    let config = BuilderConfig { optimization: Optimization::None, ..config.clone() };
    Builder::new(&RecordOnlyBackend::new()).build(net, &config)
}

fn build_with(net: &Network, profiles: Vec<OptimizationProfile>) -> Result<Engine, BuildError> {
    build(net, &BuilderConfig { profiles, ..BuilderConfig::default() })
}

fn profile_error(net: &Network, profiles: Vec<OptimizationProfile>) -> ProfileError {
    match build_with(net, profiles) {
        Err(BuildError::Profile(e)) => e,
        other => panic!("expected a profile error, got {other:?}"),
    }
}

#[test]
fn a_profile_must_cover_every_dynamic_input() {
    let mut other = OptimizationProfile::new();
    other.set_dimensions("y", &[1], &[1], &[1]);
    let err = profile_error(&chain_net(), vec![other]);
    assert!(matches!(&err, ProfileError::UnknownInput { input, .. } if input == "y"), "{err}");
    assert!(err.to_string().contains("inputs: x"), "{err}");

    let mut net = chain_net();
    net.add_input("z", DataType::F32, dyn_shape(&[Dim::Unknown])).unwrap();
    let err = profile_error(&net, vec![profile(1, 2, 4)]);
    assert_eq!(err, ProfileError::MissingInput { profile: 0, input: "z".into(), shape: "[?]".into() });
}

#[test]
fn ranks_order_and_fixed_dims_are_checked() {
    let mut p = OptimizationProfile::new();
    p.set_dimensions("x", &[1, 16], &[2], &[4, 16]);
    let err = profile_error(&chain_net(), vec![p]);
    assert!(matches!(err, ProfileError::Rank { rank: 2, which: "opt", .. }), "{err}");

    let err = profile_error(&chain_net(), vec![profile(1, 8, 4)]);
    assert_eq!(err, ProfileError::Order { profile: 0, input: "x".into(), axis: 0, min: 1, opt: 8, max: 4 });
    assert!(err.to_string().contains("axis 0"), "{err}");

    let mut p = OptimizationProfile::new();
    p.set_dimensions("x", &[1, 16], &[2, 16], &[4, 32]);
    let err = profile_error(&chain_net(), vec![profile(1, 1, 1), p]);
    assert!(matches!(err, ProfileError::FixedDim { profile: 1, axis: 1, fixed: 16, max: 32, .. }), "{err}");
}

#[test]
fn a_named_dim_shared_by_two_inputs_needs_one_range() {
    let mut net = chain_net();
    let x2 = net.add_input("x2", DataType::F32, dyn_shape(&[n()])).unwrap();
    let e = net.add_unary(x2, UnaryOp::Exp).unwrap();
    net.mark_output(net.output(e, 0)).unwrap();
    let mut p = profile(1, 2, 4);
    p.set_dimensions("x2", &[1], &[2], &[8]);
    let err = profile_error(&net, vec![p.clone()]);
    assert!(matches!(&err, ProfileError::NamedDimConflict { dim, .. } if dim == "N"), "{err}");
    p.set_dimensions("x2", &[1], &[2], &[4]);
    build_with(&net, vec![p]).unwrap();
}

#[test]
fn shape_tensor_ranges_need_an_integer_vector_input() {
    let mut p = profile(1, 2, 4);
    p.set_shape_values("x", &[1], &[1], &[1]);
    let err = profile_error(&chain_net(), vec![p]);
    assert!(matches!(err, ProfileError::NotAShapeTensor { .. }), "{err}");

    let mut net = Network::new("fill");
    let dims = net.add_input("dims", DataType::I64, [2]).unwrap();
    let value = HostTensor::scalar(TensorData::F32(vec![1.0])).unwrap();
    let fill = net.add_layer("fill", LayerKind::Fill { value }, vec![Some(dims)]).unwrap();
    net.mark_output(net.output(fill, 0)).unwrap();
    let mut p = OptimizationProfile::new();
    p.set_shape_values("dims", &[1, 1], &[2, 3], &[4]);
    let err = profile_error(&net, vec![p]);
    assert!(matches!(err, ProfileError::ValueCount { len: 2, which: "max", .. }), "{err}");
    let mut p = OptimizationProfile::new();
    p.set_shape_values("dims", &[1, 1], &[2, 3], &[4, 5]);
    let engine = build_with(&net, vec![p]).unwrap();
    // The Fill output is a network output, so nothing is planned; the values bound it.
    assert_eq!(engine.memory_plans()[0].unplanned, Vec::<String>::new());
}

#[test]
fn the_arena_is_sized_at_the_max_shapes_and_reuses_memory() {
    let engine = build_with(&chain_net(), vec![profile(1, 8, 64), profile(1, 2, 4)]).unwrap();
    assert_eq!(engine.num_optimization_profiles(), 2);
    let plans = engine.memory_plans();
    assert_eq!(plans.len(), 2);
    // Three [64,16] f32 intermediates of 4096 bytes, each dead two steps after it is made:
    // two slots suffice.
    assert_eq!(plans[0].tensors.len(), 3);
    assert!(plans[0].tensors.iter().all(|t| t.size == 4096), "{:?}", plans[0].tensors);
    assert_eq!(plans[0].unshared_bytes, 3 * 4096);
    assert_eq!(plans[0].peak_bytes, 2 * 4096);
    assert_eq!(plans[1].peak_bytes, 2 * 256, "[4,16] f32 is 256 bytes");
    assert_eq!(engine.peak_activation_bytes(), 8192);
    for plan in plans {
        for (i, a) in plan.tensors.iter().enumerate() {
            assert_eq!(a.offset % memory_plan::ARENA_ALIGNMENT, 0);
            for b in &plan.tensors[i + 1..] {
                let together = a.first_step <= b.last_step && b.first_step <= a.last_step;
                let apart = a.offset + a.size <= b.offset || b.offset + b.size <= a.offset;
                assert!(!together || apart, "{a:?} and {b:?} overlap while both live");
            }
        }
    }
}

#[test]
fn without_a_profile_dynamic_tensors_are_unplanned() {
    let engine = build_with(&chain_net(), vec![]).unwrap();
    assert_eq!(engine.num_optimization_profiles(), 0);
    let plan = &engine.memory_plans()[0];
    assert!(plan.tensors.is_empty());
    assert_eq!(plan.unplanned.len(), 3, "{:?}", plan.unplanned);
    assert_eq!(engine.peak_activation_bytes(), 0);
}

#[test]
fn the_workspace_limit_fails_a_build_that_needs_more() {
    let net = chain_net();
    let config = |limit| BuilderConfig {
        profiles: vec![profile(1, 1, 1), profile(1, 8, 64)],
        workspace_limit_bytes: Some(limit),
        ..BuilderConfig::default()
    };
    let err = build(&net, &config(8191)).unwrap_err();
    assert_eq!(err, BuildError::WorkspaceLimit { needed: 8192, limit: 8191, profile: 1 });
    assert!(err.to_string().contains("workspace limit"), "{err}");
    build(&net, &config(8192)).unwrap();
}

#[test]
fn profiles_survive_the_engine_file() {
    let engine = build_with(&chain_net(), vec![profile(1, 8, 64), profile(2, 3, 5)]).unwrap();
    let bytes = engine.serialize();
    let loaded = Engine::deserialize(&bytes).unwrap();
    assert_eq!(loaded.profiles(), engine.profiles());
    assert_eq!(loaded.memory_plans(), engine.memory_plans());
    assert_eq!(loaded.profiles()[1].dimensions("x").unwrap().opt, vec![3, 16]);
    assert_eq!(loaded.serialize(), bytes);
}

#[test]
fn engine_files_of_older_formats_are_refused() {
    let mut bytes = build_with(&chain_net(), vec![profile(1, 8, 64)]).unwrap().serialize();
    assert_eq!((format::FORMAT_VERSION, format::OLDEST_READABLE_VERSION), (19, 16));
    for previous in [1u32, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 20] {
        bytes[8..12].copy_from_slice(&previous.to_le_bytes());
        let err = Engine::deserialize(&bytes).unwrap_err();
        assert_eq!(
            err,
            EngineLoadError::File(EngineFileError::FormatVersion { found: previous, supported: format::FORMAT_VERSION })
        );
        assert!(err.to_string().contains(&format!("version {previous} is not supported")), "{err}");
    }
}
