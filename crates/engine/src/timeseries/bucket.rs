//! Bucket documents, as MongoDB stores them in `system.buckets.<name>` (version 1, the
//! uncompressed form):
//!
//! ```text
//! { _id: ObjectId(<bucket start time> ...),
//!   control: { version: 1, min: {<field>: <min>, ...}, max: {<field>: <max>, ...} },
//!   meta: <the measurements' metaField value>,            (absent without one)
//!   data: { <field>: { "0": <value>, "1": <value>, ... }, ... } }
//! ```
//!
//! `control.min.<timeField>` is the bucket's start (the first measurement's time rounded down
//! to `bucketRoundingSeconds`), which is also the `_id`'s timestamp; every measurement's time
//! lies in `[start, start + bucketMaxSpanSeconds)`. `control.max.<timeField>` is the latest
//! time. Other fields' `control.min`/`control.max` are their least and greatest values in
//! BSON order. Measurement `i` of the bucket is the row `"i"` of every data column.

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use nidus_doc::compare::cmp_bson;

/// MongoDB's `timeseriesBucketMaxCount`.
pub const MAX_COUNT: usize = 1000;
/// MongoDB's `timeseriesBucketMaxSize` (bytes of measurements in one bucket).
pub const MAX_SIZE: usize = 125 * 1024;

/// The smallest ObjectId of second `secs` (`max`: the greatest).
pub fn object_id_at(secs: u32, max: bool) -> ObjectId {
    let mut bytes = if max { [0xffu8; 12] } else { [0u8; 12] };
    bytes[..4].copy_from_slice(&secs.to_be_bytes());
    ObjectId::from_bytes(bytes)
}

/// A bucket id: the start time's seconds, then the unique part of a fresh ObjectId.
fn new_bucket_id(start_ms: i64) -> ObjectId {
    let mut bytes = ObjectId::new().bytes();
    let secs = (start_ms.div_euclid(1000)).clamp(0, u32::MAX as i64) as u32;
    bytes[..4].copy_from_slice(&secs.to_be_bytes());
    ObjectId::from_bytes(bytes)
}

/// One bucket as the writer builds it.
#[derive(Debug, Clone)]
pub struct Bucket {
    pub id: ObjectId,
    pub start_ms: i64,
    pub meta: Option<Bson>,
    pub count: usize,
    pub bytes: usize,
    min: Document,
    max: Document,
    data: Document,
}

impl Bucket {
    /// An empty bucket for a measurement at `time_ms` (start rounded down to `rounding_s`).
    pub fn new(time_ms: i64, rounding_s: i64, meta: Option<Bson>) -> Bucket {
        let unit = rounding_s.max(1) * 1000;
        let start_ms = time_ms - time_ms.rem_euclid(unit);
        Bucket {
            id: new_bucket_id(start_ms),
            start_ms,
            meta,
            count: 0,
            bytes: 0,
            min: Document::new(),
            max: Document::new(),
            data: Document::new(),
        }
    }

    /// A stored bucket, rebuilt with its own id and start.
    pub fn reopen(id: ObjectId, start_ms: i64, meta: Option<Bson>) -> Bucket {
        Bucket {
            id,
            start_ms,
            meta,
            count: 0,
            bytes: 0,
            min: Document::new(),
            max: Document::new(),
            data: Document::new(),
        }
    }

    /// Whether a measurement at `time_ms` of `size` bytes belongs in this bucket.
    pub fn fits(&self, time_ms: i64, span_s: i64, size: usize) -> bool {
        time_ms >= self.start_ms
            && time_ms < self.start_ms.saturating_add(span_s.saturating_mul(1000))
            && self.count < MAX_COUNT
            && (self.count == 0 || self.bytes + size <= MAX_SIZE)
    }

    /// Adds a measurement (its metaField already removed) as the next row.
    pub fn add(&mut self, m: &Document, time_field: &str, size: usize) {
        let row = self.count.to_string();
        for (k, v) in m {
            let column = self
                .data
                .entry(k.clone())
                .or_insert_with(|| Bson::Document(Document::new()));
            if let Bson::Document(c) = column {
                c.insert(row.clone(), v.clone());
            }
            let control_min = if k == time_field {
                Bson::DateTime(DateTime::from_millis(self.start_ms))
            } else {
                v.clone()
            };
            match self.min.get(k) {
                Some(cur) if k == time_field || cmp_bson(&control_min, cur).is_ge() => {}
                _ => {
                    self.min.insert(k.clone(), control_min);
                }
            }
            match self.max.get(k) {
                Some(cur) if cmp_bson(v, cur).is_le() => {}
                _ => {
                    self.max.insert(k.clone(), v.clone());
                }
            }
        }
        self.count += 1;
        self.bytes += size;
    }

    pub fn to_document(&self) -> Document {
        let mut d = doc! {
            "_id": self.id,
            "control": { "version": 1, "min": self.min.clone(), "max": self.max.clone() },
        };
        if let Some(m) = &self.meta {
            d.insert("meta", m.clone());
        }
        d.insert("data", self.data.clone());
        d
    }
}

/// The measurements of a bucket document, in row order: the time field, the metaField,
/// then the other fields in column order (MongoDB's unpacked field order).
pub fn unpack(bucket: &Document, time_field: &str, meta_field: Option<&str>) -> Vec<Document> {
    let Ok(data) = bucket.get_document("data") else {
        return Vec::new();
    };
    let Ok(times) = data.get_document(time_field) else {
        return Vec::new();
    };
    let meta = meta_field.and_then(|f| bucket.get("meta").map(|m| (f, m)));
    let columns: Vec<(&String, &Document)> = data
        .iter()
        .filter(|(k, _)| k.as_str() != time_field)
        .filter_map(|(k, v)| match v {
            Bson::Document(c) => Some((k, c)),
            _ => None,
        })
        .collect();
    let mut out = Vec::with_capacity(times.len());
    for (row, t) in times {
        let mut m = Document::new();
        m.insert(time_field, t.clone());
        if let Some((f, v)) = meta {
            m.insert(f, v.clone());
        }
        for (k, c) in &columns {
            if let Some(v) = c.get(row) {
                m.insert((*k).clone(), v.clone());
            }
        }
        out.push(m);
    }
    out
}

/// Rebuilds buckets from measurements (after deleting or updating some of a bucket's):
/// the measurements in order, split where one no longer fits.
pub fn rebuild(
    measurements: &[Document],
    time_field: &str,
    meta: Option<Bson>,
    span_s: i64,
    rounding_s: i64,
) -> Vec<Bucket> {
    let mut out: Vec<Bucket> = Vec::new();
    for m in measurements {
        let Some(Bson::DateTime(t)) = m.get(time_field) else {
            continue;
        };
        let size = bson::to_vec(m).map(|b| b.len()).unwrap_or(0);
        let t = t.timestamp_millis();
        match out.last_mut() {
            Some(b) if b.fits(t, span_s, size) => b.add(m, time_field, size),
            _ => {
                let mut b = Bucket::new(t, rounding_s, meta.clone());
                b.add(m, time_field, size);
                out.push(b);
            }
        }
    }
    out
}
