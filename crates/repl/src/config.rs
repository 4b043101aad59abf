//! The replica set configuration (`rs.conf()`): members and settings, parsed and validated
//! as MongoDB does for `replSetInitiate`, and written back in MongoDB's shape.

use bson::{doc, oid::ObjectId, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_doc::compare::type_name;

/// MongoDB's limits on a configuration.
pub const MAX_MEMBERS: usize = 50;
pub const MAX_VOTING_MEMBERS: usize = 7;
/// The member field MongoDB's `replSetGetConfig` leaves out unless asked
/// (`$_internalIncludeNewlyAdded`); `local.system.replset` keeps it.
pub const NEWLY_ADDED: &str = "newlyAdded";

#[derive(Debug, Clone, PartialEq)]
pub struct MemberConfig {
    pub id: i64,
    pub host: String,
    pub priority: f64,
    pub votes: i32,
    pub hidden: bool,
    pub secondary_delay_secs: i64,
    pub build_indexes: bool,
    pub tags: Document,
    /// MongoDB's `newlyAdded`: a voting member added by `replSetReconfig` that has not yet
    /// reported a state past initial sync. Until the primary's automatic reconfiguration
    /// clears it, the member neither votes nor counts towards a majority (here: a Raft
    /// learner) and has an effective priority of 0.
    pub newly_added: bool,
}

impl MemberConfig {
    /// The member's Raft node id (Raft reserves 0 for "none"; MongoDB's `_id` may be 0).
    pub fn raft_id(&self) -> u64 {
        self.id as u64 + 1
    }

    /// Votes in elections and counts towards majorities: MongoDB's `isVoter`.
    pub fn is_voter(&self) -> bool {
        self.votes > 0 && !self.newly_added
    }

    /// Priority 0 members never become primary.
    pub fn electable(&self) -> bool {
        self.priority > 0.0 && self.is_voter()
    }

    /// Raft's election priority: MongoDB priorities are 0..=1000 with fractions; scaled so
    /// that the order is kept. A newly added member's effective priority is 0.
    pub fn raft_priority(&self) -> i64 {
        if self.newly_added {
            return 0;
        }
        (self.priority * 1000.0).round() as i64
    }

    fn to_document(&self) -> Document {
        let mut d = doc! {
            "_id": self.id as i32,
            "host": &self.host,
            "arbiterOnly": false,
            "buildIndexes": self.build_indexes,
            "hidden": self.hidden,
            "priority": self.priority,
            "tags": self.tags.clone(),
            "secondaryDelaySecs": self.secondary_delay_secs,
            "votes": self.votes,
        };
        if self.newly_added {
            d.insert(NEWLY_ADDED, true);
        }
        d
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub chaining_allowed: bool,
    pub heartbeat_interval_millis: i64,
    pub heartbeat_timeout_secs: i64,
    pub election_timeout_millis: i64,
    pub catch_up_timeout_millis: i64,
    pub catch_up_takeover_delay_millis: i64,
    pub replica_set_id: ObjectId,
    /// `getLastErrorModes`: the custom write concern modes, in the order given.
    pub write_modes: Vec<WriteMode>,
}

/// A custom write concern mode (`settings.getLastErrorModes.<name>`): a write satisfies it
/// once, for each constraint, the members holding it carry at least that many distinct
/// values of the tag (MongoDB's `ReplSetTagPattern`).
#[derive(Debug, Clone, PartialEq)]
pub struct WriteMode {
    pub name: String,
    /// (tag key, minimum number of distinct values), one per key (the largest count given).
    pub constraints: Vec<(String, i32)>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            chaining_allowed: true,
            heartbeat_interval_millis: 2000,
            heartbeat_timeout_secs: 10,
            election_timeout_millis: 10000,
            catch_up_timeout_millis: -1,
            catch_up_takeover_delay_millis: 30000,
            replica_set_id: ObjectId::new(),
            write_modes: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReplSetConfig {
    pub set_name: String,
    pub version: i64,
    pub term: i64,
    pub members: Vec<MemberConfig>,
    pub settings: Settings,
    pub write_concern_majority_journal_default: bool,
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::InvalidReplicaSetConfig, msg)
}

fn number(v: &Bson) -> Option<f64> {
    match v {
        Bson::Int32(n) => Some(*n as f64),
        Bson::Int64(n) => Some(*n as f64),
        Bson::Double(f) => Some(*f),
        _ => None,
    }
}

fn int_field(d: &Document, field: &str, ctx: &str) -> Result<Option<i64>> {
    match d.get(field) {
        None => Ok(None),
        Some(v) => match number(v) {
            Some(f) if f.fract() == 0.0 => Ok(Some(f as i64)),
            _ => Err(Error::type_mismatch(format!(
                "Expected field \"{field}\" in {ctx} to be a number, found {}",
                nidus_common_type(v)
            ))),
        },
    }
}

fn bool_field(d: &Document, field: &str, default: bool) -> Result<bool> {
    match d.get(field) {
        None => Ok(default),
        Some(Bson::Boolean(b)) => Ok(*b),
        Some(v) => match number(v) {
            Some(f) => Ok(f != 0.0),
            None => Err(Error::type_mismatch(format!(
                "Expected boolean for field \"{field}\", found {}",
                nidus_common_type(v)
            ))),
        },
    }
}

fn nidus_common_type(v: &Bson) -> &'static str {
    match v {
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Boolean(_) => "bool",
        Bson::Null => "null",
        _ => "a value of another type",
    }
}

impl ReplSetConfig {
    /// A configuration of this member alone (`replSetInitiate` without a config).
    pub fn single(set_name: &str, me: &str) -> ReplSetConfig {
        ReplSetConfig {
            set_name: set_name.to_string(),
            version: 1,
            term: 0,
            members: vec![MemberConfig {
                id: 0,
                host: me.to_string(),
                priority: 1.0,
                votes: 1,
                hidden: false,
                secondary_delay_secs: 0,
                build_indexes: true,
                tags: Document::new(),
                newly_added: false,
            }],
            settings: Settings::default(),
            write_concern_majority_journal_default: true,
        }
    }

    /// Parses and validates a configuration document as `replSetInitiate` receives it.
    pub fn parse(d: &Document) -> Result<ReplSetConfig> {
        let set_name = match d.get("_id") {
            Some(Bson::String(s)) if !s.is_empty() => s.clone(),
            Some(Bson::String(_)) => {
                return Err(invalid("Replica set configuration _id must not be empty"))
            }
            Some(v) => {
                return Err(Error::type_mismatch(format!(
                    "Expected field \"_id\" in replica set configuration to be a string, found {}",
                    nidus_common_type(v)
                )))
            }
            None => {
                return Err(Error::new(
                    ErrorCode::NoSuchKey,
                    "Missing expected field \"_id\"",
                ))
            }
        };
        let version = int_field(d, "version", "replica set configuration")?.unwrap_or(1);
        if version < 1 {
            return Err(invalid(format!(
                "version field value of {version} is out of range"
            )));
        }
        let term = int_field(d, "term", "replica set configuration")?.unwrap_or(0);
        let members = match d.get("members") {
            Some(Bson::Array(a)) => a,
            Some(v) => {
                return Err(Error::type_mismatch(format!(
                "Expected field \"members\" in replica set configuration to be an array, found {}",
                nidus_common_type(v)
            )))
            }
            None => {
                return Err(Error::new(
                    ErrorCode::NoSuchKey,
                    "Missing expected field \"members\"",
                ))
            }
        };
        let mut parsed = Vec::new();
        for (i, m) in members.iter().enumerate() {
            let Bson::Document(m) = m else {
                return Err(Error::type_mismatch(format!(
                    "Expected type of members.{i} in replica set configuration to be an object"
                )));
            };
            parsed.push(parse_member(m)?);
        }
        let settings = parse_settings(d.get_document("settings").ok())?;
        // MongoDB's `convertToTagPatternMap`: every key a mode constrains is some member's.
        for mode in &settings.write_modes {
            for (key, _) in &mode.constraints {
                if !parsed.iter().any(|m| m.tags.contains_key(key)) {
                    return Err(Error::new(
                        ErrorCode::NoSuchKey,
                        format!("No replica set tag key {key} in config"),
                    ));
                }
            }
        }
        let config = ReplSetConfig {
            set_name,
            version,
            term,
            members: parsed,
            settings,
            write_concern_majority_journal_default: bool_field(
                d,
                "writeConcernMajorityJournalDefault",
                true,
            )?,
        };
        config.validate()?;
        Ok(config)
    }

    /// MongoDB's `ReplSetConfig::validate` rules this implementation supports.
    pub fn validate(&self) -> Result<()> {
        if self.members.is_empty() {
            return Err(invalid(
                "Replica set configuration must contain at least one non-arbiter member with priority > 0",
            ));
        }
        if self.members.len() > MAX_MEMBERS {
            return Err(invalid(format!(
                "Replica set configuration contains {} members, but must have at most {MAX_MEMBERS}",
                self.members.len()
            )));
        }
        for (i, a) in self.members.iter().enumerate() {
            for (j, b) in self.members.iter().enumerate().skip(i + 1) {
                if a.id == b.id {
                    return Err(invalid(format!(
                        "Found two member configurations with same _id field, members.{i}._id == members.{j}._id == {}",
                        a.id
                    )));
                }
                if a.host == b.host {
                    return Err(invalid(format!(
                        "Found two member configurations with same host field, members.{i}.host == members.{j}.host == {}",
                        a.host
                    )));
                }
            }
        }
        let voters = self.members.iter().filter(|m| m.votes > 0).count();
        if voters > MAX_VOTING_MEMBERS {
            return Err(invalid(format!(
                "Replica set configuration contains {voters} voting members, but must be at least 1 and no more than {MAX_VOTING_MEMBERS}"
            )));
        }
        if voters == 0 || !self.members.iter().any(MemberConfig::electable) {
            return Err(invalid(
                "Replica set configuration must contain at least one non-arbiter member with priority > 0",
            ));
        }
        if self.settings.election_timeout_millis <= 0 {
            return Err(Error::bad_value(
                "electionTimeoutMillis field value must be positive",
            ));
        }
        if self.settings.heartbeat_interval_millis <= 0 {
            return Err(Error::bad_value(
                "heartbeatIntervalMillis field value must be positive",
            ));
        }
        Ok(())
    }

    /// The custom write concern mode `name` (`w: "<name>"`), or MongoDB's
    /// UnknownReplWriteConcern.
    pub fn write_mode(&self, name: &str) -> Result<&WriteMode> {
        self.settings
            .write_modes
            .iter()
            .find(|m| m.name == name)
            .ok_or_else(|| unknown_write_mode(name))
    }

    /// Whether the members `holds` answers true for (by Raft id) satisfy `mode`: for each
    /// constraint, as many distinct values of its tag among them as it asks for.
    pub fn satisfies(&self, mode: &WriteMode, holds: impl Fn(u64) -> bool) -> bool {
        let holders: Vec<&MemberConfig> =
            self.members.iter().filter(|m| holds(m.raft_id())).collect();
        mode.constraints.iter().all(|(key, min)| {
            let mut values: Vec<&str> = holders
                .iter()
                .filter_map(|m| m.tags.get_str(key).ok())
                .collect();
            values.sort_unstable();
            values.dedup();
            values.len() >= usize::try_from(*min).unwrap_or(usize::MAX)
        })
    }

    pub fn member_by_raft_id(&self, id: u64) -> Option<&MemberConfig> {
        self.members.iter().find(|m| m.raft_id() == id)
    }

    pub fn member_by_host(&self, host: &str) -> Option<&MemberConfig> {
        self.members.iter().find(|m| m.host == host)
    }

    /// Members that vote (MongoDB's `votingMembersCount`).
    pub fn voters(&self) -> usize {
        self.members.iter().filter(|m| m.is_voter()).count()
    }

    /// Voting members needed for a majority (`w: "majority"`).
    pub fn majority(&self) -> usize {
        self.voters() / 2 + 1
    }

    /// MongoDB's marking of a reconfiguration's new voting members (by `_id`) as newly
    /// added, keeping the mark of members that still have it under `old`. A member that ends
    /// up with `votes: 0` has none.
    pub fn mark_newly_added(&mut self, old: &ReplSetConfig) {
        for m in &mut self.members {
            let before = old.members.iter().find(|o| o.id == m.id);
            m.newly_added = m.votes > 0 && before.is_none_or(|o| o.newly_added);
        }
    }

    /// What `replSetGetConfig` returns and `local.system.replset` holds.
    pub fn to_document(&self) -> Document {
        let s = &self.settings;
        doc! {
            "_id": &self.set_name,
            "version": self.version as i32,
            "term": self.term as i32,
            "members": self.members.iter().map(|m| Bson::Document(m.to_document())).collect::<Vec<_>>(),
            "protocolVersion": 1i64,
            "writeConcernMajorityJournalDefault": self.write_concern_majority_journal_default,
            "settings": {
                "chainingAllowed": s.chaining_allowed,
                "heartbeatIntervalMillis": s.heartbeat_interval_millis as i32,
                "heartbeatTimeoutSecs": s.heartbeat_timeout_secs as i32,
                "electionTimeoutMillis": s.election_timeout_millis as i32,
                "catchUpTimeoutMillis": s.catch_up_timeout_millis as i32,
                "catchUpTakeoverDelayMillis": s.catch_up_takeover_delay_millis as i32,
                "getLastErrorModes": s.write_modes.iter().map(|m| {
                    let constraints: Document = m
                        .constraints
                        .iter()
                        .map(|(k, n)| (k.clone(), Bson::Int32(*n)))
                        .collect();
                    (m.name.clone(), Bson::Document(constraints))
                }).collect::<Document>(),
                "getLastErrorDefaults": { "w": 1, "wtimeout": 0 },
                "replicaSetId": s.replica_set_id,
            },
        }
    }

    /// Reads back what [`to_document`](Self::to_document) wrote.
    pub fn from_stored(d: &Document) -> Result<ReplSetConfig> {
        let mut c = ReplSetConfig::parse(d)?;
        if let Ok(id) = d
            .get_document("settings")
            .and_then(|s| s.get_object_id("replicaSetId"))
        {
            c.settings.replica_set_id = id;
        }
        Ok(c)
    }
}

fn parse_member(m: &Document) -> Result<MemberConfig> {
    let ctx = "replica set member config";
    let id = int_field(m, "_id", ctx)?
        .ok_or_else(|| Error::new(ErrorCode::NoSuchKey, "Missing expected field \"_id\""))?;
    if !(0..=255).contains(&id) {
        return Err(Error::bad_value(format!(
            "_id field value of {id} is out of range."
        )));
    }
    let host = match m.get("host") {
        Some(Bson::String(h)) if !h.is_empty() => h.clone(),
        Some(Bson::String(_)) => return Err(invalid("Empty host field")),
        Some(v) => {
            return Err(Error::type_mismatch(format!(
                "Expected field \"host\" in {ctx} to be a string, found {}",
                nidus_common_type(v)
            )))
        }
        None => {
            return Err(Error::new(
                ErrorCode::NoSuchKey,
                "Missing expected field \"host\"",
            ))
        }
    };
    let host = if host.contains(':') {
        host
    } else {
        format!("{host}:27017")
    };
    if bool_field(m, "arbiterOnly", false)? {
        return Err(invalid(format!(
            "Arbiters are not supported; member {host} must hold data"
        )));
    }
    let priority = match m.get("priority") {
        None => 1.0,
        Some(v) => number(v).ok_or_else(|| {
            Error::type_mismatch(format!(
                "Expected field \"priority\" in {ctx} to be a number"
            ))
        })?,
    };
    if !(0.0..=1000.0).contains(&priority) {
        return Err(Error::bad_value(format!(
            "priority field value of {priority} is out of range"
        )));
    }
    let votes = int_field(m, "votes", ctx)?.unwrap_or(1);
    if votes != 0 && votes != 1 {
        return Err(Error::bad_value(format!(
            "votes field value is {votes} but must be 0 or 1"
        )));
    }
    let hidden = bool_field(m, "hidden", false)?;
    let secondary_delay_secs = int_field(m, "secondaryDelaySecs", ctx)?.unwrap_or(0);
    if secondary_delay_secs < 0 {
        return Err(Error::bad_value(format!(
            "secondaryDelaySecs field value of {secondary_delay_secs} is out of range"
        )));
    }
    if priority != 0.0 && votes == 0 {
        return Err(invalid(format!(
            "priority must be 0 when non-voting (votes:0); member {host} has priority {priority}"
        )));
    }
    if priority != 0.0 && hidden {
        return Err(invalid(format!(
            "priority must be 0 when hidden=true; member {host} has priority {priority}"
        )));
    }
    if priority != 0.0 && secondary_delay_secs > 0 {
        return Err(invalid(format!(
            "priority must be 0 when secondaryDelaySecs is used; member {host} has priority {priority}"
        )));
    }
    let build_indexes = bool_field(m, "buildIndexes", true)?;
    let newly_added = bool_field(m, NEWLY_ADDED, false)?;
    if !build_indexes && priority != 0.0 {
        return Err(invalid("priority must be 0 when buildIndexes=false"));
    }
    Ok(MemberConfig {
        id,
        host,
        priority,
        votes: votes as i32,
        hidden,
        secondary_delay_secs,
        build_indexes,
        tags: parse_tags(m)?,
        newly_added,
    })
}

/// MongoDB's UnknownReplWriteConcern for a mode no configuration defines.
pub fn unknown_write_mode(name: &str) -> Error {
    Error::new(
        ErrorCode::UnknownReplWriteConcern,
        format!("No write concern mode named '{name}' found in replica set configuration"),
    )
}

/// A member's `tags`: string values only (MongoDB's `MemberConfig`).
fn parse_tags(m: &Document) -> Result<Document> {
    let tags = match m.get("tags") {
        None => return Ok(Document::new()),
        Some(Bson::Document(t)) => t,
        Some(v) => {
            return Err(Error::type_mismatch(format!(
                "BSON field 'MemberConfig.tags' is the wrong type '{}', expected type 'object'",
                type_name(v)
            )))
        }
    };
    for (k, v) in tags {
        if !matches!(v, Bson::String(_)) {
            return Err(Error::type_mismatch(format!(
                "tags.{k} field has non-string value of type {}",
                type_name(v)
            )));
        }
    }
    Ok(tags.clone())
}

/// `settings.getLastErrorModes` as MongoDB's `ReplSetWriteConcernModeDefinitions` parses it.
fn parse_write_modes(v: &Bson) -> Result<Vec<WriteMode>> {
    const FIELD: &str = "getLastErrorModes";
    let Bson::Document(modes) = v else {
        return Err(Error::type_mismatch(format!(
            "Expected {FIELD} to be an Object, it actually had type {}",
            type_name(v)
        )));
    };
    let mut out: Vec<WriteMode> = Vec::new();
    for (raw_name, def) in modes {
        let name = nidus_common::repeated::original_name(raw_name);
        if out.iter().any(|m| m.name == name) {
            return Err(Error::new(
                ErrorCode::Location(51001),
                format!("{FIELD} contains multiple fields named {name}"),
            ));
        }
        let Bson::Document(def) = def else {
            return Err(Error::type_mismatch(format!(
                "Expected {FIELD}.{name} to be an Object, not {}",
                type_name(def)
            )));
        };
        let mut constraints: Vec<(String, i32)> = Vec::new();
        for (raw_key, count) in def {
            let key = nidus_common::repeated::original_name(raw_key);
            let Some(n) = number(count) else {
                return Err(Error::type_mismatch(format!(
                    "Expected {FIELD}.{name}.{key} to be a number, not {}",
                    type_name(count)
                )));
            };
            // `numberInt()`: doubles truncate toward zero, saturating at the int32 range.
            let min = n.clamp(i32::MIN as f64, i32::MAX as f64) as i32;
            if min <= 0 {
                return Err(Error::bad_value(format!(
                    "Value of {FIELD}.{name}.{key} must be positive, but found {min}"
                )));
            }
            match constraints.iter_mut().find(|(k, _)| k == key) {
                Some((_, m)) => *m = (*m).max(min),
                None => constraints.push((key.to_string(), min)),
            }
        }
        out.push(WriteMode {
            name: name.to_string(),
            constraints,
        });
    }
    Ok(out)
}

fn parse_settings(s: Option<&Document>) -> Result<Settings> {
    let mut out = Settings::default();
    let Some(s) = s else { return Ok(out) };
    let ctx = "settings";
    if let Some(v) = int_field(s, "heartbeatIntervalMillis", ctx)? {
        out.heartbeat_interval_millis = v;
    }
    if let Some(v) = int_field(s, "heartbeatTimeoutSecs", ctx)? {
        out.heartbeat_timeout_secs = v;
    }
    if let Some(v) = int_field(s, "electionTimeoutMillis", ctx)? {
        out.election_timeout_millis = v;
    }
    if let Some(v) = int_field(s, "catchUpTimeoutMillis", ctx)? {
        out.catch_up_timeout_millis = v;
    }
    if let Some(v) = int_field(s, "catchUpTakeoverDelayMillis", ctx)? {
        out.catch_up_takeover_delay_millis = v;
    }
    out.chaining_allowed = bool_field(s, "chainingAllowed", true)?;
    if let Ok(id) = s.get_object_id("replicaSetId") {
        out.replica_set_id = id;
    }
    if let Some(modes) = s.get("getLastErrorModes") {
        out.write_modes = parse_write_modes(modes)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> Document {
        doc! { "_id": "rs0", "members": [
            { "_id": 0, "host": "h1:1", "priority": 3 },
            { "_id": 1, "host": "h2:2", "priority": 2 },
            { "_id": 2, "host": "h3:3", "priority": 0, "votes": 0 },
        ], "settings": { "electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 500 } }
    }

    #[test]
    fn a_write_mode_counts_distinct_tag_values_of_the_members_holding_the_write() {
        let mut d = three();
        let tags = [("east", "e1"), ("east", "e2"), ("west", "w1")];
        for (m, (dc, rack)) in d.get_array_mut("members").unwrap().iter_mut().zip(tags) {
            if let Bson::Document(m) = m {
                m.insert("tags", doc! { "dc": dc, "rack": rack });
            }
        }
        d.get_document_mut("settings").unwrap().insert(
            "getLastErrorModes",
            doc! { "multiDC": { "dc": 2 }, "both": { "dc": 2, "rack": 3 }, "many": { "dc": 3 } },
        );
        let c = ReplSetConfig::parse(&d).unwrap();
        let multi = c.write_mode("multiDC").unwrap();
        // Raft ids are `_id` + 1: members 1 and 2 are both east.
        assert!(!c.satisfies(multi, |id| id <= 2));
        assert!(c.satisfies(multi, |id| id != 2));
        let both = c.write_mode("both").unwrap();
        assert!(!c.satisfies(both, |id| id != 2));
        assert!(c.satisfies(both, |_| true));
        assert!(!c.satisfies(c.write_mode("many").unwrap(), |_| true));
        assert_eq!(
            c.write_mode("none").unwrap_err().code,
            ErrorCode::UnknownReplWriteConcern
        );
        // Written back as given, and read back the same.
        let again = ReplSetConfig::from_stored(&c.to_document()).unwrap();
        assert_eq!(again.settings.write_modes, c.settings.write_modes);
    }

    #[test]
    fn parses_members_and_settings() {
        let c = ReplSetConfig::parse(&three()).unwrap();
        assert_eq!(c.members.len(), 3);
        assert_eq!(c.members[0].raft_id(), 1);
        assert!(c.members[0].raft_priority() > c.members[1].raft_priority());
        assert!(!c.members[2].electable());
        assert_eq!(c.settings.election_timeout_millis, 2000);
        assert_eq!(c.majority(), 2);
        let back = ReplSetConfig::from_stored(&c.to_document()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn rejects_invalid_configs() {
        let cases: Vec<(Document, i32)> = vec![
            (doc! { "_id": "rs0", "members": [] }, 93),
            (
                doc! { "_id": "rs0", "members": [{ "_id": 0, "host": "a:1" }, { "_id": 0, "host": "b:1" }] },
                93,
            ),
            (
                doc! { "_id": "rs0", "members": [{ "_id": 0, "host": "a:1" }, { "_id": 1, "host": "a:1" }] },
                93,
            ),
            (
                doc! { "_id": "rs0", "members": [{ "_id": 0, "host": "a:1", "votes": 0 }] },
                93,
            ),
            (
                doc! { "_id": "rs0", "members": [{ "_id": 0, "host": "a:1", "hidden": true }] },
                93,
            ),
            (
                doc! { "_id": "rs0", "members": [{ "_id": 0, "host": "a:1", "arbiterOnly": true }] },
                93,
            ),
            (
                doc! { "_id": "rs0", "members": [{ "_id": 0, "host": "a:1", "votes": 2 }] },
                2,
            ),
            (
                doc! { "_id": "rs0", "members": [{ "_id": 0, "host": "a:1", "priority": 0 }] },
                93,
            ),
        ];
        for (d, code) in cases {
            let e = ReplSetConfig::parse(&d).expect_err(&format!("{d}"));
            assert_eq!(e.code.code(), code, "{d}: {}", e.message);
        }
    }
}
