//! SSH identification strings (RFC 4253 4.2): `SSH-protoversion-softwareversion
//! SP comments CR LF`, the first line each side sends.

use crate::text;

/// The longest identification line RFC 4253 allows, line ending included.
const MAX_LINE: usize = 255;

/// True when `stream` starts like an identification string, as far as it goes.
pub fn looks_like_ssh(stream: &[u8]) -> bool {
    crate::starts_so_far(stream, b"SSH-")
}

/// The identification string at the start of `stream`, without its line ending;
/// `None` while the line has not ended (or when it is not one, or too long).
pub fn banner(stream: &[u8]) -> Option<String> {
    if !stream.starts_with(b"SSH-") {
        return None;
    }
    let end = stream.iter().take(MAX_LINE).position(|&b| b == b'\n')?;
    let line = stream.get(..end)?;
    Some(text(line.strip_suffix(b"\r").unwrap_or(line)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_without_its_ending_is_the_banner() {
        assert_eq!(
            banner(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n\x00\x00").as_deref(),
            Some("SSH-2.0-OpenSSH_9.2p1 Debian-2")
        );
        assert_eq!(banner(b"SSH-2.0-x"), None);
        assert_eq!(banner(&[b'S'; 300]), None);
        assert!(looks_like_ssh(b"SS"));
        assert!(!looks_like_ssh(b"SSX"));
    }
}
