//! One pass's sums of Envoy's request stats, fed one stat at a time by Envoy's iteration.
//! Pure; uses nothing outside `stats_scan`.

use super::*;

/// One pass's sums of `http.<prefix>.<suffix>` stats over the HTTP connection managers whose
/// stat prefix is not ignored, fed the stats one by one as Envoy's iteration visits them.
pub struct StatSums<'a> {
    suffixes: &'static [&'static str],
    ignored: &'a [String],
    sums: [u64; 2],
    /// Stats of the first suffix met, under any prefix.
    seen: u64,
}

impl<'a> StatSums<'a> {
    pub fn new(pass: Pass, ignored: &'a [String]) -> Self {
        StatSums {
            suffixes: match pass {
                Pass::Gauges => &["downstream_rq_active"],
                // Requests answered by Envoy's own health_check filter are not work.
                Pass::Counters => &["downstream_rq_total", "health_check.request_total"],
            },
            ignored,
            sums: [0; 2],
            seen: 0,
        }
    }

    /// Whether the pass met no stat of the kind it sums, under any prefix (ignored ones too):
    /// Envoy keeps none of them.
    pub fn saw_none(&self) -> bool {
        self.seen == 0
    }

    /// One stat: added to its suffix's sum if it is `http.<prefix>.<suffix>` with a prefix not
    /// ignored.
    pub fn add(&mut self, name: &[u8], value: u64) {
        let Some(rest) = name.strip_prefix(b"http.") else {
            return;
        };
        for (i, suffix) in self.suffixes.iter().enumerate() {
            let Some(prefix) = rest
                .strip_suffix(suffix.as_bytes())
                .and_then(|n| n.strip_suffix(b"."))
            else {
                continue;
            };
            if i == 0 {
                self.seen += 1;
            }
            if !self.ignored.iter().any(|i| i.as_bytes() == prefix) {
                self.sums[i] = self.sums[i].saturating_add(value);
            }
        }
    }

    /// The pass's figure (requests in flight, or started less Envoy's health checks), less the
    /// requests the module knows are not work: `(started so far, in flight now)`.
    pub fn total_less(&self, (not_work_started, not_work_active): (u64, u64)) -> u64 {
        if self.suffixes.len() == 1 {
            self.sums[0].saturating_sub(not_work_active)
        } else {
            self.sums[0]
                .saturating_sub(self.sums[1])
                .saturating_sub(not_work_started)
        }
    }
}
