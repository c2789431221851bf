//! Invalid UTF-8 in slurmrestd's answers, replaced as the body streams in. slurmrestd writes a
//! job's name, comment or working directory as slurmctld holds them, byte for byte: a job that
//! any Slurm user submitted with `sbatch -J` in a Latin-1 terminal (`M\xfcller`) makes the whole
//! `/jobs` listing, and that job's `/job/{id}`, invalid JSON for serde_json, which refuses a
//! string that is not UTF-8. A poll cycle that read either failed, for every job in it: one such
//! job, not even one of the operator's, held back the others' updates. Each invalid sequence
//! becomes U+FFFD instead, exactly as
//! [`String::from_utf8_lossy`] would replace it in the whole body; JSON's own syntax is ASCII,
//! so only string contents change.
//!
//! No crate fitted better: encoding_rs's streaming decoder does the same but copies every chunk,
//! while a valid chunk (every real answer so far) passes through here untouched.

use bytes::Bytes;

/// U+FFFD REPLACEMENT CHARACTER, encoded.
const REPLACEMENT: &[u8] = "\u{FFFD}".as_bytes();

/// The repair of one body, fed its chunks in order. A sequence cut at a chunk's end waits for
/// the next chunk (at most 3 bytes are held).
#[derive(Debug, Default)]
pub struct Utf8Repair {
    /// The start of a sequence the last chunk ended in.
    partial: Vec<u8>,
}

impl Utf8Repair {
    /// The next chunk, with its invalid sequences replaced: `chunk` itself when it is valid and
    /// nothing is held from the one before.
    pub fn feed(&mut self, chunk: Bytes) -> Bytes {
        if self.partial.is_empty() && std::str::from_utf8(&chunk).is_ok() {
            return chunk;
        }
        let mut input = std::mem::take(&mut self.partial);
        input.extend_from_slice(&chunk);
        let mut out = Vec::with_capacity(input.len() + REPLACEMENT.len());
        let mut rest = input.as_slice();
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    out.extend_from_slice(valid.as_bytes());
                    break;
                }
                Err(error) => {
                    let (valid, after) = rest.split_at(error.valid_up_to());
                    out.extend_from_slice(valid);
                    match error.error_len() {
                        Some(invalid) => {
                            out.extend_from_slice(REPLACEMENT);
                            rest = &after[invalid..];
                        }
                        // Cut short by the chunk's end: the next chunk may complete it.
                        None => {
                            self.partial = after.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        Bytes::from(out)
    }

    /// The end of the body: a sequence still held was cut short for good.
    pub fn finish(&mut self) -> Option<Bytes> {
        if self.partial.is_empty() {
            return None;
        }
        self.partial.clear();
        Some(Bytes::from_static(REPLACEMENT))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repaired(chunks: &[&[u8]]) -> Vec<u8> {
        let mut repair = Utf8Repair::default();
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend_from_slice(&repair.feed(Bytes::copy_from_slice(chunk)));
        }
        out.extend(repair.finish().unwrap_or_default());
        out
    }

    /// Valid and invalid UTF-8 of every kind: multi-byte characters, stray continuation bytes,
    /// Latin-1, sequences cut short, overlong forms, surrogates, code points past U+10FFFF.
    const CORPUS: &[&[u8]] = &[
        b"{\"name\":\"plain\"}",
        "{\"name\":\"M\u{fc}ller \u{65e5}\u{672c} \u{1F680}\"}".as_bytes(),
        b"{\"name\":\"M\xfcller\"}",
        b"{\"name\":\"bad\xffname\",\"comment\":\"\x80\x80\"}",
        b"\xe6\x97\"cut\xf0\x9f\x9a\"",
        b"\xc0\xaf overlong, \xed\xa0\x80 surrogate, \xf4\x90\x80\x80 too high",
        b"\xe2\x82\xac\xe2\x82",
        b"\xf0",
        b"",
    ];

    /// Every input, cut into two and three chunks at every pair of points, comes out as
    /// `from_utf8_lossy` makes it whole: no sequence is lost or doubled at a chunk's edge.
    #[test]
    fn chunks_are_repaired_as_the_whole_body_would_be() {
        for input in CORPUS {
            let want = String::from_utf8_lossy(input).into_owned().into_bytes();
            assert_eq!(repaired(&[input]), want, "{input:?} whole");
            for i in 0..=input.len() {
                let (a, rest) = input.split_at(i);
                assert_eq!(repaired(&[a, rest]), want, "{input:?} cut at {i}");
                for j in 0..=rest.len() {
                    let (b, c) = rest.split_at(j);
                    assert_eq!(
                        repaired(&[a, b, c]),
                        want,
                        "{input:?} cut at {i}, {}",
                        i + j
                    );
                }
            }
        }
    }

    /// A valid chunk is passed on as it is, not copied.
    #[test]
    fn a_valid_chunk_passes_through_uncopied() {
        let chunk = Bytes::from_static("{\"name\":\"M\u{fc}ller\"}".as_bytes());
        let mut repair = Utf8Repair::default();
        let out = repair.feed(chunk.clone());
        assert_eq!(out.as_ptr(), chunk.as_ptr());
        assert!(repair.finish().is_none());
    }

    /// Once a body repaired, serde_json reads it; the invalid bytes are U+FFFD in the string.
    #[test]
    fn a_repaired_body_decodes() {
        let body = b"{\"jobs\":[{\"name\":\"M\xfcller\"}]}";
        assert!(serde_json::from_slice::<serde_json::Value>(body).is_err());
        let value: serde_json::Value = serde_json::from_slice(&repaired(&[body])).unwrap();
        assert_eq!(value["jobs"][0]["name"], "M\u{FFFD}ller");
    }
}
