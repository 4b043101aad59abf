//! Internal authentication (`--keyFile`, `security.keyFile`): members of a set prove to each
//! other that they hold the same key by authenticating as MongoDB's `__system@local` user,
//! whose password is the key. The user exists only in memory, on members started with the key.

use super::scram::{Credentials, Mechanism, ScramError};
use std::path::Path;

pub const INTERNAL_USER: &str = "__system";
pub const INTERNAL_DB: &str = "local";

/// Whether `user@db` is the members' internal user.
pub fn is_internal_user(db: &str, user: &str) -> bool {
    db == INTERNAL_DB && user == INTERNAL_USER
}

/// The key's characters: MongoDB's keys are base64 text.
fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '+' || c == '/' || c == '='
}

/// Reads and checks a key file as mongod does: only its owner may read it; whitespace is
/// ignored; 6 to 1024 base64 characters.
pub fn read_key_file(path: &Path) -> Result<String, String> {
    let file = path.display();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta =
            std::fs::metadata(path).map_err(|e| format!("error getting file {file}: {e}"))?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(format!("permissions on {file} are too open"));
        }
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("error reading file {file}: {e}"))?;
    let key: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    if let Some(bad) = key.chars().find(|c| !is_key_char(*c)) {
        return Err(format!("invalid char in key file {file}: {bad}"));
    }
    if !(6..=1024).contains(&key.len()) {
        return Err(format!(
            "security key in {file} has length {}, must be between 6 and 1024 chars",
            key.len()
        ));
    }
    Ok(key)
}

/// The in-memory credentials of `__system@local` for each mechanism.
pub struct InternalKey {
    credentials: Vec<(Mechanism, Credentials)>,
}

impl InternalKey {
    pub fn new(key: &str) -> Result<InternalKey, ScramError> {
        let credentials = Mechanism::ALL
            .into_iter()
            .map(|m| {
                Credentials::generate(m, INTERNAL_USER, key, m.default_iterations()).map(|c| (m, c))
            })
            .collect::<Result<_, _>>()?;
        Ok(InternalKey { credentials })
    }

    /// The credentials a SCRAM conversation as `user@db` checks against, when that user is
    /// the internal one.
    pub fn credentials(&self, db: &str, user: &str, mech: Mechanism) -> Option<Credentials> {
        if !is_internal_user(db, user) {
            return None;
        }
        self.credentials
            .iter()
            .find(|(m, _)| *m == mech)
            .map(|(_, c)| c.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_file(contents: &str, mode: u32) -> (tempfile::TempDir, std::path::PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, path)
    }

    #[test]
    fn key_files_are_checked_as_mongod_checks_them() {
        let cases: &[(&str, u32, Result<&str, &str>)] = &[
            ("abc123+/=\n", 0o600, Ok("abc123+/=")),
            ("abc 123\r\n\tdef\n", 0o400, Ok("abc123def")),
            ("abc123", 0o644, Err("are too open")),
            ("abc123", 0o640, Err("are too open")),
            (
                "abc",
                0o600,
                Err("has length 3, must be between 6 and 1024 chars"),
            ),
            ("abc12-3", 0o600, Err("invalid char in key file")),
        ];
        for (contents, mode, want) in cases {
            let (_dir, path) = key_file(contents, *mode);
            match (read_key_file(&path), want) {
                (Ok(k), Ok(w)) => assert_eq!(k, *w),
                (Err(e), Err(w)) => assert!(e.contains(w), "{contents:?}: {e}"),
                (got, want) => panic!("{contents:?} {mode:o}: got {got:?}, want {want:?}"),
            }
        }
        let long = "a".repeat(1025);
        let (_dir, path) = key_file(&long, 0o600);
        assert!(read_key_file(&path)
            .unwrap_err()
            .contains("has length 1025"));
    }

    #[test]
    fn only_system_at_local_has_internal_credentials() {
        let k = InternalKey::new("secret123").unwrap();
        assert!(k
            .credentials("local", "__system", Mechanism::Sha256)
            .is_some());
        assert!(k
            .credentials("local", "__system", Mechanism::Sha1)
            .is_some());
        assert!(k
            .credentials("admin", "__system", Mechanism::Sha256)
            .is_none());
        assert!(k.credentials("local", "root", Mechanism::Sha256).is_none());
    }
}
