//! CUDA streams as the package sees them: the legacy default stream's spellings, and waiting
//! on the host for a stream (kiln-cuda's `synchronize_stream`). Device executions are ordered
//! on a caller's stream; a synchronous run, a host copy or a DLPack consumer on another stream
//! must wait for that stream.

/// The legacy default stream (`CUstream` 0, also spelt `CU_STREAM_LEGACY`, 1).
pub const LEGACY_STREAM: u64 = 0;

/// Whether two `CUstream` handles name the same stream (0 and 1 are both the legacy one).
pub fn same_stream(a: u64, b: u64) -> bool {
    let legacy = |s: u64| if s == 1 { LEGACY_STREAM } else { s };
    legacy(a) == legacy(b)
}

/// A `CUstream` as DLPack and the CUDA array interface spell it: 0 is ambiguous there, 1 is
/// the legacy default stream.
pub fn protocol_stream(stream: u64) -> u64 {
    if stream == LEGACY_STREAM {
        1
    } else {
        stream
    }
}

/// Waits until the work enqueued so far on `stream` (a `CUstream` of device `device`; 0 the
/// legacy default stream) is done.
pub fn synchronize(stream: u64, device: usize) -> Result<(), String> {
    kiln_builtin_backends::synchronize_stream(device, stream).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_stream_spellings_are_one_stream() {
        assert!(same_stream(0, 1) && same_stream(1, 0) && same_stream(7, 7));
        assert!(!same_stream(0, 2) && !same_stream(7, 8));
        assert_eq!((protocol_stream(0), protocol_stream(2), protocol_stream(0x55)), (1, 2, 0x55));
    }
}
