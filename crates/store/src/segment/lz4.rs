//! LZ4 blocks whose long repeats decode at copy speed.
//!
//! A byte-stream-split page of small integers holds long runs of zeros (the
//! high bytes of every value), and LZ4 writes a run as one match whose source
//! overlaps its destination (offset 1, or the period of the pattern). Decoders
//! copy such a match a byte at a time (`lz4_flex` does, for any match closer
//! than its length plus 15 bytes); on the busy-address query that was 11% of
//! the time, in pages of `tcp_flags`, ports, lengths, `ip_id` and `ip_ttl`.
//!
//! [`compress`] writes the block `lz4_flex` makes, with every long overlapping
//! match split into pieces that each copy from wholly before themselves: the
//! output so far ends with the repeated pattern, so a piece may reach back a
//! multiple of its period and copy nearly as much as it reaches back; the run
//! roughly doubles with each piece (a 24 kB run takes about ten). The length
//! bytes of the pieces add up to about those of the one match, so the block is
//! a few bytes larger at most. The result is an ordinary LZ4 block: every
//! match at least 4 bytes, offsets at most 65,535, the last 5 bytes literals
//! and no match starting within 12 bytes of the end, as the format asks.

/// An overlapping match at least this long is split.
const SPLIT_FROM: usize = 128;
/// The shortest piece: more than LZ4's minimum match of 4, so that the last
/// piece of a match still starts at least 12 bytes before the block's end
/// (the match it comes from ended at least 5 before it).
const MIN_PIECE: usize = 8;
/// `lz4_flex` copies a match 16 bytes at a time when its source lies at least
/// its length plus this many bytes back.
const WILD_COPY_SLACK: usize = 15;
/// The first piece, copied the slow way, grows the pattern to at least this.
const SEED: usize = 32;
/// LZ4's largest offset.
const MAX_OFFSET: usize = 65_535;

/// Compresses `page` as one LZ4 block (the `LZ4_RAW` codec's format).
pub(super) fn compress(page: &[u8]) -> Vec<u8> {
    let block = lz4_flex::block::compress(page);
    match split_overlaps(&block) {
        Some(split) => split,
        None => block,
    }
}

/// One sequence of a block: literals, then (except in the last) a match.
struct Sequence<'a> {
    literals: &'a [u8],
    /// `(offset, length)`.
    copy: Option<(usize, usize)>,
}

/// The sequences of a block `lz4_flex` wrote; `None` if it cannot be parsed
/// (never for such a block; the caller then keeps the block as it is).
fn sequences(block: &[u8]) -> Option<Vec<Sequence<'_>>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < block.len() {
        let token = *block.get(at)?;
        at += 1;
        let mut literals = usize::from(token >> 4);
        if literals == 15 {
            literals += extension(block, &mut at)?;
        }
        let literal_bytes = block.get(at..at.checked_add(literals)?)?;
        at += literals;
        if at == block.len() {
            out.push(Sequence {
                literals: literal_bytes,
                copy: None,
            });
            break;
        }
        let offset = usize::from(u16::from_le_bytes([*block.get(at)?, *block.get(at + 1)?]));
        at += 2;
        let mut length = usize::from(token & 15);
        if length == 15 {
            length += extension(block, &mut at)?;
        }
        out.push(Sequence {
            literals: literal_bytes,
            copy: Some((offset, length + 4)),
        });
    }
    Some(out)
}

/// Reads a length's extension bytes (255 while more follow) at `at`.
fn extension(block: &[u8], at: &mut usize) -> Option<usize> {
    let mut sum = 0usize;
    loop {
        let byte = *block.get(*at)?;
        *at += 1;
        sum = sum.checked_add(usize::from(byte))?;
        if byte != 255 {
            return Some(sum);
        }
    }
}

/// Whether a match is one a decoder copies slowly and worth splitting.
fn overlapping(offset: usize, length: usize) -> bool {
    length >= SPLIT_FROM && offset < length + WILD_COPY_SLACK
}

/// The block with its long overlapping matches split; `None` if it has none.
fn split_overlaps(block: &[u8]) -> Option<Vec<u8>> {
    let sequences = sequences(block)?;
    if !sequences.iter().any(|s| {
        s.copy
            .is_some_and(|(offset, length)| overlapping(offset, length))
    }) {
        return None;
    }
    let mut out = Vec::with_capacity(block.len() + 64);
    for sequence in &sequences {
        let Some((offset, length)) = sequence.copy else {
            put_sequence(&mut out, sequence.literals, None);
            continue;
        };
        if !overlapping(offset, length) || offset == 0 {
            put_sequence(&mut out, sequence.literals, Some((offset, length)));
            continue;
        }
        // The pattern (period `offset`) starts `offset` bytes before the match;
        // `written` of the match's bytes are out so far.
        let mut literals = sequence.literals;
        let mut written = 0;
        while written < length {
            let remaining = length - written;
            let pattern = offset + written;
            let (reach, mut piece) = if pattern < SEED {
                // Grow the pattern the slow way first (a few dozen bytes).
                (offset, SEED - pattern)
            } else {
                let reach = (pattern.min(MAX_OFFSET) / offset) * offset;
                (reach, reach - WILD_COPY_SLACK)
            };
            piece = piece.max(MIN_PIECE).min(remaining);
            let rest = remaining - piece;
            if rest > 0 && rest < MIN_PIECE {
                // Leave a last piece long enough, or take it all.
                piece = if piece >= MIN_PIECE + (MIN_PIECE - rest) {
                    piece - (MIN_PIECE - rest)
                } else {
                    remaining
                };
            }
            put_sequence(&mut out, literals, Some((reach, piece)));
            literals = &[];
            written += piece;
        }
    }
    Some(out)
}

/// Appends one sequence: its token, literals and match.
fn put_sequence(out: &mut Vec<u8>, literals: &[u8], copy: Option<(usize, usize)>) {
    let literal_code = literals.len().min(15);
    let match_code = copy.map_or(0, |(_, length)| (length - 4).min(15));
    out.push(((literal_code as u8) << 4) | match_code as u8);
    if literal_code == 15 {
        put_extension(out, literals.len() - 15);
    }
    out.extend_from_slice(literals);
    if let Some((offset, length)) = copy {
        out.extend_from_slice(&(offset as u16).to_le_bytes());
        if match_code == 15 {
            put_extension(out, length - 4 - 15);
        }
    }
}

fn put_extension(out: &mut Vec<u8>, mut value: usize) {
    while value >= 255 {
        out.push(255);
        value -= 255;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> usize {
            (self.next() % n) as usize
        }
    }

    /// Pages like the encoder's: runs of one byte, repeated short patterns and
    /// random stretches, of sizes up to and past 64 kB.
    fn page(rng: &mut Rng) -> Vec<u8> {
        let len = match rng.below(4) {
            0 => rng.below(100),
            1 => rng.below(5_000),
            2 => 32_768,
            _ => 70_000 + rng.below(60_000),
        };
        let mut page = Vec::with_capacity(len);
        while page.len() < len {
            let most = [40, 2_000, 30_000][rng.below(3)];
            let part = 1 + rng.below(most);
            match rng.below(3) {
                0 => page.extend(std::iter::repeat_n(rng.below(3) as u8, part)),
                1 => {
                    let period = 1 + rng.below(40);
                    let pattern: Vec<u8> = (0..period).map(|_| rng.next() as u8).collect();
                    page.extend(pattern.iter().cycle().take(part));
                }
                _ => page.extend((0..part).map(|_| rng.next() as u8)),
            }
        }
        page.truncate(len);
        page
    }

    /// Every match of a block, checked against the format's rules.
    fn check_rules(block: &[u8], decoded_len: usize) -> Vec<(usize, usize)> {
        let sequences = sequences(block).expect("parses");
        let mut position = 0;
        let mut copies = Vec::new();
        for (i, sequence) in sequences.iter().enumerate() {
            position += sequence.literals.len();
            match sequence.copy {
                Some((offset, length)) => {
                    assert!(length >= 4);
                    assert!(
                        offset >= 1 && offset <= position,
                        "offset {offset} at {position}"
                    );
                    assert!(
                        position + 12 <= decoded_len,
                        "a match starts within 12 bytes of the end"
                    );
                    position += length;
                    assert!(
                        position + 5 <= decoded_len,
                        "the last 5 bytes are not literals"
                    );
                    copies.push((offset, length));
                }
                None => assert_eq!(i, sequences.len() - 1),
            }
        }
        assert_eq!(position, decoded_len);
        copies
    }

    #[test]
    fn split_blocks_decode_to_the_page_and_copy_fast() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut split = 0;
        for _ in 0..300 {
            let page = page(&mut rng);
            let plain = lz4_flex::block::compress(&page);
            let block = compress(&page);
            if block != plain {
                split += 1;
            }
            let decoded = lz4_flex::block::decompress(&block, page.len()).expect("decodes");
            assert_eq!(decoded, page);
            if !page.is_empty() {
                for (offset, length) in check_rules(&block, page.len()) {
                    assert!(!overlapping(offset, length), "{offset} {length}");
                }
            }
            // A few bytes larger for each match split: the pieces' tokens
            // and offsets (about 3 bytes each, a dozen pieces at most).
            let splits = sequences(&plain)
                .expect("parses")
                .iter()
                .filter(|s| {
                    s.copy
                        .is_some_and(|(offset, length)| overlapping(offset, length))
                })
                .count();
            assert!(block.len() <= plain.len() + 48 * splits);
        }
        assert!(
            split > 50,
            "only {split} pages had a long overlapping match"
        );
    }

    #[test]
    fn the_reference_decoder_reads_split_blocks() {
        // The C library DuckDB and the LZ4 tools use.
        let mut rng = Rng(42);
        for _ in 0..100 {
            let page = page(&mut rng);
            let block = compress(&page);
            let mut out = vec![0u8; page.len()];
            let decoded = unsafe {
                lz4_sys::LZ4_decompress_safe(
                    block.as_ptr().cast(),
                    out.as_mut_ptr().cast(),
                    block.len() as i32,
                    out.len() as i32,
                )
            };
            assert_eq!(decoded, page.len() as i32);
            assert_eq!(out, page);
        }
    }

    #[test]
    fn a_page_of_zeros_becomes_a_doubling_chain() {
        let page = vec![0u8; 24_576];
        let block = compress(&page);
        let copies = check_rules(&block, page.len());
        assert!(copies.len() > 5 && copies.len() < 20, "{copies:?}");
        assert!(block.len() <= lz4_flex::block::compress(&page).len() + 48);
    }
}
