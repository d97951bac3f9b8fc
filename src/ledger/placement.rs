//! Which ledger shard holds a job (design §19). A keyed job lives in the shard of its ordering key,
//! so a key's whole order (its rows, its seq, its head) is in one shard and strict mode's run rule
//! stays shard-local; an unkeyed job lives in the shard of its dedupe key when it has one (so an
//! unkeyed dedupe key is unique across the ledger) and of its id otherwise.
//!
//! The hash is 64-bit FNV-1a over the UTF-8 bytes, reduced `mod N`: specified here and pinned by
//! the test vectors below, because a job's shard must never change while its rows exist (a
//! different hash, or a different N, would put a key's new jobs where its old ones are not).
//! `std`'s `DefaultHasher` is not specified across releases, so it is not used.

/// FNV-1a's 64-bit offset basis.
const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a's 64-bit prime.
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// 64-bit FNV-1a of `bytes`.
pub const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = OFFSET;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(PRIME);
        i += 1;
    }
    h
}

/// Where a job lives: the hash of what places it (its ordering key, else its dedupe key, else its
/// id). Independent of the number of shards; [`Route::shard`] reduces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route(u64);

impl Route {
    /// The route of a job with these fields.
    pub fn of(ordering_key: Option<&str>, dedupe_key: Option<&str>, id: &str) -> Route {
        Route(fnv1a(ordering_key.or(dedupe_key).unwrap_or(id).as_bytes()))
    }

    /// The route of every job of `key`.
    pub fn key(key: &str) -> Route {
        Route(fnv1a(key.as_bytes()))
    }

    /// The route as stored in a row: its 64 bits in decimal, as TEXT (a number would pass
    /// through JavaScript's doubles on the way to a Durable Object shard and lose its low bits).
    pub fn to_text(self) -> String {
        self.0.to_string()
    }

    /// A route read back from a row ([`Route::to_text`]).
    pub fn parse(text: &str) -> Option<Route> {
        text.parse().ok().map(Route)
    }

    /// The shard, of `shards` (at least 1), that holds the job.
    pub fn shard(self, shards: usize) -> usize {
        // `shards` is at most `MAX_SHARDS`, so both conversions are exact.
        (self.0 % shards.max(1) as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_survives_its_row() {
        let r = Route::key("https://mastodon.social");
        assert_eq!(Route::parse(&r.to_text()), Some(r));
        assert_eq!(Route::parse("-1"), None);
    }

    #[test]
    fn fnv1a_matches_the_published_vectors() {
        // From the FNV reference test suite (Fowler, Noll, Vo; draft-eastlake-fnv).
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn shards_are_pinned() {
        // If these change, every existing sharded ledger would route its keys elsewhere (the
        // figures are from an independent implementation, not from this one).
        let of = |k: &str| Route::key(k).shard(16);
        assert_eq!([of("https://example.com/users/alice"), of("tenant-42"), of("a")], [3, 2, 12]);
        assert_eq!(Route::key("anything").shard(1), 0);
    }

    #[test]
    fn a_keyed_job_follows_its_key_and_an_unkeyed_one_its_dedupe_key_or_id() {
        assert_eq!(Route::of(Some("k"), Some("d"), "id"), Route::key("k"));
        assert_eq!(Route::of(None, Some("d"), "id"), Route::key("d"));
        assert_eq!(Route::of(None, None, "id"), Route::key("id"));
    }
}
