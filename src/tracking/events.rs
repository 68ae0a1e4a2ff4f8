//! What the tracker reports, turned into the module's bookkeeping: tickets of the in-flight
//! table, the connection's counts, health checks, losing the connection, and its close.
//! May use what `tracking` may.

use super::*;
use crate::connections::Conn;
use crate::counting::Ticket;
use crate::engine::shared::Shared;
use crate::exchange::Event;
use crate::host::extension::StatsHost;

impl TrackedConnection {
    /// The connection is gone (its filter's destroy hook, possibly on the drain side's thread:
    /// only the in-flight table and atomics are touched). Ends what it still holds: a tunnel, a
    /// response cut by the close, requests read ahead that Envoy never answered.
    pub fn on_close(&mut self, conn: &Conn, shared: &Shared, stats: &impl StatsHost) {
        self.websocket_closed(shared, stats);
        self.sse_closed(shared, stats);
        self.end_all(conn, shared);
        if std::mem::take(&mut self.partial_head) {
            shared.connections().note_partial_head(false);
        }
        if self.lost && self.counts() {
            shared.connections().note_untracked(false);
        }
    }

    pub(super) fn after_feed(
        &mut self,
        conn: &Conn,
        shared: &Shared,
        stats: &impl StatsHost,
        fed: &mut Fed,
    ) {
        if let Some(e) = self.tracker.hpack_failure() {
            // Once per connection (the tracker gives it once): counted, logged, and the
            // connection followed on as without decoding.
            shared.count(stats, crate::host::extension::Stat::HpackDecodingStopped);
            log::info!(
                "graceful_drain: connection {}: its HTTP/2 header blocks are no longer decoded \
                 ({e:?}): its streams count as requests, none as a health check",
                conn.id
            );
        }
        if fed.lost && !self.lost {
            self.lose(
                conn,
                shared,
                stats,
                "its bytes do not follow HTTP/1.1 or HTTP/2 framing",
                fed,
            );
        }
    }

    pub(super) fn lose(
        &mut self,
        conn: &Conn,
        shared: &Shared,
        stats: &impl StatsHost,
        why: &str,
        fed: &mut Fed,
    ) {
        fed.lost = true;
        self.lost = true;
        // Envoy may still be serving them: given back, so that the drain counts them from
        // Envoy's gauges instead, and until a gauge pass shows them (`Registry::give_back`).
        let counted = self.tickets.iter().filter(|(_, t)| t.is_some()).count() as u64;
        shared.give_back(counted, || self.end_all(conn, shared));
        shared.count(stats, crate::engine::shared::Stat::ConnectionsUntracked);
        if self.shadow {
            conn.cross_check_event(None);
            log::info!(
                "graceful_drain: cross-check: connection {} no longer followed ({why})",
                conn.id
            );
            return;
        }
        conn.set_untracked();
        shared.connections().note_untracked(true);
        log::info!(
            "graceful_drain: connection {} is no longer followed ({why}, protocol {:?}): counted \
             busy until it closes; the drain also waits for Envoy's gauges while it is open",
            conn.id,
            self.tracker.protocol()
        );
    }

    pub(super) fn end_all(&mut self, conn: &Conn, shared: &Shared) {
        for (_, ticket) in self.tickets.drain(..) {
            if let Some(t) = ticket {
                shared.request_ended_in(conn.reserved(), t);
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn on_event(
    ev: Event,
    t: &Tracker,
    tickets: &mut Vec<(u32, Option<Ticket>)>,
    shadow: bool,
    conn: &Conn,
    shared: &Shared,
    stats: &impl StatsHost,
    now: &impl Fn() -> u64,
    fed: &mut Fed,
) {
    if shadow {
        #[cfg(feature = "cross-check")]
        log::debug!(
            "graceful_drain: cross-check: connection {} tracker {ev:?}",
            conn.id
        );
        match ev {
            Event::Started(id) => {
                tickets.push((id, None));
                conn.cross_check_event(Some(true));
            }
            Event::Ended(id) => {
                if let Some(i) = tickets.iter().position(|(t, _)| *t == id) {
                    tickets.swap_remove(i);
                    conn.cross_check_event(Some(false));
                }
            }
            Event::Lost => fed.lost = true,
        }
        return;
    }
    match ev {
        Event::Started(id) => {
            fed.started += 1;
            conn.exchange_started();
            // HTTP/2: the stream's `:path` and `user-agent` when its header blocks are decoded
            // (`TrackedConnection::on_read`: with `health_check_paths` configured), else no hints.
            if shared.is_draining()
                && matches!(t.protocol(), Protocol::Http1 | Protocol::Http2)
                && is_health_check(t, shared)
            {
                fed.health_checks += 1;
                shared.health_check_seen();
                tickets.push((id, None));
                return;
            }
            let (ticket, draining) = shared.request_started_in(conn.lane(), conn.reserved());
            if draining {
                fed.served_while_draining += 1;
                shared.served_while_draining(stats);
            }
            tickets.push((id, Some(ticket)));
        }
        Event::Ended(id) => {
            if let Some(i) = tickets.iter().position(|(t, _)| *t == id) {
                fed.ended += 1;
                if let (_, Some(ticket)) = tickets.swap_remove(i) {
                    shared.request_ended_in(conn.reserved(), ticket);
                }
                conn.exchange_ended(now());
                // The HTTP filter counts the connections it sends away; here Envoy's drain-close
                // did it, with the response that just ended.
                if t.protocol() == Protocol::Http1 && t.will_close() && shared.is_draining() {
                    fed.sent_away_http1 |= shared
                        .send_away_once(stats, Some(conn.id), || {
                            crate::engine::shared::Protocol::Http1
                        })
                        .is_some();
                }
            }
        }
        // Handled once the feed returns (the tickets are this call's to give back).
        Event::Lost => fed.lost = true,
    }
}

/// The request whose head just completed is a health check by the configured policy (the HTTP
/// filter's predicate, [`crate::config::RequestPolicy::is_health_check`]). A path cut to the
/// hint's length cannot be matched exactly: never a health check then.
pub(super) fn is_health_check(t: &Tracker, shared: &Shared) -> bool {
    let policy = shared.policy();
    if !policy.has_health_checks() {
        return false;
    }
    let h = t.hints();
    let path = h
        .path
        .filter(|p| !(h.truncated && p.len() >= crate::exchange::HINT_LEN));
    policy.is_health_check(h.user_agent, path)
}
