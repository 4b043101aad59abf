//! Pull-based document streams between pipeline stages.

use bson::Document;
use nidus_common::Result;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A stage's output: `next` returns the next document, or None at the end.
pub trait DocStream: Send {
    fn next(&mut self) -> Result<Option<Document>>;
    /// Splits a stream that has returned nothing yet into at most `n` streams that together
    /// return its documents, the first's before the second's and so on, each readable on a
    /// thread of its own (a parallel `$group`). None: it does not split; it is unchanged.
    fn split(&mut self, _n: usize) -> Option<Vec<Stream>> {
        None
    }
}

pub type Stream = Box<dyn DocStream>;

/// Documents computed ahead of time (a blocking stage's results, `$documents`, test input).
pub struct VecStream {
    docs: VecDeque<Document>,
}

impl VecStream {
    pub fn new(docs: Vec<Document>) -> VecStream {
        VecStream { docs: docs.into() }
    }

    pub fn boxed(docs: Vec<Document>) -> Stream {
        Box::new(VecStream::new(docs))
    }
}

impl DocStream for VecStream {
    fn next(&mut self) -> Result<Option<Document>> {
        Ok(self.docs.pop_front())
    }
}

/// An empty stream.
pub struct Empty;

impl DocStream for Empty {
    fn next(&mut self) -> Result<Option<Document>> {
        Ok(None)
    }
}

/// Counts what a stage returns (explain's `nReturned` per stage).
pub struct Counted {
    pub inner: Stream,
    pub count: Arc<AtomicU64>,
}

impl DocStream for Counted {
    fn next(&mut self) -> Result<Option<Document>> {
        let d = self.inner.next()?;
        if d.is_some() {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
        Ok(d)
    }

    fn split(&mut self, n: usize) -> Option<Vec<Stream>> {
        let parts = self.inner.split(n)?;
        Some(
            parts
                .into_iter()
                .map(|inner| {
                    Box::new(Counted {
                        inner,
                        count: self.count.clone(),
                    }) as Stream
                })
                .collect(),
        )
    }
}

/// Drains a stream into a vector.
pub fn collect(mut s: Stream) -> Result<Vec<Document>> {
    let mut out = Vec::new();
    while let Some(d) = s.next()? {
        out.push(d);
    }
    Ok(out)
}

type Build<T> = fn(&T, Stream, &crate::pipeline::ExpCtx) -> Result<Stream>;

/// A blocking stage's stream: does its work on the first `next` (not when the pipeline is
/// opened), then returns the results.
pub struct Deferred<T: Send + Sync + 'static> {
    pending: Option<(Stream, crate::pipeline::ExpCtx, Arc<T>)>,
    build: Build<T>,
    out: Option<Stream>,
}

impl<T: Send + Sync + 'static> Deferred<T> {
    pub fn new(
        input: Stream,
        ctx: crate::pipeline::ExpCtx,
        stage: Arc<T>,
        build: Build<T>,
    ) -> Self {
        Deferred {
            pending: Some((input, ctx, stage)),
            build,
            out: None,
        }
    }
}

impl<T: Send + Sync + 'static> DocStream for Deferred<T> {
    fn next(&mut self) -> Result<Option<Document>> {
        if let Some((input, ctx, stage)) = self.pending.take() {
            self.out = Some((self.build)(&stage, input, &ctx)?);
        }
        match &mut self.out {
            Some(s) => s.next(),
            None => Ok(None),
        }
    }
}
