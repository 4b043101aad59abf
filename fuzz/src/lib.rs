//! The bodies of Nidus's fuzz targets, shared by the cargo-fuzz binaries in `fuzz_targets/`
//! (run with nightly: `cargo +nightly fuzz run <target>`) and by the stable test
//! `crates/server/tests/fuzz_corpus.rs`, which includes this file by path and runs every
//! target over the checked-in corpus plus mutated and random inputs.
//!
//! Every target takes arbitrary bytes and must neither panic nor hang. Structured targets
//! (filter, update, projection, expression, pipeline) read their input two ways, chosen by
//! the first byte: as concatenated BSON documents (the spec, then documents to apply it
//! to; this is how the seed corpus is written), or as instructions for [`Gen`], a small
//! grammar that builds BSON trees from operator names, field paths and edge-case values, so
//! that mutations keep producing well-formed specs.
//!
//! This file must stay free of anything outside the project's own crates and `bson`.

use bson::{doc, Binary, Bson, Decimal128, Document, RawDocument, Regex, Timestamp};

/// A target's entry point.
pub type Target = fn(&[u8]);

/// Every target, by name (the names of the cargo-fuzz binaries and of the corpus folders).
pub const TARGETS: &[(&str, Target)] = &[
    ("wire_decode", wire_decode),
    ("bson_validate", bson_validate),
    ("filter", filter),
    ("update", update),
    ("projection", projection),
    ("expression", expression),
    ("pipeline", pipeline),
];

/// The wire decoder on a whole message (as sent), and again with its length field fixed so
/// inputs reach the body parsers. A message it accepts must re-encode to one it accepts.
pub fn wire_decode(data: &[u8]) {
    use nidus_wire::{decode_message, encode_msg_request, encode_query_request, Request};
    let mut fixed = data.to_vec();
    if let (Some(len), Ok(n)) = (fixed.get_mut(..4), i32::try_from(data.len())) {
        len.copy_from_slice(&n.to_le_bytes());
    }
    for input in [data, fixed.as_slice()] {
        if let Ok(decoded) = decode_message(input) {
            let again = match &decoded.request {
                Request::Msg(m) => encode_msg_request(1, m, false),
                Request::Query(q) => encode_query_request(1, q),
            };
            assert!(
                decode_message(&again).is_ok(),
                "re-encoded message must decode"
            );
        }
    }
}

/// BSON validation of an incoming document (what the wire layer runs on every body and
/// sequence document); an accepted document converts to a `Document` and back to the same
/// bytes, and its values go through index-key encoding and comparison.
pub fn bson_validate(data: &[u8]) {
    let Ok(raw) = nidus_wire::validate_document(data) else {
        return;
    };
    let Ok(doc) = Document::try_from(raw) else {
        return;
    };
    // Duplicate keys collapse in a `Document` (as in every command the server parses), so
    // the round trip is checked from the `Document` on.
    let again = bson::to_vec(&doc).unwrap_or_default();
    let reread = RawDocument::from_bytes(&again).map(Document::try_from);
    assert!(
        matches!(&reread, Ok(Ok(d)) if d == &doc || has_nan(d)),
        "a validated document must round-trip"
    );
    let values: Vec<&Bson> = doc.values().take(8).collect();
    for v in &values {
        let _ = nidus_doc::keystring::encode_key_bson(&[(v, false)]);
        let _ = nidus_doc::keystring::encode_key_bson(&[(v, true)]);
    }
    for pair in values.windows(2) {
        let _ = nidus_doc::compare::cmp_bson(pair[0], pair[1]);
    }
}

/// Filter parsing and matching.
pub fn filter(data: &[u8]) {
    let (spec, docs) = structured(data, Shape::Document);
    let Bson::Document(filter) = spec else { return };
    if let Ok(m) = nidus_query::Matcher::parse(&filter) {
        let _ = m.canonical_document();
        for d in &docs {
            let raw = raw_of(d);
            let _ = m.matches_with_position(&raw);
        }
    }
}

/// Update parsing (operators, replacement, pipeline; the second document, when it is an
/// array, is `arrayFilters`) and application.
pub fn update(data: &[u8]) {
    use nidus_query::update::{Update, UpdateContext};
    let (spec, mut docs) = structured(data, Shape::Update);
    let filters: Option<Vec<Document>> = match docs.first() {
        Some(d) if d.contains_key("arrayFilters") => {
            let first = docs.remove(0);
            first
                .get_array("arrayFilters")
                .ok()
                .map(|a| a.iter().filter_map(|b| b.as_document().cloned()).collect())
        }
        _ => None,
    };
    let Ok(u) = Update::parse(&spec, filters.as_deref()) else {
        return;
    };
    for (i, d) in docs.iter().enumerate() {
        let mut doc = d.clone();
        let ctx = UpdateContext {
            matched_array_index: (i % 2 == 1).then_some(i / 2),
            is_upsert_insert: i % 3 == 2,
            ..UpdateContext::default()
        };
        let _ = u.apply(&mut doc, &ctx);
    }
}

/// Projection parsing under both policies (find and aggregation) and application.
pub fn projection(data: &[u8]) {
    use nidus_query::projection::{Policy, Projection};
    let (spec, docs) = structured(data, Shape::Document);
    let Bson::Document(spec) = spec else { return };
    let scope = nidus_expr::LetScope::empty();
    for policy in [Policy::Find, Policy::Aggregate] {
        if let Ok(p) = Projection::parse_with(&spec, policy, &scope) {
            for (i, d) in docs.iter().enumerate() {
                let raw = raw_of(d);
                let _ = p.apply_with_position(&raw, (i % 2 == 1).then_some(i));
            }
        }
    }
}

/// Aggregation expression parsing, evaluation and serialization.
pub fn expression(data: &[u8]) {
    use nidus_expr::{Expression, ParseContext};
    let (spec, docs) = structured(data, Shape::Expression);
    let ctx = ParseContext::new();
    let Ok(e) = Expression::parse(&spec, &ctx) else {
        return;
    };
    let _ = e.serialize();
    for d in &docs {
        let _ = e.evaluate_doc(d);
    }
    if docs.is_empty() {
        let _ = e.evaluate_doc(&Document::new());
    }
}

/// Aggregation pipeline parsing and the explain serialization of every stage.
pub fn pipeline(data: &[u8]) {
    use nidus_engine::pipeline::{parse_pipeline, stage_document, ParseCtx};
    let (spec, _) = structured(data, Shape::Pipeline);
    let stages = match spec {
        Bson::Array(a) => a,
        other => vec![other],
    };
    let pcx = ParseCtx::new("fuzz");
    if let Ok(parsed) = parse_pipeline(&stages, &pcx) {
        for s in &parsed {
            let _ = stage_document(s.as_ref());
        }
    }
}

/// NaN != NaN, so documents holding one compare unequal to themselves.
fn has_nan(d: &Document) -> bool {
    fn value(v: &Bson) -> bool {
        match v {
            Bson::Double(f) => f.is_nan(),
            Bson::Document(d) => has_nan(d),
            Bson::Array(a) => a.iter().any(value),
            Bson::JavaScriptCodeWithScope(c) => has_nan(&c.scope),
            _ => false,
        }
    }
    d.values().any(value)
}

fn raw_of(d: &Document) -> bson::RawDocumentBuf {
    bson::RawDocumentBuf::from_document(d).unwrap_or_default()
}

/// What a structured target's spec looks like at its root.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Document,
    Update,
    Expression,
    Pipeline,
}

/// Splits an input into a spec and documents to apply it to. First byte even: BSON
/// documents (the spec is the first one, or its single `spec` field when present, which lets
/// a corpus file hold an array or scalar spec); odd: generated by [`Gen`].
fn structured(data: &[u8], shape: Shape) -> (Bson, Vec<Document>) {
    let Some((&mode, rest)) = data.split_first() else {
        return (Bson::Document(Document::new()), Vec::new());
    };
    if mode.is_multiple_of(2) {
        let mut docs = split_documents(rest);
        if docs.is_empty() {
            return (Bson::Null, Vec::new());
        }
        let first = docs.remove(0);
        let spec = match first.get("spec") {
            Some(s) if first.len() == 1 => s.clone(),
            _ => Bson::Document(first),
        };
        return (spec, docs);
    }
    let mut g = Gen::new(rest);
    let spec = match shape {
        Shape::Document => Bson::Document(g.query_doc(0)),
        Shape::Update => g.update_spec(),
        Shape::Expression => g.expression(0),
        Shape::Pipeline => g.pipeline(0),
    };
    let mut docs = Vec::new();
    while docs.len() < 4 && !g.is_done() {
        docs.push(g.data_doc(0));
    }
    (spec, docs)
}

/// Reads consecutive validated BSON documents (at most 8) until the bytes run out or one
/// is invalid.
fn split_documents(mut bytes: &[u8]) -> Vec<Document> {
    let mut out = Vec::new();
    while out.len() < 8 && bytes.len() >= 5 {
        let len = i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let Some(doc_bytes) = usize::try_from(len).ok().and_then(|n| bytes.get(..n)) else {
            break;
        };
        let Ok(raw) = nidus_wire::validate_document(doc_bytes) else {
            break;
        };
        let Ok(doc) = Document::try_from(raw) else {
            break;
        };
        out.push(doc);
        bytes = &bytes[doc_bytes.len()..];
    }
    out
}

/// Serializes documents in the corpus-file form [`structured`] reads (mode byte 0).
pub fn corpus_entry(spec: Bson, docs: &[Document]) -> Vec<u8> {
    let mut out = vec![0u8];
    let first = match spec {
        Bson::Document(d) => d,
        other => doc! { "spec": other },
    };
    for d in std::iter::once(&first).chain(docs) {
        out.extend(bson::to_vec(d).unwrap_or_default());
    }
    out
}

/// Operator and stage names the generator picks from.
const OPERATORS: &[&str] = &[
    "$abs",
    "$acos",
    "$acosh",
    "$add",
    "$addFields",
    "$addToSet",
    "$all",
    "$allElementsTrue",
    "$and",
    "$anyElementTrue",
    "$arrayElemAt",
    "$arrayToObject",
    "$asin",
    "$asinh",
    "$atan",
    "$atanh",
    "$avg",
    "$bit",
    "$bitsAllClear",
    "$bitsAllSet",
    "$bitsAnyClear",
    "$bitsAnySet",
    "$bottom",
    "$bottomN",
    "$bucket",
    "$bucketAuto",
    "$ceil",
    "$cmp",
    "$comment",
    "$concat",
    "$concatArrays",
    "$cond",
    "$const",
    "$convert",
    "$cos",
    "$cosh",
    "$count",
    "$currentDate",
    "$dateAdd",
    "$dateDiff",
    "$dateFromParts",
    "$dateFromString",
    "$dateSubtract",
    "$dateToParts",
    "$dateToString",
    "$dateTrunc",
    "$dayOfMonth",
    "$dayOfWeek",
    "$dayOfYear",
    "$degreesToRadians",
    "$divide",
    "$documents",
    "$each",
    "$elemMatch",
    "$eq",
    "$exists",
    "$exp",
    "$expr",
    "$facet",
    "$filter",
    "$first",
    "$firstN",
    "$floor",
    "$getField",
    "$group",
    "$gt",
    "$gte",
    "$hour",
    "$ifNull",
    "$in",
    "$inc",
    "$indexOfArray",
    "$indexOfBytes",
    "$indexOfCP",
    "$isArray",
    "$isNumber",
    "$isoDayOfWeek",
    "$isoWeek",
    "$isoWeekYear",
    "$jsonSchema",
    "$last",
    "$lastN",
    "$let",
    "$limit",
    "$literal",
    "$ln",
    "$log",
    "$lookup",
    "$lt",
    "$lte",
    "$ltrim",
    "$map",
    "$match",
    "$max",
    "$maxN",
    "$merge",
    "$mergeObjects",
    "$meta",
    "$millisecond",
    "$min",
    "$minN",
    "$minute",
    "$mod",
    "$month",
    "$mul",
    "$multiply",
    "$ne",
    "$nin",
    "$nor",
    "$not",
    "$objectToArray",
    "$options",
    "$or",
    "$out",
    "$pop",
    "$position",
    "$pow",
    "$project",
    "$pull",
    "$pullAll",
    "$push",
    "$radiansToDegrees",
    "$rand",
    "$range",
    "$redact",
    "$reduce",
    "$regex",
    "$regexFind",
    "$regexFindAll",
    "$regexMatch",
    "$rename",
    "$replaceAll",
    "$replaceOne",
    "$replaceRoot",
    "$replaceWith",
    "$reverseArray",
    "$round",
    "$rtrim",
    "$sample",
    "$second",
    "$set",
    "$setDifference",
    "$setEquals",
    "$setField",
    "$setIntersection",
    "$setIsSubset",
    "$setOnInsert",
    "$setUnion",
    "$sin",
    "$sinh",
    "$size",
    "$skip",
    "$slice",
    "$sort",
    "$sortArray",
    "$sortByCount",
    "$split",
    "$sqrt",
    "$stdDevPop",
    "$stdDevSamp",
    "$strLenBytes",
    "$strLenCP",
    "$strcasecmp",
    "$substr",
    "$substrBytes",
    "$substrCP",
    "$subtract",
    "$sum",
    "$switch",
    "$tan",
    "$tanh",
    "$toBool",
    "$toDate",
    "$toDecimal",
    "$toDouble",
    "$toInt",
    "$toLong",
    "$toLower",
    "$toObjectId",
    "$toString",
    "$toUpper",
    "$top",
    "$topN",
    "$trim",
    "$trunc",
    "$type",
    "$unionWith",
    "$unset",
    "$unsetField",
    "$unwind",
    "$week",
    "$where",
    "$year",
    "$zip",
];

/// Argument names of operators and stages (`{$map: {input, as, in}}`, ...).
const ARG_NAMES: &[&str] = &[
    "input",
    "as",
    "in",
    "cond",
    "if",
    "then",
    "else",
    "vars",
    "initialValue",
    "branches",
    "case",
    "default",
    "n",
    "sortBy",
    "output",
    "groupBy",
    "boundaries",
    "buckets",
    "from",
    "localField",
    "foreignField",
    "pipeline",
    "let",
    "path",
    "includeArrayIndex",
    "preserveNullAndEmptyArrays",
    "newRoot",
    "size",
    "to",
    "onError",
    "onNull",
    "format",
    "timezone",
    "date",
    "unit",
    "amount",
    "startDate",
    "endDate",
    "startOfWeek",
    "binSize",
    "find",
    "replacement",
    "chars",
    "regex",
    "options",
    "field",
    "value",
    "inputs",
    "useLongestLength",
    "defaults",
    "year",
    "month",
    "day",
    "hour",
    "isoWeekYear",
    "base",
    "bsonType",
    "type",
    "properties",
    "required",
    "items",
    "minimum",
    "maximum",
    "enum",
    "pattern",
    "minItems",
    "maxItems",
    "additionalProperties",
    "_id",
    "coll",
    "into",
    "on",
    "whenMatched",
    "whenNotMatched",
    "db",
    "sortOrder",
    "arrayFilters",
];

/// Field names and paths, including the positional and array-filter forms.
const FIELDS: &[&str] = &[
    "a", "b", "c", "_id", "a.b", "a.b.c", "a.0", "a.0.b", "b.1", "a.$", "a.$[]", "a.$[x]",
    "a.$[].b", "x", "x.y", "", ".", "a..b", "$", "a.$$", "0", "1", "a.-1", "a.$[x].c", "a.b.0.c",
    "a.10", "ab", "\u{e9}",
];

/// Variable and field-path strings.
const PATHS: &[&str] = &[
    "$a",
    "$a.b",
    "$b",
    "$_id",
    "$$ROOT",
    "$$CURRENT",
    "$$NOW",
    "$$REMOVE",
    "$$this",
    "$$value",
    "$$x",
    "$$KEEP",
    "$$PRUNE",
    "$$DESCEND",
    "$",
    "$$",
    "$a.",
    "$.a",
    "$$ROOT.a",
    "$a.0",
    "$x.y",
];

/// A byte-driven builder of BSON trees. Out of input, it yields zeros (small values, empty
/// containers), so every input decodes to something and generation always ends.
pub struct Gen<'a> {
    data: &'a [u8],
    pos: usize,
    /// Nodes left to create: bounds the tree whatever the input.
    budget: usize,
}

const MAX_DEPTH: usize = 12;

impl<'a> Gen<'a> {
    pub fn new(data: &'a [u8]) -> Gen<'a> {
        Gen {
            data,
            pos: 0,
            budget: 400,
        }
    }

    fn is_done(&self) -> bool {
        self.pos >= self.data.len() || self.budget == 0
    }

    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        for b in &mut out {
            *b = self.byte();
        }
        out
    }

    fn pick<'s>(&mut self, from: &[&'s str]) -> &'s str {
        let i = usize::from(self.byte()) % from.len();
        from[i]
    }

    /// How many children a container gets (0..=3, rarely more).
    fn count(&mut self) -> usize {
        if self.budget == 0 {
            return 0;
        }
        match self.byte() % 16 {
            0..=3 => 0,
            4..=8 => 1,
            9..=11 => 2,
            12..=14 => 3,
            _ => 6,
        }
    }

    fn spend(&mut self) -> bool {
        if self.budget == 0 {
            return false;
        }
        self.budget -= 1;
        true
    }

    fn string(&mut self) -> String {
        match self.byte() % 6 {
            0 => self.pick(FIELDS).to_string(),
            1 => self.pick(PATHS).to_string(),
            2 => self.pick(OPERATORS).to_string(),
            3 => self.pick(ARG_NAMES).to_string(),
            4 => {
                let n = usize::from(self.byte() % 12);
                (0..n)
                    .map(|_| char::from(b' ' + self.byte() % 95))
                    .collect()
            }
            _ => [
                "",
                "abc",
                "ABC",
                "é",
                "\u{1F600}x",
                "%Y-%m-%d",
                "UTC",
                "2021-01-01",
                "i",
                "x*",
            ][usize::from(self.byte()) % 10]
                .to_string(),
        }
    }

    /// A scalar, edge cases favoured.
    pub fn scalar(&mut self) -> Bson {
        match self.byte() % 20 {
            0 => Bson::Int32(i32::from(self.byte() as i8)),
            1 => Bson::Int32([0, 1, -1, i32::MAX, i32::MIN, 2, 100][usize::from(self.byte()) % 7]),
            2 => Bson::Int64(
                [
                    0,
                    1,
                    -1,
                    i64::MAX,
                    i64::MIN,
                    1 << 53,
                    (1 << 53) + 1,
                    86_400_000,
                ][usize::from(self.byte()) % 8],
            ),
            3 => Bson::Int64(i64::from_le_bytes(self.bytes::<8>())),
            4 => Bson::Double(
                [
                    0.0,
                    -0.0,
                    0.5,
                    -1.5,
                    f64::NAN,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    1e308,
                    f64::MIN_POSITIVE,
                    9.223372036854776e18,
                    2.5,
                ][usize::from(self.byte()) % 11],
            ),
            5 => Bson::Double(f64::from_le_bytes(self.bytes::<8>())),
            6 => Bson::Decimal128(Decimal128::from_bytes(self.bytes::<16>())),
            7 => Bson::Decimal128(
                [
                    "0",
                    "-0",
                    "1E+6144",
                    "-1E-6176",
                    "NaN",
                    "Infinity",
                    "-Infinity",
                    "0.1",
                    "123456789012345678901234567890123",
                ][usize::from(self.byte()) % 9]
                    .parse()
                    .unwrap_or(Decimal128::from_bytes([0; 16])),
            ),
            8 | 9 => Bson::String(self.string()),
            10 => Bson::Boolean(self.byte() % 2 == 1),
            11 => Bson::Null,
            12 => Bson::DateTime(bson::DateTime::from_millis(
                [
                    0,
                    -1,
                    i64::MAX,
                    i64::MIN,
                    1_600_000_000_000,
                    253_402_300_800_000,
                ][usize::from(self.byte()) % 6],
            )),
            13 => Bson::Timestamp(Timestamp {
                time: u32::from_le_bytes(self.bytes::<4>()),
                increment: u32::from(self.byte()),
            }),
            14 => Bson::ObjectId(bson::oid::ObjectId::from_bytes(self.bytes::<12>())),
            15 => Bson::Binary(Binary {
                subtype: bson::spec::BinarySubtype::from(self.byte() % 9),
                bytes: (0..self.byte() % 6).map(|i| i.wrapping_mul(37)).collect(),
            }),
            16 => Bson::RegularExpression(Regex {
                pattern: ["a", "^a", "(", "a*?", "\\d+", "", "[", "(?i)x"]
                    [usize::from(self.byte()) % 8]
                    .to_string(),
                options: ["", "i", "m", "x", "s", "imsx", "z"][usize::from(self.byte()) % 7]
                    .to_string(),
            }),
            17 => {
                [Bson::MinKey, Bson::MaxKey, Bson::Undefined][usize::from(self.byte()) % 3].clone()
            }
            18 => Bson::JavaScriptCode("this.a == 1".into()),
            _ => Bson::Int32(i32::from_le_bytes(self.bytes::<4>())),
        }
    }

    /// Any value: scalars, containers, operator objects.
    pub fn value(&mut self, depth: usize) -> Bson {
        if !self.spend() || depth >= MAX_DEPTH {
            return self.scalar();
        }
        match self.byte() % 8 {
            0..=3 => self.scalar(),
            4 => Bson::Array((0..self.count()).map(|_| self.value(depth + 1)).collect()),
            5 => Bson::Document(self.data_doc(depth + 1)),
            6 => {
                let op = self.pick(OPERATORS);
                doc! { op: self.value(depth + 1) }.into()
            }
            _ => Bson::Document(self.arg_doc(depth + 1)),
        }
    }

    /// A document of plain fields (a stored document).
    pub fn data_doc(&mut self, depth: usize) -> Document {
        let mut d = Document::new();
        for _ in 0..self.count() {
            let k = self.pick(&["a", "b", "c", "_id", "x", "0", "1", "a.b", "$a"]);
            let v = if depth >= MAX_DEPTH || !self.spend() {
                self.scalar()
            } else {
                match self.byte() % 4 {
                    0 => Bson::Array(
                        (0..self.count())
                            .map(|_| self.data_value(depth + 1))
                            .collect(),
                    ),
                    1 => Bson::Document(self.data_doc(depth + 1)),
                    _ => self.scalar(),
                }
            };
            d.insert(k, v);
        }
        d
    }

    fn data_value(&mut self, depth: usize) -> Bson {
        if depth >= MAX_DEPTH || !self.spend() {
            return self.scalar();
        }
        match self.byte() % 4 {
            0 => Bson::Document(self.data_doc(depth + 1)),
            1 => Bson::Array(
                (0..self.count())
                    .map(|_| self.data_value(depth + 1))
                    .collect(),
            ),
            _ => self.scalar(),
        }
    }

    /// An object of operator argument names (`{input: ..., as: ..., in: ...}`).
    fn arg_doc(&mut self, depth: usize) -> Document {
        let mut d = Document::new();
        for _ in 0..self.count().max(1) {
            let k = self.pick(ARG_NAMES);
            let v = self.expression(depth + 1);
            d.insert(k, v);
        }
        d
    }

    /// A filter: fields with values or operator objects, logical operators over filters.
    pub fn query_doc(&mut self, depth: usize) -> Document {
        let mut d = Document::new();
        for _ in 0..self.count().max(1) {
            if !self.spend() || depth >= MAX_DEPTH {
                break;
            }
            match self.byte() % 6 {
                5 => {
                    let op = self.pick(&["$and", "$or", "$nor"]);
                    let n = self.count().max(1);
                    let arms: Vec<Bson> =
                        (0..n).map(|_| self.query_doc(depth + 1).into()).collect();
                    d.insert(op, arms);
                }
                1 => {
                    let e = self.expression(depth + 1);
                    d.insert("$expr", e);
                }
                2 => {
                    let f = self.pick(FIELDS);
                    let ops = self.operator_doc(depth + 1);
                    d.insert(f, ops);
                }
                3 => {
                    let f = self.pick(FIELDS);
                    let inner = self.query_doc(depth + 1);
                    d.insert(f, doc! { "$elemMatch": inner });
                }
                4 => {
                    let k = self.pick(&[
                        "$comment",
                        "$jsonSchema",
                        "$where",
                        "$text",
                        "$alwaysTrue",
                        "$alwaysFalse",
                    ]);
                    let v = self.value(depth + 1);
                    d.insert(k, v);
                }
                _ => {
                    // Also what input exhausted to zeros yields: a plain equality.
                    let f = self.pick(FIELDS);
                    let v = self.value(depth + 1);
                    d.insert(f, v);
                }
            }
        }
        d
    }

    /// `{$op: value, ...}` as found under a field of a filter.
    fn operator_doc(&mut self, depth: usize) -> Document {
        if depth >= MAX_DEPTH {
            return doc! { "$eq": self.scalar() };
        }
        const QUERY_OPS: &[&str] = &[
            "$eq",
            "$ne",
            "$gt",
            "$gte",
            "$lt",
            "$lte",
            "$in",
            "$nin",
            "$exists",
            "$type",
            "$size",
            "$all",
            "$mod",
            "$regex",
            "$options",
            "$not",
            "$elemMatch",
            "$bitsAllSet",
            "$bitsAnySet",
            "$bitsAllClear",
            "$bitsAnyClear",
            "$near",
            "$geoWithin",
            "$comment",
            "$eq",
            "$in",
        ];
        let mut d = Document::new();
        for _ in 0..self.count().max(1) {
            let op = self.pick(QUERY_OPS);
            let v = match op {
                "$not" if self.byte().is_multiple_of(2) => {
                    Bson::Document(self.operator_doc(depth + 1))
                }
                "$elemMatch" => Bson::Document(if self.byte().is_multiple_of(2) {
                    self.operator_doc(depth + 1)
                } else {
                    self.query_doc(depth + 1)
                }),
                _ => self.value(depth + 1),
            };
            d.insert(op, v);
        }
        d
    }

    /// An aggregation expression.
    pub fn expression(&mut self, depth: usize) -> Bson {
        if !self.spend() || depth >= MAX_DEPTH {
            return self.scalar();
        }
        match self.byte() % 10 {
            0 => Bson::String(self.pick(PATHS).to_string()),
            1 | 2 => self.scalar(),
            3 => Bson::Array(
                (0..self.count())
                    .map(|_| self.expression(depth + 1))
                    .collect(),
            ),
            4 => Bson::Document(self.arg_doc(depth + 1)),
            _ => {
                let op = self.pick(OPERATORS);
                let arg = match self.byte() % 3 {
                    0 => Bson::Array(
                        (0..self.count())
                            .map(|_| self.expression(depth + 1))
                            .collect(),
                    ),
                    1 => Bson::Document(self.arg_doc(depth + 1)),
                    _ => self.expression(depth + 1),
                };
                doc! { op: arg }.into()
            }
        }
    }

    /// An update: operators over paths, a replacement, or a pipeline.
    pub fn update_spec(&mut self) -> Bson {
        const UPDATE_OPS: &[&str] = &[
            "$set",
            "$unset",
            "$inc",
            "$mul",
            "$min",
            "$max",
            "$rename",
            "$push",
            "$pull",
            "$pullAll",
            "$addToSet",
            "$pop",
            "$bit",
            "$currentDate",
            "$setOnInsert",
        ];
        match self.byte() % 6 {
            0 => Bson::Document(self.data_doc(0)),
            1 => self.pipeline(0),
            _ => {
                let mut d = Document::new();
                for _ in 0..self.count().max(1) {
                    let op = self.pick(UPDATE_OPS);
                    let mut fields = Document::new();
                    for _ in 0..self.count().max(1) {
                        let f = self.pick(FIELDS);
                        let v = match self.byte() % 4 {
                            0 => {
                                let m = self.pick(&[
                                    "$each",
                                    "$slice",
                                    "$sort",
                                    "$position",
                                    "$in",
                                    "$gt",
                                ]);
                                let v = self.value(1);
                                let mut inner = doc! { m: v };
                                if self.byte().is_multiple_of(2) {
                                    inner.insert(
                                        "$each",
                                        Bson::Array(vec![self.value(2), self.value(2)]),
                                    );
                                }
                                Bson::Document(inner)
                            }
                            _ => self.value(1),
                        };
                        fields.insert(f, v);
                    }
                    d.insert(op, fields);
                }
                Bson::Document(d)
            }
        }
    }

    /// A pipeline: an array of `{$stage: arg}` documents.
    pub fn pipeline(&mut self, depth: usize) -> Bson {
        const STAGES: &[&str] = &[
            "$match",
            "$project",
            "$addFields",
            "$set",
            "$unset",
            "$replaceRoot",
            "$replaceWith",
            "$unwind",
            "$group",
            "$sort",
            "$limit",
            "$skip",
            "$count",
            "$sortByCount",
            "$bucket",
            "$bucketAuto",
            "$facet",
            "$lookup",
            "$unionWith",
            "$sample",
            "$redact",
            "$documents",
            "$out",
            "$merge",
            "$planCacheStats",
        ];
        let n = if depth >= 3 { 1 } else { self.count().max(1) };
        let mut stages = Vec::new();
        for _ in 0..n {
            let name = self.pick(STAGES);
            let arg = match name {
                "$match" => Bson::Document(self.query_doc(1)),
                "$limit" | "$skip" => self.scalar(),
                "$facet" if depth < 3 && self.byte().is_multiple_of(2) => {
                    let inner = self.pipeline(depth + 1);
                    doc! { "f": inner }.into()
                }
                "$lookup" | "$unionWith" if depth < 3 && self.byte().is_multiple_of(2) => {
                    let inner = self.pipeline(depth + 1);
                    doc! { "from": "c", "pipeline": inner, "as": "out" }.into()
                }
                _ => match self.byte() % 3 {
                    0 => Bson::Document(self.arg_doc(1)),
                    1 => self.expression(1),
                    _ => Bson::Document(self.data_doc(1)),
                },
            };
            stages.push(Bson::Document(doc! { name: arg }));
        }
        Bson::Array(stages)
    }
}
