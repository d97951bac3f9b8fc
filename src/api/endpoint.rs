//! A request's route, parsed from its method and path (mini-redis's `Command::from_frame`):
//! the one list of what the API answers, who may ask for it, and what `openapi.json` documents
//! (`tests/native/operator.rs` holds the two together). The router matches only these, a literal
//! segment before a `{name}` one; a `{name}` segment is percent-decoded.

use super::http::percent_decode;

/// What a request asks for. A variant's `String` is its path's `{name}` segment, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `GET /`: the dashboard page (no token).
    Dashboard,
    /// `GET /openapi.json` (no token).
    OpenApi,
    /// `POST /jobs`.
    Submit,
    /// `GET /jobs`.
    List,
    /// `GET /jobs/counts`.
    Counts,
    /// `GET /jobs/activity`.
    Activity,
    /// `POST /jobs/redrive`: bulk redrive.
    RedriveMatching,
    /// `GET /jobs/{id}`.
    Job(String),
    /// `GET /batches/{id}`: a batch's progress (design §25).
    Batch(String),
    /// `POST /jobs/{id}/redrive`.
    Redrive(String),
    /// `POST /jobs/{id}/cancel`.
    Cancel(String),
    /// `POST /jobs/cancel`: PENDING jobs matching a filter cancelled (design §22.2).
    CancelMatching,
    /// `POST /keys/{key}/cancel`: an ordering key's PENDING jobs cancelled (design §22.2).
    CancelKey(String),
    /// `GET /keys`.
    Keys,
    /// `PUT /keys/{key}`: pause or resume an ordering key.
    ChangeKey(String),
    /// `POST /keys/{key}/skip`.
    SkipKey(String),
    /// `GET /limits`.
    Limits,
    /// `GET /limits/{key}`.
    Limit(String),
    /// `PUT /limits/{key}`.
    ChangeLimit(String),
    /// `GET /schedules`: periodic jobs (design §23).
    Schedules,
    /// `PUT /schedules/{name}`: pause or resume a schedule.
    ChangeSchedule(String),
    /// `GET /metrics`: the ledger's state in the Prometheus text format (design §27).
    Metrics,
    /// `GET` (where it stands) or `POST` (apply) `/admin/migrate`: a D1 ledger's schema (design
    /// §21). Answered by the worker's edge, which holds the D1 binding.
    Migrate {
        /// `POST`: apply the migrations the ledger lacks.
        apply: bool,
    },
    /// `GET` (verify) or `POST` (copy a page) `/ledger/move`: a D1 ledger moved to shards (design
    /// §19.7). Answered by the worker's edge, which holds the shards' namespace.
    MoveLedger {
        /// `POST`: copy the next page.
        copy: bool,
    },
}

/// A route of the table: its method, its path pattern, and the route a match makes (given the
/// `{name}` segment, or "" for a path without one).
type Entry = (&'static str, &'static str, fn(String) -> Endpoint);

/// Every route.
const TABLE: &[Entry] = &[
    ("GET", "/", |_| Endpoint::Dashboard),
    ("GET", "/openapi.json", |_| Endpoint::OpenApi),
    ("POST", "/jobs", |_| Endpoint::Submit),
    ("GET", "/jobs", |_| Endpoint::List),
    ("GET", "/jobs/counts", |_| Endpoint::Counts),
    ("GET", "/jobs/activity", |_| Endpoint::Activity),
    ("POST", "/jobs/redrive", |_| Endpoint::RedriveMatching),
    ("POST", "/jobs/cancel", |_| Endpoint::CancelMatching),
    ("GET", "/jobs/{id}", Endpoint::Job),
    ("POST", "/jobs/{id}/redrive", Endpoint::Redrive),
    ("POST", "/jobs/{id}/cancel", Endpoint::Cancel),
    ("GET", "/batches/{id}", Endpoint::Batch),
    ("GET", "/keys", |_| Endpoint::Keys),
    ("PUT", "/keys/{key}", Endpoint::ChangeKey),
    ("POST", "/keys/{key}/skip", Endpoint::SkipKey),
    ("POST", "/keys/{key}/cancel", Endpoint::CancelKey),
    ("GET", "/limits", |_| Endpoint::Limits),
    ("GET", "/limits/{key}", Endpoint::Limit),
    ("PUT", "/limits/{key}", Endpoint::ChangeLimit),
    ("GET", "/schedules", |_| Endpoint::Schedules),
    ("PUT", "/schedules/{name}", Endpoint::ChangeSchedule),
    ("GET", "/metrics", |_| Endpoint::Metrics),
    ("GET", "/admin/migrate", |_| Endpoint::Migrate { apply: false }),
    ("POST", "/admin/migrate", |_| Endpoint::Migrate { apply: true }),
    ("GET", "/ledger/move", |_| Endpoint::MoveLedger { copy: false }),
    ("POST", "/ledger/move", |_| Endpoint::MoveLedger { copy: true }),
];

/// Why a request matched no route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRouted {
    /// The path exists with other methods: 405.
    WrongMethod,
    /// No such path: 404.
    NotFound,
}

/// Every route's method and path pattern, as `openapi.json` must document them.
#[cfg(any(test, feature = "testing"))]
pub fn routes() -> impl Iterator<Item = (&'static str, &'static str)> {
    TABLE.iter().map(|(method, pattern, _)| (*method, *pattern))
}

impl Endpoint {
    /// The route `method` and `path` ask for, with its pattern (`/jobs/{id}`).
    pub fn parse(method: &str, path: &str) -> Result<(Endpoint, &'static str), NotRouted> {
        // Empty segments inside a path stay (`/jobs//redrive` names the job "", never the bulk route).
        let split = |p: &str| -> Vec<String> {
            let p = p.trim_matches('/');
            if p.is_empty() {
                Vec::new()
            } else {
                p.split('/').map(str::to_string).collect()
            }
        };
        let segments = split(path);
        let mut path_exists = false;
        for (m, pattern, make) in TABLE {
            let parts = split(pattern);
            if parts.len() != segments.len() {
                continue;
            }
            let mut param = String::new();
            let fits = parts.iter().zip(&segments).all(|(p, s)| {
                if p.starts_with('{') {
                    param = percent_decode(s);
                    true
                } else {
                    p == s
                }
            });
            if !fits {
                continue;
            }
            if *m == method {
                return Ok((make(param), pattern));
            }
            path_exists = true;
        }
        Err(if path_exists { NotRouted::WrongMethod } else { NotRouted::NotFound })
    }

    /// Whether `PRODUCER_TOKEN` opens this route: submit jobs, read one job's state (never its
    /// payload, result, errors or history) and the counts (Fedify's `getDepth`). Cancel, redrive,
    /// skip, lists, the charts and the ledger's administration need `ADMIN_TOKEN`.
    pub fn producer_may(&self) -> bool {
        match self {
            Endpoint::Submit | Endpoint::Job(_) | Endpoint::Batch(_) | Endpoint::Counts => true,
            Endpoint::Dashboard
            | Endpoint::OpenApi
            | Endpoint::List
            | Endpoint::Activity
            | Endpoint::RedriveMatching
            | Endpoint::Redrive(_)
            | Endpoint::Cancel(_)
            | Endpoint::CancelMatching
            | Endpoint::CancelKey(_)
            | Endpoint::Keys
            | Endpoint::ChangeKey(_)
            | Endpoint::SkipKey(_)
            | Endpoint::Limits
            | Endpoint::Limit(_)
            | Endpoint::ChangeLimit(_)
            | Endpoint::Schedules
            | Endpoint::ChangeSchedule(_)
            | Endpoint::Metrics
            | Endpoint::Migrate { .. }
            | Endpoint::MoveLedger { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_parses_to_its_route_with_its_segment_decoded() {
        assert_eq!(Endpoint::parse("GET", "/jobs/a%2Fb"), Ok((Endpoint::Job("a/b".into()), "/jobs/{id}")));
        assert_eq!(Endpoint::parse("POST", "/jobs//redrive"), Ok((Endpoint::Redrive(String::new()), "/jobs/{id}/redrive")));
        assert_eq!(Endpoint::parse("POST", "/jobs/redrive"), Ok((Endpoint::RedriveMatching, "/jobs/redrive")));
        assert_eq!(Endpoint::parse("POST", "/jobs/cancel"), Ok((Endpoint::CancelMatching, "/jobs/cancel")));
        assert_eq!(Endpoint::parse("POST", "/jobs/cancel/cancel"), Ok((Endpoint::Cancel("cancel".into()), "/jobs/{id}/cancel")));
        assert_eq!(Endpoint::parse("GET", "/jobs/"), Ok((Endpoint::List, "/jobs")));
        assert_eq!(Endpoint::parse("POST", "/admin/migrate"), Ok((Endpoint::Migrate { apply: true }, "/admin/migrate")));
        assert_eq!(Endpoint::parse("DELETE", "/jobs/x"), Err(NotRouted::WrongMethod));
        assert_eq!(Endpoint::parse("GET", "/jobs/x/history"), Err(NotRouted::NotFound));
        assert_eq!(Endpoint::parse("PUT", "/keys"), Err(NotRouted::WrongMethod));
    }

    #[test]
    fn every_route_in_the_table_parses_to_itself() {
        for (method, pattern) in routes() {
            let path = pattern.replace("{id}", "j").replace("{key}", "k");
            assert_eq!(Endpoint::parse(method, &path).map(|(_, p)| p), Ok(pattern), "{method} {path}");
        }
    }

    #[test]
    fn the_producer_token_opens_submitting_a_jobs_state_a_batch_s_and_the_counts_only() {
        let open: Vec<(&str, &str)> = routes()
            .filter(|(m, p)| {
                let path = p.replace("{id}", "j").replace("{key}", "k");
                Endpoint::parse(m, &path).is_ok_and(|(r, _)| r.producer_may())
            })
            .collect();
        assert_eq!(open, vec![("POST", "/jobs"), ("GET", "/jobs/counts"), ("GET", "/jobs/{id}"), ("GET", "/batches/{id}")]);
    }
}
