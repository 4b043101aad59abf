//! `$fill`: fills null and missing fields, as MongoDB rewrites it: `method: "locf"` and
//! `method: "linear"` become a `$setWindowFields` with `$locf`/`$linearFill` (with the
//! stage's `sortBy` and `partitionBy`/`partitionByFields`), `value` becomes an `$addFields`
//! of `{$ifNull: ["$field", value]}`.

use super::{add_fields, set_window_fields, ParseCtx, StageRef};
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};

const NAME: &str = "$fill";

pub fn parse(arg: &Bson, pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::new(
            ErrorCode::FailedToParse,
            format!(
                "The {NAME} stage specification must be an object, found {}",
                super::type_name(arg)
            ),
        ));
    };
    let mut output = None;
    let mut sort_by = None;
    let mut partition_by = None;
    let mut partition_fields = None;
    for (k, v) in spec {
        match (k.as_str(), v) {
            ("output", Bson::Document(d)) => output = Some(d),
            ("sortBy", Bson::Document(d)) => sort_by = Some(d.clone()),
            ("partitionBy", Bson::String(_) | Bson::Document(_)) => partition_by = Some(v.clone()),
            ("partitionByFields", Bson::Array(a)) => {
                let mut names = Vec::new();
                for f in a {
                    match f {
                        Bson::String(s) => names.push(s.clone()),
                        other => return Err(wrong_type("partitionByFields", other, "string")),
                    }
                }
                partition_fields = Some(names);
            }
            ("output" | "sortBy", other) => return Err(wrong_type(k, other, "object")),
            ("partitionBy", other) => return Err(wrong_type(k, other, "[string, object]")),
            ("partitionByFields", other) => return Err(wrong_type(k, other, "array")),
            (other, _) => {
                return Err(Error::location(
                    40415,
                    format!("BSON field '{NAME}.{other}' is an unknown field."),
                ))
            }
        }
    }
    let Some(output) = output else {
        return Err(Error::location(
            40414,
            format!("BSON field '{NAME}.output' is missing but a required field"),
        ));
    };
    if output.is_empty() {
        return Err(Error::location(
            6050203,
            "The output field in '$fill' must contain an object with at least one element",
        ));
    }
    let mut window_output = Document::new();
    let mut add_fields = Document::new();
    for (field, fspec) in output {
        let Bson::Document(f) = fspec else {
            return Err(Error::location(
                6050200,
                "Each fill output specification must be an object with exactly one field",
            ));
        };
        for k in f.keys() {
            if k != "method" && k != "value" {
                return Err(Error::location(
                    40415,
                    format!("BSON field '{NAME}.{k}' is an unknown field."),
                ));
            }
        }
        if let Some(method) = f.get("method") {
            if f.contains_key("value") {
                return Err(Error::location(
                    6050201,
                    "Each fill output specification must have exactly one of 'method' or 'value' fields, not both",
                ));
            }
            let func = match method {
                Bson::String(m) if m == "locf" => "$locf",
                Bson::String(m) if m == "linear" => "$linearFill",
                Bson::String(_) => {
                    return Err(Error::location(
                        6050202,
                        "Method must be either locf or linear",
                    ))
                }
                other => return Err(wrong_type("method", other, "string")),
            };
            let mut w = Document::new();
            w.insert(func, format!("${field}"));
            window_output.insert(field.clone(), w);
        } else if let Some(value) = f.get("value") {
            add_fields.insert(
                field.clone(),
                bson::bson!({"$ifNull": [format!("${field}"), value.clone()]}),
            );
        } else {
            return Err(Error::location(
                6050201,
                "Each fill output specification must have exactly one of 'method' or 'value' fields, not both",
            ));
        }
    }
    if partition_by.is_some() && partition_fields.is_some() {
        return Err(Error::location(
            6050204,
            "Maximum one of 'partitionBy' and 'partitionByFields can be specified in '$fill'",
        ));
    }
    if let Some(names) = &partition_fields {
        let mut p = Document::new();
        for n in names {
            p.insert(n.clone(), format!("${n}"));
        }
        partition_by = Some(Bson::Document(p));
    }
    let mut stages = Vec::new();
    if !window_output.is_empty() {
        let mut swf = Document::new();
        if let Some(p) = partition_by {
            swf.insert("partitionBy", p);
        }
        if let Some(s) = sort_by {
            swf.insert("sortBy", s);
        }
        swf.insert("output", window_output);
        stages.extend(set_window_fields::parse(&Bson::Document(swf), pcx)?);
    } else if let Some(s) = &sort_by {
        nidus_query::sort::SortPattern::parse(s)?;
    }
    if !add_fields.is_empty() {
        stages.extend(add_fields::parse_add_fields(
            &Bson::Document(add_fields),
            pcx,
        )?);
    }
    Ok(stages)
}

fn wrong_type(field: &str, v: &Bson, want: &str) -> Error {
    Error::new(
        ErrorCode::TypeMismatch,
        format!(
            "BSON field '{NAME}.{field}' is the wrong type '{}', expected type '{want}'",
            super::type_name(v)
        ),
    )
}
