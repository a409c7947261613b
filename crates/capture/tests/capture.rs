//! Tests of the capture readers and writer through the public API: hand-built pcap
//! and pcapng in both byte orders, the real lan-hour capture against tcpdump, and
//! damage at every cut point.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use hindsight_capture::{
    CaptureError, CaptureFormat, CaptureReader, PcapWriter, TimestampPrecision,
};
use hindsight_model::LinkType;

type Owned = (i64, u32, Vec<u8>, LinkType, u32);

fn read_all_bytes(bytes: &[u8]) -> (Vec<Owned>, Option<CaptureError>) {
    let mut reader = match CaptureReader::from_reader("test", bytes) {
        Ok(reader) => reader,
        Err(error) => return (Vec::new(), Some(error)),
    };
    let mut frames = Vec::new();
    while let Some(frame) = reader.next_frame() {
        match frame {
            Ok(f) => frames.push((
                f.ts_nanos,
                f.wire_len,
                f.data.to_vec(),
                f.link_type,
                f.iface,
            )),
            Err(error) => return (frames, Some(error)),
        }
    }
    assert!(
        reader.next_frame().is_none(),
        "a finished reader stays finished"
    );
    (frames, None)
}

fn pcap_bytes(
    big_endian: bool,
    nanos: bool,
    link: u32,
    records: &[(u32, u32, &[u8], u32)],
) -> Vec<u8> {
    let w32 = |v: u32| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let w16 = |v: u16| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let mut out = Vec::new();
    out.extend(w32(if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 }));
    out.extend(w16(2));
    out.extend(w16(4));
    out.extend(w32(0));
    out.extend(w32(0));
    out.extend(w32(65535));
    out.extend(w32(link));
    for &(sec, frac, data, orig) in records {
        out.extend(w32(sec));
        out.extend(w32(frac));
        out.extend(w32(data.len() as u32));
        out.extend(w32(orig));
        out.extend_from_slice(data);
    }
    out
}

struct NgBuilder {
    big: bool,
    out: Vec<u8>,
}

impl NgBuilder {
    fn w32(&self, v: u32) -> [u8; 4] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
    fn w16(&self, v: u16) -> [u8; 2] {
        if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }
    fn block(&mut self, kind: u32, body: &[u8]) {
        let mut padded = body.to_vec();
        while !padded.len().is_multiple_of(4) {
            padded.push(0);
        }
        let total = 12 + padded.len() as u32;
        let (t, l) = (self.w32(kind), self.w32(total));
        self.out.extend(t);
        self.out.extend(l);
        self.out.extend(padded);
        self.out.extend(l);
    }
    fn shb(&mut self) {
        let mut body = Vec::new();
        body.extend(self.w32(0x1a2b_3c4d));
        body.extend(self.w16(1));
        body.extend(self.w16(0));
        body.extend([0xff; 8]);
        self.block(0x0a0d_0d0a, &body);
    }
    fn idb(&mut self, link: u16, tsresol: Option<u8>, tsoffset: Option<u64>) {
        let mut body = Vec::new();
        body.extend(self.w16(link));
        body.extend(self.w16(0));
        body.extend(self.w32(262_144));
        if let Some(res) = tsresol {
            body.extend(self.w16(9));
            body.extend(self.w16(1));
            body.extend([res, 0, 0, 0]);
        }
        if let Some(offset) = tsoffset {
            body.extend(self.w16(14));
            body.extend(self.w16(8));
            body.extend(if self.big {
                offset.to_be_bytes()
            } else {
                offset.to_le_bytes()
            });
        }
        body.extend([0, 0, 0, 0]);
        self.block(1, &body);
    }
    fn epb(&mut self, iface: u32, units: u64, data: &[u8], orig: u32) {
        let mut body = Vec::new();
        body.extend(self.w32(iface));
        body.extend(self.w32((units >> 32) as u32));
        body.extend(self.w32(units as u32));
        body.extend(self.w32(data.len() as u32));
        body.extend(self.w32(orig));
        body.extend_from_slice(data);
        self.block(6, &body);
    }
    fn spb(&mut self, data: &[u8]) {
        let mut body = Vec::new();
        body.extend(self.w32(data.len() as u32));
        body.extend_from_slice(data);
        self.block(3, &body);
    }
    fn opb(&mut self, iface: u16, units: u64, data: &[u8]) {
        let mut body = Vec::new();
        body.extend(self.w16(iface));
        body.extend(self.w16(0));
        body.extend(self.w32((units >> 32) as u32));
        body.extend(self.w32(units as u32));
        body.extend(self.w32(data.len() as u32));
        body.extend(self.w32(data.len() as u32));
        body.extend_from_slice(data);
        self.block(2, &body);
    }
}

#[test]
fn pcap_in_both_byte_orders_and_resolutions() {
    for big in [false, true] {
        for nanos in [false, true] {
            let bytes = pcap_bytes(
                big,
                nanos,
                1 | 0x1000_0000,
                &[(10, 5, b"abc", 60), (11, 7, b"", 0)],
            );
            let (frames, error) = read_all_bytes(&bytes);
            assert!(error.is_none(), "{error:?}");
            let scale = if nanos { 1 } else { 1000 };
            assert_eq!(
                frames,
                vec![
                    (
                        10_000_000_000 + 5 * scale,
                        60,
                        b"abc".to_vec(),
                        LinkType::ETHERNET,
                        0
                    ),
                    (11_000_000_000 + 7 * scale, 0, vec![], LinkType::ETHERNET, 0),
                ],
                "big {big} nanos {nanos}: FCS bits in the link type are masked"
            );
        }
    }
}

#[test]
fn pcapng_sections_interfaces_resolutions_and_block_kinds() {
    for big in [false, true] {
        let mut ng = NgBuilder {
            big,
            out: Vec::new(),
        };
        ng.shb();
        ng.idb(1, None, None); // µs
        ng.idb(113, Some(9), Some(100)); // ns, +100 s
        ng.block(4, &[1, 2, 3, 4]); // name resolution block: skipped
        ng.epb(0, 1_500_000, b"eth", 64);
        ng.epb(1, 2_000_000_001, b"sll", 70);
        ng.spb(b"simple");
        ng.opb(1, 5, b"old");
        ng.block(0x0bad_1dea, &[0; 8]); // custom block: skipped
        ng.shb(); // a second section resets the interfaces
        ng.idb(101, Some(0x80 | 10), None); // 2^-10 s
        ng.epb(0, 1024 * 3, b"raw", 3);
        let (frames, error) = read_all_bytes(&ng.out);
        assert!(error.is_none(), "{error:?}");
        assert_eq!(
            frames,
            vec![
                (1_500_000_000, 64, b"eth".to_vec(), LinkType::ETHERNET, 0),
                (102_000_000_001, 70, b"sll".to_vec(), LinkType::LINUX_SLL, 1),
                (
                    102_000_000_001,
                    6,
                    b"simple".to_vec(),
                    LinkType::ETHERNET,
                    0
                ),
                (100_000_000_005, 3, b"old".to_vec(), LinkType::LINUX_SLL, 1),
                (3_000_000_000, 3, b"raw".to_vec(), LinkType::RAW, 2),
            ],
            "big endian: {big}"
        );
    }
}

#[test]
fn gzip_files_are_read_transparently() {
    let dir = tempfile::tempdir().unwrap();
    let plain = pcap_bytes(false, true, 1, &[(1, 2, b"xyz", 3)]);
    let path = dir.path().join("c.pcap.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&path).unwrap(),
        flate2::Compression::fast(),
    );
    gz.write_all(&plain).unwrap();
    gz.finish().unwrap();
    let mut reader = CaptureReader::open(&path).unwrap();
    assert!(reader.is_gzip());
    assert_eq!(reader.format(), CaptureFormat::Pcap { nanos: true });
    let frame = reader.next_frame().unwrap().unwrap();
    assert_eq!((frame.ts_nanos, frame.data), (1_000_000_002, &b"xyz"[..]));
    assert!(reader.next_frame().is_none());
}

#[test]
fn every_cut_point_returns_the_whole_frames_then_an_error() {
    let mut ng = NgBuilder {
        big: false,
        out: Vec::new(),
    };
    ng.shb();
    ng.idb(1, None, None);
    for i in 0..4u8 {
        ng.epb(0, u64::from(i), &[i; 21], 21);
    }
    let records: Vec<(u32, u32, &[u8], u32)> =
        (0..4).map(|i| (i, 0, &b"0123456789"[..], 10)).collect();
    // Cuts at these offsets fall between blocks or records: a shorter but valid file.
    let ng_boundaries: Vec<usize> = vec![28, 52, 108, 164, 220, 276];
    let pcap_boundaries: Vec<usize> = (0..=4).map(|k| 24 + k * 26).collect();
    for (full, boundaries) in [
        (ng.out.clone(), ng_boundaries),
        (pcap_bytes(false, false, 1, &records), pcap_boundaries),
    ] {
        let (all, error) = read_all_bytes(&full);
        assert!(error.is_none());
        assert_eq!(*boundaries.last().unwrap(), full.len());
        for cut in 0..full.len() {
            let (frames, error) = read_all_bytes(&full[..cut]);
            assert!(frames.len() < all.len(), "cut at {cut}");
            assert_eq!(frames, all[..frames.len()], "cut at {cut}");
            match error {
                None => assert!(boundaries.contains(&cut), "cut at {cut} must be an error"),
                Some(error) => {
                    assert!(
                        matches!(
                            error,
                            CaptureError::Truncated { .. } | CaptureError::UnknownFormat { .. }
                        ),
                        "cut at {cut}: {error}"
                    );
                    assert!(error.offset().unwrap() <= cut as u64);
                }
            }
        }
    }
}

#[test]
fn hostile_headers_are_corruption_not_panics() {
    let huge = {
        let mut bytes = pcap_bytes(false, false, 1, &[(1, 0, b"ab", 2)]);
        bytes[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        bytes
    };
    let (_, error) = read_all_bytes(&huge);
    assert!(
        matches!(error, Some(CaptureError::Corrupt { offset: 24, .. })),
        "{error:?}"
    );

    let mut ng = NgBuilder {
        big: false,
        out: Vec::new(),
    };
    ng.shb();
    ng.idb(1, None, None);
    let good_len = ng.out.len();
    ng.epb(0, 1, b"data", 4);
    let mut bad_length = ng.out.clone();
    bad_length[good_len + 4] = 0x0d; // block length not a multiple of 4
    let (_, error) = read_all_bytes(&bad_length);
    assert!(
        matches!(error, Some(CaptureError::Corrupt { offset, .. }) if offset == good_len as u64),
        "{error:?}"
    );

    let mut unknown_iface = NgBuilder {
        big: false,
        out: Vec::new(),
    };
    unknown_iface.shb();
    unknown_iface.epb(3, 1, b"x", 1);
    let (_, error) = read_all_bytes(&unknown_iface.out);
    assert!(
        matches!(error, Some(CaptureError::Corrupt { .. })),
        "{error:?}"
    );

    for garbage in [&b""[..], b"\x00\x01", b"GIF89a this is not a capture"] {
        let (_, error) = read_all_bytes(garbage);
        assert!(
            matches!(error, Some(CaptureError::UnknownFormat { .. })),
            "{error:?}"
        );
    }
}

fn lan_hour() -> std::path::PathBuf {
    Path::new(&std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/lan-hour-2012.pcap")
}

#[test]
fn lan_hour_agrees_with_tcpdump_and_round_trips() {
    let path = lan_hour();
    let mut reader = CaptureReader::open(&path).unwrap();
    let mut frames = Vec::new();
    while let Some(frame) = reader.next_frame() {
        let f = frame.unwrap();
        frames.push((f.ts_nanos, f.wire_len, f.data.to_vec()));
    }
    assert_eq!(frames.len(), 62_781);
    assert_eq!(
        reader.source_bytes_read(),
        std::fs::metadata(&path).unwrap().len()
    );

    // tcpdump's first and last timestamps (-tt: epoch seconds with microseconds).
    let output = Command::new("tcpdump")
        .args(["-tt", "-nn", "-r"])
        .arg(&path)
        .output()
        .expect("tcpdump");
    let text = String::from_utf8_lossy(&output.stdout);
    let epoch = |line: &str| -> i64 {
        let (sec, usec) = line
            .split_whitespace()
            .next()
            .unwrap()
            .split_once('.')
            .unwrap();
        sec.parse::<i64>().unwrap() * 1_000_000_000 + usec.parse::<i64>().unwrap() * 1000
    };
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), frames.len());
    assert_eq!(epoch(lines[0]), frames[0].0);
    assert_eq!(epoch(lines[lines.len() - 1]), frames[frames.len() - 1].0);

    // Written back as nanosecond pcap, the frames read back identical, and tcpdump agrees.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("copy.pcap");
    let mut writer = PcapWriter::new(
        std::io::BufWriter::new(std::fs::File::create(&out).unwrap()),
        LinkType::ETHERNET,
        65_535,
        TimestampPrecision::Nanos,
    )
    .unwrap();
    for (ts, wire, data) in &frames {
        writer.write_frame(*ts, *wire, data).unwrap();
    }
    writer.into_inner().unwrap();
    let mut again = CaptureReader::open(&out).unwrap();
    for expected in &frames {
        let f = again.next_frame().unwrap().unwrap();
        assert_eq!(
            (&f.ts_nanos, &f.wire_len, f.data),
            (&expected.0, &expected.1, &expected.2[..])
        );
    }
    assert!(again.next_frame().is_none());
    let count = Command::new("tcpdump")
        .args(["-nn", "-r"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&count.stdout).lines().count(),
        frames.len()
    );
}
