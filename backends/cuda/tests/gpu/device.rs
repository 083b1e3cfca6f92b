//! The device probe: a fingerprint where CUDA exists, a clean error naming the missing
//! library where it does not.

use kiln::{Backend, BackendError};
use kiln_cuda::{probe, CudaBackend};

#[test]
fn device_is_a_fingerprint_or_an_error_naming_the_missing_library() {
    let backend = CudaBackend::new();
    match probe::libraries().runtime_ready() {
        Err(missing) => {
            match backend.device() {
                Err(BackendError::Unavailable { backend, reason }) => {
                    assert_eq!(backend, "cuda");
                    assert!(reason.contains(".so"), "the reason should name the library: {reason}");
                    assert_eq!(reason, missing);
                }
                other => panic!("without {missing} device() must be Unavailable, got {other:?}"),
            }
            assert!(matches!(backend.prepare(&kiln::Network::new("empty")), Err(BackendError::Unavailable { .. })));
            eprintln!("SKIPPED: no CUDA driver/device: {missing}");
        }
        Ok(()) => {
            let fp = backend.device().expect("the libraries are present, so the device should open");
            eprintln!("cuda device: {fp:?}");
            assert_eq!(fp.backend, "cuda");
            assert!(fp.multiprocessor_count > 0 && fp.memory_bytes > 0 && fp.l2_cache_bytes > 0, "{fp:?}");
            assert!(fp.compute_capability.contains('.'), "{fp:?}");
        }
    }
}

#[test]
fn unsupported_layers_are_refused_by_name() {
    // Strings never live on the device.
    let mut net = kiln::Network::new("text");
    let x = net.add_input("x", kiln::DataType::String, kiln::Shape::fixed(&[4])).unwrap();
    let concat = kiln::LayerKind::Text(kiln::TextOp::Concat);
    let layer = net.add_layer("join", concat, vec![Some(x), Some(x)]).unwrap();
    for t in net.layer(layer).outputs.clone() {
        net.mark_output(t).unwrap();
    }
    match CudaBackend::new().check_support(&net) {
        Err(BackendError::Unsupported { layer, kind, .. }) => assert_eq!((layer.as_str(), kind.as_str()), ("join", "Text")),
        other => panic!("Text should be refused by name, got {other:?}"),
    }
}
