//! The `timeseries` option of `create`, checked as MongoDB 8.0 checks it (the IDL parse, the
//! create command's checks, then the bucketing parameters).

use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};

/// Largest `bucketMaxSpanSeconds` / `bucketRoundingSeconds` (one year).
const MAX_SPAN: i64 = 31_536_000;

#[derive(Debug, Clone, PartialEq)]
pub struct TimeseriesOptions {
    pub time_field: String,
    pub meta_field: Option<String>,
    /// `seconds`, `minutes` or `hours`; None when custom bucketing parameters are set.
    pub granularity: Option<String>,
    pub bucket_max_span_seconds: i64,
    pub bucket_rounding_seconds: i64,
}

/// MongoDB's `getMaxSpanSecondsFromGranularity` and `getBucketRoundingSecondsFromGranularity`.
fn granularity_spans(g: &str) -> (i64, i64) {
    match g {
        "minutes" => (86_400, 3_600),
        "hours" => (2_592_000, 86_400),
        _ => (3_600, 60),
    }
}

fn wrong_type(field: &str, v: &Bson, expected: &str) -> Error {
    Error::type_mismatch(format!(
        "BSON field 'create.timeseries.{field}' is the wrong type '{}', expected type '{expected}'",
        nidus_doc::compare::type_name(v)
    ))
}

fn span_value(field: &str, v: &Bson) -> Result<i64> {
    let n = match v {
        Bson::Int32(n) => i64::from(*n),
        Bson::Int64(n) => *n,
        Bson::Double(f) if f.fract() == 0.0 => *f as i64,
        other => return Err(wrong_type(field, other, "int")),
    };
    if n < 1 {
        return Err(Error::new(
            ErrorCode::Location(51024),
            format!("BSON field '{field}' value must be >= 1, actual value '{n}'"),
        ));
    }
    if n > MAX_SPAN {
        return Err(Error::new(
            ErrorCode::Location(51024),
            format!("BSON field '{field}' value must be <= {MAX_SPAN}, actual value '{n}'"),
        ));
    }
    Ok(n)
}

impl TimeseriesOptions {
    /// Parses and checks the user's `timeseries` document for namespace `ns` ("db.coll").
    pub fn parse(spec: &Document, ns: &str) -> Result<TimeseriesOptions> {
        let (mut time, mut meta, mut granularity, mut span, mut rounding) =
            (None, None, None, None, None);
        for (k, v) in spec {
            match k.as_str() {
                "timeField" => match v {
                    Bson::String(s) => time = Some(s.clone()),
                    other => return Err(wrong_type(k, other, "string")),
                },
                "metaField" => match v {
                    Bson::String(s) => meta = Some(s.clone()),
                    other => return Err(wrong_type(k, other, "string")),
                },
                "granularity" => match v {
                    Bson::String(s) if matches!(s.as_str(), "seconds" | "minutes" | "hours") => {
                        granularity = Some(s.clone())
                    }
                    Bson::String(s) => {
                        return Err(Error::bad_value(format!(
                            "Enumeration value '{s}' for field 'create.timeseries.granularity' is not a valid value."
                        )))
                    }
                    other => return Err(wrong_type(k, other, "string")),
                },
                "bucketMaxSpanSeconds" => span = Some(span_value(k, v)?),
                "bucketRoundingSeconds" => rounding = Some(span_value(k, v)?),
                other => {
                    return Err(Error::new(
                        ErrorCode::Location(40415),
                        format!("BSON field 'create.timeseries.{other}' is an unknown field."),
                    ))
                }
            }
        }
        let Some(time_field) = time else {
            return Err(Error::new(
                ErrorCode::Location(40414),
                "BSON field 'create.timeseries.timeField' is missing but a required field",
            ));
        };
        let top_level = |field: &str| {
            Error::new(
                ErrorCode::InvalidOptions,
                format!("{ns}: '{field}' must be a top-level field and not contain a '.'"),
            )
        };
        if time_field.contains('.') {
            return Err(top_level("timeField"));
        }
        if let Some(m) = &meta {
            if m == "_id" {
                return Err(Error::new(
                    ErrorCode::InvalidOptions,
                    "'metaField' cannot be \"_id\"",
                ));
            }
            if *m == time_field {
                return Err(Error::new(
                    ErrorCode::InvalidOptions,
                    "'metaField' cannot be the same as 'timeField'",
                ));
            }
            if m.contains('.') {
                return Err(top_level("metaField"));
            }
        }
        let invalid = |msg: String| Error::new(ErrorCode::InvalidOptions, msg);
        let (granularity, max_span, rounding) = match (&granularity, span, rounding) {
            (Some(g), span, rounding) => {
                let (default_span, default_rounding) = granularity_spans(g);
                if span.is_some_and(|s| s != default_span) {
                    return Err(invalid(format!(
                        "Time-series 'bucketMaxSpanSeconds' cannot be set to a value other than the default of {default_span} for the provided granularity"
                    )));
                }
                if rounding.is_some() {
                    return Err(invalid(
                        "Time-series 'bucketRoundingSeconds' cannot be set alongside the granularity parameter".into(),
                    ));
                }
                (Some(g.clone()), default_span, default_rounding)
            }
            (None, None, None) => (Some("seconds".to_string()), 3_600, 60),
            (None, span, rounding) => {
                if span != rounding {
                    return Err(invalid(
                        "Time-series 'bucketRoundingSeconds' must be equal to 'bucketMaxSpanSeconds'".into(),
                    ));
                }
                let s = span.unwrap_or(3_600);
                (None, s, s)
            }
        };
        if time_field.starts_with('$') || meta.as_deref().is_some_and(|m| m.starts_with('$')) {
            return Err(Error::bad_value(
                "The 'timeField' or 'metaField' cannot start with '$'",
            ));
        }
        Ok(TimeseriesOptions {
            time_field,
            meta_field: meta,
            granularity,
            bucket_max_span_seconds: max_span,
            bucket_rounding_seconds: rounding,
        })
    }

    /// The stored form, as `listCollections` shows it.
    pub fn to_document(&self) -> Document {
        let mut d = doc! { "timeField": self.time_field.clone() };
        if let Some(m) = &self.meta_field {
            d.insert("metaField", m.clone());
        }
        match &self.granularity {
            Some(g) => {
                d.insert("granularity", g.clone());
            }
            None => {
                d.insert("bucketRoundingSeconds", self.bucket_rounding_seconds as i32);
            }
        }
        d.insert("bucketMaxSpanSeconds", self.bucket_max_span_seconds as i32);
        d
    }

    /// Reads the stored form back.
    pub fn from_document(d: &Document) -> Option<TimeseriesOptions> {
        let time_field = d.get_str("timeField").ok()?.to_string();
        let granularity = d.get_str("granularity").ok().map(str::to_string);
        let int = |k: &str| d.get(k).and_then(crate::clustered::as_i64);
        let (default_span, default_rounding) =
            granularity_spans(granularity.as_deref().unwrap_or("seconds"));
        Some(TimeseriesOptions {
            time_field,
            meta_field: d.get_str("metaField").ok().map(str::to_string),
            bucket_max_span_seconds: int("bucketMaxSpanSeconds").unwrap_or(default_span),
            bucket_rounding_seconds: int("bucketRoundingSeconds").unwrap_or(
                if granularity.is_some() {
                    default_rounding
                } else {
                    int("bucketMaxSpanSeconds").unwrap_or(default_rounding)
                },
            ),
            granularity,
        })
    }

    /// The view's pipeline: `[{$_internalUnpackBucket: {timeField, metaField,
    /// bucketMaxSpanSeconds}}]` (MongoDB's `generateViewPipeline`).
    pub fn view_pipeline(&self) -> Vec<Document> {
        let mut arg = doc! { "timeField": self.time_field.clone() };
        if let Some(m) = &self.meta_field {
            arg.insert("metaField", m.clone());
        }
        arg.insert("bucketMaxSpanSeconds", self.bucket_max_span_seconds as i32);
        vec![doc! { "$_internalUnpackBucket": arg }]
    }
}
