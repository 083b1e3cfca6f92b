//! Every WGSL kernel the backend can compile parses and validates with naga, and every
//! file of /shaders is used by the backend's table.

use kiln_wgpu::ops::all_instantiations;
use kiln_wgpu::shaders::BODIES;

#[test]
fn every_instantiation_validates_with_naga() {
    let all = all_instantiations();
    assert!(all.len() > 150, "only {} instantiations: the table lost entries", all.len());
    let mut failures = Vec::new();
    for inst in &all {
        assert!(!inst.body.is_empty(), "`{}` names no shader body", inst.key);
        let source = inst.source();
        let module = match naga::front::wgsl::parse_str(&source) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{}: parse: {}", inst.key, e.emit_to_string(&source)));
                continue;
            }
        };
        // Only the kernels that say so may need SHADER_F16: the others run on every adapter.
        let capabilities = match inst.needs_f16() {
            true => naga::valid::Capabilities::SHADER_FLOAT16,
            false => naga::valid::Capabilities::default(),
        };
        let mut validator = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities);
        if let Err(e) = validator.validate(&module) {
            failures.push(format!("{}: validate: {}", inst.key, e.emit_to_string(&source)));
        }
    }
    assert!(failures.is_empty(), "{} of {} kernels failed:\n{}", failures.len(), all.len(), failures.join("\n"));
}

#[test]
fn every_shader_file_is_in_the_table() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shaders");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("SKIPPED: {} is not here (a packed test binary)", dir.display());
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(stem) = name.strip_suffix(".wgsl") else { continue };
        if stem == "common" {
            continue;
        }
        if stem == "minifloat" {
            // A snippet the cast preludes include, not a kernel body.
            let used = all_instantiations().iter().any(|i| i.prelude.contains("fn round_to_f8e4m3fn("));
            assert!(used, "shaders/minifloat.wgsl is included by no kernel");
            continue;
        }
        assert!(BODIES.iter().any(|(n, _)| *n == stem), "shaders/{name} is not in kiln_wgpu::shaders::BODIES");
        assert!(
            all_instantiations().iter().any(|i| i.key.split('/').next() == Some(stem)
                || i.key == stem
                || (stem == "unary" && i.key.starts_with("activation/"))),
            "shaders/{name} is never instantiated"
        );
    }
}
