//! `setClusterParameter` / `getClusterParameter` for the cluster parameter Nidus acts on,
//! `changeStreamOptions` (`preAndPostImages.expireAfterSeconds`: how long change-stream
//! pre- and post-images are kept, `"off"` for as long as the oplog keeps their entries).
//!
//! Parameters are stored as MongoDB stores them, one document per parameter in
//! `config.clusterParameters` (`{_id: <name>, clusterParameterTime, ...fields}`), written
//! through the oplog so every member of a set sees the same value; each member expires its
//! own pre-images by it.

use super::Ctx;
use bson::{doc, Bson, Document, Timestamp};
use nidus_common::{Error, ErrorCode, Result};
use nidus_engine::find::FindSpec;
use nidus_engine::namespace::Namespace;
use nidus_engine::write::{UpdateSpec, WriteOpts};
use nidus_engine::Engine;
use nidus_query::update::Update;

const CHANGE_STREAM_OPTIONS: &str = "changeStreamOptions";

fn parameters_ns() -> Namespace {
    Namespace::new("config", "clusterParameters")
}

fn unknown(name: &str) -> Error {
    Error::new(
        ErrorCode::NoSuchKey,
        format!("Unknown Cluster Parameter {name}"),
    )
}

/// The stored `changeStreamOptions` document, or its default.
fn change_stream_options(engine: &Engine) -> Result<Document> {
    let stored = match engine.collection(&parameters_ns()) {
        None => None,
        Some(coll) => {
            let spec = FindSpec {
                filter: doc! { "_id": CHANGE_STREAM_OPTIONS },
                ..FindSpec::default()
            };
            let mut exec = engine.plan_find(Some(&coll), &spec)?;
            match exec.next_doc()? {
                Some(raw) => Some(
                    Document::try_from(raw.as_ref()).map_err(|e| Error::internal(e.to_string()))?,
                ),
                None => None,
            }
        }
    };
    Ok(stored.unwrap_or_else(|| {
        doc! {
            "_id": CHANGE_STREAM_OPTIONS,
            "clusterParameterTime": Timestamp { time: 0, increment: 0 },
            "preAndPostImages": { "expireAfterSeconds": "off" },
        }
    }))
}

/// `preAndPostImages.expireAfterSeconds` in seconds; `None` when `"off"`.
pub fn pre_image_expiry_secs(engine: &Engine) -> Result<Option<i64>> {
    let options = change_stream_options(engine)?;
    Ok(options.get_document("preAndPostImages").ok().and_then(|p| {
        match p.get("expireAfterSeconds") {
            Some(Bson::Int64(n)) => Some(*n),
            Some(Bson::Int32(n)) => Some(i64::from(*n)),
            _ => None,
        }
    }))
}

/// Checks `{preAndPostImages: {expireAfterSeconds: "off" | n > 0}}` and returns it with a
/// numeric value as a 64-bit integer (the IDL's `safeInt64`).
fn validate_change_stream_options(value: &Bson) -> Result<Document> {
    let bad = |m: &str| Error::bad_value(m.to_string());
    let Bson::Document(options) = value else {
        return Err(Error::type_mismatch(format!(
            "BSON field 'changeStreamOptions' is the wrong type '{}', expected type 'object'",
            super::type_name(value)
        )));
    };
    for k in options.keys() {
        if k != "preAndPostImages" {
            return Err(Error::new(
                ErrorCode::Location(40415),
                format!("BSON field 'changeStreamOptions.{k}' is an unknown field."),
            ));
        }
    }
    let Some(images) = options.get("preAndPostImages") else {
        return Err(bad(
            "Should specify at least one option for 'changeStreamOptions' parameter",
        ));
    };
    let Bson::Document(images) = images else {
        return Err(Error::type_mismatch(format!(
            "BSON field 'changeStreamOptions.preAndPostImages' is the wrong type '{}', expected type 'object'",
            super::type_name(images)
        )));
    };
    for k in images.keys() {
        if k != "expireAfterSeconds" {
            return Err(Error::new(
                ErrorCode::Location(40415),
                format!(
                    "BSON field 'changeStreamOptions.preAndPostImages.{k}' is an unknown field."
                ),
            ));
        }
    }
    let expire = match images.get("expireAfterSeconds") {
        None => {
            return Err(bad(
                "Should specify at least one option for 'preAndPostImages'",
            ))
        }
        Some(Bson::String(s)) if s == "off" => Bson::String(s.clone()),
        Some(Bson::String(s)) => {
            return Err(bad(&format!(
                "Invalid value for 'expireAfterSeconds': '{s}'; expected \"off\" or a number"
            )))
        }
        Some(v) => match super::safe_i64(v) {
            Some(n) if n > 0 => Bson::Int64(n),
            Some(_) => {
                return Err(bad(
                    "Expected a positive number of seconds for 'expireAfterSeconds'",
                ))
            }
            None => {
                return Err(Error::type_mismatch(format!(
                    "BSON field 'expireAfterSeconds' is the wrong type '{}', expected types '[string, long, int, decimal, double]'",
                    super::type_name(v)
                )))
            }
        },
    };
    Ok(doc! { "preAndPostImages": { "expireAfterSeconds": expire } })
}

pub fn set(ctx: &mut Ctx) -> Result<Document> {
    ctx.require_admin(&ctx.command_name())?;
    if ctx.state.repl.is_none() {
        return Err(Error::new(
            ErrorCode::IllegalOperation,
            "Cannot set cluster parameter on a standalone; start the server with --replSet",
        ));
    }
    let Some(Bson::Document(request)) = ctx.body.get("setClusterParameter") else {
        return Err(Error::type_mismatch(
            "BSON field 'setClusterParameter' is the wrong type, expected type 'object'",
        ));
    };
    let mut names = request.iter();
    let (name, value) = match (names.next(), names.next()) {
        (Some(one), None) => one,
        _ => {
            return Err(Error::bad_value(
                "Exactly one cluster parameter must be set by setClusterParameter",
            ))
        }
    };
    if name != CHANGE_STREAM_OPTIONS {
        return Err(unknown(name));
    }
    let fields = validate_change_stream_options(value)?;
    let time = ctx.state.cluster_time.tick();
    let mut stored = doc! { "_id": name, "clusterParameterTime": time };
    stored.extend(fields);
    let engine = &ctx.state.engine;
    let coll = engine.ensure_collection(&parameters_ns())?;
    let spec = UpdateSpec {
        filter: doc! { "_id": name },
        update: Update::parse(&Bson::Document(stored), None)?,
        multi: false,
        upsert: true,
        sort: None,
        hint: None,
    };
    engine.update(&coll, &spec, &WriteOpts::default())?;
    Ok(Document::new())
}

pub fn get(ctx: &mut Ctx) -> Result<Document> {
    ctx.require_admin(&ctx.command_name())?;
    let names: Vec<String> = match ctx.body.get("getClusterParameter") {
        Some(Bson::String(s)) if s == "*" => vec![CHANGE_STREAM_OPTIONS.to_string()],
        Some(Bson::String(s)) => vec![s.clone()],
        Some(Bson::Array(items)) => items
            .iter()
            .map(|v| match v {
                Bson::String(s) => Ok(s.clone()),
                other => Err(super::wrong_type(
                    "getClusterParameter",
                    "getClusterParameter",
                    other,
                    "string",
                )),
            })
            .collect::<Result<_>>()?,
        Some(other) => {
            return Err(Error::type_mismatch(format!(
                "BSON field 'getClusterParameter' is the wrong type '{}', expected types '[string, array]'",
                super::type_name(other)
            )))
        }
        None => Vec::new(),
    };
    let mut out = Vec::new();
    for name in names {
        if name != CHANGE_STREAM_OPTIONS {
            return Err(unknown(&name));
        }
        out.push(Bson::Document(change_stream_options(&ctx.state.engine)?));
    }
    Ok(doc! { "clusterParameters": out })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_stream_options_values() {
        let ok = |v: Bson| {
            validate_change_stream_options(&v).map(|d| {
                d.get_document("preAndPostImages")
                    .unwrap()
                    .get("expireAfterSeconds")
                    .cloned()
            })
        };
        assert_eq!(
            ok(Bson::Document(
                doc! {"preAndPostImages": {"expireAfterSeconds": "off"}}
            ))
            .unwrap(),
            Some(Bson::String("off".into()))
        );
        assert_eq!(
            ok(Bson::Document(
                doc! {"preAndPostImages": {"expireAfterSeconds": 10}}
            ))
            .unwrap(),
            Some(Bson::Int64(10))
        );
        for bad in [
            doc! {},
            doc! {"preAndPostImages": {}},
            doc! {"preAndPostImages": {"expireAfterSeconds": "unknown"}},
            doc! {"preAndPostImages": {"expireAfterSeconds": -1}},
            doc! {"preAndPostImages": {"expireAfterSeconds": 0}},
        ] {
            assert_eq!(
                ok(Bson::Document(bad)).unwrap_err().code,
                ErrorCode::BadValue
            );
        }
    }
}
