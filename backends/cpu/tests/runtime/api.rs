//! Buffers, streams, events, empty tensors and threads.

use crate::*;
use std::collections::HashSet;

#[test]
fn contexts_are_send_and_engines_are_shared() {
    fn is_send<T: Send>() {}
    fn is_send_sync<T: Send + Sync>() {}
    is_send::<ExecutionContext>();
    is_send_sync::<PreparedEngine>();
    is_send_sync::<Buffer>();
    is_send_sync::<Event>();
}

#[test]
fn two_contexts_run_on_two_threads() {
    let prepared = prepare(&chain_net(n()), vec![profile(1, 4, 8)]);
    let workers: Vec<_> = [3usize, 7]
        .into_iter()
        .map(|batch| {
            let mut ctx = prepared.create_execution_context();
            std::thread::spawn(move || {
                for round in 0..20 {
                    let (x, y) = run_batch(&mut ctx, batch, round as f32 + batch as f32 * 0.1);
                    assert_eq!(y, expected_chain(&x), "batch {batch} round {round}");
                }
                batch
            })
        })
        .collect();
    let done: Vec<usize> = workers.into_iter().map(|w| w.join().expect("worker thread")).collect();
    assert_eq!(done, vec![3, 7]);
}

#[test]
fn empty_tensors_run_and_get_distinct_non_null_addresses() {
    let prepared = prepare(&chain_net(n()), vec![profile(0, 4, 8)]);
    let mut ctx = prepared.create_execution_context();
    ctx.set_input_shape("x", &[0, 16]).unwrap();
    assert_eq!(ctx.tensor_shape("y").unwrap(), vec![0, 16]);
    let (input, output) = (Buffer::new(0), Buffer::new(0));
    ctx.set_tensor_address("x", input.clone()).unwrap();
    ctx.set_tensor_address("y", output.clone()).unwrap();
    let addresses = [ctx.tensor_address("x").unwrap(), ctx.tensor_address("y").unwrap(), Buffer::new(0).address()];
    assert!(addresses.iter().all(|&a| a != 0), "{addresses:?}");
    assert_eq!(addresses.iter().collect::<HashSet<_>>().len(), 3, "{addresses:?}");
    let stream = Stream::new().unwrap();
    ctx.enqueue(&stream, None).unwrap();
    stream.synchronize().unwrap();
    assert!(output.is_empty());
}

#[test]
fn inputs_may_be_refilled_once_the_input_consumed_event_fires() {
    let prepared = prepare(&chain_net(n()), vec![profile(1, 8, 8)]);
    let mut ctx = prepared.create_execution_context();
    ctx.set_input_shape("x", &[8, 16]).unwrap();
    let first = input_values(128, 1.0);
    let second = input_values(128, 2.0);
    let input = f32_buffer(&first);
    let (out_a, out_b) = (Buffer::new(512), Buffer::new(512));
    ctx.set_tensor_address("x", input.clone()).unwrap();
    ctx.set_tensor_address("y", out_a.clone()).unwrap();
    let stream = Stream::new().unwrap();
    let consumed = Event::new();
    ctx.enqueue(&stream, Some(&consumed)).unwrap();
    consumed.wait();
    // The first run has read its inputs: overwrite them for the second while it may run.
    assert!(input.write_bytes(&HostTensor::from_f32(vec![128], second.clone()).unwrap().data().to_le_bytes()));
    ctx.set_tensor_address("y", out_b.clone()).unwrap();
    ctx.enqueue(&stream, Some(&consumed)).unwrap();
    stream.synchronize().unwrap();
    assert!(consumed.query());
    assert_eq!(read_f32(&out_a, &[8, 16]), expected_chain(&first));
    assert_eq!(read_f32(&out_b, &[8, 16]), expected_chain(&second));
}

#[test]
fn enqueue_checks_shapes_and_buffers_first() {
    let prepared = prepare(&chain_net(n()), vec![profile(1, 4, 8)]);
    let mut ctx = prepared.create_execution_context();
    let stream = Stream::new().unwrap();
    assert_eq!(ctx.enqueue(&stream, None), Err(RunError::ShapeNotSet { input: "x".into() }));
    ctx.set_input_shape("x", &[4, 16]).unwrap();
    assert_eq!(ctx.enqueue(&stream, None), Err(RunError::AddressNotSet { tensor: "x".into() }));
    ctx.set_tensor_address("x", Buffer::new(100)).unwrap();
    assert_eq!(
        ctx.enqueue(&stream, None),
        Err(RunError::BufferTooSmall { tensor: "x".into(), needed: 256, available: 100 })
    );
    ctx.set_tensor_address("x", Buffer::new(256)).unwrap();
    assert_eq!(ctx.enqueue(&stream, None), Err(RunError::AddressNotSet { tensor: "y".into() }));
    ctx.set_tensor_address("y", Buffer::new(255)).unwrap();
    assert!(matches!(ctx.enqueue(&stream, None), Err(RunError::BufferTooSmall { needed: 256, .. })));
    let err = ctx.set_tensor_address("nope", Buffer::new(1)).unwrap_err();
    assert!(err.to_string().contains("inputs and outputs: x, y"), "{err}");
    assert!(stream.is_idle());
    stream.synchronize().unwrap();
}
