//! The subject of a client certificate as MongoDB names x.509 users: the distinguished name
//! in RFC 2253 form (last RDN first, OpenSSL's short attribute names, `+` between the values
//! of one RDN, RFC 2253 escapes), e.g. `CN=client,OU=KernelUser,O=MongoDB,C=US`.
//!
//! A small DER reader finds the subject in the certificate (rustls has already verified the
//! certificate against `--tlsCAFile`; this only reads it).

/// One DER element: its tag, its content, and what follows it.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;

/// The subject DN of a DER certificate, RFC 2253 style (None when it cannot be read).
pub fn subject_name(cert: &[u8]) -> Option<String> {
    let (SEQUENCE, cert, _) = tlv(cert)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = tlv(cert)? else {
        return None;
    };
    let mut rest = tbs;
    // version [0] EXPLICIT (optional), serialNumber, signature, issuer, validity, subject.
    let (tag, _, after) = tlv(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    for _ in 0..4 {
        rest = tlv(rest)?.2;
    }
    let (SEQUENCE, subject, _) = tlv(rest)? else {
        return None;
    };
    format_name(subject)
}

/// An RDNSequence's content as RFC 2253: the last RDN first.
fn format_name(mut seq: &[u8]) -> Option<String> {
    let mut rdns = Vec::new();
    while !seq.is_empty() {
        let (SET, mut set, rest) = tlv(seq)? else {
            return None;
        };
        seq = rest;
        let mut parts = Vec::new();
        while !set.is_empty() {
            let (SEQUENCE, atv, rest) = tlv(set)? else {
                return None;
            };
            set = rest;
            let (OID, oid, value) = tlv(atv)? else {
                return None;
            };
            let oid = oid_string(oid)?;
            let name = short_name(&oid).map_or(oid.clone(), str::to_string);
            parts.push(format!("{name}={}", attribute_value(value)?));
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

fn oid_string(bytes: &[u8]) -> Option<String> {
    let (&first, rest) = bytes.split_first()?;
    let mut arcs = vec![u64::from(first / 40).min(2), 0];
    arcs[1] = u64::from(first) - arcs[0] * 40;
    let mut acc: u64 = 0;
    for &b in rest {
        acc = acc.checked_mul(128)? | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            arcs.push(acc);
            acc = 0;
        }
    }
    Some(
        arcs.iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("."),
    )
}

/// OpenSSL's short names for the attribute types MongoDB prints by name.
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.4" => "SN",
        "2.5.4.5" => "serialNumber",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "street",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.12" => "title",
        "2.5.4.17" => "postalCode",
        "2.5.4.42" => "GN",
        "2.5.4.43" => "initials",
        "2.5.4.44" => "generationQualifier",
        "2.5.4.46" => "dnQualifier",
        "2.5.4.65" => "pseudonym",
        "0.9.2342.19200300.100.1.1" => "UID",
        "0.9.2342.19200300.100.1.25" => "DC",
        "1.2.840.113549.1.9.1" => "emailAddress",
        _ => return None,
    })
}

/// A value as text (the string types), escaped; other types as `#` and the hex of their DER.
fn attribute_value(der: &[u8]) -> Option<String> {
    let (tag, content, _) = tlv(der)?;
    let text = match tag {
        // UTF8String, PrintableString, IA5String, NumericString, VisibleString
        0x0c | 0x13 | 0x16 | 0x12 | 0x1a => String::from_utf8_lossy(content).into_owned(),
        // TeletexString / T61String: read as Latin-1, as most encoders mean it.
        0x14 => content.iter().map(|&b| b as char).collect(),
        // BMPString: UTF-16BE
        0x1e => {
            let units: Vec<u16> = content
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
                .collect();
            String::from_utf16_lossy(&units)
        }
        // UniversalString: UTF-32BE
        0x1c => content
            .chunks(4)
            .filter_map(|c| {
                let mut b = [0u8; 4];
                b[..c.len()].copy_from_slice(c);
                char::from_u32(u32::from_be_bytes(b))
            })
            .collect(),
        _ => {
            let whole = &der[..der.len() - tlv(der)?.2.len()];
            return Some(format!(
                "#{}",
                whole.iter().map(|b| format!("{b:02X}")).collect::<String>()
            ));
        }
    };
    Some(escape(&text))
}

/// RFC 2253 §2.4 escapes: `,+"\<>;` anywhere, `#` or a space first, a space last.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let last = s.chars().count().saturating_sub(1);
    for (i, c) in s.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn der(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        if content.len() < 0x80 {
            out.push(content.len() as u8);
        } else {
            out.push(0x82);
            out.extend_from_slice(&(content.len() as u16).to_be_bytes());
        }
        out.extend_from_slice(content);
        out
    }

    fn atv(oid: &[u8], tag: u8, value: &str) -> Vec<u8> {
        let mut c = der(OID, oid);
        c.extend(der(tag, value.as_bytes()));
        der(SEQUENCE, &c)
    }

    #[test]
    fn subject_is_printed_last_rdn_first_with_escapes() {
        let mut name = Vec::new();
        name.extend(der(SET, &atv(&[0x55, 4, 6], 0x13, "US")));
        name.extend(der(SET, &atv(&[0x55, 4, 10], 0x0c, "Mongo, Inc.")));
        let mut multi = atv(&[0x55, 4, 11], 0x0c, "A");
        multi.extend(atv(&[0x55, 4, 11], 0x0c, "#B "));
        name.extend(der(SET, &multi));
        name.extend(der(SET, &atv(&[0x55, 4, 3], 0x0c, "client")));
        let name = der(SEQUENCE, &name);
        let mut tbs = der(0xa0, &der(0x02, &[2]));
        tbs.extend(der(0x02, &[1, 2, 3]));
        tbs.extend(der(SEQUENCE, &der(OID, &[0x2a])));
        tbs.extend(der(SEQUENCE, &[])); // issuer
        tbs.extend(der(SEQUENCE, &[])); // validity
        tbs.extend(&name);
        let mut cert = der(SEQUENCE, &tbs);
        cert.extend(der(SEQUENCE, &[]));
        let cert = der(SEQUENCE, &cert);
        assert_eq!(
            subject_name(&cert).as_deref(),
            Some(r"CN=client,OU=A+OU=\#B\ ,O=Mongo\, Inc.,C=US")
        );
    }

    #[test]
    fn mutated_certificates_never_panic() {
        let mut name = Vec::new();
        name.extend(der(SET, &atv(&[0x55, 4, 3], 0x1e, "\0a\0b")));
        name.extend(der(SET, &atv(&[0x55, 4, 10], 0x1c, "\0\0\0x")));
        let mut tbs = der(0x02, &[1]);
        tbs.extend(der(SEQUENCE, &[]));
        tbs.extend(der(SEQUENCE, &[]));
        tbs.extend(der(SEQUENCE, &[]));
        tbs.extend(der(SEQUENCE, &name));
        let cert = der(SEQUENCE, &der(SEQUENCE, &tbs));
        assert_eq!(subject_name(&cert).as_deref(), Some("O=x,CN=ab"));
        // Every truncation and many byte flips: None or a name, never a panic.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..cert.len() {
            let _ = subject_name(&cert[..len]);
        }
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut m = cert.clone();
            let i = (seed as usize) % m.len();
            m[i] = (seed >> 32) as u8;
            let _ = subject_name(&m);
        }
    }

    #[test]
    fn unknown_types_and_garbage() {
        assert_eq!(
            oid_string(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d]).unwrap(),
            "1.2.840.113549"
        );
        assert_eq!(subject_name(&[0x30, 0x05, 0x30]), None);
        assert_eq!(subject_name(&[]), None);
        assert_eq!(
            attribute_value(&[0x04, 0x02, 0xab, 0xcd]).unwrap(),
            "#0402ABCD"
        );
    }
}
