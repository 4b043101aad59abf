//! SCRAM-SHA-1 and SCRAM-SHA-256 (RFC 5802, RFC 7677) as MongoDB runs them: the server side,
//! and the client side members use to authenticate to each other (`--keyFile`).
//!
//! Stored credentials are MongoDB's: `{iterationCount, salt, storedKey, serverKey}` with the
//! byte strings in base64. SCRAM-SHA-1 hashes MongoDB's password digest
//! (`hex(md5("<user>:mongo:<password>"))`); SCRAM-SHA-256 hashes the SASLprep'd password.
//! Every failure inside a conversation is reported to the client as AuthenticationFailed;
//! [`ScramError`] only says which step went wrong, for the log.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bson::{doc, Bson, Document};
use hmac::{Hmac, Mac};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Sha1,
    Sha256,
}

/// Why a conversation failed (never sent to the client, which only sees "Authentication failed.").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, ScramError> {
    Err(ScramError(msg.into()))
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::Sha1, Mechanism::Sha256];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha1 => "SCRAM-SHA-1",
            Mechanism::Sha256 => "SCRAM-SHA-256",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// MongoDB's salt lengths: 16 bytes for SHA-1, 28 for SHA-256 (hash length minus 4).
    fn salt_len(self) -> usize {
        match self {
            Mechanism::Sha1 => 16,
            Mechanism::Sha256 => 28,
        }
    }

    /// `scramIterationCount` / `scramSHA256IterationCount` defaults.
    pub fn default_iterations(self) -> u32 {
        match self {
            Mechanism::Sha1 => 10_000,
            Mechanism::Sha256 => 15_000,
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha1 => {
                let mut m = <Hmac<sha1::Sha1> as Mac>::new_from_slice(key)
                    .expect("HMAC accepts keys of any length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            Mechanism::Sha256 => {
                let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(key)
                    .expect("HMAC accepts keys of any length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        use sha2::Digest;
        match self {
            Mechanism::Sha1 => sha1::Sha1::digest(data).to_vec(),
            Mechanism::Sha256 => sha2::Sha256::digest(data).to_vec(),
        }
    }

    /// `Hi(password, salt, i)`: PBKDF2 with HMAC over the mechanism's hash.
    fn hi(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Mechanism::Sha1 => {
                let mut out = [0u8; 20];
                pbkdf2::pbkdf2_hmac::<sha1::Sha1>(password, salt, iterations, &mut out);
                out.to_vec()
            }
            Mechanism::Sha256 => {
                let mut out = [0u8; 32];
                pbkdf2::pbkdf2_hmac::<sha2::Sha256>(password, salt, iterations, &mut out);
                out.to_vec()
            }
        }
    }

    /// The string the mechanism salts and hashes: MongoDB's digest for SHA-1, the SASLprep'd
    /// password for SHA-256.
    pub fn prepare_password(self, user: &str, password: &str) -> Result<String, ScramError> {
        match self {
            Mechanism::Sha1 => Ok(mongo_password_digest(user, password)),
            Mechanism::Sha256 => stringprep::saslprep(password)
                .map(|p| p.into_owned())
                .map_err(|e| ScramError(format!("Error preparing password: {e}"))),
        }
    }
}

/// MongoDB's legacy password digest: `hex(md5("<user>:mongo:<password>"))`.
pub fn mongo_password_digest(user: &str, password: &str) -> String {
    use md5::Digest;
    let d = md5::Md5::digest(format!("{user}:mongo:{password}").as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Random bytes from the operating system.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    if getrandom::fill(&mut buf).is_err() {
        // No OS randomness: fall back to ObjectId-derived bytes (still unique per call).
        for (i, chunk) in buf.chunks_mut(12).enumerate() {
            let oid = bson::oid::ObjectId::new().bytes();
            for (j, b) in chunk.iter_mut().enumerate() {
                *b = oid[j] ^ (i as u8);
            }
        }
    }
    buf
}

/// One mechanism's stored credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub iteration_count: u32,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl Credentials {
    /// Derives the keys from the prepared password (see [`Mechanism::prepare_password`]).
    pub fn derive(mech: Mechanism, prepared: &[u8], salt: &[u8], iterations: u32) -> Credentials {
        Credentials::derive_with_client_key(mech, prepared, salt, iterations).1
    }

    /// The client key (what a client's proof hides) and the credentials stored from it.
    fn derive_with_client_key(
        mech: Mechanism,
        prepared: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> (Vec<u8>, Credentials) {
        let salted = mech.hi(prepared, salt, iterations);
        let client_key = mech.hmac(&salted, b"Client Key");
        let creds = Credentials {
            iteration_count: iterations,
            salt: salt.to_vec(),
            stored_key: mech.hash(&client_key),
            server_key: mech.hmac(&salted, b"Server Key"),
        };
        (client_key, creds)
    }

    /// New credentials with a fresh random salt.
    pub fn generate(
        mech: Mechanism,
        user: &str,
        password: &str,
        iterations: u32,
    ) -> Result<Credentials, ScramError> {
        let prepared = mech.prepare_password(user, password)?;
        let salt = random_bytes(mech.salt_len());
        Ok(Credentials::derive(
            mech,
            prepared.as_bytes(),
            &salt,
            iterations,
        ))
    }

    pub fn to_document(&self) -> Document {
        doc! {
            "iterationCount": self.iteration_count as i32,
            "salt": B64.encode(&self.salt),
            "storedKey": B64.encode(&self.stored_key),
            "serverKey": B64.encode(&self.server_key),
        }
    }

    pub fn from_document(d: &Document) -> Option<Credentials> {
        let iterations = match d.get("iterationCount")? {
            Bson::Int32(n) if *n > 0 => *n as u32,
            Bson::Int64(n) if *n > 0 && *n <= u32::MAX as i64 => *n as u32,
            _ => return None,
        };
        let field = |k: &str| d.get_str(k).ok().and_then(|s| B64.decode(s).ok());
        Some(Credentials {
            iteration_count: iterations,
            salt: field("salt")?,
            stored_key: field("storedKey")?,
            server_key: field("serverKey")?,
        })
    }
}

/// The client-first message: `gs2-header client-first-message-bare`.
#[derive(Debug, Clone)]
pub struct ClientFirst {
    pub user: String,
    pub nonce: String,
    gs2_header: String,
    bare: String,
}

/// Decodes a SCRAM `saslname` (`=2C` → `,`, `=3D` → `=`).
fn decode_saslname(s: &str) -> Result<String, ScramError> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(pos) = rest.find('=') {
        out.push_str(&rest[..pos]);
        let code = rest.get(pos + 1..pos + 3);
        match code {
            Some("2C") => out.push(','),
            Some("3D") => out.push('='),
            _ => return err("invalid escape in SCRAM user name"),
        }
        rest = &rest[pos + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

pub fn parse_client_first(payload: &[u8]) -> Result<ClientFirst, ScramError> {
    let text = std::str::from_utf8(payload).or_else(|_| err("payload is not UTF-8"))?;
    let mut parts = text.splitn(3, ',');
    let cbind = parts.next().unwrap_or_default();
    let authzid = parts.next();
    let bare = parts.next();
    let (Some(authzid), Some(bare)) = (authzid, bare) else {
        return err("Incorrect number of arguments for first SCRAM client message");
    };
    match cbind {
        "n" | "y" => {}
        c if c.starts_with("p=") => return err("Server does not support channel binding"),
        _ => return err("Incorrect SCRAM client message prefix"),
    }
    if !authzid.is_empty() && !authzid.starts_with("a=") {
        return err("Incorrect SCRAM authzid");
    }
    let mut user = None;
    let mut nonce = None;
    for attr in bare.split(',') {
        if let Some(u) = attr.strip_prefix("n=") {
            user = Some(decode_saslname(u)?);
        } else if let Some(r) = attr.strip_prefix("r=") {
            nonce = Some(r.to_string());
        } else if attr.starts_with("m=") {
            return err("SCRAM mandatory extensions are not supported");
        }
    }
    let (Some(user), Some(nonce)) = (user, nonce) else {
        return err("Invalid SCRAM client-first message");
    };
    if user.is_empty() || nonce.is_empty() {
        return err("Invalid SCRAM client-first message");
    }
    Ok(ClientFirst {
        user,
        nonce,
        gs2_header: format!("{cbind},{authzid},"),
        bare: bare.to_string(),
    })
}

/// A conversation after the server-first message went out.
#[derive(Debug, Clone)]
pub struct Conversation {
    pub mechanism: Mechanism,
    creds: Credentials,
    client_first: ClientFirst,
    server_first: String,
    nonce: String,
}

impl Conversation {
    /// Answers a client-first message with `r=<nonce>,s=<salt>,i=<iterations>`; the server's
    /// part of the nonce is `server_nonce` (random in production, fixed in tests).
    pub fn start(
        mechanism: Mechanism,
        client_first: ClientFirst,
        creds: Credentials,
        server_nonce: &str,
    ) -> (Conversation, String) {
        let nonce = format!("{}{server_nonce}", client_first.nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&creds.salt),
            creds.iteration_count
        );
        let conv = Conversation {
            mechanism,
            creds,
            client_first,
            server_first: server_first.clone(),
            nonce,
        };
        (conv, server_first)
    }

    /// A random server nonce (24 bytes, base64, as MongoDB's).
    pub fn random_nonce() -> String {
        B64.encode(random_bytes(24))
    }

    /// Checks the client-final message's proof; returns the server-final `v=<signature>`.
    pub fn finish(&self, payload: &[u8]) -> Result<String, ScramError> {
        let text = std::str::from_utf8(payload).or_else(|_| err("payload is not UTF-8"))?;
        let Some((without_proof, proof)) = text.rsplit_once(",p=") else {
            return err("Missing SCRAM client proof");
        };
        let mut cbind = None;
        let mut nonce = None;
        for attr in without_proof.split(',') {
            if let Some(c) = attr.strip_prefix("c=") {
                cbind = Some(c);
            } else if let Some(r) = attr.strip_prefix("r=") {
                nonce = Some(r);
            }
        }
        if cbind != Some(B64.encode(&self.client_first.gs2_header).as_str()) {
            return err("Unmatched SCRAM channel binding");
        }
        if nonce != Some(self.nonce.as_str()) {
            return err("Unmatched SCRAM nonce received from client in second step");
        }
        let proof = B64
            .decode(proof)
            .or_else(|_| err("SCRAM proof is not base64"))?;
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first.bare, self.server_first
        );
        let m = self.mechanism;
        let signature = m.hmac(&self.creds.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return err("SCRAM authentication failed, storedKey mismatch");
        }
        let client_key = xor(&proof, &signature);
        let computed = m.hash(&client_key);
        if !constant_time_eq(&computed, &self.creds.stored_key) {
            return err("SCRAM authentication failed, storedKey mismatch");
        }
        let server_signature = m.hmac(&self.creds.server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)))
    }
}

/// Encodes a SCRAM `saslname` (`,` → `=2C`, `=` → `=3D`).
fn encode_saslname(s: &str) -> String {
    s.replace('=', "=3D").replace(',', "=2C")
}

/// The client side of a conversation, after its client-first message went out.
#[derive(Debug, Clone)]
pub struct ClientConversation {
    mechanism: Mechanism,
    prepared: String,
    bare: String,
    nonce: String,
    server_signature: Option<Vec<u8>>,
}

impl ClientConversation {
    /// Starts a conversation as `user` with `password`; returns the client-first message.
    pub fn start(
        mechanism: Mechanism,
        user: &str,
        password: &str,
    ) -> Result<(ClientConversation, String), ScramError> {
        let prepared = mechanism.prepare_password(user, password)?;
        let nonce = B64.encode(random_bytes(24));
        let bare = format!("n={},r={nonce}", encode_saslname(user));
        let first = format!("n,,{bare}");
        let conv = ClientConversation {
            mechanism,
            prepared,
            bare,
            nonce,
            server_signature: None,
        };
        Ok((conv, first))
    }

    /// Answers the server-first message with the client-final message (the proof).
    pub fn proof(&mut self, server_first: &[u8]) -> Result<String, ScramError> {
        let text = std::str::from_utf8(server_first).or_else(|_| err("payload is not UTF-8"))?;
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for attr in text.split(',') {
            if let Some(r) = attr.strip_prefix("r=") {
                nonce = Some(r);
            } else if let Some(s) = attr.strip_prefix("s=") {
                salt = B64.decode(s).ok();
            } else if let Some(i) = attr.strip_prefix("i=") {
                iterations = i.parse::<u32>().ok().filter(|i| *i > 0);
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return err("invalid SCRAM server-first message");
        };
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return err("the server's nonce does not extend the client's");
        }
        let m = self.mechanism;
        let (client_key, creds) =
            Credentials::derive_with_client_key(m, self.prepared.as_bytes(), &salt, iterations);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.bare);
        let signature = m.hmac(&creds.stored_key, auth_message.as_bytes());
        let proof = xor(&client_key, &signature);
        self.server_signature = Some(m.hmac(&creds.server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)))
    }

    /// Checks the server-final message: the server proves it knows the password too.
    pub fn verify(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let text = std::str::from_utf8(server_final).or_else(|_| err("payload is not UTF-8"))?;
        let Some(v) = text.split(',').find_map(|a| a.strip_prefix("v=")) else {
            return err("the server did not send its signature");
        };
        let given = B64.decode(v).or_else(|_| err("signature is not base64"))?;
        match &self.server_signature {
            Some(expected) if constant_time_eq(expected, &given) => Ok(()),
            _ => err("the server's signature does not match"),
        }
    }
}

fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a whole conversation with the RFC's fixed nonces and returns the server-final.
    fn rfc_conversation(
        mech: Mechanism,
        password: &str,
        client_first: &str,
        server_nonce: &str,
        salt_b64: &str,
        expected_server_first: &str,
        client_final: &str,
    ) -> Result<String, ScramError> {
        let salt = B64.decode(salt_b64).unwrap();
        let creds = Credentials::derive(mech, password.as_bytes(), &salt, 4096);
        let first = parse_client_first(client_first.as_bytes())?;
        assert_eq!(first.user, "user");
        let (conv, server_first) = Conversation::start(mech, first, creds, server_nonce);
        assert_eq!(server_first, expected_server_first);
        conv.finish(client_final.as_bytes())
    }

    #[test]
    fn rfc5802_sha1_test_vector() {
        let v = rfc_conversation(
            Mechanism::Sha1,
            "pencil",
            "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
            "3rfcNHYJY1ZVvWVs7j",
            "QSXCR+Q6sek8bf92",
            "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
            "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
        );
        assert_eq!(v, Ok("v=rmF9pqV8S7suAoZWja4dJRkFsKQ=".to_string()));
    }

    #[test]
    fn rfc7677_sha256_test_vector() {
        let v = rfc_conversation(
            Mechanism::Sha256,
            "pencil",
            "n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
            "W22ZaJ0SNY7soEsUEjb6gQ==",
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        );
        assert_eq!(
            v,
            Ok("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_string())
        );
    }

    #[test]
    fn wrong_proof_and_wrong_nonce_fail() {
        let bad_proof = rfc_conversation(
            Mechanism::Sha256,
            "pencil",
            "n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
            "W22ZaJ0SNY7soEsUEjb6gQ==",
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=eHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        );
        assert!(bad_proof.is_err());
        let bad_nonce = rfc_conversation(
            Mechanism::Sha1,
            "pencil",
            "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
            "3rfcNHYJY1ZVvWVs7j",
            "QSXCR+Q6sek8bf92",
            "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
            "c=biws,r=fyko+d2lbbFgONRv9qkxdawLXXXX,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
        );
        assert!(bad_nonce.is_err());
        // A different password derives different keys, so the RFC's proof no longer verifies.
        let wrong_password = rfc_conversation(
            Mechanism::Sha1,
            "pencil!",
            "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
            "3rfcNHYJY1ZVvWVs7j",
            "QSXCR+Q6sek8bf92",
            "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
            "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
        );
        assert!(wrong_password.is_err());
    }

    #[test]
    fn mongodb_sha1_digest() {
        // hex(md5("user:mongo:pencil")), the string SCRAM-SHA-1 hashes for MongoDB users.
        assert_eq!(
            mongo_password_digest("user", "pencil"),
            "1c33006ec1ffd90f9cadcbcc0e118200"
        );
        assert_eq!(
            Mechanism::Sha1.prepare_password("user", "pencil").unwrap(),
            "1c33006ec1ffd90f9cadcbcc0e118200"
        );
        // SASLprep maps non-ASCII spaces to a space (RFC 4013 §2.1) for SCRAM-SHA-256.
        assert_eq!(
            Mechanism::Sha256
                .prepare_password("u", "a\u{00A0}b")
                .unwrap(),
            "a b"
        );
    }

    #[test]
    fn client_first_parsing() {
        let f = parse_client_first(b"n,,n=us=2Cer=3D,r=abc").unwrap();
        assert_eq!(f.user, "us,er=");
        assert_eq!(f.nonce, "abc");
        assert!(parse_client_first(b"p=tls-unique,,n=u,r=abc").is_err());
        assert!(parse_client_first(b"n,,n=u").is_err());
        assert!(parse_client_first(b"n,,r=abc").is_err());
        assert!(parse_client_first(b"x").is_err());
        assert!(parse_client_first(&[0xff, 0xfe]).is_err());
        assert!(parse_client_first(b"n,,n=a=ZZ,r=x").is_err());
    }

    #[test]
    fn client_and_server_agree_and_refuse_a_wrong_password() {
        for mech in Mechanism::ALL {
            for (server_password, ok) in [("key=,pw", true), ("other", false)] {
                let creds = Credentials::generate(mech, "__system", server_password, 4096).unwrap();
                let (mut client, first) =
                    ClientConversation::start(mech, "__system", "key=,pw").unwrap();
                let parsed = parse_client_first(first.as_bytes()).unwrap();
                assert_eq!(parsed.user, "__system");
                let (server, server_first) =
                    Conversation::start(mech, parsed, creds, &Conversation::random_nonce());
                let client_final = client.proof(server_first.as_bytes()).unwrap();
                match server.finish(client_final.as_bytes()) {
                    Ok(server_final) => {
                        assert!(ok, "{mech:?} accepted a wrong password");
                        client.verify(server_final.as_bytes()).unwrap();
                        assert!(client.verify(b"v=AAAA").is_err());
                    }
                    Err(_) => assert!(!ok, "{mech:?} refused the right password"),
                }
            }
        }
    }

    #[test]
    fn client_refuses_a_server_nonce_that_does_not_extend_its_own() {
        let (mut client, _) = ClientConversation::start(Mechanism::Sha256, "u", "p").unwrap();
        assert!(client.proof(b"r=abc,s=QSXCR+Q6sek8bf92,i=4096").is_err());
        assert!(client.proof(b"s=QSXCR+Q6sek8bf92,i=4096").is_err());
    }

    #[test]
    fn credentials_round_trip_through_bson() {
        let c = Credentials::generate(Mechanism::Sha256, "u", "p", 15000).unwrap();
        assert_eq!(c.salt.len(), 28);
        let d = c.to_document();
        assert_eq!(d.get_i32("iterationCount").unwrap(), 15000);
        assert_eq!(Credentials::from_document(&d), Some(c));
    }
}
