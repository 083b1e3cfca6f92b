//! Any byte string given to the timing-cache loader is an error or a cache, never a panic,
//! hang or huge allocation; a cache that loads writes back bytes that load to the same.
//!
//! A checksum guards the payload, so each input is also loaded as a payload framed with
//! a true prefix (magic, version, length, checksum): the decoder sees the mutations.
#![no_main]

use kiln::tactics::TimingCache;
use libfuzzer_sys::fuzz_target;

/// Bytes 0..12 of any cache kiln writes: magic and format version.
fn framed(payload: &[u8]) -> Vec<u8> {
    let mut file = TimingCache::new().serialize()[..12].to_vec();
    file.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    file.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    file.extend_from_slice(payload);
    file
}

fn load(bytes: &[u8]) {
    if let Ok(cache) = TimingCache::from_bytes(bytes) {
        let written = cache.serialize();
        let again = TimingCache::from_bytes(&written).expect("a cache kiln wrote loads again");
        assert_eq!(again.serialize(), written, "a loaded cache writes back what it read");
    }
}

fuzz_target!(|data: &[u8]| {
    load(data);
    // A cache kiln wrote (a seed) is framed already: its payload starts after 20 bytes.
    load(&framed(data.get(20..).filter(|_| data.starts_with(&TimingCache::new().serialize()[..8])).unwrap_or(data)));
});
