//! OP_COMPRESSED (opcode 2012) and the three compressors MongoDB negotiates.
//!
//! Layout after the header: `originalOpcode: i32, uncompressedSize: i32, compressorId: u8`,
//! then the compressed bytes of the original message's body (its header is not included).

use crate::header::{write_header, MsgHeader, OP_COMPRESSED, OP_MSG, OP_QUERY};
use crate::reader::Reader;
use crate::HEADER_LEN;
use crate::{WireError, MAX_MESSAGE_SIZE_BYTES};
use std::io::{Read, Write};

/// `originalOpcode` + `uncompressedSize` + `compressorId`.
const COMPRESSION_HEADER_LEN: usize = 9;
/// Initial buffer for streaming decompressors; growth beyond is driven by real output.
const INITIAL_DECOMPRESS_CAPACITY: usize = 64 * 1024;

/// A compressor id as MongoDB numbers them on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compressor {
    Noop = 0,
    Snappy = 1,
    Zlib = 2,
    Zstd = 3,
}

impl Compressor {
    /// Looks up a name from a `hello` command's `compression` array.
    pub fn from_name(name: &str) -> Option<Compressor> {
        match name {
            "noop" => Some(Compressor::Noop),
            "snappy" => Some(Compressor::Snappy),
            "zlib" => Some(Compressor::Zlib),
            "zstd" => Some(Compressor::Zstd),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Compressor::Noop => "noop",
            Compressor::Snappy => "snappy",
            Compressor::Zlib => "zlib",
            Compressor::Zstd => "zstd",
        }
    }

    /// The `compressorId` byte.
    pub fn id(self) -> u8 {
        self as u8
    }

    pub fn from_id(id: u8) -> Option<Compressor> {
        match id {
            0 => Some(Compressor::Noop),
            1 => Some(Compressor::Snappy),
            2 => Some(Compressor::Zlib),
            3 => Some(Compressor::Zstd),
            _ => None,
        }
    }
}

/// Compresses `data` (snappy raw format, zlib with its header, zstd at the default level).
///
/// # Panics
/// Only if the compression library fails on in-memory data, which happens for inputs beyond
/// snappy's ~4 GiB limit or on allocation failure, never for messages within
/// `MAX_MESSAGE_SIZE_BYTES`.
pub fn compress(c: Compressor, data: &[u8]) -> Vec<u8> {
    try_compress(c, data).expect("in-memory compression of a bounded message cannot fail")
}

fn try_compress(c: Compressor, data: &[u8]) -> std::io::Result<Vec<u8>> {
    match c {
        Compressor::Noop => Ok(data.to_vec()),
        Compressor::Snappy => snap::raw::Encoder::new()
            .compress_vec(data)
            .map_err(std::io::Error::other),
        Compressor::Zlib => {
            let mut encoder =
                flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(data)?;
            encoder.finish()
        }
        Compressor::Zstd => zstd::bulk::compress(data, zstd::DEFAULT_COMPRESSION_LEVEL),
    }
}

/// Decompresses `data`, which must expand to exactly `uncompressed_size` bytes.
///
/// `uncompressed_size` is checked against `MAX_MESSAGE_SIZE_BYTES` before any allocation;
/// decompressors never produce more than `uncompressed_size + 1` bytes.
pub fn decompress(
    c: Compressor,
    data: &[u8],
    uncompressed_size: usize,
) -> Result<Vec<u8>, WireError> {
    if uncompressed_size > MAX_MESSAGE_SIZE_BYTES {
        return Err(too_large());
    }
    let out = match c {
        Compressor::Noop => data.to_vec(),
        Compressor::Snappy => decompress_snappy(data, uncompressed_size)?,
        Compressor::Zlib => read_bounded(flate2::read::ZlibDecoder::new(data), uncompressed_size)?,
        Compressor::Zstd => zstd::bulk::decompress(data, uncompressed_size).map_err(corrupt)?,
    };
    if out.len() != uncompressed_size {
        return Err(WireError::Compression(
            "Decompressing message returned less data than expected".into(),
        ));
    }
    Ok(out)
}

fn decompress_snappy(data: &[u8], uncompressed_size: usize) -> Result<Vec<u8>, WireError> {
    // The raw format starts with the decompressed length; it must agree before we allocate.
    let claimed = snap::raw::decompress_len(data).map_err(corrupt)?;
    if claimed != uncompressed_size {
        return Err(WireError::Compression(
            "Decompressing message returned less data than expected".into(),
        ));
    }
    let mut out = vec![0u8; claimed];
    let written = snap::raw::Decoder::new()
        .decompress(data, &mut out)
        .map_err(corrupt)?;
    out.truncate(written);
    Ok(out)
}

/// Reads at most `limit + 1` bytes so an over-long stream is detected without unbounded
/// output.
fn read_bounded(reader: impl Read, limit: usize) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(limit.min(INITIAL_DECOMPRESS_CAPACITY));
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader.take(cap).read_to_end(&mut out).map_err(corrupt)?;
    Ok(out)
}

fn corrupt(e: impl std::fmt::Display) -> WireError {
    WireError::Compression(format!("Compressed message was invalid or corrupted: {e}"))
}

fn too_large() -> WireError {
    WireError::Compression("Decompressed message would be larger than maximum message size".into())
}

/// Unwraps an OP_COMPRESSED body: returns the original message's reconstructed header (same
/// ids, original opcode, length of the decompressed message), its body, and the compressor.
pub(crate) fn unwrap(
    header: &MsgHeader,
    body: &[u8],
) -> Result<(MsgHeader, Vec<u8>, Compressor), WireError> {
    if body.len() < COMPRESSION_HEADER_LEN {
        return Err(WireError::Compression(
            "Invalid compressed message header".into(),
        ));
    }
    let mut reader = Reader::new(body);
    let original_op = reader.i32("originalOpcode")?;
    let declared_size = reader.i32("uncompressedSize")?;
    let compressor_id = reader.u8("compressorId")?;
    match original_op {
        OP_MSG | OP_QUERY => {}
        OP_COMPRESSED => return Err(WireError::NestedCompression),
        other => return Err(WireError::UnsupportedOpCode(other)),
    }
    let compressor =
        Compressor::from_id(compressor_id).ok_or(WireError::UnknownCompressor(compressor_id))?;
    let size = usize::try_from(declared_size)
        .map_err(|_| WireError::Compression(format!("Invalid uncompressedSize {declared_size}")))?;
    if size > MAX_MESSAGE_SIZE_BYTES - HEADER_LEN {
        return Err(too_large());
    }
    let rest = reader.take(reader.remaining(), "compressed data")?;
    let inner_body = decompress(compressor, rest, size)?;
    let inner_header = MsgHeader {
        // Fits: size + HEADER_LEN <= MAX_MESSAGE_SIZE_BYTES < i32::MAX.
        message_length: i32::try_from(size + HEADER_LEN).map_err(|_| too_large())?,
        request_id: header.request_id,
        response_to: header.response_to,
        op_code: original_op,
    };
    Ok((inner_header, inner_body, compressor))
}

/// Wraps a complete encoded message (header + body) in OP_COMPRESSED with `c`, keeping its
/// request and response ids. Like MongoDB, sends the original message unchanged when it is
/// not a well-formed frame or compression fails or would not fit in a message.
pub fn wrap_compressed(message: &[u8], c: Compressor) -> Vec<u8> {
    try_wrap(message, c).unwrap_or_else(|| message.to_vec())
}

fn try_wrap(message: &[u8], c: Compressor) -> Option<Vec<u8>> {
    let header_bytes: &[u8; HEADER_LEN] = message.get(..HEADER_LEN)?.try_into().ok()?;
    let header = MsgHeader::parse(header_bytes);
    let body = message.get(HEADER_LEN..)?;
    let compressed = try_compress(c, body).ok()?;
    let total = HEADER_LEN + COMPRESSION_HEADER_LEN + compressed.len();
    if total > MAX_MESSAGE_SIZE_BYTES {
        return None;
    }
    let mut out = Vec::with_capacity(total);
    write_header(
        &mut out,
        COMPRESSION_HEADER_LEN + compressed.len(),
        header.request_id,
        header.response_to,
        OP_COMPRESSED,
    );
    out.extend_from_slice(&header.op_code.to_le_bytes());
    out.extend_from_slice(&i32::try_from(body.len()).ok()?.to_le_bytes());
    out.push(c.id());
    out.extend_from_slice(&compressed);
    Some(out)
}

/// Wraps `message` with the compressor, if any.
pub(crate) fn frame(message: Vec<u8>, compressor: Option<Compressor>) -> Vec<u8> {
    match compressor {
        Some(c) => try_wrap(&message, c).unwrap_or(message),
        None => message,
    }
}
