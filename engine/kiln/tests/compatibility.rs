//! Compatibility of serialized engines (seed §6.7): what refuses a load and what warns.

mod common;

use common::RecordOnlyBackend;
use kiln::engine::format::{self, EngineFileError};
use kiln::KILN_VERSION;
use kiln::*;

fn engine() -> Engine {
    let mut net = Network::new("compat");
    let x = net.add_input("x", DataType::F32, [2]).unwrap();
    let relu = net.add_activation(x, ActivationKind::Relu).unwrap();
    net.mark_output(net.output(relu, 0)).unwrap();
    Builder::new(&RecordOnlyBackend::new()).build(&net, &BuilderConfig::default()).unwrap()
}

#[test]
fn another_kiln_version_is_refused_naming_both_versions() {
    let bytes = engine().serialize();
    let (mut header, sections) = format::read_file(&bytes).unwrap();
    let sections: Vec<_> = sections.into_iter().map(|(k, b)| (k, b.to_vec())).collect();
    for other in ["0.0.0", "99.1.2", &format!("{KILN_VERSION}+build.7")] {
        header.kiln_version = other.to_string();
        let err = Engine::deserialize(&format::write_file(header.clone(), &sections)).unwrap_err();
        assert!(matches!(&err, EngineLoadError::File(EngineFileError::KilnVersion { found, .. }) if found == other), "{err:?}");
        let text = err.to_string();
        assert!(text.contains(other) && text.contains(KILN_VERSION), "{text}");
    }
}

#[test]
fn another_backend_or_compute_capability_is_refused_saying_what_differs() {
    let engine = engine();
    let mut device = RecordOnlyBackend::new().fingerprint;
    device.backend = "wgpu".into();
    let err = engine.check_device(&device).unwrap_err().to_string();
    assert!(err.contains("`record-only`") && err.contains("`wgpu`"), "{err}");
    let mut device = RecordOnlyBackend::new().fingerprint;
    // An adapter id or CPU architecture plays the compute capability's role.
    device.compute_capability = "9.0".into();
    let err = engine.check_device(&device).unwrap_err().to_string();
    assert!(err.contains("compute capability 1.0") && err.contains("9.0"), "{err}");
}

#[test]
fn every_performance_difference_is_a_warning_and_nothing_else_is() {
    let engine = engine();
    let base = RecordOnlyBackend::new().fingerprint;
    type Edit = fn(&mut DeviceFingerprint);
    let soft: [(&str, Edit); 7] = [
        ("memory bus width", |d| d.memory_bus_width_bits = 5120),
        ("L2 cache size", |d| d.l2_cache_bytes = 50 << 20),
        ("shared memory per block", |d| d.shared_memory_per_block = 48 << 10),
        ("shared memory per multiprocessor", |d| d.shared_memory_per_multiprocessor = 228 << 10),
        ("texture alignment", |d| d.texture_alignment = 512),
        ("multiprocessor count", |d| d.multiprocessor_count = 132),
        ("integrated GPU", |d| d.integrated = true),
    ];
    for (what, edit) in soft {
        let mut device = base.clone();
        edit(&mut device);
        let warnings = engine.check_device(&device).unwrap_or_else(|e| panic!("{what} must not refuse the load: {e}"));
        assert_eq!(warnings.len(), 1, "{what}: {warnings:?}");
        assert!(warnings[0].starts_with(what), "{what}: {}", warnings[0]);
    }
    // Name, driver and memory size neither refuse nor warn.
    let mut device = base.clone();
    device.name = "another board".into();
    device.driver_version = "999".into();
    device.memory_bytes = 1 << 40;
    assert_eq!(engine.check_device(&device).unwrap(), Vec::<String>::new());
}
