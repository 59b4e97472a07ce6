//! Text-level stopping and UTF-8 assembly for streamed tokens.
//!
//! Tokens are byte pieces: a character may span several tokens, and a stop string may span
//! several pieces. `Utf8Assembler` turns bytes into text as soon as characters are complete;
//! `StopScanner` holds back any tail that could still become a stop string, so a partial stop
//! prefix is never sent to the client.

/// Joins token bytes into text, keeping a truncated character for the next piece. Invalid bytes
/// become U+FFFD exactly as `String::from_utf8_lossy` would over the whole sequence, so the
/// streamed text equals the text decoded at once.
#[derive(Debug, Default)]
pub struct Utf8Assembler {
    pending: Vec<u8>,
}

impl Utf8Assembler {
    /// Adds bytes and returns the text completed so far.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[..valid]).unwrap_or_default());
                    match e.error_len() {
                        // A character cut short at the end: wait for the next piece.
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// The rest at the end of generation (a truncated character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

/// Finds stop strings in generated text and says how much text is safe to send.
#[derive(Debug, Default)]
pub struct StopScanner {
    stops: Vec<String>,
    text: String,
    sent: usize,
}

impl StopScanner {
    /// A scanner for `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> Self {
        StopScanner { stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), ..Default::default() }
    }

    /// Adds generated text; returns the text now safe to send and whether a stop string ended
    /// generation (the stop string and anything after it are dropped).
    pub fn push(&mut self, s: &str) -> (String, bool) {
        self.text.push_str(s);
        // A stop string cannot begin before `sent`: anything that could begin one was held back.
        let tail = &self.text[self.sent..];
        if let Some(at) = self.stops.iter().filter_map(|stop| tail.find(stop.as_str())).min() {
            let out = tail[..at].to_string();
            self.sent = self.text.len();
            return (out, true);
        }
        // Hold back the longest tail that is a prefix of some stop string.
        let hold_from = tail
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| self.stops.iter().any(|stop| stop.starts_with(&tail[i..])))
            .unwrap_or(tail.len());
        let out = tail[..hold_from].to_string();
        self.sent += hold_from;
        (out, false)
    }

    /// The held-back text, sent when generation ends without a stop string.
    pub fn finish(&mut self) -> String {
        let out = self.text[self.sent..].to_string();
        self.sent = self.text.len();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_prefix_is_held_back_then_released() {
        let mut s = StopScanner::new(vec!["END".into()]);
        assert_eq!(s.push("abc E"), ("abc ".to_string(), false));
        assert_eq!(s.push("N"), (String::new(), false));
        assert_eq!(s.push("x"), ("ENx".to_string(), false));
        assert_eq!(s.push("yEND tail"), ("y".to_string(), true));
    }

    #[test]
    fn the_earliest_of_several_stops_wins_and_finish_flushes() {
        let mut s = StopScanner::new(vec!["bb".into(), "ab".into()]);
        assert_eq!(s.push("xa"), ("x".to_string(), false));
        assert_eq!(s.push("bb"), (String::new(), true));
        let mut s = StopScanner::new(vec!["zz".into()]);
        assert_eq!(s.push("az"), ("a".to_string(), false));
        assert_eq!(s.finish(), "z");
    }

    #[test]
    fn utf8_pieces_join_like_lossy_decoding() {
        let bytes = "é€x".as_bytes();
        let mut a = Utf8Assembler::default();
        let mut out = String::new();
        for b in bytes {
            out += &a.push(&[*b]);
        }
        assert_eq!(out + &a.finish(), "é€x");
        let bad = [0x61, 0xFF, 0xE2, 0x82, 0x62, 0xE2];
        let mut a = Utf8Assembler::default();
        let mut out = String::new();
        for b in bad {
            out += &a.push(&[b]);
        }
        assert_eq!(out + &a.finish(), String::from_utf8_lossy(&bad));
    }
}
