//! The job routes but submission: list, get (a producer sees its state only), a batch's
//! progress, cancel and redrive, one job or many by filter. What a route does to a job is an
//! operation (`crate::operations`); this layer reads, authorizes and answers.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;
use serde_json::{json, Value};

use super::input::parse_dead_filter;
use super::http::{query_pairs, ApiResponse, MAX_PAGE};
use super::ports::Api;
use crate::clock::Clock;
use crate::config::Config;
use crate::ledger::{CancelFilter, JobRow, ListFilter, Redrive, Sql, Status, MAX_PRIORITY};
use crate::operations::{Cancelled, Redriven};
use crate::producer::{self, QueueSender};

impl<S: Sql, Q: QueueSender, C: Clock> Api<'_, S, Q, C> {
    /// `GET /batches/{id}` (design §25): the batch's callback and each job with how it stands, its
    /// result once finished (an operator's view; a producer's shows none).
    pub(super) async fn batch(&self, id: &str, results: bool) -> Result<ApiResponse, crate::error::InfraError> {
        let no_batch = || ApiResponse::error(404, format!("no batch {id:?}"));
        let Some(then) = self.ledger.get(id).await? else { return Ok(no_batch()) };
        let members = self.ledger.batch_members(id, then.route()).await?;
        if members.is_empty() {
            return Ok(no_batch());
        }
        let open: Vec<&str> = members.iter().filter(|m| m.status.is_none()).map(|m| m.id.as_str()).collect();
        let live = if open.is_empty() { Vec::new() } else { self.ledger.get_all(&open).await? };
        let mut live = live.into_iter();
        let (mut done, mut dead) = (0, 0);
        let jobs: Vec<Value> = members
            .iter()
            .map(|m| {
                let status = match m.status {
                    Some(s) => s,
                    None => live.next().flatten().map_or(Status::Pending, |j| j.status),
                };
                done += usize::from(status == Status::Done);
                dead += usize::from(status == Status::Dead);
                let mut j = json!({ "id": m.id, "status": status });
                if let (true, Some(r)) = (results, m.result.as_deref()) {
                    j["result"] = serde_json::from_str(r).unwrap_or_else(|_| json!("redacted"));
                }
                j
            })
            .collect();
        Ok(ApiResponse::json(
            200,
            json!({ "batch": {
                "id": id, "total": members.len(), "finished": done + dead, "done": done, "dead": dead,
                "then": { "id": then.id, "status": then.status }, "jobs": jobs,
            }}),
        ))
    }

    pub(super) async fn list(&self, query: &str) -> Result<ApiResponse, crate::error::InfraError> {
        let mut status = None;
        let mut limit = 50;
        let mut cursor = None;
        let (mut job_type, mut ordering_key, mut priority) = (None, None, None);
        for (k, v) in query_pairs(query) {
            match k.as_str() {
                "status" => match Status::parse(&v.to_ascii_uppercase()) {
                    Some(s) => status = Some(s),
                    None => {
                        return Ok(ApiResponse::error(
                            400,
                            format!("status must be PENDING, RUNNING, DONE or DEAD, got {v:?}"),
                        ))
                    }
                },
                "limit" => match v.parse::<u32>() {
                    Ok(n) if (1..=MAX_PAGE).contains(&n) => limit = n,
                    _ => return Ok(ApiResponse::error(400, format!("limit must be 1 to {MAX_PAGE}, got {v:?}"))),
                },
                "cursor" => match decode_cursor(&v) {
                    Some(c) => cursor = Some(c),
                    None => return Ok(ApiResponse::error(400, "cursor is not one this API gave out")),
                },
                "type" if !v.is_empty() => job_type = Some(v),
                "ordering_key" if !v.is_empty() => ordering_key = Some(v),
                "priority" if !v.is_empty() => match v.parse::<u8>().ok().filter(|p| *p <= MAX_PRIORITY) {
                    Some(p) => priority = Some(p),
                    None => {
                        return Ok(ApiResponse::error(
                            400,
                            format!(
                                "priority must be a whole number from 0 (most urgent) to {MAX_PRIORITY}, got {v:?}"
                            ),
                        ))
                    }
                },
                "type" | "ordering_key" | "priority" => {}
                _ => return Ok(ApiResponse::error(400, format!("unknown query parameter {k:?}"))),
            }
        }
        let filter =
            ListFilter { status, job_type: job_type.as_deref(), ordering_key: ordering_key.as_deref(), priority };
        let (jobs, next) = self.ledger.list(&filter, cursor.as_ref().map(|(at, id)| (*at, id.as_str())), limit).await?;
        let next_cursor = next.map(|(at, id)| B64URL.encode(format!("{at}:{id}")));
        // Payloads and results stay out of lists (up to 128 KB and 4 KB each); `GET /jobs/{id}`
        // has them.
        let jobs: Vec<Value> = jobs
            .iter()
            .map(|j| {
                let mut v = json!(j);
                if let Some(o) = v.as_object_mut() {
                    o.shift_remove("payload");
                    o.shift_remove("result");
                }
                v
            })
            .collect();
        Ok(ApiResponse::json(200, json!({ "jobs": jobs, "next_cursor": next_cursor })))
    }

    pub(super) async fn get(&self, id: &str) -> Result<ApiResponse, crate::error::InfraError> {
        let Some((job, history)) = self.ledger.get_with_history(id).await? else {
            return Ok(ApiResponse::error(404, format!("no job {id:?}")));
        };
        Ok(ApiResponse::json(200, json!({ "job": job, "history": history })))
    }

    /// `GET /jobs/{id}` for a producer: the job's state alone, never its payload, result, errors
    /// or history (a producer's token travels in more places than an operator's).
    pub(super) async fn state(&self, id: &str) -> Result<ApiResponse, crate::error::InfraError> {
        let Some(j) = self.ledger.get(id).await? else {
            return Ok(ApiResponse::error(404, format!("no job {id:?}")));
        };
        let job = json!({
            "id": j.id, "type": j.job_type, "status": j.status, "ordering_key": j.ordering_key,
            "attempts": j.attempts, "max_attempts": j.max_attempts, "snoozes": j.snoozes, "priority": j.priority,
            "next_run_at": j.next_run_at, "created_at": j.created_at, "updated_at": j.updated_at,
            "finished_at": j.finished_at, "waiting_on": j.waiting_on,
            "waited_by": j.waited_by,
        });
        Ok(ApiResponse::json(200, json!({ "job": job })))
    }

    /// `POST /jobs/{id}/cancel` (design §22.1): a PENDING job becomes DEAD "cancelled" (200); a
    /// RUNNING one is asked to stop (202): its run learns of it within
    /// [`crate::consumer::CANCEL_REACH_MS`] and ends it DEAD "cancelled". A finished job, or one
    /// asked already, is refused (409). The cancelled job may have been what its key waited for
    /// (strict mode: a head waiting for its delay or retry; lock mode: a failed job holding the
    /// key's lock): the key's next job is woken at once (in lock mode it then takes over the
    /// finished holder's lock).
    pub(super) async fn cancel(&self, cfg: &Config, id: &str) -> Result<ApiResponse, crate::error::InfraError> {
        Ok(match self.operations(cfg).cancel(id).await? {
            Cancelled::Done { job, woken, unsent } => {
                let mut answer = json!({ "job": job });
                if job.ordering_key.is_some() {
                    answer["woken"] = json!(woken);
                }
                if let Some(e) = unsent {
                    answer["warning"] = json!(format!("{e}; the key's next job runs when maintenance sends it"));
                }
                ApiResponse::json(200, answer)
            }
            Cancelled::Requested(job) => ApiResponse::json(
                202,
                json!({"job": job, "cancel_requested": true,
                       "within_ms": crate::consumer::CANCEL_REACH_MS}),
            ),
            Cancelled::NotFound => ApiResponse::error(404, format!("no job {id:?}")),
            Cancelled::Refused(j) if j.status == Status::Running => ApiResponse::json(
                409,
                json!({"error": "job is RUNNING and was asked to stop already", "status": j.status}),
            ),
            Cancelled::Refused(j) => ApiResponse::json(
                409,
                json!({"error": format!("job is {}: a finished job cannot be cancelled", j.status.as_str()), "status": j.status}),
            ),
        })
    }

    /// `POST /jobs/cancel` and `POST /keys/{key}/cancel` (design §22.2): open jobs matching a
    /// filter counted (`"dry_run": true`) or cancelled, at most `BULK_REDRIVE_LIMIT` per call and
    /// shard (oldest submission first), each as `POST /jobs/{id}/cancel` would: PENDING ones end
    /// now, RUNNING ones are asked to stop; `remaining` says how many match still.
    pub(super) async fn cancel_matching(
        &self,
        cfg: &Config,
        filter: CancelFilter,
        dry_run: bool,
    ) -> Result<ApiResponse, crate::error::InfraError> {
        let now = self.clock.now_ms();
        if dry_run {
            let found = self.ledger.cancellable_matching(&filter).await?;
            let answer = json!({ "dry_run": true, "matched": found.matched, "running": found.running, "as_of": now });
            return Ok(ApiResponse::json(200, answer));
        }
        let done = self.operations(cfg).cancel_matching(&filter, cfg.bulk_redrive_limit).await?;
        let ids: Vec<&str> = done.cancelled.iter().map(|j| j.id.as_str()).collect();
        let asked: Vec<&str> = done.asked.iter().map(|j| j.id.as_str()).collect();
        let mut answer = json!({
            "dry_run": false, "cancelled": ids.len(), "ids": ids,
            "cancel_requested": asked.len(), "requested_ids": asked, "within_ms": crate::consumer::CANCEL_REACH_MS,
            "remaining": done.remaining, "as_of": now,
        });
        if let Some(e) = done.unsent {
            answer["warning"] = json!(format!("{e}; the keys' next jobs run when maintenance sends them"));
        }
        Ok(ApiResponse::json(200, answer))
    }

    /// `POST /jobs/redrive`: DEAD jobs matching a filter, counted (`"dry_run": true`) or redriven,
    /// at most `BULK_REDRIVE_LIMIT` per call (oldest death first). Jobs that cannot be redriven
    /// (no readable payload, a dedupe key active elsewhere) are counted, never taken, so every
    /// call reaches the redrivable ones. `as_of` is the server's time of the answer: a caller
    /// looping over calls pins `filter.to` to the count's `as_of + 1`, so a job redriven and dead
    /// again in between is not taken twice.
    pub(super) async fn redrive_matching(&self, cfg: &Config, body: &[u8]) -> Result<ApiResponse, crate::error::InfraError> {
        let (filter, dry_run) = match parse_dead_filter(body) {
            Ok(f) => f,
            Err(e) => return Ok(ApiResponse::error(e.status(), e.to_string())),
        };
        let now = self.clock.now_ms();
        let found = self.ledger.dead_matching(&filter, cfg.bulk_redrive_limit).await?;
        if dry_run {
            return Ok(ApiResponse::json(
                200,
                json!({ "dry_run": true, "matched": found.matched, "redrivable": found.redrivable, "as_of": now }),
            ));
        }
        let ids: Vec<&str> = found.ids.iter().map(String::as_str).collect();
        self.operations(cfg).before_redrive(&ids).await?;
        let mut redriven = Vec::new();
        let mut refused = Vec::new();
        for (id, r) in ids.iter().zip(self.ledger.redrive_all(&ids, now).await?) {
            match r {
                Redrive::Redriven(j) => redriven.push(j),
                Redrive::Refused(_) | Redrive::NotFound => refused.push(*id),
            }
        }
        let msgs = redriven.iter().filter_map(|j| producer::message_for(j, 0)).collect();
        let sent = producer::send_all(self.queue, msgs).await;
        let mut answer = json!({
            "dry_run": false,
            "matched": found.matched,
            "redrivable": found.redrivable,
            "redriven": redriven.len(),
            "refused": refused,
            "remaining": (found.redrivable - (redriven.len() + refused.len()) as i64).max(0),
            "as_of": now,
        });
        if let Err(e) = sent {
            answer["error"] = json!(format!("{e}; the jobs are PENDING and maintenance will send them"));
            return Ok(ApiResponse::json(503, answer));
        }
        Ok(ApiResponse::json(200, answer))
    }

    /// `POST /jobs/{id}/redrive`: a DEAD job PENDING again and sent.
    pub(super) async fn redrive(&self, cfg: &Config, id: &str) -> Result<ApiResponse, crate::error::InfraError> {
        let refused = |why: String, j: &JobRow| ApiResponse::json(409, json!({"error": why, "status": j.status}));
        Ok(match self.operations(cfg).redrive(id).await? {
            Redriven::NotFound => ApiResponse::error(404, format!("no job {id:?}")),
            Redriven::NotDead(j) => refused(format!("job is {}, only DEAD jobs can be redriven", j.status.as_str()), &j),
            Redriven::Unreadable(j) => {
                refused("job has no readable payload to send again (its body could not be read)".into(), &j)
            }
            Redriven::DedupeTaken(j) => {
                let key = j.dedupe_key.clone().unwrap_or_default();
                refused(format!("dedupe_key {key:?} is active in another job"), &j)
            }
            Redriven::Done { job, unsent: Some(e) } => ApiResponse::json(
                503,
                json!({"error": format!("{e}; the job is PENDING and maintenance will send it"), "job": job}),
            ),
            Redriven::Done { job, unsent: None } => ApiResponse::json(200, json!({ "job": job })),
        })
    }
}

fn decode_cursor(c: &str) -> Option<(i64, String)> {
    let raw = String::from_utf8(B64URL.decode(c).ok()?).ok()?;
    let (at, id) = raw.split_once(':')?;
    Some((at.parse().ok()?, id.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_junk_is_refused() {
        let c = B64URL.encode("1700000000000:job:1");
        assert_eq!(decode_cursor(&c), Some((1_700_000_000_000, "job:1".into())));
        assert_eq!(decode_cursor("!!"), None);
        assert_eq!(decode_cursor(&B64URL.encode("x:y")), None);
    }
}
