//! `$_internalUnpackBucket`: turns time-series bucket documents into their measurements
//! (`timeseries/bucket.rs`), then applies the measurement filter the optimizer absorbed
//! from a following `$match` (`eventFilter`, see `optimize/timeseries_pushdown.rs`). It is
//! the pipeline of every time-series view.

use super::{DocStream, DocumentSource, ExpCtx, ParseCtx, StageRef, Stream};
use bson::{doc, Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use nidus_query::matcher::Matcher;
use std::any::Any;
use std::collections::VecDeque;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct UnpackBucket {
    pub time_field: String,
    pub meta_field: Option<String>,
    pub bucket_max_span_seconds: i64,
    /// The measurement filter (as written) and its matcher.
    pub event_filter: Option<(Document, Arc<Matcher>)>,
}

fn invalid(msg: &str) -> Error {
    Error::new(ErrorCode::FailedToParse, msg.to_string())
}

pub fn parse(arg: &Bson, _pcx: &ParseCtx) -> Result<Vec<StageRef>> {
    let Bson::Document(spec) = arg else {
        return Err(invalid(
            "$_internalUnpackBucket specification must be an object",
        ));
    };
    let (mut time, mut meta, mut span, mut filter) = (None, None, 3600, None);
    for (k, v) in spec {
        match (k.as_str(), v) {
            ("timeField", Bson::String(s)) => time = Some(s.clone()),
            ("metaField", Bson::String(s)) => meta = Some(s.clone()),
            ("bucketMaxSpanSeconds", v) => {
                span = crate::clustered::as_i64(v)
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        invalid("bucketMaxSpanSeconds field must be a positive integer")
                    })?
            }
            ("eventFilter", Bson::Document(d)) => filter = Some(d.clone()),
            ("exclude" | "include", Bson::Array(a)) if a.is_empty() => {}
            (
                "assumeNoMixedSchemaData" | "usesExtendedRange" | "fixedBuckets",
                Bson::Boolean(_),
            ) => {}
            _ => {
                return Err(invalid(&format!(
                    "unrecognized option to $_internalUnpackBucket: \"{k}\""
                )))
            }
        }
    }
    let Some(time_field) = time else {
        return Err(invalid(
            "The $_internalUnpackBucket stage requires a timeField parameter",
        ));
    };
    let mut stage = UnpackBucket {
        time_field,
        meta_field: meta,
        bucket_max_span_seconds: span,
        event_filter: None,
    };
    if let Some(f) = filter {
        stage = stage.with_event_filter(f)?;
    }
    Ok(vec![Arc::new(stage)])
}

impl UnpackBucket {
    /// This stage with `filter` also applied to every measurement (`$and` with the filter
    /// it has).
    pub fn with_event_filter(&self, filter: Document) -> Result<UnpackBucket> {
        let filter = match &self.event_filter {
            Some((old, _)) => doc! { "$and": [old.clone(), filter] },
            None => filter,
        };
        let matcher = Arc::new(Matcher::parse(&filter)?);
        Ok(UnpackBucket {
            event_filter: Some((filter, matcher)),
            ..self.clone()
        })
    }
}

impl DocumentSource for UnpackBucket {
    fn name(&self) -> &'static str {
        crate::timeseries::UNPACK_STAGE
    }

    fn serialize(&self) -> Bson {
        let mut d = doc! { "exclude": [], "timeField": self.time_field.clone() };
        if let Some(m) = &self.meta_field {
            d.insert("metaField", m.clone());
        }
        d.insert("bucketMaxSpanSeconds", self.bucket_max_span_seconds as i32);
        d.insert("assumeNoMixedSchemaData", true);
        if let Some((_, m)) = &self.event_filter {
            d.insert("eventFilter", m.canonical_document());
        }
        Bson::Document(d)
    }

    fn open(&self, input: Stream, ctx: &ExpCtx) -> Result<Stream> {
        Ok(Box::new(UnpackStream {
            input,
            stage: self.clone(),
            ready: VecDeque::new(),
            ctx: ctx.clone(),
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct UnpackStream {
    input: Stream,
    stage: UnpackBucket,
    ready: VecDeque<Document>,
    ctx: ExpCtx,
}

impl DocStream for UnpackStream {
    fn next(&mut self) -> Result<Option<Document>> {
        loop {
            while let Some(m) = self.ready.pop_front() {
                let keep = match &self.stage.event_filter {
                    Some((_, matcher)) => {
                        let raw = nidus_common::encode::document_to_raw(&m)
                            .map_err(|e| Error::internal(e.to_string()))?;
                        matcher.matches(&raw)?
                    }
                    None => true,
                };
                if keep {
                    return Ok(Some(m));
                }
            }
            let Some(bucket) = self.input.next()? else {
                return Ok(None);
            };
            self.ctx.check_interrupt()?;
            self.ready = crate::timeseries::bucket::unpack(
                &bucket,
                &self.stage.time_field,
                self.stage.meta_field.as_deref(),
            )
            .into();
        }
    }
}
