//! Engine files: round trip, and refusal of truncated, corrupted and mismatched files.

mod common;

use common::RecordOnlyBackend;
use kiln::engine::format::{self, EngineFileError, SectionKind};
use kiln::*;

fn small_engine() -> Engine {
    let mut net = Network::new("round-trip");
    let x = net.add_input("x", DataType::F32, [1, 2, 4, 4]).unwrap();
    let conv = net
        .add_convolution(x, 3, &[3, 3], TensorData::F32((0..54).map(|i| i as f32 * 0.01).collect()), Some(TensorData::F32(vec![0.5, -0.5, 0.25])))
        .unwrap();
    let act = net.add_activation(net.output(conv, 0), ActivationKind::Relu).unwrap();
    let unused = net.add_unary(x, UnaryOp::Exp).unwrap();
    let _ = unused;
    net.set_tensor_name(net.output(act, 0), "y").unwrap();
    net.mark_output(net.output(act, 0)).unwrap();
    let backend = RecordOnlyBackend::new();
    Builder::new(&backend).build(&net, &BuilderConfig { flags: vec!["test".into()], ..BuilderConfig::default() }).unwrap()
}

#[test]
fn engine_round_trips_to_an_identical_file() {
    let engine = small_engine();
    let bytes = engine.serialize();
    let loaded = Engine::deserialize(&bytes).unwrap();
    assert_eq!(loaded.serialize(), bytes, "serialize(deserialize(f)) must equal f");
    assert_eq!(loaded.network().dump(), engine.network().dump());
    assert_eq!(loaded.backend(), "record-only");
    assert_eq!(loaded.build_flags().flags, vec!["test".to_string()]);
    let w0 = engine.network().weights();
    let w1 = loaded.network().weights();
    assert_eq!(w0.len(), w1.len());
    for (a, b) in w0.iter().zip(w1) {
        assert_eq!(a.as_ref(), b.as_ref());
    }
}

#[test]
fn builder_drops_layers_no_output_needs() {
    let engine = small_engine();
    let kinds: Vec<&str> = engine.network().layers().iter().map(|l| l.kind.type_name()).collect();
    assert!(!kinds.contains(&"Unary"), "the unused Exp layer must be removed: {kinds:?}");
    assert_eq!(engine.network().inputs().len(), 1, "inputs are kept even when unused");
}

#[test]
fn truncated_files_are_refused_at_every_length() {
    let bytes = small_engine().serialize();
    for len in 0..bytes.len() {
        let err = Engine::deserialize(&bytes[..len]).expect_err("a truncated engine must not load");
        let text = err.to_string();
        assert!(text.contains("truncated") || text.contains("corrupted") || text.contains("invalid"), "len {len}: {text}");
    }
}

#[test]
fn every_single_byte_corruption_is_detected_without_panic() {
    let bytes = small_engine().serialize();
    for i in 0..bytes.len() {
        let mut copy = bytes.clone();
        copy[i] ^= 0x5a;
        if let Ok(engine) = Engine::deserialize(&copy) {
            // Only padding bytes between sections are not covered by a checksum.
            assert_eq!(engine.serialize(), bytes, "byte {i} changed the engine yet it loaded");
        }
    }
}

#[test]
fn garbage_is_not_an_engine() {
    let err = Engine::deserialize(b"this is not an engine file at all").unwrap_err();
    assert_eq!(err, EngineLoadError::File(EngineFileError::BadMagic));
}

#[test]
fn other_format_versions_are_refused() {
    let mut bytes = small_engine().serialize();
    let newer = format::FORMAT_VERSION + 1;
    bytes[8..12].copy_from_slice(&newer.to_le_bytes());
    let err = Engine::deserialize(&bytes).unwrap_err();
    assert_eq!(err, EngineLoadError::File(EngineFileError::FormatVersion { found: newer, supported: format::FORMAT_VERSION }));
}

#[test]
fn other_kiln_versions_are_refused() {
    let engine = small_engine();
    let bytes = engine.serialize();
    let (mut header, sections) = format::read_file(&bytes).unwrap();
    header.kiln_version = "0.0.1-old".into();
    let sections: Vec<(SectionKind, Vec<u8>)> = sections.into_iter().map(|(k, b)| (k, b.to_vec())).collect();
    let rewritten = format::write_file(header, &sections);
    let err = Engine::deserialize(&rewritten).unwrap_err().to_string();
    assert!(err.contains("built by kiln 0.0.1-old") && err.contains("rebuild"), "{err}");
}

#[test]
fn backend_and_compute_capability_must_match_other_differences_warn() {
    let engine = small_engine();
    let mut device = RecordOnlyBackend::new().fingerprint;
    assert_eq!(engine.check_device(&device).unwrap(), Vec::<String>::new());
    device.multiprocessor_count = 8;
    device.l2_cache_bytes = 1 << 20;
    let warnings = engine.check_device(&device).unwrap();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].contains("L2 cache size"));
    device.compute_capability = "2.0".into();
    let err = engine.check_device(&device).unwrap_err().to_string();
    assert!(err.contains("compute capability 1.0") && err.contains("2.0"), "{err}");
    device.backend = "cpu".into();
    assert!(matches!(engine.check_device(&device), Err(EngineLoadError::BackendMismatch { .. })));
}

#[test]
fn an_inconsistent_plan_is_refused() {
    // A plan whose stored shapes disagree with its layers (e.g. a hand-edited file whose
    // checksums were recomputed) must not reach a backend.
    let engine = small_engine();
    let bytes = engine.serialize();
    let (header, sections) = format::read_file(&bytes).unwrap();
    let mut sections: Vec<(SectionKind, Vec<u8>)> = sections.into_iter().map(|(k, b)| (k, b.to_vec())).collect();
    // Drop the weights: the Constant layers then point at missing blobs.
    sections[1].1.clear();
    let rewritten = format::write_file(header, &sections);
    let err = Engine::deserialize(&rewritten).unwrap_err().to_string();
    assert!(err.contains("engine plan is invalid"), "{err}");
}
