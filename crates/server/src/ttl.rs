//! The TTL monitor: every `ttlMonitorSleepSecs` (60 s by default) a pass
//! deletes, from each clustered collection with `expireAfterSeconds`, the
//! documents whose `_id` is a date from 1970-01-01 up to that many seconds
//! ago, and through each TTL index (`expireAfterSeconds` on a one-field
//! secondary index) the documents whose field holds a date (in an array:
//! any date) that many seconds old, as mongod's TTL monitor does. Other
//! values never expire.
//! `ttlMonitorEnabled: false` pauses it. `serverStatus.metrics.ttl`
//! counts passes and deleted documents.
//!
//! Deletes are acknowledged once journaled, without waiting for their
//! fsync (as mongod's TTL deletes use no `j`); the next group commit or
//! checkpoint makes them durable.

use crate::server::Shared;
use doc::catalog::{Ack, Collection, DocError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// `ttlMonitorSleepSecs`' default, as mongod's.
pub const SLEEP_SECS_DEFAULT: u64 = 60;

/// Documents deleted per read of a collection's expired range.
const BATCH: usize = 512;

#[derive(Debug)]
pub struct Ttl {
    pub enabled: AtomicBool,
    pub sleep_secs: AtomicU64,
    pub passes: AtomicU64,
    pub deleted: AtomicU64,
}

impl Default for Ttl {
    fn default() -> Ttl {
        Ttl {
            enabled: AtomicBool::new(true),
            sleep_secs: AtomicU64::new(SLEEP_SECS_DEFAULT),
            passes: AtomicU64::new(0),
            deleted: AtomicU64::new(0),
        }
    }
}

/// One pass over every collection; returns the documents it deleted.
pub fn pass(shared: &Shared) -> u64 {
    let engine = shared.catalog.engine();
    let now = bson::DateTime::now().timestamp_millis();
    let mut deleted = 0;
    for db in shared.catalog.databases() {
        for coll in shared.catalog.list(&db) {
            for ix in coll.indexes().into_iter().filter(|ix| ix.is_ready()) {
                let Some(ttl) = ix.expire_after_seconds() else { continue };
                let until = now.saturating_sub(ttl.saturating_mul(1000));
                match expire_through(engine, &coll, ix, until) {
                    Ok(n) => deleted += n,
                    Err(e) => tracing::debug!(ns = %coll.ns, error = %e, "TTL index pass stopped"),
                }
            }
            if !coll.is_clustered() {
                continue;
            }
            let ttl = match coll.options.get("expireAfterSeconds") {
                Some(bson::Bson::Int64(s)) => *s,
                Some(bson::Bson::Int32(s)) => i64::from(*s),
                _ => continue,
            };
            let until = now.saturating_sub(ttl.saturating_mul(1000));
            // A collection dropped meanwhile fails its reads: it is
            // skipped, and the pass goes on with the others.
            match expire(engine, &coll, until) {
                Ok(n) => deleted += n,
                Err(e) if shared.catalog.get(&coll.ns).is_none() => {
                    tracing::debug!(ns = %coll.ns, error = %e, "TTL skipped a dropped collection")
                }
                Err(e) => tracing::warn!(ns = %coll.ns, error = %e, "TTL deletes failed"),
            }
        }
    }
    shared.ttl.passes.fetch_add(1, Ordering::Relaxed);
    shared.ttl.deleted.fetch_add(deleted, Ordering::Relaxed);
    deleted
}

/// Delete `coll`'s documents whose `_id` is a date up to `until`.
fn expire(engine: &storage::Engine, coll: &Collection, until: i64) -> Result<u64, DocError> {
    let mut deleted = 0;
    loop {
        let batch = coll.expired(engine, until, BATCH)?;
        let mut gone = 0;
        for (rid, d) in &batch {
            gone += u64::from(coll.delete(engine, *rid, d, (Ack::Written, &Default::default()), None)?);
        }
        deleted += gone;
        // A batch that deleted nothing lost every race to other writers:
        // the next pass looks again.
        if batch.len() < BATCH || gone == 0 {
            return Ok(deleted);
        }
    }
}

/// Delete the documents the TTL index `ix` holds a date key up to
/// `until` for.
fn expire_through(
    engine: &storage::Engine,
    coll: &std::sync::Arc<Collection>,
    ix: std::sync::Arc<doc::index::Index>,
    until: i64,
) -> Result<u64, DocError> {
    use query::bounds::Interval;
    let dates = Interval {
        low: bson::Bson::DateTime(bson::DateTime::from_millis(i64::MIN)),
        low_inclusive: true,
        high: bson::Bson::DateTime(bson::DateTime::from_millis(until)),
        high_inclusive: true,
    };
    let stats = std::sync::Arc::new(crate::exec::index_scan::ScanStats::default());
    let scan = query::plan::IndexScan {
        index: 0,
        bounds: vec![vec![dates]],
        fetch_filter: None,
        covered: false,
        key_range: None,
        reverse: false,
        sorted: false,
        wildcard_path: None,
    };
    let records =
        crate::exec::index_scan::records(storage::Reader::Latest(engine.clone()), coll.clone(), ix, &scan, stats);
    let mut deleted = 0;
    for record in records {
        let (rid, d) = record?;
        deleted += u64::from(coll.delete(engine, rid, d.document()?, (Ack::Written, &Default::default()), None)?);
    }
    Ok(deleted)
}

/// Run passes until the server shuts down: the interval is read each
/// second, so a `setParameter` takes effect at once.
pub async fn monitor(shared: std::sync::Arc<Shared>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut since = Duration::ZERO;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        since += Duration::from_secs(1);
        if since.as_secs() < shared.ttl.sleep_secs.load(Ordering::Relaxed)
            || !shared.ttl.enabled.load(Ordering::Relaxed)
        {
            continue;
        }
        since = Duration::ZERO;
        let s = shared.clone();
        match tokio::task::spawn_blocking(move || pass(&s)).await {
            Ok(0) | Err(_) => {}
            Ok(n) => tracing::info!(deleted = n, "TTL pass deleted expired documents"),
        }
    }
}
