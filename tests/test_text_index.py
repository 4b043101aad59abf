"""Text indexes and $text (issue 22).

Cases are the MongoDB manual's text search examples (the `articles`, `blog` and `quotes`
collections of the $text, text index, weights and language pages) with the manual's results;
scores follow MongoDB's FTS scoring (fts_spec.cpp): per indexed string, a term seen n times in
a string of `tokens` non-stop-word tokens scores
weight * (1 + 1/2 + ... + 1/2^(n-1)) * (0.5 * n / tokens + 0.5), times 1.1 when the term is the
whole string, summed over strings and over the query's terms.
"""

from __future__ import annotations

import pytest
from pymongo.errors import OperationFailure, WriteError

ARTICLES = [
    {"_id": 1, "subject": "coffee", "author": "xyz", "views": 50},
    {"_id": 2, "subject": "Coffee Shopping", "author": "efg", "views": 5},
    {"_id": 3, "subject": "Baking a cake", "author": "abc", "views": 90},
    {"_id": 4, "subject": "baking", "author": "xyz", "views": 100},
    {"_id": 5, "subject": "Café Con Leche", "author": "abc", "views": 200},
    {"_id": 6, "subject": "Сырники", "author": "jkl", "views": 80},
    {"_id": 7, "subject": "coffee and cream", "author": "efg", "views": 10},
    {"_id": 8, "subject": "Cafe con Leche", "author": "xyz", "views": 10},
]


@pytest.fixture
def articles(db):
    db.articles.insert_many(ARTICLES)
    db.articles.create_index([("subject", "text")])
    return db.articles


def ids(cursor):
    return sorted(d["_id"] for d in cursor)


# ($text operand, the manual's matching _ids)
SEARCHES = [
    ({"$search": "coffee"}, [1, 2, 7]),
    ({"$search": "bake coffee cake"}, [1, 2, 3, 4, 7]),
    ({"$search": "\"coffee shop\""}, [2]),
    ({"$search": "coffee -shop"}, [1, 7]),
    ({"$search": "leche", "$language": "es"}, [5, 8]),
    ({"$search": "Coffee"}, [1, 2, 7]),
    ({"$search": "Coffee", "$caseSensitive": True}, [2]),
    ({"$search": "\"Café Con Leche\"", "$caseSensitive": True}, [5]),
    ({"$search": "Coffee -shop", "$caseSensitive": True}, [2]),
    ({"$search": "CAFÉ", "$diacriticSensitive": True}, [5]),
    ({"$search": "leches -cafés", "$diacriticSensitive": True}, [8]),
    ({"$search": "café"}, [5, 8]),
    ({"$search": "сырники"}, [6]),
    # Only stop words or only negations: nothing to scan.
    ({"$search": "the and a"}, []),
    ({"$search": "-coffee"}, []),
    # A phrase's words are also searched for; "-" inside a word is a delimiter.
    # Phrases ignore diacritics unless asked not to.
    ({"$search": "\"con leche\" -\"café con\""}, []),
    ({"$search": "\"con leche\" -\"café con\"", "$diacriticSensitive": True}, [8]),
    ({"$search": "coffee-shop"}, [1, 2, 7]),
]


@pytest.mark.parametrize("text,expected", SEARCHES, ids=lambda x: repr(x))
def test_manual_searches(articles, text, expected):
    assert ids(articles.find({"$text": text})) == expected
    # The same through aggregate's leading $match and through count.
    assert ids(articles.aggregate([{"$match": {"$text": text}}])) == expected
    assert articles.count_documents({"$text": text}) == len(expected)


def test_text_score_projection_and_sort(articles):
    out = list(articles.find({"$text": {"$search": "coffee"}},
                             {"score": {"$meta": "textScore"}, "_id": 1})
               .sort([("score", {"$meta": "textScore"})]))
    # "coffee": one token, the stem "coffe" is not the whole string: 1.0; "Coffee Shopping"
    # and "coffee and cream" ("and" a stop word): two tokens, 0.75.
    assert out[0] == {"_id": 1, "score": 1.0}
    assert sorted((d["_id"], d["score"]) for d in out[1:]) == [(2, 0.75), (7, 0.75)]
    cake = list(articles.find({"$text": {"$search": "cake"}}, {"score": {"$meta": "textScore"}}))
    assert cake == [{"_id": 3, "subject": "Baking a cake", "author": "abc", "views": 90,
                     "score": 0.75}]
    # Exact-string boost: "baking" stems to "bake" (no boost); none matches the whole string.
    whole = list(articles.find({"$text": {"$search": "baking"}},
                               {"_id": 1, "s": {"$meta": "textScore"}}).sort("_id", 1))
    assert whole == [{"_id": 3, "s": 0.75}, {"_id": 4, "s": 1.0}]


def test_sort_by_score_then_field_with_limit(articles):
    out = list(articles.find({"$text": {"$search": "coffee cake"}}, {"_id": 1})
               .sort([("score", {"$meta": "textScore"}), ("views", -1)]).limit(3))
    # coffee: 1.0 (_id 1); 0.75 each for 2 (views 5), 3 (views 90), 7 (views 10).
    assert [d["_id"] for d in out] == [1, 3, 7]


def test_aggregate_scores(articles):
    out = list(articles.aggregate([
        {"$match": {"$text": {"$search": "coffee"}}},
        {"$sort": {"score": {"$meta": "textScore"}, "_id": 1}},
        {"$project": {"_id": 1, "score": {"$meta": "textScore"}}},
    ]))
    assert out == [{"_id": 1, "score": 1.0}, {"_id": 2, "score": 0.75},
                   {"_id": 7, "score": 0.75}]


def test_aggregate_errors(articles):
    with pytest.raises(OperationFailure) as e:
        list(articles.aggregate([{"$sort": {"_id": 1}}, {"$match": {"$text": {"$search": "x"}}}]))
    assert e.value.code == 17313
    assert "$match with $text is only allowed as the first pipeline stage" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        list(articles.aggregate([{"$match": {"views": 5}},
                                 {"$sort": {"s": {"$meta": "textScore"}}}]))
    assert e.value.code == 40218
    with pytest.raises(OperationFailure) as e:
        list(articles.aggregate([{"$match": {"views": 5}},
                                 {"$project": {"s": {"$meta": "textScore"}}}]))
    assert e.value.code == 40218


def test_other_predicates_and_skip(articles):
    got = ids(articles.find({"$text": {"$search": "coffee cake"}, "views": {"$gte": 10}}))
    assert got == [1, 3, 7]
    got = ids(articles.find({"$and": [{"$text": {"$search": "coffee"}}, {"author": "efg"}]}))
    assert got == [2, 7]
    out = list(articles.find({"$text": {"$search": "coffee"}}).sort("_id", 1).skip(1).limit(1))
    assert [d["_id"] for d in out] == [2]


def test_writes_maintain_the_index(articles):
    articles.update_one({"_id": 4}, {"$set": {"subject": "coffee beans"}})
    articles.delete_one({"_id": 1})
    articles.insert_one({"_id": 9, "subject": "Coffees"})
    assert ids(articles.find({"$text": {"$search": "coffee"}})) == [2, 4, 7, 9]
    assert ids(articles.find({"$text": {"$search": "baking"}})) == [3]
    assert db_validate_ok(articles)


def db_validate_ok(coll):
    out = coll.database.command("validate", coll.name)
    return out["valid"]


# --- weights, wildcard, compound -------------------------------------------------------------

BLOG = [
    {"_id": 1, "content": "This morning I had a cup of coffee.", "about": "beverage",
     "keywords": ["coffee"]},
    {"_id": 2, "content": "Who likes chocolate ice cream for dessert?", "about": "food",
     "keywords": ["poll"]},
    {"_id": 3, "content": "My favorite flavors are strawberry and chocolate.", "about": "food",
     "keywords": ["ice cream", "dessert"]},
]


def test_weights_spec_and_scores(db):
    db.blog.insert_many(BLOG)
    name = db.blog.create_index([("content", "text"), ("keywords", "text"), ("about", "text")],
                                weights={"content": 10, "keywords": 5}, name="TextIndex")
    spec = next(ix for ix in db.blog.list_indexes() if ix["name"] == name)
    assert spec.to_dict() == {
        "v": 2, "key": {"_fts": "text", "_ftsx": 1}, "name": "TextIndex",
        "weights": {"about": 1, "content": 10, "keywords": 5},
        "default_language": "english", "language_override": "language",
        "textIndexVersion": 3,
    }
    out = {d["_id"]: d["score"] for d in db.blog.find({"$text": {"$search": "coffee"}},
                                                      {"score": {"$meta": "textScore"}})}
    # content: morning, cup, coffee -> 3 tokens; keywords: "coffee" alone.
    assert out == {1: pytest.approx(10 * (0.5 / 3 + 0.5) + 5 * 1.0)}
    out = {d["_id"]: d["score"] for d in db.blog.find({"$text": {"$search": "dessert food"}},
                                                      {"score": {"$meta": "textScore"}})}
    # about "food" is the whole string: 1.1; content of 2: likes, chocolate, ice, cream,
    # dessert -> 5 tokens; keywords of 3: "dessert" whole string.
    assert out == {2: pytest.approx(1.1 + 10 * (0.5 / 5 + 0.5)),
                   3: pytest.approx(1.1 + 5 * 1.1)}


def test_wildcard_text_index(db):
    db.c.insert_many([{"_id": 1, "a": "red apple", "b": {"c": "green pear"}},
                      {"_id": 2, "x": ["yellow banana", {"y": "red cherry"}]},
                      {"_id": 3, "n": 5}])
    db.c.create_index([("$**", "text")])
    spec = next(ix for ix in db.c.list_indexes() if ix["name"] == "$**_text")
    assert spec["key"] == {"_fts": "text", "_ftsx": 1}
    assert spec["weights"] == {"$**": 1}
    assert ids(db.c.find({"$text": {"$search": "red"}})) == [1, 2]
    assert ids(db.c.find({"$text": {"$search": "pear"}})) == [1]
    assert ids(db.c.find({"$text": {"$search": "banana"}})) == [2]


def test_compound_prefix_and_suffix(db):
    db.inv.insert_many([
        {"_id": 1, "dept": "kitchen", "description": "green apple peeler", "qty": 5},
        {"_id": 2, "dept": "kitchen", "description": "red apple corer", "qty": 0},
        {"_id": 3, "dept": "food", "description": "red apple", "qty": 9},
    ])
    db.inv.create_index([("dept", 1), ("description", "text"), ("qty", -1)])
    spec = next(ix for ix in db.inv.list_indexes() if ix["name"] != "_id_")
    assert spec["key"] == {"dept": 1, "_fts": "text", "_ftsx": 1, "qty": -1}
    assert spec["name"] == "dept_1_description_text_qty_-1"
    assert ids(db.inv.find({"dept": "kitchen", "$text": {"$search": "apple"}})) == [1, 2]
    assert ids(db.inv.find({"dept": {"$eq": "food"}, "$text": {"$search": "apple"}})) == [3]
    assert ids(db.inv.find({"dept": "kitchen", "qty": {"$gt": 0},
                            "$text": {"$search": "apple"}})) == [1]
    with pytest.raises(OperationFailure) as e:
        list(db.inv.find({"$text": {"$search": "apple"}}))
    assert e.value.code == 291
    assert "are equality predicates given for all prefix fields?" in str(e.value)
    with pytest.raises(OperationFailure) as e:
        list(db.inv.find({"dept": {"$in": ["food"]}, "$text": {"$search": "apple"}}))
    assert e.value.code == 291
    # Arrays on a non-text key field cannot be indexed.
    with pytest.raises(WriteError) as e:
        db.inv.insert_one({"dept": ["a", "b"], "description": "x"})
    assert "of text index contains an array in document" in str(e.value)


# --- languages ----------------------------------------------------------------------------

QUOTES = [
    {"_id": 1, "language": "portuguese", "original": "A sorte protege os audazes.",
     "translation": [{"language": "english", "quote": "Fortune favors the bold."},
                     {"language": "spanish", "quote": "La suerte protege a los audaces."}]},
    {"_id": 2, "language": "spanish", "original": "Nada hay más surrealista que la realidad.",
     "translation": [{"language": "english", "quote": "There is nothing more surreal than reality."},
                     {"language": "french",
                      "quote": "Il n'y a rien de plus surréaliste que la réalité."}]},
    {"_id": 3, "original": "is this a dagger which I see before me.",
     "translation": {"language": "spanish", "quote": "Es este un puñal que veo delante de mí."}},
]


def test_language_override_per_document_and_subdocument(db):
    db.quotes.insert_many(QUOTES)
    db.quotes.create_index([("original", "text"), ("translation.quote", "text")])
    # Spanish stems "audaces" to "audac"; the query's language decides the query's stems.
    assert ids(db.quotes.find({"$text": {"$search": "audaces", "$language": "es"}})) == [1]
    assert ids(db.quotes.find({"$text": {"$search": "realidad", "$language": "spanish"}})) == [2]
    assert ids(db.quotes.find({"$text": {"$search": "fortunes"}})) == [1]
    assert ids(db.quotes.find({"$text": {"$search": "dagger"}})) == [3]
    assert ids(db.quotes.find({"$text": {"$search": "puñal", "$language": "es"}})) == [3]
    # The index holds each document's stems ("Fortune" in English: "fortun"); a query in
    # "none" searches its words unstemmed.
    assert ids(db.quotes.find({"$text": {"$search": "fortune", "$language": "none"}})) == []
    assert ids(db.quotes.find({"$text": {"$search": "fortun", "$language": "none"}})) == [1]


def test_default_language_and_custom_override(db):
    db.c.insert_many([{"_id": 1, "t": "Les chats mangent", "idioma": "fr"},
                      {"_id": 2, "t": "the cats eat"},
                      {"_id": 3, "t": "die Katzen essen"}])
    db.c.create_index([("t", "text")], default_language="german", language_override="idioma")
    spec = next(ix for ix in db.c.list_indexes() if ix["name"] == "t_text")
    assert spec["default_language"] == "german"
    assert spec["language_override"] == "idioma"
    assert ids(db.c.find({"$text": {"$search": "katze"}})) == [3]
    assert ids(db.c.find({"$text": {"$search": "chat", "$language": "french"}})) == [1]
    # "die" is a German stop word: nothing to search for.
    assert ids(db.c.find({"$text": {"$search": "die"}})) == []


# (language, document text, search, matches): stop words of the language find nothing,
# stemmed forms find each other.
LANGUAGE_CASES = [
    ("italian", "il gatto nero", "il", False),
    ("it", "il gatto nero", "gatti", True),
    ("portuguese", "os gatos pretos", "os", False),
    ("dutch", "de zwarte katten", "kat", True),
    ("russian", "без кошки", "без", False),
    ("swedish", "och katterna", "och", False),
    ("danish", "katten og hunden", "og", False),
    ("finnish", "ja kissat", "ja", False),
    ("romanian", "și pisicile", "și", True),
    ("none", "the running dogs", "the", True),
    ("none", "the running dogs", "run", False),
]


@pytest.mark.parametrize("lang,text,search,found", LANGUAGE_CASES, ids=lambda x: repr(x))
def test_language_stop_words_and_stems(db, lang, text, search, found):
    db.c.create_index([("t", "text")], default_language=lang)
    db.c.insert_one({"_id": 1, "t": text})
    assert ids(db.c.find({"$text": {"$search": search}})) == ([1] if found else [])


def test_language_errors(db):
    db.c.create_index([("t", "text")])
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"t": "x", "language": "klingon"})
    assert e.value.code == 17262
    assert "language override unsupported: klingon" in str(e.value)
    with pytest.raises(WriteError) as e:
        db.c.insert_one({"t": "x", "language": 5})
    assert e.value.code == 17261
    db.c.insert_one({"t": "fine"})
    with pytest.raises(OperationFailure) as e:
        list(db.c.find({"$text": {"$search": "x", "$language": "klingon"}}))
    assert e.value.code == 2
    assert 'unsupported language: "klingon"' in str(e.value)


# --- index spec errors ---------------------------------------------------------------------

# (key, options, error code)
BAD_SPECS = [
    ({"a": "text"}, {"default_language": "klingon"}, 67),
    ({"a": "text"}, {"weights": {"a": 0}}, 67),
    ({"a": "text"}, {"weights": {"a": "x"}}, 67),
    ({"a": "text"}, {"language_override": "$x"}, 67),
    ({"a": "text"}, {"textIndexVersion": 7}, 67),
    ({"a": "text", "b": 1, "c": "text"}, {}, 67),
    ({"_fts": 1, "a": "text"}, {}, 67),
    ({"a": "text"}, {"collation": {"locale": "fr"}}, 67),
]


@pytest.mark.parametrize("key,options,code", BAD_SPECS, ids=lambda x: repr(x))
def test_bad_text_specs(db, key, options, code):
    with pytest.raises(OperationFailure) as e:
        db.c.create_index(list(key.items()), **options)
    assert e.value.code == code
    assert len(list(db.c.list_indexes())) <= 1


def test_one_text_index_per_collection(db):
    db.c.create_index([("a", "text")])
    # The same spec again is a no-op; another text index conflicts.
    db.c.create_index([("a", "text")])
    with pytest.raises(OperationFailure) as e:
        db.c.create_index([("b", "text")])
    assert e.value.code == 85
    assert "An equivalent index already exists with a different name and options" in str(e.value)
    assert len(list(db.c.list_indexes())) == 2


def test_partial_text_index(db):
    db.c.insert_many([{"_id": 1, "t": "red apple", "n": 5}, {"_id": 2, "t": "red cherry", "n": 1}])
    db.c.create_index([("t", "text")], partialFilterExpression={"n": {"$gt": 2}})
    assert ids(db.c.find({"$text": {"$search": "red"}, "n": {"$gt": 3}})) == [1]
    # Without predicates implying the filter the index cannot answer (documents are missing).
    with pytest.raises(OperationFailure) as e:
        list(db.c.find({"$text": {"$search": "red"}}))
    assert e.value.code == 291


def test_query_errors(db):
    db.c.insert_one({"a": "hello"})
    with pytest.raises(OperationFailure) as e:
        list(db.c.find({"$text": {"$search": "hello"}}))
    assert e.value.code == 27
    assert "text index required for $text query" in str(e.value)
    db.c.create_index([("a", "text")])
    with pytest.raises(OperationFailure) as e:
        list(db.c.find({"a": "x"}, {"s": {"$meta": "textScore"}}))
    assert e.value.code == 40218
    with pytest.raises(OperationFailure) as e:
        list(db.c.find({"$text": {"$search": 5}}))
    assert e.value.code == 14
    with pytest.raises(OperationFailure) as e:
        list(db.c.find({"$text": {"$search": "x", "$bogus": 1}}))
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        list(db.c.find({"$and": [{"$text": {"$search": "a"}}, {"$text": {"$search": "b"}}]}))
    assert e.value.code == 2
    assert "Too many text expressions" in str(e.value)
    # A text index answers only $text.
    assert ids(db.c.find({"a": "hello"})) == [d["_id"] for d in db.c.find()]


def test_explain_stages(articles):
    ex = articles.find({"$text": {"$search": "coffee -shop \"coffee\""}}).explain()
    plan = ex["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "TEXT_MATCH"
    assert plan["indexName"] == "subject_text"
    assert plan["textIndexVersion"] == 3
    assert plan["parsedTextQuery"] == {"terms": ["coffe"], "negatedTerms": ["shop"],
                                       "phrases": ["coffee"], "negatedPhrases": []}
    assert plan["inputStage"]["stage"] == "FETCH"
    assert plan["inputStage"]["inputStage"]["stage"] == "OR"
    scan = plan["inputStage"]["inputStage"]["inputStage"]
    assert scan["stage"] == "IXSCAN"
    assert scan["keyPattern"] == {"_fts": "text", "_ftsx": 1}
    assert scan["direction"] == "backward"
    ex = articles.database.command(
        "explain", {"find": "articles", "filter": {"$text": {"$search": "coffee cake"}},
                    "projection": {"score": {"$meta": "textScore"}}},
        verbosity="executionStats")
    plan = ex["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "PROJECTION_DEFAULT"
    text_or = plan["inputStage"]["inputStage"]
    assert text_or["stage"] == "TEXT_OR"
    assert [s["stage"] for s in text_or["inputStages"]] == ["IXSCAN", "IXSCAN"]
    assert ex["executionStats"]["nReturned"] == 4
    assert ex["executionStats"]["totalKeysExamined"] == 4
