"""The Node.js driver and Mongoose against nidus: the pagination query real applications run
and a unique "if present" (partial) index, with MongoDB's results.

scripts/test.sh installs the packages (scripts/lib.sh ensure_node_drivers) into
tests/.node/drivers; this test runs the same step if they are missing and skips (with the
reason) only when npm cannot fetch them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DRIVERS = ROOT / "tests" / ".node" / "drivers"

SCRIPT = r"""
const { MongoClient } = require('mongodb');
const mongoose = require('mongoose');

async function main() {
  const uri = process.argv[2];
  const out = {};
  const client = new MongoClient(uri);
  await client.connect();
  const db = client.db('t_node');
  await db.dropDatabase();
  const c = db.collection('c');
  await c.insertMany(Array.from({ length: 50 }, (_, i) => ({ _id: i, v: i % 5 })));
  // The "older page" query: the page before _id 40, newest first.
  out.page = (await c.find({ _id: { $lt: 40 } }).sort({ _id: -1 }).limit(3).toArray()).map(d => d._id);
  out.pageAgg = (await c.aggregate([{ $match: { _id: { $lt: 40 } } }, { $sort: { _id: -1 } }, { $limit: 3 }]).toArray()).map(d => d._id);
  const fam = await c.findOneAndUpdate({ _id: { $lt: 40 } }, { $set: { seen: true } }, { sort: { _id: -1 }, returnDocument: 'after' });
  out.findOneAndUpdate = fam && fam._id;
  out.nextPage = (await c.find({ _id: { $lt: 37 } }).sort({ _id: -1 }).limit(3).toArray()).map(d => d._id);
  out.pageByV = (await c.find({ v: 2, _id: { $lt: 40 } }).sort({ _id: -1 }).limit(2).toArray()).map(d => d._id);
  await c.createIndex({ v: 1, _id: -1 });
  out.pageByVIndexed = (await c.find({ v: 2, _id: { $lt: 40 } }).sort({ _id: -1 }).limit(2).toArray()).map(d => d._id);
  await client.close();

  await mongoose.connect(uri, { dbName: 't_node' });
  const User = mongoose.model('User', new mongoose.Schema({
    name: String,
    email: { type: String },
  }));
  await User.collection.createIndex({ email: 1 }, { unique: true, partialFilterExpression: { email: { $exists: true } } });
  // Each insert's outcome: 'ok' or the error code (two users without email must both fit).
  out.inserts = [];
  for (const u of [{ name: 'a' }, { name: 'b' }, { name: 'c', email: 'c@x.org' }, { name: 'd', email: 'c@x.org' }]) {
    try {
      await User.create(u);
      out.inserts.push('ok');
    } catch (e) {
      out.inserts.push(e.code);
    }
  }
  out.users = (await User.find({}, { _id: 0, name: 1, email: 1 }).sort({ name: 1 }).lean()).map(u => u.name + ':' + (u.email || ''));
  out.withEmail = (await User.find({ email: { $exists: true } }).lean()).map(u => u.name);
  const older = await User.find().sort({ _id: -1 }).limit(2).lean();
  out.newestTwo = older.map(u => u.name);
  await mongoose.connection.db.dropDatabase();
  await mongoose.disconnect();
  console.log(JSON.stringify(out));
}
main().catch(e => { console.error(e); process.exit(1); });
"""


@pytest.fixture(scope="module")
def node_drivers():
    node = shutil.which("node")
    if not node:
        pytest.skip("node is not installed")
    if not (DRIVERS / "node_modules" / "mongoose").exists():
        subprocess.run(["bash", "-c", f"source {ROOT}/scripts/lib.sh && ensure_node_drivers"],
                       capture_output=True, text=True, timeout=1200)
    if not (DRIVERS / "node_modules" / "mongoose").exists():
        err = DRIVERS / "INSTALL_ERROR"
        pytest.skip(f"npm could not install the Node.js driver and Mongoose: "
                    f"{err.read_text() if err.exists() else '?'}")
    return node


def test_node_driver_and_mongoose(node_drivers, nidus_server, tmp_path):
    script = tmp_path / "run.js"
    script.write_text(SCRIPT)
    env = {**os.environ, "NODE_PATH": str(DRIVERS / "node_modules")}
    uri = f"mongodb://127.0.0.1:{nidus_server.port}/?directConnection=true&serverSelectionTimeoutMS=10000"
    r = subprocess.run([node_drivers, str(script), uri], capture_output=True, text=True, timeout=120,
                       env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"node exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # MongoDB's results.
    # page, pageAgg, findOneAndUpdate: wrong before the bounds fix on main (issue 18).
    assert out["page"] == [39, 38, 37], json.dumps(out)
    assert out["pageAgg"] == [39, 38, 37]
    assert out["findOneAndUpdate"] == 39
    assert out["nextPage"] == [36, 35, 34]
    assert out["pageByV"] == [37, 32]
    assert out["pageByVIndexed"] == [37, 32]
    assert out["inserts"] == ["ok", "ok", "ok", 11000]
    assert out["users"] == ["a:", "b:", "c:c@x.org"]
    assert out["withEmail"] == ["c"]
    assert out["newestTwo"] == ["c", "b"]


WATCH_SCRIPT = r"""
const { MongoClient } = require('mongodb');
const mongoose = require('mongoose');

function within(ms, p) {
  return Promise.race([p, new Promise((_, rej) => setTimeout(() => rej(new Error('timeout')), ms))]);
}

async function main() {
  const uri = process.argv[2];
  const out = {};
  const client = new MongoClient(uri);
  await client.connect();
  const db = client.db('t_node_watch');
  await db.dropDatabase();
  const c = db.collection('c');
  await c.insertOne({ _id: 0 });
  const stream = c.watch([{ $match: { operationType: { $in: ['insert', 'update', 'delete'] } } }],
                         { fullDocument: 'updateLookup' });
  await stream.tryNext();  // sends the aggregate: later writes are seen
  await c.insertOne({ _id: 1, a: 1 });
  await c.updateOne({ _id: 1 }, { $set: { a: 2 } });
  await c.deleteOne({ _id: 1 });
  const evs = [];
  for (let i = 0; i < 3; i++) evs.push(await within(10000, stream.next()));
  out.types = evs.map(e => e.operationType);
  out.inserted = evs[0].fullDocument;
  out.updatedFields = evs[1].updateDescription.updatedFields;
  out.removedFields = evs[1].updateDescription.removedFields;
  out.lookedUp = evs[1].fullDocument;
  out.deletedKey = evs[2].documentKey;
  out.ns = evs[0].ns;
  await stream.close();
  // Resuming after the first event gives the second.
  const resumed = c.watch([], { resumeAfter: evs[0]._id });
  out.resumed = (await within(10000, resumed.next())).operationType;
  await resumed.close();
  // db.watch(): events of every collection of the database.
  const dbStream = db.watch();
  await dbStream.tryNext();
  await db.collection('d').insertOne({ _id: 'x' });
  const de = await within(10000, dbStream.next());
  out.dbWatch = [de.operationType, de.ns.coll, de.documentKey._id];
  await dbStream.close();
  await client.close();

  // Mongoose Model.watch(), from an operation time taken before the writes.
  await mongoose.connect(uri, { dbName: 't_node_watch' });
  const Item = mongoose.model('Item', new mongoose.Schema({ name: String, qty: Number }));
  await Item.createCollection();
  const start = (await mongoose.connection.db.command({ ping: 1 })).operationTime;
  const ms = Item.watch([], { fullDocument: 'updateLookup', startAtOperationTime: start });
  const changes = [];
  const two = new Promise(resolve => ms.on('change', ch => {
    changes.push(ch);
    if (changes.length === 2) resolve();
  }));
  const it = await Item.create({ name: 'pen', qty: 1 });
  await Item.updateOne({ _id: it._id }, { $inc: { qty: 2 } });
  await within(10000, two);
  out.mongoose = changes.map(ch => [ch.operationType, ch.fullDocument.name, ch.fullDocument.qty]);
  await ms.close();
  await mongoose.connection.db.dropDatabase();
  await mongoose.disconnect();
  console.log(JSON.stringify(out));
}
main().catch(e => { console.error(e); process.exit(1); });
"""


def test_node_driver_and_mongoose_watch(node_drivers, rs_member, tmp_path):
    """collection.watch(), db.watch() and Mongoose's Model.watch() on a one-member set."""
    script = tmp_path / "watch.js"
    script.write_text(WATCH_SCRIPT)
    env = {**os.environ, "NODE_PATH": str(DRIVERS / "node_modules")}
    uri = f"mongodb://127.0.0.1:{rs_member.port}/?directConnection=true&serverSelectionTimeoutMS=10000"
    r = subprocess.run([node_drivers, str(script), uri], capture_output=True, text=True, timeout=120,
                       env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"node exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["types"] == ["insert", "update", "delete"], json.dumps(out)
    assert out["inserted"] == {"_id": 1, "a": 1}
    assert out["updatedFields"] == {"a": 2} and out["removedFields"] == []
    assert out["lookedUp"] is None  # the delete came before the lookup of the update
    assert out["deletedKey"] == {"_id": 1}
    assert out["ns"] == {"db": "t_node_watch", "coll": "c"}
    assert out["resumed"] == "update"
    assert out["dbWatch"] == ["insert", "d", "x"]
    assert out["mongoose"] == [["insert", "pen", 1], ["update", "pen", 3]]
