//! Hash slots: CRC16 (XMODEM, as Redis Cluster uses) of the key, or of its
//! hash tag, modulo 16384. Here, below the cluster layer, because the store
//! shards keys by slot in cluster mode (`Store::by_slot`), so a slot's keys
//! are found without scanning the keyspace; `cluster::slot` re-exports it.

/// Number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

const CRC16: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);

/// The slot of a key. If the key has a non-empty `{...}` section, only that
/// part is hashed, so `{user42}:ip` and `{user42}:day` share a slot.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(0) | None => key,
            Some(len) => &key[open + 1..open + 1 + len],
        },
        None => key,
    };
    CRC16.checksum(hashed) & (SLOTS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_test_vectors() {
        // The CRC16 check value from the Redis Cluster specification.
        assert_eq!(CRC16.checksum(b"123456789"), 0x31C3);
        // `CLUSTER KEYSLOT` answers from Redis's own tests and docs.
        assert_eq!(key_slot(b"somekey"), 11058);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"hello"), 866);
        assert_eq!(key_slot(b"user1000"), 3443);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn hash_tags() {
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{user1000}.followers"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(
            key_slot(b"foo{}{bar}"),
            key_slot(b"bar"),
            "an empty tag hashes the whole key"
        );
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"{user42}:ip"), key_slot(b"{user42}:day"));
    }
}
