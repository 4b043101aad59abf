//! Index bounds: per-field ordered interval lists, printed as MongoDB prints them, and the
//! checker an index scan consults for every key (MongoDB's `IndexBoundsChecker`).
//!
//! Intervals of one field are kept in *index order* (for a descending field the first
//! interval holds the largest values and each interval runs from high to low), so a forward
//! scan meets them first to last; a backward scan reverses the lists.

use bson::Bson;
use nidus_doc::compare::cmp_bson;
use std::cmp::Ordering;

/// One interval of values; `start` comes first in scan order.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    pub start: Bson,
    pub start_inclusive: bool,
    pub end: Bson,
    pub end_inclusive: bool,
}

impl Interval {
    pub fn point(v: Bson) -> Interval {
        Interval {
            start: v.clone(),
            start_inclusive: true,
            end: v,
            end_inclusive: true,
        }
    }

    pub fn all() -> Interval {
        Interval {
            start: Bson::MinKey,
            start_inclusive: true,
            end: Bson::MaxKey,
            end_inclusive: true,
        }
    }

    pub fn new(start: Bson, start_inclusive: bool, end: Bson, end_inclusive: bool) -> Interval {
        Interval {
            start,
            start_inclusive,
            end,
            end_inclusive,
        }
    }

    pub fn is_point(&self) -> bool {
        self.start_inclusive && self.end_inclusive && cmp_bson(&self.start, &self.end).is_eq()
    }

    pub fn is_all(&self) -> bool {
        let ends = |a: &Bson, b: &Bson| {
            matches!(
                (a, b),
                (Bson::MinKey, Bson::MaxKey) | (Bson::MaxKey, Bson::MinKey)
            )
        };
        self.start_inclusive && self.end_inclusive && ends(&self.start, &self.end)
    }

    /// The same values seen from the other end.
    pub fn reversed(&self) -> Interval {
        Interval {
            start: self.end.clone(),
            start_inclusive: self.end_inclusive,
            end: self.start.clone(),
            end_inclusive: self.start_inclusive,
        }
    }

    /// Empty in ascending orientation (start after end, or equal with an open side).
    fn is_empty_ascending(&self) -> bool {
        match cmp_bson(&self.start, &self.end) {
            Ordering::Greater => true,
            Ordering::Equal => !(self.start_inclusive && self.end_inclusive),
            Ordering::Less => false,
        }
    }

    /// `[1, 1]`, `(10, inf.0]`, `["a", {})`, `[MaxKey, MinKey]`.
    pub fn display(&self) -> String {
        format!(
            "{}{}, {}{}",
            if self.start_inclusive { '[' } else { '(' },
            display_value(&self.start),
            display_value(&self.end),
            if self.end_inclusive { ']' } else { ')' },
        )
    }
}

/// A value as MongoDB's `BSONElement::toString` prints it inside bounds.
pub fn display_value(v: &Bson) -> String {
    match v {
        Bson::MinKey => "MinKey".into(),
        Bson::MaxKey => "MaxKey".into(),
        Bson::Double(d) => display_double(*d),
        Bson::Int32(n) => n.to_string(),
        Bson::Int64(n) => n.to_string(),
        Bson::Decimal128(d) => format!("NumberDecimal(\"{d}\")"),
        Bson::String(s) => format!("\"{s}\""),
        Bson::Null => "null".into(),
        Bson::Undefined => "undefined".into(),
        Bson::Boolean(b) => b.to_string(),
        Bson::ObjectId(o) => format!("ObjectId('{}')", o.to_hex()),
        Bson::DateTime(d) => format!("new Date({})", d.timestamp_millis()),
        Bson::Timestamp(t) => format!("Timestamp({}, {})", t.time, t.increment),
        Bson::RegularExpression(r) => format!("/{}/{}", r.pattern, r.options),
        Bson::Document(d) if d.is_empty() => "{}".into(),
        Bson::Array(a) if a.is_empty() => "[]".into(),
        Bson::Document(d) => {
            let fields: Vec<String> = d
                .iter()
                .map(|(k, v)| format!("{k}: {}", display_value(v)))
                .collect();
            format!("{{ {} }}", fields.join(", "))
        }
        Bson::Array(a) => {
            let items: Vec<String> = a.iter().map(display_value).collect();
            format!("[ {} ]", items.join(", "))
        }
        Bson::Binary(b) => format!("BinData({}, {})", u8::from(b.subtype), hex(&b.bytes)),
        other => other.to_string(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

fn display_double(d: f64) -> String {
    if d.is_nan() {
        "nan.0".into()
    } else if d.is_infinite() {
        if d > 0.0 { "inf.0" } else { "-inf.0" }.into()
    } else if d == d.trunc() && d.abs() < 1e15 {
        format!("{d:.1}")
    } else {
        format!("{d}")
    }
}

/// The intervals of one index field, in index order.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderedIntervalList {
    pub field: String,
    pub intervals: Vec<Interval>,
}

impl OrderedIntervalList {
    pub fn all(field: &str, descending: bool) -> OrderedIntervalList {
        let i = Interval::all();
        OrderedIntervalList {
            field: field.to_string(),
            intervals: vec![if descending { i.reversed() } else { i }],
        }
    }

    /// Builds the list from intervals in ascending value order (any order, overlapping
    /// allowed): sorts, merges, drops empties, then orients them for the field's direction.
    pub fn from_ascending(field: &str, mut ivs: Vec<Interval>, descending: bool) -> Self {
        ivs.retain(|i| !i.is_empty_ascending());
        ivs.sort_by(|a, b| {
            cmp_bson(&a.start, &b.start).then_with(|| b.start_inclusive.cmp(&a.start_inclusive))
        });
        let mut merged: Vec<Interval> = Vec::with_capacity(ivs.len());
        for iv in ivs {
            if let Some(last) = merged.last_mut() {
                let touches = match cmp_bson(&iv.start, &last.end) {
                    Ordering::Less => true,
                    Ordering::Equal => iv.start_inclusive || last.end_inclusive,
                    Ordering::Greater => false,
                };
                if touches {
                    match cmp_bson(&iv.end, &last.end) {
                        Ordering::Greater => {
                            last.end = iv.end;
                            last.end_inclusive = iv.end_inclusive;
                        }
                        Ordering::Equal => last.end_inclusive |= iv.end_inclusive,
                        Ordering::Less => {}
                    }
                    continue;
                }
            }
            merged.push(iv);
        }
        if descending {
            merged.reverse();
            merged = merged.iter().map(Interval::reversed).collect();
        }
        OrderedIntervalList {
            field: field.to_string(),
            intervals: merged,
        }
    }

    /// Intervals in ascending value order (undoing a descending orientation).
    pub fn ascending(&self, descending: bool) -> Vec<Interval> {
        if descending {
            self.intervals
                .iter()
                .rev()
                .map(Interval::reversed)
                .collect()
        } else {
            self.intervals.clone()
        }
    }

    pub fn is_all(&self) -> bool {
        self.intervals.len() == 1 && self.intervals[0].is_all()
    }

    pub fn is_points(&self) -> bool {
        !self.intervals.is_empty() && self.intervals.iter().all(Interval::is_point)
    }

    pub fn reversed(&self) -> OrderedIntervalList {
        OrderedIntervalList {
            field: self.field.clone(),
            intervals: self
                .intervals
                .iter()
                .rev()
                .map(Interval::reversed)
                .collect(),
        }
    }
}

/// Intersection of two ascending interval lists (each sorted, non-overlapping).
pub fn intersect_ascending(a: &[Interval], b: &[Interval]) -> Vec<Interval> {
    let mut out = Vec::new();
    for x in a {
        for y in b {
            let (start, start_inclusive) = match cmp_bson(&x.start, &y.start) {
                Ordering::Greater => (x.start.clone(), x.start_inclusive),
                Ordering::Less => (y.start.clone(), y.start_inclusive),
                Ordering::Equal => (x.start.clone(), x.start_inclusive && y.start_inclusive),
            };
            let (end, end_inclusive) = match cmp_bson(&x.end, &y.end) {
                Ordering::Less => (x.end.clone(), x.end_inclusive),
                Ordering::Greater => (y.end.clone(), y.end_inclusive),
                Ordering::Equal => (x.end.clone(), x.end_inclusive && y.end_inclusive),
            };
            let iv = Interval::new(start, start_inclusive, end, end_inclusive);
            if !iv.is_empty_ascending() {
                out.push(iv);
            }
        }
    }
    out
}

/// Complement of an ascending interval list within `[MinKey, MaxKey]`.
pub fn complement_ascending(ivs: &[Interval]) -> Vec<Interval> {
    let mut out = Vec::new();
    let mut start = Bson::MinKey;
    let mut start_inclusive = true;
    for iv in ivs {
        let gap = Interval::new(
            start.clone(),
            start_inclusive,
            iv.start.clone(),
            !iv.start_inclusive,
        );
        if !gap.is_empty_ascending() {
            out.push(gap);
        }
        start = iv.end.clone();
        start_inclusive = !iv.end_inclusive;
    }
    let tail = Interval::new(start, start_inclusive, Bson::MaxKey, true);
    if !tail.is_empty_ascending() {
        out.push(tail);
    }
    out
}

/// The bounds of one index scan: one list per field of the key pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexBounds {
    pub fields: Vec<OrderedIntervalList>,
}

impl IndexBounds {
    /// `{field: ['[1, 1]', ...], ...}` as explain prints it.
    pub fn to_document(&self) -> bson::Document {
        let mut d = bson::Document::new();
        for oil in &self.fields {
            let items: Vec<Bson> = oil
                .intervals
                .iter()
                .map(|i| Bson::String(i.display()))
                .collect();
            d.insert(oil.field.clone(), items);
        }
        d
    }

    pub fn reversed(&self) -> IndexBounds {
        IndexBounds {
            fields: self
                .fields
                .iter()
                .map(OrderedIntervalList::reversed)
                .collect(),
        }
    }

    /// MongoDB's `isSingleInterval`: point fields, then at most one other interval, then only
    /// all-values fields. Such a scan runs from a start key to an end key, and the key past
    /// the end is not counted as examined.
    pub fn is_single_interval(&self) -> bool {
        let mut i = 0;
        let f = &self.fields;
        while i < f.len() && f[i].intervals.len() == 1 && f[i].intervals[0].is_point() {
            i += 1;
        }
        if i < f.len() && f[i].intervals.len() == 1 {
            i += 1;
        }
        f[i..].iter().all(OrderedIntervalList::is_all)
    }

    /// True when no key can match (some field has no interval).
    pub fn is_empty(&self) -> bool {
        self.fields.iter().any(|f| f.intervals.is_empty())
    }
}

/// Where a value lies relative to one interval, in scan order.
#[derive(Debug, PartialEq, Eq)]
enum Position {
    Before,
    Inside,
    After,
}

/// What the scan should do with a key.
#[derive(Debug, PartialEq)]
pub enum CheckResult {
    /// The key is inside the bounds.
    Valid,
    /// The key is outside; seek to the first key at or after the target.
    Seek(SeekTarget),
    /// No later key can be inside the bounds.
    Done,
}

/// A seek position in scan order: the keys whose first values equal `values` begin here
/// (`inclusive`), or the keys after all of them start here (`!inclusive`).
#[derive(Debug, PartialEq)]
pub struct SeekTarget {
    pub values: Vec<Bson>,
    pub inclusive: bool,
}
/// Walks the bounds in step with a scan; `directions[i]` is true when field `i` is compared
/// descending in scan order (descending field XOR backward scan).
pub struct BoundsChecker {
    bounds: IndexBounds,
    scan_desc: Vec<bool>,
    current: Vec<usize>,
    /// The previous key checked: when a field's value changes, every later field starts
    /// over at its first interval.
    last: Option<Vec<Bson>>,
}

impl BoundsChecker {
    /// `bounds` must already be in scan order.
    pub fn new(bounds: IndexBounds, scan_desc: Vec<bool>) -> BoundsChecker {
        let n = bounds.fields.len();
        BoundsChecker {
            bounds,
            scan_desc,
            current: vec![0; n],
            last: None,
        }
    }

    pub fn bounds(&self) -> &IndexBounds {
        &self.bounds
    }

    fn cmp(&self, field: usize, a: &Bson, b: &Bson) -> Ordering {
        let o = cmp_bson(a, b);
        if self.scan_desc[field] {
            o.reverse()
        } else {
            o
        }
    }

    fn position(&self, field: usize, iv: &Interval, v: &Bson) -> Position {
        match self.cmp(field, v, &iv.start) {
            Ordering::Less => return Position::Before,
            Ordering::Equal if !iv.start_inclusive => return Position::Before,
            _ => {}
        }
        match self.cmp(field, v, &iv.end) {
            Ordering::Greater => Position::After,
            Ordering::Equal if !iv.end_inclusive => Position::After,
            _ => Position::Inside,
        }
    }

    /// The first key to seek to, before any key was read.
    pub fn start(&self) -> SeekTarget {
        let mut target = SeekTarget {
            values: Vec::new(),
            inclusive: true,
        };
        self.extend_with_starts(&mut target, 0);
        target
    }

    /// Appends the current interval's start of fields `from..` while they are inclusive.
    fn extend_with_starts(&self, target: &mut SeekTarget, from: usize) {
        for field in from..self.bounds.fields.len() {
            let Some(iv) = self.bounds.fields[field].intervals.get(self.current[field]) else {
                return;
            };
            target.values.push(iv.start.clone());
            if !iv.start_inclusive {
                target.inclusive = false;
                return;
            }
        }
    }

    /// Checks a key's values (one per field) against the bounds, advancing the current
    /// interval of each field as the scan moves forward.
    pub fn check(&mut self, key: &[Bson]) -> CheckResult {
        if let Some(last) = &self.last {
            let changed = last
                .iter()
                .zip(key)
                .position(|(a, b)| !cmp_bson(a, b).is_eq() || a.element_type() != b.element_type());
            if let Some(at) = changed {
                for later in self.current.iter_mut().skip(at + 1) {
                    *later = 0;
                }
            }
        }
        self.last = Some(key.to_vec());
        for field in 0..self.bounds.fields.len() {
            let Some(v) = key.get(field) else {
                return CheckResult::Valid;
            };
            let n = self.bounds.fields[field].intervals.len();
            loop {
                let idx = self.current[field];
                if idx >= n {
                    return self.advance_prefix(key, field);
                }
                let iv = &self.bounds.fields[field].intervals[idx];
                match self.position(field, iv, v) {
                    Position::Inside => break,
                    Position::Before => {
                        for later in self.current.iter_mut().skip(field + 1) {
                            *later = 0;
                        }
                        let mut target = SeekTarget {
                            values: key[..field].to_vec(),
                            inclusive: true,
                        };
                        self.extend_with_starts(&mut target, field);
                        return CheckResult::Seek(target);
                    }
                    Position::After => {
                        self.current[field] += 1;
                        for later in self.current.iter_mut().skip(field + 1) {
                            *later = 0;
                        }
                    }
                }
            }
        }
        CheckResult::Valid
    }

    /// Field `field` ran out of intervals under the current prefix: move past the prefix.
    fn advance_prefix(&mut self, key: &[Bson], field: usize) -> CheckResult {
        if field == 0 {
            return CheckResult::Done;
        }
        for later in self.current.iter_mut().skip(field) {
            *later = 0;
        }
        // Every key sharing the first `field` values is done: seek past that prefix.
        CheckResult::Seek(SeekTarget {
            values: key[..field].to_vec(),
            inclusive: false,
        })
    }
}

/// The key range of a `min`/`max` query: keys from `start` (inclusive) to `end` (exclusive),
/// compared whole and in index order (MongoDB's "simple range" bounds, which explain prints
/// as `indexBounds: {}`).
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRange {
    pub start: Vec<Bson>,
    pub end: Vec<Bson>,
}

impl KeyRange {
    /// Compares two keys in index order (`descending[i]` for descending fields).
    pub fn compare(a: &[Bson], b: &[Bson], descending: &[bool]) -> Ordering {
        for ((x, y), desc) in a.iter().zip(b).zip(descending) {
            let o = cmp_bson(x, y);
            let o = if *desc { o.reverse() } else { o };
            if o.is_ne() {
                return o;
            }
        }
        Ordering::Equal
    }

    pub fn start(&self) -> SeekTarget {
        SeekTarget {
            values: self.start.clone(),
            inclusive: true,
        }
    }

    /// Valid before the end key, Done from it on (a forward scan never meets keys before the
    /// start, where it was positioned).
    pub fn check(&self, key: &[Bson], descending: &[bool]) -> CheckResult {
        if Self::compare(key, &self.end, descending).is_lt() {
            CheckResult::Valid
        } else {
            CheckResult::Done
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asc(field: &str, ivs: Vec<Interval>) -> OrderedIntervalList {
        OrderedIntervalList::from_ascending(field, ivs, false)
    }

    #[test]
    fn prints_like_mongodb() {
        let cases = [
            (Interval::point(Bson::Int32(1)), "[1, 1]"),
            (
                Interval::new(Bson::Int32(10), false, Bson::Double(f64::INFINITY), true),
                "(10, inf.0]",
            ),
            (Interval::all(), "[MinKey, MaxKey]"),
            (Interval::all().reversed(), "[MaxKey, MinKey]"),
            (Interval::point(Bson::String("a".into())), "[\"a\", \"a\"]"),
            (
                Interval::new(
                    Bson::String("a".into()),
                    true,
                    Bson::Document(Default::default()),
                    false,
                ),
                "[\"a\", {})",
            ),
            (Interval::point(Bson::Double(28.0)), "[28.0, 28.0]"),
            (Interval::point(Bson::Null), "[null, null]"),
        ];
        for (iv, want) in cases {
            assert_eq!(iv.display(), want);
        }
    }

    #[test]
    fn merges_and_orients() {
        let l = OrderedIntervalList::from_ascending(
            "a",
            vec![
                Interval::point(Bson::Int32(3)),
                Interval::point(Bson::Int32(1)),
                Interval::point(Bson::Int32(3)),
                Interval::new(Bson::Int32(1), true, Bson::Int32(2), false),
            ],
            true,
        );
        let shown: Vec<String> = l.intervals.iter().map(Interval::display).collect();
        assert_eq!(shown, ["[3, 3]", "(2, 1]"]);
    }

    #[test]
    fn complement_and_intersection() {
        let c = complement_ascending(&[Interval::point(Bson::Int32(5))]);
        let shown: Vec<String> = c.iter().map(Interval::display).collect();
        assert_eq!(shown, ["[MinKey, 5)", "(5, MaxKey]"]);
        let i = intersect_ascending(
            &[Interval::new(Bson::Int32(1), true, Bson::Int32(10), true)],
            &[Interval::new(Bson::Int32(5), false, Bson::MaxKey, true)],
        );
        assert_eq!(i[0].display(), "(5, 10]");
    }

    #[test]
    fn checker_counts_seeks_like_the_esr_example() {
        // Index {e: 1, s: 1, r: 1}, bounds e [42,42], s all, r (10, inf]; keys as seed 004.
        let bounds = IndexBounds {
            fields: vec![
                asc("e", vec![Interval::point(Bson::Int32(42))]),
                OrderedIntervalList::all("s", false),
                asc(
                    "r",
                    vec![Interval::new(
                        Bson::Int32(10),
                        false,
                        Bson::Double(f64::INFINITY),
                        true,
                    )],
                ),
            ],
        };
        let mut c = BoundsChecker::new(bounds, vec![false; 3]);
        let k =
            |e: i32, s: &str, r: i32| vec![Bson::Int32(e), Bson::String(s.into()), Bson::Int32(r)];
        assert!(matches!(c.check(&k(42, "a", 10)), CheckResult::Seek(_)));
        assert!(matches!(c.check(&k(42, "b", 10)), CheckResult::Seek(_)));
        assert_eq!(c.check(&k(42, "b", 20)), CheckResult::Valid);
        assert_eq!(c.check(&k(42, "d", 30)), CheckResult::Valid);
        assert_eq!(
            c.check(&[Bson::Int32(99), Bson::Null, Bson::Int32(11)]),
            CheckResult::Done
        );
    }
}
