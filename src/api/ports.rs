//! What the API works with for one request: its ports (ledger, queue, clock, ids, sealer) and
//! settings, as [`Api`]. Every route file adds its operations to it.

use crate::app::JobTypes;
use crate::config::{Config, ConfigError};
use crate::ledger::{Ledger, Sql};
use crate::operations::Operations;
use crate::seal::Sealer;

/// The API's ports and settings for one request.
pub struct Api<'a, S: Sql, Q, C> {
    /// The ledger.
    pub ledger: &'a Ledger<S>,
    /// Where jobs are sent.
    pub queue: &'a Q,
    /// Time.
    pub clock: &'a C,
    /// Checked vars, or why they are bad.
    pub cfg: Result<&'a Config, &'a ConfigError>,
    /// `ADMIN_TOKEN`, if configured.
    pub admin_token: Option<&'a str>,
    /// `PRODUCER_TOKEN`, if configured: submit and read only.
    pub producer_token: Option<&'a str>,
    /// `METRICS_TOKEN`, if configured: `GET /metrics` only (a scraper's credential).
    pub metrics_token: Option<&'a str>,
    /// New job ids.
    pub new_id: &'a dyn Fn() -> String,
    /// The job types there are handlers for: a submitted payload must fit one.
    pub types: &'a dyn JobTypes,
    /// Seals sensitive payloads (`PAYLOAD_KEY`); `None`: sensitive jobs are refused.
    pub sealer: Option<&'a dyn Sealer>,
}

impl<S: Sql, Q, C> Api<'_, S, Q, C> {
    /// The operations this request's ports can do (`crate::operations`).
    pub(super) fn operations<'b>(&'b self, cfg: &'b Config) -> Operations<'b, S, Q, C> {
        Operations { ledger: self.ledger, queue: self.queue, clock: self.clock, cfg }
    }
}
