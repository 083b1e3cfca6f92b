//! Builds TensorRT's sampleMNISTAPI network through kiln's network-definition API, builds
//! an engine for the cpu backend, round-trips it through the engine file format and
//! classifies a synthetic handwritten "1".
//!
//! Run with `cargo run -p kiln-examples --example mnist_api`.
#![forbid(unsafe_code)]

use kiln::{Builder, BuilderConfig, Engine, ExecutionContext, HostTensor};
use kiln_examples::{digit_one_image, mnist_network, IMAGE_SIDE};
use std::collections::HashMap;
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let network = mnist_network(1)?;
    println!(
        "network `{}`: {} layers, {} weights blobs",
        network.name,
        network.layers().len(),
        network.weights().len()
    );

    let cpu = kiln_cpu::CpuBackend::new();
    let engine = Builder::new(&cpu).build(&network, &BuilderConfig::default())?;
    // Serialize and load back, as a deployment would with an engine file.
    let engine_file = engine.serialize();
    let engine = Engine::deserialize(&engine_file)?;
    println!("engine for `{}` on {}: {} bytes", engine.backend(), engine.device().name, engine_file.len());

    let context = ExecutionContext::new(engine, &cpu)?;
    let image = HostTensor::from_f32(vec![1, 1, IMAGE_SIDE, IMAGE_SIDE], digit_one_image())?;
    let outputs = context.run(&HashMap::from([("data".to_string(), image)]))?;
    let prob = outputs.get("prob").and_then(HostTensor::as_f32).ok_or("the engine has no f32 output `prob`")?;

    let best = prob.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(digit, _)| digit);
    println!("probabilities for the synthetic digit:");
    for (digit, p) in prob.iter().enumerate() {
        let marker = if Some(digit) == best { "  <- most likely" } else { "" };
        println!("  {digit}: {p:.4} {}{marker}", "#".repeat((p * 50.0).round() as usize));
    }
    // The weights come from a formula, not from training: the answer need not be "1".
    println!("(weights are synthetic, so the most likely class is arbitrary)");
    Ok(())
}
