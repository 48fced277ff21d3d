//! `SmallBytes`: a byte string kept inline when short.
//!
//! Keys and small values are mostly short (`rl:user:42`, a counter), and a
//! `Vec<u8>` would put each behind a 24-byte header plus a heap block of its
//! own (16+ bytes of allocator overhead). Up to 22 bytes live inside the
//! 24-byte value itself; longer ones take one exact-size boxed slice.
//! Hand-written because the inline-string crates are UTF-8 only
//! (`compact_str`, `smol_str`) or give up a word of inline room
//! (`smallvec`'s `[u8; 16]`), and keys are arbitrary bytes.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

const INLINE: usize = 22;

#[derive(Clone)]
pub enum SmallBytes {
    Inline { len: u8, data: [u8; INLINE] },
    Heap(Box<[u8]>),
}

const _: () = assert!(std::mem::size_of::<SmallBytes>() == 24);

impl SmallBytes {
    pub fn new(bytes: &[u8]) -> Self {
        if bytes.len() <= INLINE {
            let mut data = [0u8; INLINE];
            data[..bytes.len()].copy_from_slice(bytes);
            SmallBytes::Inline {
                len: bytes.len() as u8,
                data,
            }
        } else {
            SmallBytes::Heap(bytes.into())
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            SmallBytes::Inline { len, data } => &data[..*len as usize],
            SmallBytes::Heap(b) => b,
        }
    }

    /// Heap bytes owned beyond the value itself, for memory accounting.
    pub fn heap_size(&self) -> usize {
        match self {
            SmallBytes::Inline { .. } => 0,
            SmallBytes::Heap(b) => b.len(),
        }
    }
}

impl Default for SmallBytes {
    fn default() -> Self {
        SmallBytes::Inline {
            len: 0,
            data: [0; INLINE],
        }
    }
}

impl Deref for SmallBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Borrow<[u8]> for SmallBytes {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for SmallBytes {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for SmallBytes {}

impl Hash for SmallBytes {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl From<&[u8]> for SmallBytes {
    fn from(b: &[u8]) -> Self {
        SmallBytes::new(b)
    }
}

impl fmt::Debug for SmallBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_round_trip() {
        for len in [0, 1, 21, 22, 23, 100] {
            let data: Vec<u8> = (0..len as u8).collect();
            let b = SmallBytes::new(&data);
            assert_eq!(b.as_slice(), &data[..]);
            assert_eq!(matches!(b, SmallBytes::Inline { .. }), len <= INLINE);
        }
    }
}
