//! OP_MSG (opcode 2013): flag bits, body and document-sequence sections, CRC-32C checksum.
//!
//! Layout after the header: `flagBits: u32`, then sections until the end (or until the
//! trailing 4-byte checksum when `checksumPresent` is set). A section is a kind byte followed
//! by either one BSON document (kind 0, the body) or `int32 size, cstring identifier,
//! documents...` where `size` counts itself and everything up to the section's end (kind 1).

use crate::compression::frame;
use crate::from_raw::{RawField, CLUSTER_TIME};
use crate::header::{MsgHeader, OP_MSG};
use crate::reader::{document_bytes, reply_bytes, Reader};
use crate::HEADER_LEN;
use crate::{Compressor, WireError};
use bson::{Bson, Document, RawDocumentBuf};
use nidus_common::ErrorCode;

/// Bit 0: the message ends with a CRC-32C of everything before it.
pub const CHECKSUM_PRESENT: u32 = 1;
/// Bit 1: the sender will send another message without waiting for a reply.
pub const MORE_TO_COME: u32 = 1 << 1;
/// Bit 16: the client accepts an exhaust stream of replies (moreToCome replies).
pub const EXHAUST_ALLOWED: u32 = 1 << 16;

/// Bits 0-15 are "required": a receiver must reject a set bit it does not understand.
/// Bits 16-31 are optional and ignored when unknown.
const REQUIRED_FLAG_MASK: u32 = 0xffff;
const KNOWN_REQUIRED_FLAGS: u32 = CHECKSUM_PRESENT | MORE_TO_COME;
/// MongoDB accepts at most two kind-1 sections per message.
const MAX_DOCUMENT_SEQUENCES: usize = 2;
const CHECKSUM_LEN: usize = 4;
const FLAGS_LEN: usize = 4;

const SECTION_BODY: u8 = 0;
const SECTION_DOCUMENT_SEQUENCE: u8 = 1;

/// A decoded OP_MSG. `sequences` keep their wire order; identifiers are unique and never
/// collide with a (dotted) path present in `body`.
#[derive(Clone, Debug, PartialEq)]
pub struct OpMsg {
    pub flags: u32,
    pub body: Document,
    pub sequences: Vec<(String, Vec<RawDocumentBuf>)>,
    /// The body's `$clusterTime`, when set aside unconverted (it is then not in `body`).
    pub cluster_time: Option<RawField>,
}

impl OpMsg {
    /// An OP_MSG with no flags and no document sequences.
    pub fn new(body: Document) -> OpMsg {
        OpMsg {
            flags: 0,
            body,
            sequences: Vec::new(),
            cluster_time: None,
        }
    }

    /// The body as the client sent it: with its `$clusterTime` back in its place.
    pub fn full_body(&self) -> std::borrow::Cow<'_, Document> {
        RawField::restore(self.cluster_time.as_ref(), &self.body)
    }

    pub fn more_to_come(&self) -> bool {
        self.flags & MORE_TO_COME != 0
    }

    pub fn exhaust_allowed(&self) -> bool {
        self.flags & EXHAUST_ALLOWED != 0
    }

    /// The documents of the kind-1 section named `name`, if the message has one.
    pub fn sequence(&self, name: &str) -> Option<&[RawDocumentBuf]> {
        self.sequences
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, docs)| docs.as_slice())
    }
}

/// Parses an OP_MSG body (the bytes after the header). `header` must be the header the
/// bytes arrived with (reconstructed for OP_COMPRESSED), since the checksum covers it.
pub(crate) fn parse(header: &MsgHeader, body: &[u8]) -> Result<OpMsg, WireError> {
    let flags = Reader::new(body).u32("OP_MSG flagBits")?;
    if flags & REQUIRED_FLAG_MASK & !KNOWN_REQUIRED_FLAGS != 0 {
        return Err(WireError::IllegalFlags(flags));
    }
    let covered = if flags & CHECKSUM_PRESENT != 0 {
        verify_checksum(header, body)?
    } else {
        body
    };
    // `covered` starts with the 4 flag bytes read above.
    let sections = covered.get(FLAGS_LEN..).unwrap_or_default();
    let (body_doc, cluster_time, sequences) = parse_sections(sections)?;
    let msg = OpMsg {
        flags,
        body: body_doc,
        sequences,
        cluster_time,
    };
    check_no_body_duplicates(&msg)?;
    Ok(msg)
}

/// Checks the trailing CRC-32C and returns the body without it.
///
/// The checksum covers the header and every body byte before the checksum itself.
fn verify_checksum<'a>(header: &MsgHeader, body: &'a [u8]) -> Result<&'a [u8], WireError> {
    let split = body
        .len()
        .checked_sub(CHECKSUM_LEN)
        .filter(|&n| n > FLAGS_LEN)
        .ok_or_else(|| {
            WireError::section(
                51251,
                "Invalid message size for an OpMsg containing a checksum",
            )
        })?;
    let (covered, trailer) = body
        .split_at_checked(split)
        .ok_or(WireError::ChecksumMismatch)?;
    let expected = trailer
        .try_into()
        .map(u32::from_le_bytes)
        .map_err(|_| WireError::ChecksumMismatch)?;
    if checksum(header, covered) != expected {
        return Err(WireError::ChecksumMismatch);
    }
    Ok(covered)
}

fn checksum(header: &MsgHeader, covered_body: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&header.to_bytes()), covered_body)
}

type Sequences = Vec<(String, Vec<RawDocumentBuf>)>;

/// Reads sections until the end of `bytes`: exactly one body, at most two sequences.
fn parse_sections(bytes: &[u8]) -> Result<(Document, Option<RawField>, Sequences), WireError> {
    let mut reader = Reader::new(bytes);
    let mut body = None;
    let mut sequences: Sequences = Vec::new();
    while !reader.is_empty() {
        match reader.u8("OP_MSG section kind")? {
            SECTION_BODY => {
                if body.is_some() {
                    return Err(WireError::section(
                        40430,
                        "Multiple body sections in message",
                    ));
                }
                body = Some(parse_body(&mut reader)?);
            }
            SECTION_DOCUMENT_SEQUENCE => {
                if sequences.len() >= MAX_DOCUMENT_SEQUENCES {
                    return Err(WireError::Section {
                        code: ErrorCode::TooManyDocumentSequences,
                        message: "Too many document sequences in OP_MSG".into(),
                    });
                }
                let sequence = parse_sequence(&mut reader, &sequences)?;
                sequences.push(sequence);
            }
            kind => {
                return Err(WireError::section(
                    40432,
                    format!("Unknown section kind {kind}"),
                ))
            }
        }
    }
    let (body, cluster_time) =
        body.ok_or_else(|| WireError::section(40587, "OP_MSG messages must have a body"))?;
    Ok((body, cluster_time, sequences))
}

fn parse_body(reader: &mut Reader<'_>) -> Result<(Document, Option<RawField>), WireError> {
    reader.converted_body("OP_MSG body", "OP_MSG body: ")
}

/// Reads one kind-1 section (after its kind byte). `seen` holds the sequences read so far.
fn parse_sequence(
    reader: &mut Reader<'_>,
    seen: &Sequences,
) -> Result<(String, Vec<RawDocumentBuf>), WireError> {
    let size = reader.i32("document sequence size")?;
    // The size counts its own 4 bytes.
    let content_len = usize::try_from(size)
        .ok()
        .and_then(|n| n.checked_sub(4))
        .ok_or_else(|| WireError::Malformed(format!("invalid document sequence size {size}")))?;
    let mut content = Reader::new(reader.take(content_len, "document sequence")?);
    let name = content.cstr("document sequence identifier")?;
    if seen.iter().any(|(n, _)| n == name) {
        return Err(WireError::section(
            40431,
            format!("Duplicate document sequence: {name}"),
        ));
    }
    let mut docs = Vec::new();
    while !content.is_empty() {
        docs.push(content.document("document sequence")?.to_owned());
    }
    Ok((name.to_owned(), docs))
}

/// A sequence may not also appear in the body, at its dotted path or with an array along it.
fn check_no_body_duplicates(msg: &OpMsg) -> Result<(), WireError> {
    // The body as sent only when a sequence's name could reach the `$clusterTime` set aside.
    let body = match &msg.cluster_time {
        Some(_)
            if msg
                .sequences
                .iter()
                .any(|(name, _)| name.split('.').next() == Some(CLUSTER_TIME)) =>
        {
            msg.full_body()
        }
        _ => std::borrow::Cow::Borrowed(&msg.body),
    };
    match msg
        .sequences
        .iter()
        .find(|(name, _)| path_present(&body, name))
    {
        Some((name, _)) => Err(WireError::section(
            40433,
            format!("Duplicate field between body and document sequence {name}"),
        )),
        None => Ok(()),
    }
}

/// Whether `path` names a field of `doc`, where reaching an array before the last path
/// component counts as present (MongoDB's "element at path or array along path").
/// Recursion follows nested documents only, so it is bounded by the document's depth.
fn path_present(doc: &Document, path: &str) -> bool {
    let (head, rest) = match path.split_once('.') {
        Some((head, rest)) => (head, Some(rest)),
        None => (path, None),
    };
    match (doc.get(head), rest) {
        (None, _) => false,
        (Some(_), None) | (Some(Bson::Array(_)), Some(_)) => true,
        (Some(Bson::Document(inner)), Some(rest)) => path_present(inner, rest),
        (Some(_), Some(_)) => false,
    }
}

/// Encodes a server reply: `flags` (0, or MORE_TO_COME for exhaust; CHECKSUM_PRESENT adds a
/// checksum) and one body section, wrapped in OP_COMPRESSED when `compressor` is given.
pub fn encode_msg(
    request_id: i32,
    response_to: i32,
    flags: u32,
    body: &Document,
    compressor: Option<Compressor>,
) -> Vec<u8> {
    encode_msg_with_batch(request_id, response_to, flags, body, &[], &[], compressor)
}

/// `encode_msg` of a cursor reply whose documents are passed as they are: a non-empty
/// `batch` is written as the body's `cursor.firstBatch`/`cursor.nextBatch`, which `body`
/// holds as an empty array; `trailer` holds raw BSON elements written after the body's own
/// (as if appended to `body` last).
pub fn encode_msg_with_batch(
    request_id: i32,
    response_to: i32,
    flags: u32,
    body: &Document,
    batch: &[RawDocumentBuf],
    trailer: &[u8],
    compressor: Option<Compressor>,
) -> Vec<u8> {
    let mut payload = flags.to_le_bytes().to_vec();
    payload.push(SECTION_BODY);
    payload.extend_from_slice(&reply_bytes(body, batch, trailer));
    let message = finish(
        request_id,
        response_to,
        payload,
        flags & CHECKSUM_PRESENT != 0,
    );
    frame(message, compressor)
}

/// Encodes a client request as drivers do: kind-1 sections first, then the body; with
/// `checksum` the CHECKSUM_PRESENT flag is set and the CRC-32C appended (otherwise cleared).
pub fn encode_msg_request(request_id: i32, msg: &OpMsg, checksum: bool) -> Vec<u8> {
    let flags = if checksum {
        msg.flags | CHECKSUM_PRESENT
    } else {
        msg.flags & !CHECKSUM_PRESENT
    };
    let mut payload = flags.to_le_bytes().to_vec();
    for (name, docs) in &msg.sequences {
        encode_sequence(&mut payload, name, docs);
    }
    payload.push(SECTION_BODY);
    payload.extend_from_slice(&document_bytes(&msg.full_body()));
    finish(request_id, 0, payload, checksum)
}

fn encode_sequence(out: &mut Vec<u8>, name: &str, docs: &[RawDocumentBuf]) {
    let docs_len: usize = docs.iter().map(|d| d.as_bytes().len()).sum();
    let size = 4 + name.len() + 1 + docs_len;
    out.push(SECTION_DOCUMENT_SEQUENCE);
    out.extend_from_slice(&i32::try_from(size).unwrap_or(i32::MAX).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    for doc in docs {
        out.extend_from_slice(doc.as_bytes());
    }
}

/// Prepends the header to an OP_MSG payload (flags + sections) and appends the checksum.
fn finish(request_id: i32, response_to: i32, payload: Vec<u8>, with_checksum: bool) -> Vec<u8> {
    let trailer = if with_checksum { CHECKSUM_LEN } else { 0 };
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len() + trailer);
    crate::header::write_header(
        &mut out,
        payload.len() + trailer,
        request_id,
        response_to,
        OP_MSG,
    );
    out.extend_from_slice(&payload);
    if with_checksum {
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
    }
    out
}
