//! Stable content hashes for cache keys (the compile cache, backends' executable caches).

/// 128-bit FNV-1a over `parts`, each followed by a separator byte: stable across Rust versions,
/// platforms and processes (std's hasher is not), so it can name files of an on-disk cache.
pub fn fnv128(parts: &[&[u8]]) -> u128 {
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for p in parts {
        for &b in p.iter().chain(&[0xff]) {
            h ^= b as u128;
            h = h.wrapping_mul(0x0000000001000000000000000000013B);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    #[test]
    fn parts_are_separated_and_the_value_is_stable() {
        assert_ne!(super::fnv128(&[b"ab", b"c"]), super::fnv128(&[b"a", b"bc"]));
        assert_eq!(super::fnv128(&[]), 0x6c62272e07bb014262b821756295c58d);
        assert_eq!(super::fnv128(&[b"rlx"]), super::fnv128(&[b"rlx"]));
    }
}
