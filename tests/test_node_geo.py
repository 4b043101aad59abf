"""Mongoose with a 2dsphere field (issue 22): the schema's index, `$near` through
`Model.find().near()`-style queries and `$geoWithin`, with MongoDB's results.

Runs like tests/test_node.py (same packages, skipped with the reason when npm cannot fetch
them).
"""

from __future__ import annotations

import json
import os
import subprocess

from test_node import DRIVERS, node_drivers  # noqa: F401  (the fixture)

SCRIPT = r"""
const mongoose = require('mongoose');

async function main() {
  const uri = process.argv[2];
  const out = {};
  await mongoose.connect(uri, { dbName: 't_node_geo' });
  await mongoose.connection.db.dropDatabase();
  const Place = mongoose.model('Place', new mongoose.Schema({
    name: String,
    location: {
      type: { type: String, enum: ['Point'], required: true },
      coordinates: { type: [Number], required: true },
    },
  }).index({ location: '2dsphere' }));
  await Place.init();
  await Place.create([
    { name: 'Central Park', location: { type: 'Point', coordinates: [-73.97, 40.77] } },
    { name: 'Sara D. Roosevelt Park', location: { type: 'Point', coordinates: [-73.9928, 40.7193] } },
    { name: 'Polo Grounds', location: { type: 'Point', coordinates: [-73.9375, 40.8303] } },
  ]);
  const idx = await Place.collection.indexes();
  out.index = idx.filter(i => i.name === 'location_2dsphere').map(i => i['2dsphereIndexVersion']);
  out.near = (await Place.find({ location: { $near: { $geometry: { type: 'Point', coordinates: [-73.9667, 40.78] },
                                                      $maxDistance: 6500 } } }).lean()).map(p => p.name);
  out.within = (await Place.find({ location: { $geoWithin: { $centerSphere: [[-73.97, 40.77], 2 / 3963.2] } } })
    .lean()).map(p => p.name);
  try {
    await Place.create({ name: 'Nowhere', location: { type: 'Point', coordinates: [200, 100] } });
    out.bad = 'ok';
  } catch (e) {
    out.bad = e.code;
  }
  await mongoose.connection.db.dropDatabase();
  await mongoose.disconnect();
  console.log(JSON.stringify(out));
}
main().catch(e => { console.error(e); process.exit(1); });
"""


def run_script(node, server, path, text) -> dict:
    """Runs a Node script against the server; its last stdout line is its JSON result."""
    path.write_text(text)
    env = {**os.environ, "NODE_PATH": str(DRIVERS / "node_modules")}
    uri = f"mongodb://127.0.0.1:{server.port}/?directConnection=true&serverSelectionTimeoutMS=10000"
    r = subprocess.run([node, str(path), uri], capture_output=True, text=True, timeout=120,
                       env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"node exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_mongoose_2dsphere_schema(node_drivers, nidus_server, tmp_path):  # noqa: F811
    out = run_script(node_drivers, nidus_server, tmp_path / "geo.js", SCRIPT)
    assert out["index"] == [3], json.dumps(out)
    assert out["near"] == ["Central Park", "Polo Grounds"]
    assert out["within"] == ["Central Park"]
    assert out["bad"] == 16755


TEXT_SCRIPT = r"""
const mongoose = require('mongoose');

async function main() {
  const uri = process.argv[2];
  const out = {};
  await mongoose.connect(uri, { dbName: 't_node_text' });
  await mongoose.connection.db.dropDatabase();
  const Shop = mongoose.model('Shop', new mongoose.Schema({ title: String, body: String })
    .index({ title: 'text', body: 'text' }, { weights: { title: 10 }, name: 'shop_text' }));
  await Shop.init();
  await Shop.create([
    { title: 'Tea house', body: 'We also serve coffee' },
    { title: 'Coffee shop', body: 'Best espresso in town' },
    { title: 'Bakery', body: 'Bread and cakes' },
  ]);
  const idx = (await Shop.collection.indexes()).find(i => i.name === 'shop_text');
  out.index = { key: idx.key, weights: idx.weights, language: idx.default_language,
                version: idx.textIndexVersion };
  const hits = await Shop.find({ $text: { $search: 'coffees' } }, { score: { $meta: 'textScore' } })
    .sort({ score: { $meta: 'textScore' } }).lean();
  out.hits = hits.map(h => h.title);
  out.scored = hits.every(h => h.score > 0) && hits[0].score > hits[1].score;
  out.phrase = (await Shop.find({ $text: { $search: '"serve coffee" -espresso' } }).lean()).map(h => h.title);
  try {
    await Shop.collection.createIndex({ other: 'text' });
    out.second = 'ok';
  } catch (e) {
    out.second = e.code;
  }
  await mongoose.connection.db.dropDatabase();
  await mongoose.disconnect();
  console.log(JSON.stringify(out));
}
main().catch(e => { console.error(e); process.exit(1); });
"""


def test_mongoose_text_index_schema(node_drivers, nidus_server, tmp_path):  # noqa: F811
    """A Mongoose schema with a weighted compound text index: the stored spec, `$text` with
    stemming, scores and their sort, phrases and negations, and one text index per
    collection (85)."""
    out = run_script(node_drivers, nidus_server, tmp_path / "text.js", TEXT_SCRIPT)
    assert out["index"] == {"key": {"_fts": "text", "_ftsx": 1}, "weights": {"body": 1, "title": 10},
                            "language": "english", "version": 3}, json.dumps(out)
    assert out["hits"] == ["Coffee shop", "Tea house"]
    assert out["scored"] is True
    assert out["phrase"] == ["Tea house"]
    assert out["second"] == 85
