use super::*;
use bson::{doc, Decimal128};
use proptest::prelude::*;
use Ordering::{Equal, Greater, Less};

fn coll(spec: Document) -> Collation {
    match Collation::parse(&spec) {
        Ok(Some(c)) => c,
        other => panic!("{spec}: {other:?}"),
    }
}

#[test]
fn string_order_table() {
    let cases: Vec<(Document, &str, &str, Ordering)> = vec![
        // Strength 1: base letters only.
        (doc! {"locale": "en", "strength": 1}, "a", "A", Equal),
        (doc! {"locale": "en", "strength": 1}, "a", "á", Equal),
        (doc! {"locale": "en", "strength": 1}, "A", "á", Equal),
        (doc! {"locale": "en", "strength": 1}, "a", "b", Less),
        (
            doc! {"locale": "en", "strength": 1},
            "résumé",
            "RESUME",
            Equal,
        ),
        // Strength 2: accents count, case does not.
        (doc! {"locale": "en", "strength": 2}, "a", "A", Equal),
        (doc! {"locale": "en", "strength": 2}, "a", "á", Less),
        (doc! {"locale": "en", "strength": 2}, "á", "b", Less),
        // Strength 3 (the default): case counts, lowercase first.
        (doc! {"locale": "en"}, "a", "A", Less),
        (doc! {"locale": "en", "strength": 3}, "A", "b", Less),
        (doc! {"locale": "en_US"}, "a", "á", Less),
        // caseFirst.
        (doc! {"locale": "en", "caseFirst": "upper"}, "A", "a", Less),
        (doc! {"locale": "en", "caseFirst": "lower"}, "a", "A", Less),
        (doc! {"locale": "da"}, "A", "a", Less),
        // caseLevel adds case to strength 1 and 2, not accents.
        (
            doc! {"locale": "en", "strength": 1, "caseLevel": true},
            "a",
            "A",
            Less,
        ),
        (
            doc! {"locale": "en", "strength": 1, "caseLevel": true},
            "a",
            "á",
            Equal,
        ),
        // numericOrdering.
        (
            doc! {"locale": "en", "numericOrdering": true},
            "10",
            "9",
            Greater,
        ),
        (
            doc! {"locale": "en", "numericOrdering": true},
            "a10",
            "a9",
            Greater,
        ),
        (doc! {"locale": "en"}, "10", "9", Less),
        // alternate: shifted ignores spaces and punctuation below strength 4.
        (
            doc! {"locale": "en", "alternate": "shifted"},
            "a b",
            "ab",
            Equal,
        ),
        (
            doc! {"locale": "en", "alternate": "shifted"},
            "a-b",
            "ab",
            Equal,
        ),
        (
            doc! {"locale": "en", "alternate": "shifted", "strength": 1},
            "A-B",
            "ab",
            Equal,
        ),
        (
            doc! {"locale": "en", "alternate": "shifted", "strength": 2},
            "a.b",
            "ab",
            Equal,
        ),
        (
            doc! {"locale": "en", "alternate": "shifted", "strength": 4},
            "a b",
            "ab",
            Less,
        ),
        (doc! {"locale": "en"}, "a b", "ab", Less),
        (doc! {"locale": "th"}, "a b", "ab", Equal),
        // maxVariable space: only spaces are ignorable.
        (
            doc! {"locale": "en", "alternate": "shifted", "maxVariable": "space"},
            "a b",
            "ab",
            Equal,
        ),
        (
            doc! {"locale": "en", "alternate": "shifted", "maxVariable": "space"},
            "a-b",
            "ab",
            Less,
        ),
        // Identical strength breaks ties by code points.
        (doc! {"locale": "en", "strength": 5}, "a", "a", Equal),
        (
            doc! {"locale": "en", "strength": 5},
            "\u{212B}",
            "\u{00C5}",
            Equal,
        ),
        // Locale tailorings and variants.
        (doc! {"locale": "sv"}, "z", "ä", Less),
        (doc! {"locale": "en"}, "ä", "z", Less),
        (doc! {"locale": "fr"}, "côte", "coté", Greater),
        (doc! {"locale": "fr_CA"}, "côte", "coté", Less),
        (
            doc! {"locale": "de", "strength": 1},
            "Müller",
            "Mueller",
            Greater,
        ),
        (
            doc! {"locale": "de@collation=phonebook", "strength": 1},
            "Müller",
            "Mueller",
            Equal,
        ),
        (doc! {"locale": "es"}, "ch", "cz", Less),
        (
            doc! {"locale": "es@collation=traditional"},
            "ch",
            "cz",
            Greater,
        ),
        (doc! {"locale": "zh"}, "阿", "八", Less),
        (doc! {"locale": "zh_Hant"}, "阿", "八", Greater),
    ];
    for (spec, a, b, want) in cases {
        let c = coll(spec.clone());
        assert_eq!(c.compare_str(a, b), want, "{spec} {a:?} vs {b:?}");
        assert_eq!(c.compare_str(b, a), want.reverse(), "{spec} {b:?} vs {a:?}");
        assert_eq!(
            c.sort_key(a).cmp(&c.sort_key(b)),
            want,
            "key {spec} {a:?} {b:?}"
        );
    }
}

#[test]
fn simple_locale_is_binary() {
    let cases = [
        doc! {"locale": "simple"},
        // MongoDB type-checks the other fields of a simple spec, then ignores them.
        doc! {"locale": "simple", "strength": 2},
        doc! {"locale": "simple", "caseLevel": true, "caseFirst": "upper"},
    ];
    for spec in cases {
        assert!(matches!(Collation::parse(&spec), Ok(None)), "{spec}");
    }
}

#[test]
fn parse_errors() {
    let unknown = |f: &str| {
        (
            40415,
            format!("BSON field 'collation.{f}' is an unknown field."),
        )
    };
    let wrong = |f: &str, got: &str, want: &str| {
        (
            14,
            format!("BSON field 'collation.{f}' is the wrong type '{got}', expected type '{want}'"),
        )
    };
    let bad_enum = |f: &str, v: &str| {
        (
            2,
            format!("Enumeration value '{v}' for field 'collation.{f}' is not a valid value."),
        )
    };
    let case_first = |spec: &str| {
        (
            2,
            format!(
                "'caseFirst' is invalid unless 'caseLevel' is on or 'strength' is greater than 2 \
                 in: {spec}"
            ),
        )
    };
    let cases: Vec<(Document, (i32, String))> = vec![
        (
            doc! {},
            (40414, "BSON field 'collation.locale' is missing but a required field".into()),
        ),
        (
            doc! {"locale": null},
            (40414, "BSON field 'collation.locale' is missing but a required field".into()),
        ),
        (doc! {"locale": 3}, wrong("locale", "int", "string")),
        (doc! {"locale": "en", "foo": 1}, unknown("foo")),
        // Fields are checked in document order.
        (doc! {"foo": 1, "locale": 3}, unknown("foo")),
        (doc! {"locale": 3, "foo": 1}, wrong("locale", "int", "string")),
        (doc! {"locale": "simple", "foo": 1}, unknown("foo")),
        (doc! {"locale": "simple", "strength": "2"}, (14, strength_type("string"))),
        (doc! {"locale": "en", "caseLevel": 1}, wrong("caseLevel", "int", "bool")),
        (doc! {"locale": "en", "caseFirst": true}, wrong("caseFirst", "bool", "string")),
        (doc! {"locale": "en", "caseFirst": "none"}, bad_enum("caseFirst", "none")),
        (doc! {"locale": "en", "strength": "2"}, (14, strength_type("string"))),
        (
            doc! {"locale": "en", "strength": 6},
            (51024, "BSON field 'collation.strength' value must be <= 5, actual value '6'".into()),
        ),
        (
            doc! {"locale": "en", "strength": -1},
            (51024, "BSON field 'collation.strength' value must be >= 0, actual value '-1'".into()),
        ),
        (
            doc! {"locale": "en", "strength": 1e12},
            (
                51024,
                "BSON field 'collation.strength' value must be <= 5, actual value '2147483647'"
                    .into(),
            ),
        ),
        (doc! {"locale": "en", "strength": 0}, bad_enum("strength", "0")),
        (doc! {"locale": "en", "strength": f64::NAN}, bad_enum("strength", "0")),
        (doc! {"locale": "en", "numericOrdering": "yes"}, wrong("numericOrdering", "string", "bool")),
        (doc! {"locale": "en", "alternate": "ignore"}, bad_enum("alternate", "ignore")),
        (doc! {"locale": "en", "maxVariable": "symbol"}, bad_enum("maxVariable", "symbol")),
        (doc! {"locale": "en", "normalization": 0}, wrong("normalization", "int", "bool")),
        (
            doc! {"locale": "en", "backwards": 1},
            (14, "Field 'backwards' should be a boolean value, but found: int".into()),
        ),
        (
            doc! {"locale": "en", "backwards": null},
            (14, "Field 'backwards' should be a boolean value, but found: null".into()),
        ),
        (doc! {"locale": "en", "version": 57}, wrong("version", "int", "string")),
        (
            doc! {"locale": "en\0"},
            (2, "Field 'locale' cannot contain null byte. Collation spec: { locale: \"en\0\" }".into()),
        ),
        (
            doc! {"locale": ""},
            (2, "Field 'locale' cannot be the empty string in: { locale: \"\" }".into()),
        ),
        (
            doc! {"locale": "garbage"},
            (2, "Field 'locale' is invalid in: { locale: \"garbage\" }".into()),
        ),
        (doc! {"locale": "root"}, (2, "Field 'locale' is invalid in: { locale: \"root\" }".into())),
        (doc! {"locale": "en-US"}, did_you_mean("en-US", "en_US")),
        (doc! {"locale": "en_GB"}, did_you_mean("en_GB", "en")),
        (doc! {"locale": "EN_US"}, did_you_mean("EN_US", "en_US")),
        (doc! {"locale": "zh_HANT"}, did_you_mean("zh_HANT", "zh_Hant")),
        (doc! {"locale": "en_US@collation=phonebook"}, did_you_mean("en_US@collation=phonebook", "en_US")),
        // The locale is validated before the strength enum and the version.
        (
            doc! {"locale": "garbage", "strength": 0},
            (2, "Field 'locale' is invalid in: { locale: \"garbage\", strength: 0 }".into()),
        ),
        (doc! {"locale": "en", "strength": 0, "version": "1"}, bad_enum("strength", "0")),
        (
            doc! {"locale": "en", "version": "1.0"},
            (
                161,
                "Requested collation version 1.0 but the only available collator version was \
                 57.1. Requested collation spec: { locale: \"en\", version: \"1.0\" }"
                    .into(),
            ),
        ),
        (
            doc! {"locale": "en", "strength": 1, "backwards": true},
            (
                2,
                "'backwards' is invalid with 'strength' of 1 in: { locale: \"en\", strength: 1, \
                 backwards: true }"
                    .into(),
            ),
        ),
        (
            doc! {"locale": "fr_CA", "strength": 1},
            (
                2,
                "'backwards' is invalid with 'strength' of 1 in: { locale: \"fr_CA\", strength: 1 }"
                    .into(),
            ),
        ),
        (
            doc! {"locale": "en", "strength": 2, "caseFirst": "upper"},
            case_first("{ locale: \"en\", strength: 2, caseFirst: \"upper\" }"),
        ),
        // Danish defaults to caseFirst upper, which strength 1 cannot honour.
        (doc! {"locale": "da", "strength": 1}, case_first("{ locale: \"da\", strength: 1 }")),
    ];
    for (spec, (code, message)) in cases {
        match Collation::parse(&spec) {
            Err(e) => {
                assert_eq!(e.code.code(), code, "{spec}: {}", e.message);
                assert_eq!(e.message, message, "{spec}");
            }
            Ok(c) => panic!("{spec} parsed: {c:?}"),
        }
    }
}

fn strength_type(got: &str) -> String {
    format!(
        "BSON field 'collation.strength' is the wrong type '{got}', expected types '[long, int, \
         decimal, double]'"
    )
}

fn did_you_mean(id: &str, hint: &str) -> (i32, String) {
    (
        2,
        format!("Field 'locale' is invalid in: {{ locale: \"{id}\" }}. Did you mean '{hint}'?"),
    )
}

#[test]
fn resolved_spec_table() {
    let full = |locale: &str| {
        doc! {
            "locale": locale, "caseLevel": false, "caseFirst": "off", "strength": 3,
            "numericOrdering": false, "alternate": "non-ignorable", "maxVariable": "punct",
            "normalization": false, "backwards": false, "version": "57.1",
        }
    };
    let with = |mut d: Document, changes: Document| {
        for (k, v) in changes {
            d.insert(k, v);
        }
        d
    };
    let cases: Vec<(Document, Document)> = vec![
        (doc! {"locale": "en"}, full("en")),
        (doc! {"locale": "en_US", "version": "57.1"}, full("en_US")),
        (
            doc! {"locale": "fr_CA"},
            with(full("fr_CA"), doc! {"backwards": true}),
        ),
        (doc! {"locale": "fr_CA", "backwards": false}, full("fr_CA")),
        (
            doc! {"locale": "da"},
            with(full("da"), doc! {"caseFirst": "upper"}),
        ),
        // A null option is present with the IDL default, overriding the locale's.
        (doc! {"locale": "da", "caseFirst": null}, full("da")),
        (
            doc! {"locale": "th"},
            with(
                full("th"),
                doc! {"alternate": "shifted", "normalization": true},
            ),
        ),
        (
            doc! {"locale": "vi"},
            with(full("vi"), doc! {"normalization": true}),
        ),
        (
            doc! {"locale": "de@collation=search"},
            with(full("de@collation=search"), doc! {"normalization": true}),
        ),
        (
            doc! {"locale": "en", "strength": 1.9},
            with(full("en"), doc! {"strength": 1}),
        ),
        (
            doc! {"locale": "en", "strength": 2_i64},
            with(full("en"), doc! {"strength": 2}),
        ),
        (
            doc! {"locale": "en", "strength": "3.5".parse::<Decimal128>().expect("lit")},
            full("en"),
        ),
        (
            doc! {
                "locale": "en", "strength": 2, "caseLevel": true, "caseFirst": "upper",
                "numericOrdering": true, "alternate": "shifted", "maxVariable": "space",
                "normalization": true, "backwards": true,
            },
            doc! {
                "locale": "en", "caseLevel": true, "caseFirst": "upper", "strength": 2,
                "numericOrdering": true, "alternate": "shifted", "maxVariable": "space",
                "normalization": true, "backwards": true, "version": "57.1",
            },
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(coll(spec.clone()).to_document(), want, "{spec}");
    }
}

#[test]
fn equality_and_sharing() {
    let a = coll(doc! {"locale": "en", "strength": 2});
    let b = coll(doc! {"strength": 2, "locale": "en"});
    let c = coll(doc! {"locale": "en"});
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_eq!(a.clone(), a);
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Collation>();
}

fn sample_collations() -> &'static [Collation] {
    static SAMPLES: std::sync::OnceLock<Vec<Collation>> = std::sync::OnceLock::new();
    SAMPLES.get_or_init(|| {
        [
            doc! {"locale": "en", "strength": 1},
            doc! {"locale": "en", "strength": 2},
            doc! {"locale": "en"},
            doc! {"locale": "en", "strength": 1, "caseLevel": true},
            doc! {"locale": "en", "caseFirst": "upper"},
            doc! {"locale": "en", "numericOrdering": true},
            doc! {"locale": "en", "alternate": "shifted"},
            doc! {"locale": "en", "alternate": "shifted", "strength": 4},
            doc! {"locale": "en", "strength": 5},
            doc! {"locale": "fr_CA"},
            doc! {"locale": "de@collation=phonebook"},
        ]
        .into_iter()
        .map(coll)
        .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// `compare_str` is a total order: it agrees with the byte order of the sort keys (itself
    /// a total order), for every sample collation.
    #[test]
    fn compare_agrees_with_sort_keys(a in "[aAáÁäbBcC eé\\-.,09]{0,6}", b in "[aAáÁäbBcC eé\\-.,09]{0,6}") {
        for c in sample_collations() {
            let want = c.sort_key(&a).cmp(&c.sort_key(&b));
            prop_assert_eq!(c.compare_str(&a, &b), want, "{:?} {:?} {:?}", c, a, b);
            prop_assert_eq!(c.compare_str(&b, &a), want.reverse(), "{:?} {:?} {:?}", c, b, a);
        }
    }
}
