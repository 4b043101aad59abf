//! `collMod` `index`: changing an existing index's `hidden` flag or its TTL
//! (`expireAfterSeconds`) in place, without rebuilding it.

use crate::catalog::{self, IndexMeta};
use crate::namespace::Namespace;
use crate::Engine;
use bson::{Bson, Document};
use nidus_common::{Error, ErrorCode, Result};
use std::sync::Arc;

/// What `collMod` asks of one index.
#[derive(Debug, Default, Clone)]
pub struct IndexChange {
    /// `name` or `keyPattern`: which index.
    pub name: Option<String>,
    pub key_pattern: Option<Document>,
    pub hidden: Option<bool>,
    pub expire_after_seconds: Option<i64>,
}

impl IndexChange {
    /// The change a `collMod` oplog entry's `index` field records (as logged by
    /// [`Engine::modify_index`]).
    pub fn from_logged(index: &Document) -> IndexChange {
        IndexChange {
            name: index.get_str("name").ok().map(str::to_string),
            key_pattern: index.get_document("keyPattern").ok().cloned(),
            hidden: index.get_bool("hidden").ok(),
            expire_after_seconds: index
                .get("expireAfterSeconds")
                .and_then(crate::clustered::as_i64),
        }
    }
}

impl Engine {
    /// Applies `change` to the index it names; returns MongoDB's reply fields
    /// (`hidden_old`/`hidden_new`, `expireAfterSeconds_old`/`expireAfterSeconds_new`).
    pub fn modify_index(&self, ns: &Namespace, change: &IndexChange) -> Result<Document> {
        let _ddl = self.ddl.lock();
        let coll = self
            .collection(ns)
            .ok_or_else(|| catalog::namespace_not_found(ns))?;
        let mut meta = coll.meta.write();
        let mut new_meta = meta.clone();
        let found = new_meta.indexes.iter_mut().find(|ix| matches(ix, change));
        let Some(ix) = found else {
            let what = match (&change.name, &change.key_pattern) {
                (Some(n), _) => format!("cannot find index {n} for ns {ns}"),
                (None, Some(k)) => format!(
                    "cannot find index {} for ns {ns}",
                    nidus_common::shell::format(&Bson::Document(k.clone()))
                ),
                (None, None) => format!("cannot find index for ns {ns}"),
            };
            return Err(Error::new(ErrorCode::IndexNotFound, what));
        };
        let mut reply = Document::new();
        if let Some(hidden) = change.hidden {
            if ix.is_id() {
                return Err(Error::bad_value("can't hide _id index"));
            }
            let old = ix.is_hidden();
            if hidden {
                Arc::make_mut(&mut ix.spec).insert("hidden", true);
            } else {
                Arc::make_mut(&mut ix.spec).remove("hidden");
            }
            if old != hidden {
                reply.insert("hidden_old", old);
                reply.insert("hidden_new", hidden);
            }
        }
        if let Some(secs) = change.expire_after_seconds {
            let Some(old) = ix.spec.get("expireAfterSeconds").cloned() else {
                return Err(Error::new(
                    ErrorCode::InvalidOptions,
                    "no expireAfterSeconds field to update",
                ));
            };
            let new = nidus_common::number(secs);
            if old != new {
                reply.insert("expireAfterSeconds_old", old);
                reply.insert("expireAfterSeconds_new", new.clone());
            }
            Arc::make_mut(&mut ix.spec).insert("expireAfterSeconds", new);
        }
        // Logged as MongoDB does: the index by name, with the fields given, so every member
        // (and a rollback's catalog comparison) sees the same spec.
        let mut logged = bson::doc! { "name": ix.name.clone() };
        if let Some(hidden) = change.hidden {
            logged.insert("hidden", hidden);
        }
        if let Some(secs) = ix
            .spec
            .get("expireAfterSeconds")
            .filter(|_| change.expire_after_seconds.is_some())
        {
            logged.insert("expireAfterSeconds", secs.clone());
        }
        let mut txn = self.kv.begin();
        self.write_entry(txn.as_mut(), &coll, &new_meta)?;
        let ops = self.ddl_ops(ns, || {
            crate::oplog::collection_command(
                &coll,
                meta.uuid,
                "collMod",
                bson::doc! { "index": logged },
            )
        });
        self.commit_logged(txn, ops)?;
        // The plan cache keys its entries on each index's hidden flag, so it drops the plans
        // chosen with the old visibility by itself.
        *meta = new_meta;
        Ok(reply)
    }
}

fn matches(ix: &IndexMeta, change: &IndexChange) -> bool {
    match (&change.name, &change.key_pattern) {
        (Some(n), _) => &ix.name == n,
        (None, Some(k)) => &ix.key_document() == k,
        (None, None) => false,
    }
}
