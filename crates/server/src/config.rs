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
    /// `--keyFile` / `security.keyFile`: members authenticate to each other with this key
    /// (and clients must authenticate, as `--auth`).
    pub key_file: Option<PathBuf>,
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
    /// `--logpath` / `systemLog.path`: log to this file instead of stdout.
    pub log_path: Option<PathBuf>,
    /// `--logappend` / `systemLog.logAppend`: append to an existing log file (otherwise it
    /// is renamed to `<path>.<timestamp>` first).
    pub log_append: bool,
    /// `--fork` / `processManagement.fork`: run in the background once ready (needs a log
    /// file, as mongod).
    pub fork: bool,
    /// `--cacheSizeGB` (also mongod's `--wiredTigerCacheSizeGB`) / `storage.*.cacheSizeGB`:
    /// the storage engine's block cache (default 256 MiB).
    pub cache_size_gb: Option<f64>,
    /// The options given, by their config-file path (`net.port`, ...), for `getCmdLineOpts`.
    pub given: BTreeMap<String, bson::Bson>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            port: 27017,
            bind_ip: vec!["127.0.0.1".to_string()],
            dbpath: PathBuf::from("./data"),
            max_conns: 1_000_000,
            auth: false,
            key_file: None,
            tls: TlsConfig::default(),
            repl_set: None,
            oplog_size_mb: nidus_engine::oplog::DEFAULT_OPLOG_SIZE_MB,
            set_parameters: BTreeMap::new(),
            argv: Vec::new(),
            profile: 0,
            slowms: 100,
            slow_op_sample_rate: 1.0,
            log_path: None,
            log_append: false,
            fork: false,
            cache_size_gb: None,
            given: BTreeMap::new(),
        }
    }
}

const USAGE: &str = "usage: nidus [--port N] [--bind_ip a,b] [--bind_ip_all] [--dbpath DIR] [--config FILE] [--maxConns N] [--auth] [--keyFile FILE] [--replSet NAME] [--oplogSizeMB MB] [--tlsMode disabled|allowTLS|preferTLS|requireTLS] [--tlsCertificateKeyFile PEM] [--tlsCAFile PEM] [--tlsAllowConnectionsWithoutCertificates] [--profile 0|1|2] [--slowms MS] [--slowOpSampleRate R] [--logpath FILE] [--logappend] [--fork] [--cacheSizeGB GB] [--setParameter name=value]... | --version";

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
                "--keyFile" => cfg.key_file = Some(PathBuf::from(value("--keyFile")?)),
                "--clusterAuthMode" => check_cluster_auth_mode(&value("--clusterAuthMode")?)?,
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
                "--logpath" => cfg.log_path = Some(PathBuf::from(value("--logpath")?)),
                "--logappend" => cfg.log_append = true,
                "--fork" => cfg.fork = true,
                "--cacheSizeGB" | "--wiredTigerCacheSizeGB" => {
                    cfg.cache_size_gb = Some(parse_cache_size(&value(&flag)?)?)
                }
                "--config" | "-f" => cfg.apply_config_file(&value("--config")?)?,
                "--help" | "-h" => return Err(USAGE.to_string()),
                other => return Err(format!("unrecognised option '{other}'\n{USAGE}")),
            }
        }
        if cfg.fork && cfg.log_path.is_none() {
            return Err("--fork has to be used with --logpath or --syslog".to_string());
        }
        cfg.given = cfg.parsed_options();
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
                ("security", "keyFile") => self.key_file = Some(PathBuf::from(v)),
                ("security", "clusterAuthMode") => check_cluster_auth_mode(v)?,
                ("operationProfiling", "mode") => self.profile = parse_profile_mode(v)?,
                ("operationProfiling", "slowOpThresholdMs") => {
                    self.slowms = v
                        .parse()
                        .map_err(|e| format!("operationProfiling.slowOpThresholdMs: {e}"))?
                }
                ("operationProfiling", "slowOpSampleRate") => {
                    self.slow_op_sample_rate = parse_sample_rate(v)?
                }
                ("systemLog", "path") => self.log_path = Some(PathBuf::from(v)),
                ("systemLog", "logAppend") => self.log_append = v == "true",
                ("systemLog", "destination") if v != "file" && v != "syslog" => {
                    return Err(format!("systemLog.destination: expected file, got '{v}'"))
                }
                ("processManagement", "fork") => self.fork = v == "true",
                // mongod's `storage.wiredTiger.engineConfig.cacheSizeGB` lands here too.
                ("storage", "cacheSizeGB") => self.cache_size_gb = Some(parse_cache_size(v)?),
                ("setParameter", name) if indented => {
                    self.set_parameters.insert(name.to_string(), v.to_string());
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl Config {
    /// The options in effect that differ from the defaults, by their config-file path, as
    /// mongod's `getCmdLineOpts` `parsed` lists them.
    fn parsed_options(&self) -> BTreeMap<String, bson::Bson> {
        use bson::Bson;
        let d = Config::default();
        let mut out = BTreeMap::new();
        let mut put = |k: &str, v: Bson| {
            out.insert(k.to_string(), v);
        };
        put("net.port", Bson::Int32(self.port as i32));
        put("net.bindIp", Bson::String(self.bind_ip.join(",")));
        put(
            "storage.dbPath",
            Bson::String(self.dbpath.display().to_string()),
        );
        if self.max_conns != d.max_conns {
            put(
                "net.maxIncomingConnections",
                Bson::Int32(self.max_conns.min(i32::MAX as usize) as i32),
            );
        }
        if self.auth {
            put("security.authorization", Bson::String("enabled".into()));
        }
        if let Some(f) = &self.key_file {
            put("security.keyFile", Bson::String(f.display().to_string()));
        }
        if let Some(rs) = &self.repl_set {
            put("replication.replSet", Bson::String(rs.clone()));
        }
        if self.profile != d.profile {
            let mode = ["off", "slowOp", "all"][self.profile.clamp(0, 2) as usize];
            put("operationProfiling.mode", Bson::String(mode.into()));
        }
        if self.slowms != d.slowms {
            put(
                "operationProfiling.slowOpThresholdMs",
                nidus_common::number(self.slowms),
            );
        }
        if self.slow_op_sample_rate != d.slow_op_sample_rate {
            put(
                "operationProfiling.slowOpSampleRate",
                Bson::Double(self.slow_op_sample_rate),
            );
        }
        if let Some(p) = &self.log_path {
            put("systemLog.destination", Bson::String("file".into()));
            put("systemLog.path", Bson::String(p.display().to_string()));
            if self.log_append {
                put("systemLog.logAppend", Bson::Boolean(true));
            }
        }
        if self.fork {
            put("processManagement.fork", Bson::Boolean(true));
        }
        if let Some(gb) = self.cache_size_gb {
            put("storage.nidus.engineConfig.cacheSizeGB", Bson::Double(gb));
        }
        if self.tls.mode != TlsMode::Disabled {
            put("net.tls.mode", Bson::String(self.tls.mode.name().into()));
            if let Some(f) = &self.tls.certificate_key_file {
                put(
                    "net.tls.certificateKeyFile",
                    Bson::String(f.display().to_string()),
                );
            }
            if let Some(f) = &self.tls.ca_file {
                put("net.tls.CAFile", Bson::String(f.display().to_string()));
            }
            if self.tls.allow_without_certificates {
                put(
                    "net.tls.allowConnectionsWithoutCertificates",
                    Bson::Boolean(true),
                );
            }
        }
        for (k, v) in &self.set_parameters {
            put(&format!("setParameter.{k}"), Bson::String(v.clone()));
        }
        out
    }

    /// The block cache size in bytes: `--cacheSizeGB`, else WiredTiger's default, the larger
    /// of 50% of (memory − 1 GiB) and 256 MiB, where memory is the machine's or the cgroup's
    /// limit if lower (as mongod sizes its cache in a container). The default is read once
    /// per process, so `serverStatus` reports the size the cache was opened with.
    pub fn cache_bytes(&self) -> usize {
        static DEFAULT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        match self.cache_size_gb {
            Some(gb) => (gb * (1u64 << 30) as f64) as usize,
            None => *DEFAULT.get_or_init(|| default_cache_bytes(memory_limit_bytes())),
        }
    }
}

/// WiredTiger's default cache for `memory` bytes (256 MiB when memory is unknown).
pub fn default_cache_bytes(memory: Option<u64>) -> usize {
    const FLOOR: u64 = 256 << 20;
    let half = memory.map_or(0, |m| m.saturating_sub(1 << 30) / 2);
    usize::try_from(half.max(FLOOR)).unwrap_or(usize::MAX)
}

/// The machine's memory (`/proc/meminfo`'s MemTotal).
pub fn memory_total_bytes() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    })
}

/// The memory this process may use: the machine's, or the cgroup's limit (v2 `memory.max`,
/// v1 `memory.limit_in_bytes`) when that is lower.
pub fn memory_limit_bytes() -> Option<u64> {
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .filter_map(|p| std::fs::read_to_string(p).ok())
    .find_map(|s| s.trim().parse::<u64>().ok());
    match (memory_total_bytes(), cgroup) {
        (Some(t), Some(c)) => Some(t.min(c)),
        (t, c) => t.or(c),
    }
}

/// `--cacheSizeGB`: a positive number of GiB (fractions allowed, as mongod's).
/// Members authenticate to each other with the key file only (`keyFile`, the default);
/// x509 membership certificates are not supported.
fn check_cluster_auth_mode(v: &str) -> Result<(), String> {
    match v {
        "keyFile" => Ok(()),
        "sendKeyFile" | "sendX509" | "x509" => Err(format!(
            "clusterAuthMode {v} is not supported; members authenticate with --keyFile"
        )),
        other => Err(format!("Bad value for clusterAuthMode: {other}")),
    }
}

fn parse_cache_size(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(gb) if gb > 0.0 && gb <= 10_000.0 => Ok(gb),
        _ => Err(format!(
            "cacheSizeGB must be a number greater than 0 and at most 10000, got '{v}'"
        )),
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

    #[test]
    fn default_cache_is_wiredtigers() {
        let gib = 1u64 << 30;
        assert_eq!(default_cache_bytes(None), 256 << 20);
        assert_eq!(default_cache_bytes(Some(gib)), 256 << 20);
        assert_eq!(default_cache_bytes(Some(gib + (256 << 20))), 256 << 20);
        assert_eq!(default_cache_bytes(Some(2 * gib)), 512 << 20);
        assert_eq!(default_cache_bytes(Some(24 * gib)), (23 * gib / 2) as usize);
    }

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
