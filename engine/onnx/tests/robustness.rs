//! Hostile inputs: corrupted bytes and extreme attribute values must give errors, never
//! panics. Mutations are deterministic (a fixed xorshift seed) over the reference models.

use kiln_onnx::proto::{AttributeProto, ModelProto, TensorProto};
use prost::Message;
use std::path::Path;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn reference_models() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut models: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .expect("data dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| {
            let bytes = std::fs::read(e.path().join("model.onnx")).expect("model");
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    models.sort();
    assert!(models.len() > 50, "the reference models are missing");
    models
}

/// Imports, turning a panic into a test failure that names the case.
fn import_without_panic(what: &str, bytes: &[u8]) {
    let outcome = std::panic::catch_unwind(|| kiln_onnx::import_bytes(bytes, None).map(|_| ()));
    assert!(outcome.is_ok(), "import panicked on {what}");
}

#[test]
fn corrupted_bytes_never_panic() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for (name, bytes) in reference_models() {
        for round in 0..200 {
            let mut b = bytes.clone();
            match round % 4 {
                0 => {
                    let i = rng.below(b.len());
                    b[i] ^= 1 << rng.below(8);
                }
                1 => {
                    let i = rng.below(b.len());
                    b[i] = rng.next() as u8;
                }
                2 => b.truncate(rng.below(b.len())),
                _ => {
                    let i = rng.below(b.len());
                    let extra: Vec<u8> = (0..rng.below(6) + 1).map(|_| rng.next() as u8).collect();
                    b.splice(i..i, extra);
                }
            }
            import_without_panic(&format!("{name} (byte mutation {round})"), &b);
        }
    }
}

const EXTREMES: [i64; 9] = [i64::MIN, -(1 << 40), -3, -1, 0, 1, 7, 1 << 40, i64::MAX];

fn mutate_attribute(a: &mut AttributeProto, rng: &mut XorShift) {
    let value = EXTREMES[rng.below(EXTREMES.len())];
    if a.i.is_some() {
        a.i = Some(value);
    }
    if !a.ints.is_empty() {
        let k = rng.below(a.ints.len());
        a.ints[k] = value;
        if rng.below(3) == 0 {
            a.ints.pop();
        }
    }
    if a.f.is_some() {
        a.f = Some([f32::NAN, f32::INFINITY, -1e30, 0.0][rng.below(4)]);
    }
    if a.s.is_some() && rng.below(2) == 0 {
        a.s = Some(b"\xff\xfeBOGUS".to_vec());
    }
}

fn mutate_tensor(t: &mut TensorProto, rng: &mut XorShift) {
    match rng.below(4) {
        0 if !t.dims.is_empty() => {
            let k = rng.below(t.dims.len());
            t.dims[k] = EXTREMES[rng.below(EXTREMES.len())];
        }
        1 => t.data_type = Some(rng.below(30) as i32),
        2 if !t.int64_data.is_empty() => {
            let k = rng.below(t.int64_data.len());
            t.int64_data[k] = EXTREMES[rng.below(EXTREMES.len())];
        }
        _ => {
            if let Some(raw) = &mut t.raw_data {
                if !raw.is_empty() {
                    let k = rng.below(raw.len());
                    raw[k] = rng.next() as u8;
                    if t.data_type == Some(7) && raw.len() >= 8 {
                        // An int64 tensor (axes, pads, sizes…): plant an extreme value.
                        let v = EXTREMES[rng.below(EXTREMES.len())].to_le_bytes();
                        raw[..8].copy_from_slice(&v);
                    }
                }
            }
        }
    }
}

#[test]
fn extreme_attribute_and_tensor_values_never_panic() {
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    for (name, bytes) in reference_models() {
        let model = ModelProto::decode(bytes.as_slice()).expect("reference model decodes");
        for round in 0..200 {
            let mut m = model.clone();
            let graph = m.graph.as_mut().expect("graph");
            match round % 3 {
                0 => {
                    for node in &mut graph.node {
                        for a in &mut node.attribute {
                            if rng.below(2) == 0 {
                                mutate_attribute(a, &mut rng);
                            }
                        }
                    }
                }
                1 if !graph.initializer.is_empty() => {
                    let k = rng.below(graph.initializer.len());
                    mutate_tensor(&mut graph.initializer[k], &mut rng);
                }
                _ => {
                    for input in &mut graph.input {
                        if let Some(kiln_onnx::proto::type_proto::Value::TensorType(t)) =
                            input.r#type.as_mut().and_then(|t| t.value.as_mut())
                        {
                            for d in t.shape.iter_mut().flat_map(|s| s.dim.iter_mut()) {
                                if rng.below(2) == 0 {
                                    d.value = Some(kiln_onnx::proto::tensor_shape_proto::dimension::Value::DimValue(
                                        [0, 1, 3, 1 << 20, i64::MAX, -5][rng.below(6)],
                                    ));
                                }
                            }
                        }
                    }
                }
            }
            import_without_panic(&format!("{name} (value mutation {round})"), &m.encode_to_vec());
        }
    }
}
