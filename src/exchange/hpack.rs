//! HPACK (RFC 7541): decoding the header blocks of one direction of an HTTP/2 connection, for
//! the few fields the module reads (a health check's `:path` and `user-agent`).
//!
//! A decoder must see every header block of its direction, in order, from the connection's
//! start: a block that inserts into the dynamic table changes what the indices of every later
//! block mean. So the caller feeds every block whole (the HEADERS or PUSH_PROMISE payload
//! without its padding and priority fields, then each CONTINUATION's), and a block whose fields
//! it does not want is still walked for its table inserts and size updates; only the values of
//! fields that are not inserted and not wanted are skipped by length, undecoded.
//!
//! Fails closed to itself, open to the module: any error (a bad index, a truncated or
//! malformed integer or string, a Huffman decoding error, a size update above the limit or not
//! at a block's start, a table larger than [`MAX_TABLE_SIZE`]) is returned, and the caller
//! stops decoding that direction for good (the tracker then counts its streams as it did
//! without HPACK: `super::http2`).
//!
//! Memory: the dynamic table is bounded by the size the decoding side advertised
//! (`SETTINGS_HEADER_TABLE_SIZE`, 4096 octets unless it said otherwise, RFC 9113 §6.5.2) and
//! never above [`MAX_TABLE_SIZE`]; entries are counted as RFC 7541 §4.1 says (name + value +
//! 32), so the bytes kept are below that size.

mod huffman;

use std::collections::VecDeque;

/// The table size both ends start from (RFC 9113 §6.5.2 `SETTINGS_HEADER_TABLE_SIZE` initial
/// value). Envoy advertises it unchanged unless `hpack_table_size` is set
/// (`Http2ProtocolOptions`, default 4096: api/envoy/config/core/v3/protocol.proto).
pub const DEFAULT_TABLE_SIZE: usize = 4096;
/// The largest dynamic table the module keeps for one direction; above it (an advertised
/// `SETTINGS_HEADER_TABLE_SIZE` and a size update beyond this) it stops decoding.
pub const MAX_TABLE_SIZE: usize = 64 * 1024;

/// Why a header block could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// An integer ran past the block's end or above 2^28.
    Integer,
    /// A string ran past the block's end.
    Truncated,
    /// An index not in the static or dynamic table (0 included).
    Index,
    /// A Huffman-coded string that does not decode (RFC 7541 §5.2).
    Huffman,
    /// A dynamic table size update above the advertised size, or after a field of the block.
    SizeUpdate,
    /// A size update above [`MAX_TABLE_SIZE`].
    TableTooLarge,
    /// The block (with its CONTINUATIONs) is longer than the module buffers, or its padding or
    /// priority fields are longer than its frame.
    Block,
}

/// RFC 7541 Appendix A: the static table, indices 1 to 61.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("via", ""),
    ("vary", ""),
    ("www-authenticate", ""),
];

/// RFC 7541 §4.1: an entry's size is its name's and value's lengths plus 32.
const ENTRY_OVERHEAD: usize = 32;

/// A dynamic table entry: name, value.
type Entry = (Box<[u8]>, Box<[u8]>);

/// The dynamic table (RFC 7541 §2.3.2, §4): newest first.
#[derive(Debug, Clone, Default)]
struct Table {
    entries: VecDeque<Entry>,
    size: usize,
    max: usize,
}

impl Table {
    /// The field at `index` of the index address space (§2.3.3): static, then dynamic.
    fn get(&self, index: usize) -> Option<(&[u8], &[u8])> {
        if index == 0 {
            return None;
        }
        if let Some((n, v)) = STATIC.get(index - 1) {
            return Some((n.as_bytes(), v.as_bytes()));
        }
        self.entries
            .get(index - 1 - STATIC.len())
            .map(|(n, v)| (&n[..], &v[..]))
    }

    fn evict_to(&mut self, size: usize) {
        while self.size > size {
            let Some((n, v)) = self.entries.pop_back() else {
                self.size = 0;
                return;
            };
            self.size -= n.len() + v.len() + ENTRY_OVERHEAD;
        }
    }

    /// §4.4: older entries are evicted to make room; an entry larger than the table empties it
    /// and is not kept.
    fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max {
            self.evict_to(0);
            return;
        }
        self.evict_to(self.max - size);
        self.entries.push_front((name.into(), value.into()));
        self.size += size;
    }

    fn set_max(&mut self, max: usize) {
        self.max = max;
        self.evict_to(max);
    }
}

/// One direction's decoder.
#[derive(Debug, Clone)]
pub struct Decoder {
    table: Table,
    /// The largest table size the decoding side advertised so far (`SETTINGS_HEADER_TABLE_SIZE`,
    /// [`DEFAULT_TABLE_SIZE`] until it says): what a size update may ask for. The largest, not
    /// the last: blocks the encoder wrote before it saw a smaller one may still arrive, and a
    /// smaller one is followed by a size update of the encoder's anyway (RFC 7541 §4.2).
    limit: usize,
    name: Vec<u8>,
    value: Vec<u8>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder {
            table: Table {
                max: DEFAULT_TABLE_SIZE,
                ..Table::default()
            },
            limit: DEFAULT_TABLE_SIZE,
            name: Vec::new(),
            value: Vec::new(),
        }
    }

    /// The decoding side advertised `SETTINGS_HEADER_TABLE_SIZE = size`.
    pub fn advertised(&mut self, size: u32) {
        self.limit = self.limit.max(size as usize);
    }

    /// The dynamic table's size and its maximum (for tests).
    pub fn table_size(&self) -> (usize, usize) {
        (self.table.size, self.table.max)
    }

    /// Decodes one whole header block: `on(name, value)` for every field whose name `want`s,
    /// in order. Every representation is walked, so the table stays in step with the encoder's.
    pub fn decode(
        &mut self,
        block: &[u8],
        want: impl Fn(&[u8]) -> bool,
        mut on: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), Error> {
        let mut i = 0;
        let mut fields = false;
        while let Some(&b) = block.get(i) {
            if b & 0x80 != 0 {
                // §6.1 Indexed Header Field.
                let index = integer(block, &mut i, 7)?;
                let (n, v) = self.table.get(index).ok_or(Error::Index)?;
                if want(n) {
                    on(n, v);
                }
                fields = true;
                continue;
            }
            if b & 0xe0 == 0x20 {
                // §6.3 Dynamic Table Size Update: only before the block's first field (§4.2).
                let size = integer(block, &mut i, 5)?;
                if fields || size > self.limit {
                    return Err(Error::SizeUpdate);
                }
                if size > MAX_TABLE_SIZE {
                    return Err(Error::TableTooLarge);
                }
                self.table.set_max(size);
                continue;
            }
            // §6.2: with incremental indexing (01), without indexing (0000), never indexed (0001).
            let insert = b & 0x40 != 0;
            let index = integer(block, &mut i, if insert { 6 } else { 4 })?;
            if index != 0 && !insert {
                // A name from the table, nothing inserted: read in place, not copied.
                let (n, _) = self.table.get(index).ok_or(Error::Index)?;
                let wanted = want(n);
                self.value.clear();
                string(block, &mut i, wanted.then_some(&mut self.value))?;
                if wanted {
                    on(n, &self.value);
                }
                fields = true;
                continue;
            }
            self.name.clear();
            if index == 0 {
                string(block, &mut i, Some(&mut self.name))?;
            } else {
                let (n, _) = self.table.get(index).ok_or(Error::Index)?;
                self.name.extend_from_slice(n);
            }
            let wanted = want(&self.name);
            self.value.clear();
            string(block, &mut i, (insert || wanted).then_some(&mut self.value))?;
            if wanted {
                on(&self.name, &self.value);
            }
            if insert {
                self.table.insert(&self.name, &self.value);
            }
            fields = true;
        }
        Ok(())
    }
}

/// §5.1: an integer with an `n`-bit prefix at `block[*i]`; `*i` moves past it. Values above
/// 2^28 are refused (no length or index of a buffered block comes near).
fn integer(block: &[u8], i: &mut usize, n: u32) -> Result<usize, Error> {
    let mask = (1usize << n) - 1;
    let first = usize::from(*block.get(*i).ok_or(Error::Integer)?) & mask;
    *i += 1;
    if first < mask {
        return Ok(first);
    }
    let mut value = mask;
    let mut shift = 0;
    loop {
        let b = *block.get(*i).ok_or(Error::Integer)?;
        *i += 1;
        // Five continuation bytes carry 35 bits, more than any value taken: a longer run (of
        // zero bits, as 0x80 0x80 ...) is refused before its shift could pass the word's width.
        if shift > 28 {
            return Err(Error::Integer);
        }
        value += usize::from(b & 0x7f) << shift;
        if value > 1 << 28 {
            return Err(Error::Integer);
        }
        if b & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
    }
}

/// §5.2: a string literal at `block[*i]`, appended to `out` decoded (Huffman or not), or
/// skipped by its length when `out` is `None`.
fn string(block: &[u8], i: &mut usize, out: Option<&mut Vec<u8>>) -> Result<(), Error> {
    let huffman = block.get(*i).is_some_and(|b| b & 0x80 != 0);
    let len = integer(block, i, 7)?;
    let src = block.get(*i..*i + len).ok_or(Error::Truncated)?;
    *i += len;
    match out {
        None => Ok(()),
        Some(out) if huffman => huffman::decode(src, out).map_err(|()| Error::Huffman),
        Some(out) => {
            out.extend_from_slice(src);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests;
