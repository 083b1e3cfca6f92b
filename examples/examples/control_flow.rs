//! The loops and conditionals chapter's two examples through kiln's network API: the
//! `for (i = j; i < 10; i += k)` loop (a recurrence and a WHILE trip limit) and the simple
//! if-conditional (`x + y` when the condition holds, `x - y` otherwise).
//!
//! Run with `cargo run -p kiln-examples --example control_flow -- [j] [k] [condition]`.
#![forbid(unsafe_code)]

use kiln::{
    Builder, BuilderConfig, DataType, ElementwiseOp, ExecutionContext, HostTensor, LoopOutputKind, Network, Shape,
    TensorData, TripLimitKind,
};
use std::collections::HashMap;
use std::error::Error;

fn scalar_input(n: &mut Network, name: &str) -> Result<kiln::TensorId, Box<dyn Error>> {
    Ok(n.add_input(name, DataType::I32, Shape::fixed(&[]))?)
}

/// `i = j; while i < 10: emit i; i += k`, giving the last i and every i the body saw.
fn for_loop() -> Result<Network, Box<dyn Error>> {
    let mut n = Network::new("for-loop");
    let (j, k) = (scalar_input(&mut n, "j")?, scalar_input(&mut n, "k")?);
    let ten = n.add_constant(&[], TensorData::I32(vec![10]))?;
    let ten = n.output(ten, 0);
    let looping = n.add_loop();
    let rec = n.add_recurrence(looping, j)?;
    let i = n.output(rec, 0);
    let next = n.add_elementwise(i, k, ElementwiseOp::Sum)?;
    n.set_recurrence_next(rec, n.output(next, 0))?;
    let more = n.add_elementwise(i, ten, ElementwiseOp::Less)?;
    n.add_trip_limit(looping, n.output(more, 0), TripLimitKind::While)?;
    for (name, kind) in [("last_i", LoopOutputKind::LastValue), ("every_i", LoopOutputKind::Concatenate)] {
        let out = n.add_loop_output(looping, i, kind, 0)?;
        let out = n.output(out, 0);
        n.set_tensor_name(out, name)?;
        n.mark_output(out)?;
    }
    Ok(n)
}

/// `condition ? x + y : x - y`; each branch runs only when taken.
fn simple_if() -> Result<Network, Box<dyn Error>> {
    let mut n = Network::new("simple-if");
    let (x, y) = (scalar_input(&mut n, "x")?, scalar_input(&mut n, "y")?);
    let c = n.add_input("condition", DataType::Bool, Shape::fixed(&[]))?;
    let conditional = n.add_if_conditional();
    n.set_condition(conditional, c)?;
    let xi = n.add_if_input(conditional, x)?;
    let yi = n.add_if_input(conditional, y)?;
    let (xi, yi) = (n.output(xi, 0), n.output(yi, 0));
    let sum = n.add_elementwise(xi, yi, ElementwiseOp::Sum)?;
    let diff = n.add_elementwise(xi, yi, ElementwiseOp::Sub)?;
    let out = n.add_if_output(conditional, n.output(sum, 0), n.output(diff, 0))?;
    let out = n.output(out, 0);
    n.set_tensor_name(out, "result")?;
    n.mark_output(out)?;
    Ok(n)
}

fn run(network: &Network, inputs: Vec<(&str, HostTensor)>) -> Result<(), Box<dyn Error>> {
    let cpu = kiln_cpu::CpuBackend::new();
    let engine = Builder::new(&cpu).build(network, &BuilderConfig::default())?;
    let context = ExecutionContext::new(engine, &cpu)?;
    let inputs: HashMap<String, HostTensor> = inputs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    for (name, value) in context.run(&inputs)? {
        println!("  {name} = {:?}", value.to_f64_vec());
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let int = |i: usize, default: i32| -> Result<i32, Box<dyn Error>> {
        Ok(args.get(i).map(|s| s.parse()).transpose()?.unwrap_or(default))
    };
    let (j, k) = (int(0, 1)?, int(1, 3)?);
    let condition = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(true);
    let i32_scalar = |v: i32| HostTensor::scalar(TensorData::I32(vec![v]));
    println!("for (i = {j}; i < 10; i += {k}):");
    run(&for_loop()?, vec![("j", i32_scalar(j)?), ("k", i32_scalar(k)?)])?;
    println!("if {condition} then x + y else x - y, with x = 7, y = 2:");
    let cond = HostTensor::scalar(TensorData::Bool(vec![condition]))?;
    run(&simple_if()?, vec![("x", i32_scalar(7)?), ("y", i32_scalar(2)?), ("condition", cond)])
}
