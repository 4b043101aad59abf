use super::AccumulatorSpec;
use crate::{ParseContext, Variables};
use bson::{bson, doc, Bson, Document};

/// Runs one accumulator spec over documents (one group) and returns the result.
fn run(spec: Bson, docs: &[Document]) -> nidus_common::Result<Bson> {
    let ctx = ParseContext::new();
    let spec = AccumulatorSpec::parse_field("out", &spec, &ctx)?;
    let key = doc! {"_id": null};
    let mut acc = spec.create(&mut Variables::for_doc(&key))?;
    for d in docs {
        let v = spec.input(&mut Variables::for_doc(d))?;
        acc.process(v)?;
    }
    acc.finalize()
}

fn code(r: nidus_common::Result<Bson>) -> i32 {
    r.expect_err("error").code.code()
}

#[test]
fn accumulators() {
    let docs = vec![
        doc! {"x": 1, "s": "b", "o": {"a": 1}, "k": 3},
        doc! {"x": 2.5, "s": "a", "o": {"b": 2}, "k": 1},
        doc! {"s": null, "k": 2},
        doc! {"x": 4i64, "s": "a", "o": {"a": 3}, "k": 5},
    ];
    let cases: Vec<(Bson, Bson)> = vec![
        (bson!({"$sum": "$x"}), bson!(7.5)),
        (bson!({"$sum": 1}), bson!(4)),
        (bson!({"$count": {}}), bson!(4)),
        (bson!({"$sum": "$k"}), bson!(11)),
        (bson!({"$sum": "$missing"}), bson!(0)),
        (bson!({"$avg": "$x"}), bson!(2.5)),
        (bson!({"$avg": "$missing"}), Bson::Null),
        (bson!({"$min": "$s"}), bson!("a")),
        (bson!({"$max": "$x"}), bson!(4i64)),
        (bson!({"$max": "$missing"}), Bson::Null),
        (bson!({"$first": "$x"}), bson!(1)),
        (bson!({"$last": "$x"}), bson!(4i64)),
        (bson!({"$push": "$x"}), bson!([1, 2.5, 4i64])),
        (bson!({"$addToSet": "$s"}), bson!([null, "a", "b"])),
        (bson!({"$mergeObjects": "$o"}), bson!({"a": 3, "b": 2})),
        (bson!({"$stdDevPop": "$k"}), bson!(1.479019945774904)),
        (bson!({"$stdDevSamp": "$missing"}), Bson::Null),
        (bson!({"$firstN": {"input": "$x", "n": 2}}), bson!([1, 2.5])),
        (
            bson!({"$lastN": {"input": "$x", "n": 2}}),
            bson!([null, 4i64]),
        ),
        (bson!({"$maxN": {"input": "$k", "n": 2}}), bson!([5, 3])),
        (
            bson!({"$minN": {"input": "$x", "n": 5}}),
            bson!([1, 2.5, 4i64]),
        ),
        (
            bson!({"$top": {"sortBy": {"k": 1}, "output": "$s"}}),
            bson!("a"),
        ),
        (
            bson!({"$bottom": {"sortBy": {"k": 1}, "output": "$k"}}),
            bson!(5),
        ),
        (
            bson!({"$topN": {"n": 2, "sortBy": {"k": -1}, "output": "$k"}}),
            bson!([5, 3]),
        ),
        (
            bson!({"$bottomN": {"n": 2, "sortBy": {"k": -1}, "output": "$k"}}),
            bson!([2, 1]),
        ),
    ];
    for (spec, want) in cases {
        let got = run(spec.clone(), &docs).unwrap_or_else(|e| panic!("{spec}: {e}"));
        assert_eq!(got, want, "{spec}");
    }
    assert_eq!(code(run(bson!({"$foo": 1}), &docs)), 15952);
    assert_eq!(code(run(bson!({"$sum": [1, 2]}), &docs)), 40237);
    assert_eq!(code(run(bson!(1), &docs)), 40234);
    assert_eq!(code(run(bson!({"$sum": 1, "$avg": 1}), &docs)), 40238);
    assert_eq!(code(run(bson!({"$mergeObjects": "$x"}), &docs)), 40400);
    assert_eq!(
        code(run(bson!({"$firstN": {"input": "$x", "n": 0}}), &docs)),
        5787908
    );
    assert_eq!(
        code(run(bson!({"$firstN": {"input": "$x"}}), &docs)),
        5787906
    );
}

#[test]
fn sums_widen() {
    let docs = vec![doc! {"v": i32::MAX}, doc! {"v": 1}];
    assert_eq!(
        run(bson!({"$sum": "$v"}), &docs).expect("sum"),
        bson!(2147483648i64)
    );
    let docs = vec![doc! {"v": i64::MAX}, doc! {"v": 1i64}];
    assert_eq!(
        run(bson!({"$sum": "$v"}), &docs).expect("sum"),
        bson!(9.223372036854776e18)
    );
    let dec: bson::Decimal128 = "0.1".parse().expect("dec");
    let docs = vec![doc! {"v": dec}, doc! {"v": 1}];
    assert_eq!(
        run(bson!({"$sum": "$v"}), &docs).expect("sum"),
        Bson::Decimal128("1.1".parse().expect("dec"))
    );
}

#[test]
fn partial_merge() {
    let ctx = ParseContext::new();
    let key = doc! {};
    for name in ["$sum", "$avg", "$min", "$push", "$addToSet", "$stdDevPop"] {
        let spec = AccumulatorSpec::parse_field("f", &bson!({name: "$v"}), &ctx).expect("spec");
        let mut a = spec.create(&mut Variables::for_doc(&key)).expect("acc");
        let mut b = spec.create(&mut Variables::for_doc(&key)).expect("acc");
        let mut whole = spec.create(&mut Variables::for_doc(&key)).expect("acc");
        for (i, v) in [1, 5, 2, 8].iter().enumerate() {
            let val = Some(Bson::Int32(*v));
            if i < 2 {
                a.process(val.clone()).expect("p")
            } else {
                b.process(val.clone()).expect("p")
            }
            whole.process(val).expect("p");
        }
        a.merge(b.partial().expect("partial")).expect("merge");
        assert_eq!(
            a.finalize().expect("f"),
            whole.finalize().expect("f"),
            "{name}"
        );
    }
}

/// Infinities and overflow: the compensation turns NaN, the plain sum is the answer
/// (MongoDB's `DoubleDoubleSummation`), for `$sum` and `$avg` alike, folded or not.
#[test]
fn sums_of_infinities() {
    let inf = f64::INFINITY;
    let cases: [(&[f64], f64); 6] = [
        (&[5.0, inf], inf),
        (&[inf, 5.0], inf),
        (&[-inf, 1.0, 2.0], -inf),
        (&[1e308, 1e308], inf),
        (&[1e308, 1e308, -1e308], inf),
        (&[0.5, 0.25, 1.0], 1.75),
    ];
    for (values, want) in cases {
        let docs: Vec<Document> = values.iter().map(|v| doc! {"v": *v}).collect();
        assert_eq!(
            run(bson!({"$sum": "$v"}), &docs).expect("sum"),
            bson!(want),
            "{values:?}"
        );
        let avg = run(bson!({"$avg": "$v"}), &docs).expect("avg");
        assert_eq!(avg, bson!(want / values.len() as f64), "{values:?}");
    }
    for values in [&[inf, -inf][..], &[f64::NAN, 1.0]] {
        let docs: Vec<Document> = values.iter().map(|v| doc! {"v": *v}).collect();
        let sum = run(bson!({"$sum": "$v"}), &docs).expect("sum");
        assert!(
            matches!(sum, Bson::Double(d) if d.is_nan()),
            "{values:?}: {sum}"
        );
    }
}

/// A state folded from consecutive parts of the input (a parallel `$group`) finalizes as
/// the state of the whole input, for every accumulator that folds exactly.
#[test]
fn absorb_equals_one_pass() {
    let ctx = ParseContext::new();
    let key = doc! {};
    let mut docs: Vec<Document> = (0..40i64)
        .map(|i| match i % 5 {
            0 => doc! {"v": i},
            1 => doc! {"v": (i as f64) * 0.1},
            2 => doc! {"v": i64::MAX - i},
            3 => doc! {"v": {"a": i % 3, "b": i}},
            _ => doc! {"w": i},
        })
        .collect();
    docs.push(doc! {"v": bson::Decimal128::from_bytes([1; 16])});
    // A later part whose sum rounds on its own: 1e16 + 1 is not a double, so only a fold of
    // the exact state (not of the rounded partial value) gives the whole input's 1e16 + 2.
    let rounding: Vec<Document> = [1.0, 1e16, 1.0].iter().map(|v| doc! {"v": *v}).collect();
    for name in ["$sum", "$avg"] {
        let spec = AccumulatorSpec::parse_field("f", &bson!({name: "$v"}), &ctx).expect("spec");
        let fed = |part: &[Document]| {
            let mut acc = spec.create(&mut Variables::for_doc(&key)).expect("acc");
            for d in part {
                acc.process(spec.input(&mut Variables::for_doc(d)).expect("input"))
                    .expect("process");
            }
            acc
        };
        let mut first = fed(&rounding[..1]);
        first.absorb(fed(&rounding[1..])).expect("absorb");
        let want = if name == "$sum" {
            1e16 + 2.0
        } else {
            (1e16 + 2.0) / 3.0
        };
        assert_eq!(first.finalize().expect("finalize"), bson!(want), "{name}");
    }
    // `$count` takes no input and `$mergeObjects` only documents (both folded in the
    // `$group` tests).
    let names = super::FOLD_EXACTLY
        .iter()
        .copied()
        .filter(|n| !matches!(*n, "$count" | "$mergeObjects"));
    for name in names {
        let spec = AccumulatorSpec::parse_field("f", &bson!({name: "$v"}), &ctx).expect("spec");
        let create = || spec.create(&mut Variables::for_doc(&key)).expect("acc");
        let feed = |acc: &mut Box<dyn super::Accumulator>, part: &[Document]| {
            for d in part {
                acc.process(spec.input(&mut Variables::for_doc(d)).expect("input"))
                    .expect("process");
            }
        };
        let mut whole = create();
        feed(&mut whole, &docs);
        let want = whole.finalize().expect("finalize");
        for cut in [1, 13, 27, 40] {
            let (mut first, mut later) = (create(), create());
            feed(&mut first, &docs[..cut]);
            feed(&mut later, &docs[cut..]);
            first.absorb(later).expect("absorb");
            assert_eq!(
                first.finalize().expect("finalize"),
                want,
                "{name} cut at {cut}"
            );
        }
    }
}
