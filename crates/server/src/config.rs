//! Command-line options, named as `mongod`'s where they overlap.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// `--tlsMode`: which connections use TLS (as mongod's `net.tls.mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TlsMode {
    #[default]
    Disabled,
    /// Plaintext between servers; clients may use either.
    AllowTls,
    /// TLS between servers; clients may use either.
    PreferTls,
    /// Every connection uses TLS.
    RequireTls,
}

impl TlsMode {
    fn parse(s: &str) -> Result<TlsMode, String> {
        match s {
            "disabled" => Ok(TlsMode::Disabled),
            "allowTLS" => Ok(TlsMode::AllowTls),
            "preferTLS" => Ok(TlsMode::PreferTls),
            "requireTLS" => Ok(TlsMode::RequireTls),
            other => Err(format!(
                "Invalid value for tlsMode: {other} (expected disabled, allowTLS, preferTLS or requireTLS)"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TlsMode::Disabled => "disabled",
            TlsMode::AllowTls => "allowTLS",
            TlsMode::PreferTls => "preferTLS",
            TlsMode::RequireTls => "requireTLS",
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct TlsConfig {
    pub mode: TlsMode,
    /// PEM file holding the server's certificate chain and its private key.
    pub certificate_key_file: Option<PathBuf>,
    /// PEM file of the CAs that sign client certificates (clients must then present one,
    /// unless `allow_without_certificates`).
    pub ca_file: Option<PathBuf>,
    pub allow_without_certificates: bool,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub port: u16,
    pub bind_ip: Vec<String>,
    pub dbpath: PathBuf,
    pub max_conns: usize,
    /// `--auth` / `security.authorization: enabled`: clients must authenticate.
    pub auth: bool,
    /// `--tlsMode`, `--tlsCertificateKeyFile`, `--tlsCAFile`,
    /// `--tlsAllowConnectionsWithoutCertificates`.
    pub tls: TlsConfig,
    /// `--replSet NAME`: present as the primary of a one-member replica set, which is what
    /// drivers require before they use transactions and retryable writes.
    pub repl_set: Option<String>,
    /// `--oplogSizeMB` / `replication.oplogSizeMB`: the oplog's size bound.
    pub oplog_size_mb: i64,
    /// `--setParameter name=value`, as given.
    pub set_parameters: BTreeMap<String, String>,
    /// The arguments as given, for `getCmdLineOpts`.
    pub argv: Vec<String>,
    /// `--profile` / `operationProfiling.mode`: every database's initial profiling level.
    pub profile: i32,
    /// `--slowms` / `operationProfiling.slowOpThresholdMs` (default 100).
    pub slowms: i64,
    /// `--slowOpSampleRate` / `operationProfiling.slowOpSampleRate` (default 1.0).
    pub slow_op_sample_rate: f64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            port: 27017,
            bind_ip: vec!["127.0.0.1".to_string()],
            dbpath: PathBuf::from("./data"),
            max_conns: 1_000_000,
            auth: false,
            tls: TlsConfig::default(),
            repl_set: None,
            oplog_size_mb: nidus_engine::oplog::DEFAULT_OPLOG_SIZE_MB,
            set_parameters: BTreeMap::new(),
            argv: Vec::new(),
            profile: 0,
            slowms: 100,
            slow_op_sample_rate: 1.0,
        }
    }
}

const USAGE: &str = "usage: nidus [--port N] [--bind_ip a,b] [--bind_ip_all] [--dbpath DIR] [--config FILE] [--maxConns N] [--auth] [--replSet NAME] [--oplogSizeMB MB] [--tlsMode disabled|allowTLS|preferTLS|requireTLS] [--tlsCertificateKeyFile PEM] [--tlsCAFile PEM] [--tlsAllowConnectionsWithoutCertificates] [--profile 0|1|2] [--slowms MS] [--slowOpSampleRate R] [--setParameter name=value]...";

impl Config {
    pub fn from_args(args: Vec<String>) -> Result<Config, String> {
        let mut cfg = Config {
            argv: args.clone(),
            ..Config::default()
        };
        let mut it = args.into_iter().skip(1);
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
                _ => (arg.clone(), None),
            };
            let mut value = |name: &str| -> Result<String, String> {
                inline
                    .clone()
                    .or_else(|| it.next())
                    .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
            };
            match flag.as_str() {
                "--port" => {
                    cfg.port = value("--port")?
                        .parse()
                        .map_err(|e| format!("--port: {e}"))?
                }
                "--bind_ip" => {
                    cfg.bind_ip = value("--bind_ip")?
                        .split(',')
                        .map(|s| s.trim().to_string())
                        .collect()
                }
                "--bind_ip_all" => cfg.bind_ip = vec!["0.0.0.0".to_string()],
                "--dbpath" => cfg.dbpath = PathBuf::from(value("--dbpath")?),
                "--maxConns" => {
                    cfg.max_conns = value("--maxConns")?
                        .parse()
                        .map_err(|e| format!("--maxConns: {e}"))?
                }
                "--setParameter" => {
                    let v = value("--setParameter")?;
                    let (k, val) = v
                        .split_once('=')
                        .ok_or_else(|| format!("--setParameter expects name=value, got {v}"))?;
                    cfg.set_parameters.insert(k.to_string(), val.to_string());
                }
                "--auth" => cfg.auth = true,
                "--replSet" => cfg.repl_set = Some(value("--replSet")?).filter(|s| !s.is_empty()),
                "--oplogSizeMB" => {
                    cfg.oplog_size_mb = value("--oplogSizeMB")?
                        .parse::<i64>()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or("--oplogSizeMB expects a positive number of megabytes")?
                }
                "--tlsMode" => cfg.tls.mode = TlsMode::parse(&value("--tlsMode")?)?,
                "--tlsCertificateKeyFile" => {
                    cfg.tls.certificate_key_file =
                        Some(PathBuf::from(value("--tlsCertificateKeyFile")?))
                }
                "--tlsCAFile" => cfg.tls.ca_file = Some(PathBuf::from(value("--tlsCAFile")?)),
                "--tlsAllowConnectionsWithoutCertificates" => {
                    cfg.tls.allow_without_certificates = true
                }
                "--noauth" => cfg.auth = false,
                "--profile" => cfg.profile = parse_profile_mode(&value("--profile")?)?,
                "--slowms" => {
                    cfg.slowms = value("--slowms")?
                        .parse()
                        .map_err(|e| format!("--slowms: {e}"))?
                }
                "--slowOpSampleRate" => {
                    cfg.slow_op_sample_rate = parse_sample_rate(&value("--slowOpSampleRate")?)?
                }
                "--config" | "-f" => cfg.apply_config_file(&value("--config")?)?,
                "--help" | "-h" => return Err(USAGE.to_string()),
                other => return Err(format!("unrecognised option '{other}'\n{USAGE}")),
            }
        }
        if cfg.tls.mode != TlsMode::Disabled && cfg.tls.certificate_key_file.is_none() {
            return Err(
                "need tlsCertificateKeyFile or certificateSelector when TLS is enabled".to_string(),
            );
        }
        Ok(cfg)
    }

    /// Reads the subset of mongod's YAML config this server understands:
    /// `net.port`, `net.bindIp`, `storage.dbPath`, `security.authorization`,
    /// `setParameter.<name>`.
    fn apply_config_file(&mut self, path: &str) -> Result<(), String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("--config {path}: {e}"))?;
        let mut section = String::new();
        for raw in text.lines() {
            let line = raw.split('#').next().unwrap_or("").trim_end();
            if line.trim().is_empty() {
                continue;
            }
            let indented = line.starts_with(' ') || line.starts_with('\t');
            let Some((k, v)) = line.trim().split_once(':') else {
                return Err(format!("--config {path}: cannot parse line '{raw}'"));
            };
            let (k, v) = (k.trim(), v.trim().trim_matches('"').trim_matches('\''));
            if !indented {
                section = k.to_string();
                if v.is_empty() {
                    continue;
                }
            }
            match (section.as_str(), k) {
                ("net", "port") => self.port = v.parse().map_err(|e| format!("net.port: {e}"))?,
                ("net", "bindIp") => {
                    self.bind_ip = v.split(',').map(|s| s.trim().to_string()).collect()
                }
                ("net", "maxIncomingConnections") => {
                    self.max_conns = v
                        .parse()
                        .map_err(|e| format!("net.maxIncomingConnections: {e}"))?
                }
                ("storage", "dbPath") => self.dbpath = PathBuf::from(v),
                ("replication", "replSetName") => {
                    self.repl_set = Some(v.to_string()).filter(|s| !s.is_empty())
                }
                ("replication", "oplogSizeMB") => {
                    self.oplog_size_mb = v
                        .parse::<i64>()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or("replication.oplogSizeMB expects a positive number")?
                }
                ("security", "authorization") => {
                    self.auth = match v {
                        "enabled" => true,
                        "disabled" => false,
                        other => {
                            return Err(format!(
                            "security.authorization: expected enabled or disabled, got '{other}'"
                        ))
                        }
                    }
                }
                ("operationProfiling", "mode") => self.profile = parse_profile_mode(v)?,
                ("operationProfiling", "slowOpThresholdMs") => {
                    self.slowms = v
                        .parse()
                        .map_err(|e| format!("operationProfiling.slowOpThresholdMs: {e}"))?
                }
                ("operationProfiling", "slowOpSampleRate") => {
                    self.slow_op_sample_rate = parse_sample_rate(v)?
                }
                ("setParameter", name) if indented => {
                    self.set_parameters.insert(name.to_string(), v.to_string());
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// `--profile 0|1|2` or `operationProfiling.mode: off|slowOp|all`.
fn parse_profile_mode(v: &str) -> Result<i32, String> {
    match v {
        "0" | "off" => Ok(0),
        "1" | "slowOp" => Ok(1),
        "2" | "all" => Ok(2),
        other => Err(format!(
            "profile: expected 0, 1, 2, off, slowOp or all, got '{other}'"
        )),
    }
}

fn parse_sample_rate(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!(
            "slowOpSampleRate must be between 0.0 and 1.0 inclusive, got '{v}'"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        std::iter::once("nidus")
            .chain(a.iter().copied())
            .map(String::from)
            .collect()
    }

    #[test]
    fn parses_mongod_flags() {
        let c = Config::from_args(args(&[
            "--port",
            "28000",
            "--dbpath=/tmp/x",
            "--setParameter",
            "enableTestCommands=1",
        ]))
        .unwrap();
        assert_eq!(c.port, 28000);
        assert_eq!(c.dbpath, PathBuf::from("/tmp/x"));
        assert_eq!(
            c.set_parameters
                .get("enableTestCommands")
                .map(String::as_str),
            Some("1")
        );
        assert!(Config::from_args(args(&["--bogus"])).is_err());
        assert!(!c.auth);
        assert!(Config::from_args(args(&["--auth"])).unwrap().auth);
        let t = Config::from_args(args(&[
            "--tlsMode",
            "requireTLS",
            "--tlsCertificateKeyFile=/k.pem",
        ]))
        .unwrap();
        assert_eq!(t.tls.mode, TlsMode::RequireTls);
        assert!(Config::from_args(args(&["--tlsMode", "preferTLS"])).is_err());
        assert!(Config::from_args(args(&["--tlsMode", "sometimes"])).is_err());
    }

    #[test]
    fn reads_yaml_config() {
        let dir = std::env::temp_dir().join(format!("nidus-cfg-{}", std::process::id()));
        std::fs::write(&dir, "net:\n  port: 29000\n  bindIp: 127.0.0.1\nstorage:\n  dbPath: /tmp/d # comment\nsecurity:\n  authorization: enabled\nsetParameter:\n  enableTestCommands: 1\n").unwrap();
        let c = Config::from_args(args(&["--config", dir.to_str().unwrap()])).unwrap();
        std::fs::remove_file(&dir).ok();
        assert_eq!(c.port, 29000);
        assert!(c.auth);
        assert_eq!(c.dbpath, PathBuf::from("/tmp/d"));
        assert_eq!(
            c.set_parameters
                .get("enableTestCommands")
                .map(String::as_str),
            Some("1")
        );
    }
}
