//! Sending jobs to the queue: envelopes from ledger rows, and batches within Queues' limits.
//!
//! Pure apart from the [`QueueSender`] port. Queues takes at most 100 messages and 256,000 bytes
//! per `sendBatch`, and 128,000 bytes per message, metadata included (Cloudflare's KB is 1,000
//! bytes); `split` keeps to those so a large submission never fails as a whole, and a message that
//! could never be sent is refused where it is made.

use serde_json::Value;

use crate::envelope::{Envelope, JobMeta};
use crate::error::InfraError;
use crate::ledger::{JobRow, DEFAULT_PRIORITY};

/// Most messages in one `sendBatch`.
pub const MAX_BATCH_MESSAGES: usize = 100;
/// Most bytes in one `sendBatch` (Cloudflare's limit).
pub const MAX_BATCH_BYTES: usize = 256_000;
/// Bytes counted per message beyond its body: Queues adds about 100 bytes of metadata.
pub const PER_MESSAGE_OVERHEAD: usize = 256;
/// Most bytes in one message body: Cloudflare's 128,000 per message, less the metadata.
pub const MAX_MESSAGE_BYTES: usize = 128_000 - PER_MESSAGE_OVERHEAD;

/// Largest payload of any job, as JSON text: what one queue message could carry. A sensitive job's
/// message carries no payload, but its payload is held to the same limit, so no job is larger in the
/// ledger (and in memory when read) than a plain one; a snooze's replacement payload too.
pub const MAX_PAYLOAD_BYTES: usize = MAX_MESSAGE_BYTES;

/// A message to send. The body is serialized once, here: its size is checked against the limits
/// and the same text is what the edge sends.
#[derive(Debug, Clone, PartialEq)]
pub struct OutMessage {
    json: String,
    /// Delivery delay.
    pub delay_seconds: u32,
    /// The job's priority: picks its lane (see [`Lanes`]).
    pub priority: u8,
    /// Whether the job has an ordering key.
    pub keyed: bool,
}

impl OutMessage {
    /// A message with `body` (an envelope), delivered after `delay_seconds`, of default priority.
    pub fn new(body: &Value, delay_seconds: u32) -> Self {
        OutMessage { json: body.to_string(), delay_seconds, priority: DEFAULT_PRIORITY, keyed: false }
    }
    /// An envelope's message: its priority and key ride along for the lane choice.
    pub fn of(env: &Envelope, delay_seconds: u32) -> Self {
        OutMessage {
            priority: env.meta.priority.unwrap_or(DEFAULT_PRIORITY),
            keyed: env.ordering_key.is_some(),
            ..OutMessage::new(&env.encode(), delay_seconds)
        }
    }
    /// The body as JSON text.
    pub fn json(&self) -> &str {
        &self.json
    }
    /// The body's size as sent.
    pub fn size(&self) -> usize {
        self.json.len()
    }
    /// Whether Queues would take it.
    pub fn fits(&self) -> bool {
        self.size() <= MAX_MESSAGE_BYTES
    }
}

/// Sends one batch (already within limits). The edge sends the JSON intact (see `edge.rs`).
#[allow(async_fn_in_trait)]
pub trait QueueSender {
    /// Sends `msgs` in one `sendBatch`.
    async fn send_batch(&self, msgs: &[OutMessage]) -> Result<(), InfraError>;
}

/// Priority lanes (design §12): Queues has no message priority, so urgent jobs travel on a queue of
/// their own, which Cloudflare consumes independently of the main queue's backlog. Jobs at or
/// below `urgent_priority` go to `urgent` when it is bound; everything else, and everything when
/// it is not, to `main`.
///
/// Per-key order wins over priority: in lock mode a key's jobs must share one queue (the lock
/// only orders what one queue delivers), so keyed jobs stay on `main` unless `keyed_by_priority`
/// (strict mode, where the ledger orders each key whichever queue delivers it).
pub struct Lanes<Q> {
    /// The main queue.
    pub main: Q,
    /// The urgent lane's queue, if bound.
    pub urgent: Option<Q>,
    /// Most urgent priority that still goes to `main`, plus one.
    pub urgent_priority: u8,
    /// Whether keyed jobs take their priority's lane (strict mode).
    pub keyed_by_priority: bool,
}

impl<Q> Lanes<Q> {
    /// Whether `m` goes to the urgent lane.
    pub fn is_urgent(&self, m: &OutMessage) -> bool {
        self.urgent.is_some() && m.priority <= self.urgent_priority && (!m.keyed || self.keyed_by_priority)
    }
}

impl<Q: QueueSender> QueueSender for Lanes<Q> {
    async fn send_batch(&self, msgs: &[OutMessage]) -> Result<(), InfraError> {
        let (urgent, main): (Vec<OutMessage>, Vec<OutMessage>) = msgs.iter().cloned().partition(|m| self.is_urgent(m));
        let mut first_error = None;
        if let (false, Some(q)) = (urgent.is_empty(), &self.urgent) {
            if let Err(e) = q.send_batch(&urgent).await {
                first_error = Some(e);
            }
        }
        if !main.is_empty() {
            if let Err(e) = self.main.send_batch(&main).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Splits messages into batches of at most 100 messages and 256 KB, keeping their order.
pub fn split(msgs: Vec<OutMessage>) -> Vec<Vec<OutMessage>> {
    let mut batches: Vec<Vec<OutMessage>> = Vec::new();
    let mut bytes = 0;
    for m in msgs {
        let size = m.size() + PER_MESSAGE_OVERHEAD;
        let full = batches.last().is_none_or(|b| b.len() >= MAX_BATCH_MESSAGES || bytes + size > MAX_BATCH_BYTES);
        if full {
            batches.push(Vec::new());
            bytes = 0;
        }
        bytes += size;
        if let Some(b) = batches.last_mut() {
            b.push(m);
        }
    }
    batches
}

/// Sends all messages, batch by batch. A failed batch does not stop the others; the first
/// failure is returned once every batch was tried. A message too large to ever send is never
/// handed to Queues (callers refuse or dead-letter it first; see [`OutMessage::fits`]).
pub async fn send_all<Q: QueueSender>(queue: &Q, msgs: Vec<OutMessage>) -> Result<(), InfraError> {
    let (fit, too_big): (Vec<OutMessage>, Vec<OutMessage>) = msgs.into_iter().partition(OutMessage::fits);
    let mut first_error = too_big.first().map(|m| {
        InfraError::new("Queue", format!("a {}-byte message exceeds the {MAX_MESSAGE_BYTES}-byte limit", m.size()))
    });
    for batch in split(fit) {
        if let Err(e) = queue.send_batch(&batch).await {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Sends again the jobs taken out of a limit key's line (design §20), those not finished: their
/// rows are read where they live, and each gets its message. A job still RUNNING was parked by an
/// invocation that has not yet recorded handing it back: one RUNNING under `mine` (the caller's own
/// invocation) is not sent but returned, for the caller to send once its batch is recorded; any
/// other gets its message `running_delay` seconds later, once its invocation has recorded it.
pub async fn wake<S: crate::ledger::Sql, Q: QueueSender>(
    ledger: &crate::ledger::Ledger<S>,
    queue: &Q,
    woken: &[crate::ledger::limit::Woken],
    running_delay: u32,
    mine: Option<&str>,
) -> Result<Vec<crate::ledger::limit::Woken>, InfraError> {
    use crate::ledger::Status;
    if woken.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<(&str, crate::ledger::Route)> = woken.iter().map(|w| (w.job_id.as_str(), w.route)).collect();
    let rows = ledger.get_routed(&ids).await?;
    let (mut msgs, mut later) = (Vec::new(), Vec::new());
    for (w, row) in woken.iter().zip(rows) {
        let Some(j) = row else { continue };
        match j.status {
            Status::Running if mine.is_some() && j.lease_owner.as_deref() == mine => later.push(w.clone()),
            Status::Running => msgs.extend(woken_message(&j, running_delay.max(1))),
            Status::Pending => msgs.extend(woken_message(&j, 0)),
            Status::Done | Status::Dead => {}
        }
    }
    send_all(queue, msgs).await?;
    Ok(later)
}

/// The message that (re)delivers a ledger job. `None` for a row with no readable payload (only
/// undecodable bodies have none, and those are DEAD for good).
pub fn message_for(job: &JobRow, delay_seconds: u32) -> Option<OutMessage> {
    Some(OutMessage::of(&envelope_for(job)?, delay_seconds))
}

/// The envelope of a ledger job's message.
fn envelope_for(job: &JobRow) -> Option<Envelope> {
    let text = job.payload.as_deref()?;
    let payload: Value = if crate::seal::is_sealed(text) {
        sealed_stub(job.job_type.as_deref())
    } else {
        serde_json::from_str(text).ok()?
    };
    let env = Envelope {
        ordering_key: job.ordering_key.clone(),
        payload,
        meta: JobMeta {
            id: Some(job.id.clone()),
            dedupe_key: job.dedupe_key.clone(),
            limit_key: job.limit_key.clone(),
            max_attempts: u32::try_from(job.max_attempts).ok(),
            priority: (job.priority != DEFAULT_PRIORITY).then_some(job.priority),
            deadline_at: job.deadline_at,
            timeout_seconds: job.timeout_seconds,
            queued_at: Some(job.created_at),
            woken: false,
        },
    };
    Some(env)
}

/// [`message_for`] a job taken out of its limit key's line: its delivery makes it due if it is
/// still parked (strict mode parks a job not due, design §20.10).
pub fn woken_message(job: &JobRow, delay_seconds: u32) -> Option<OutMessage> {
    let mut env = envelope_for(job)?;
    env.meta.woken = true;
    Some(OutMessage::of(&env, delay_seconds))
}

/// What a sensitive job's message carries instead of its payload: its type and a marker. The
/// consumer runs the ledger row's (sealed) payload, never a message's.
pub fn sealed_stub(job_type: Option<&str>) -> Value {
    serde_json::json!({"type": job_type, "__orderly_sealed__": true})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(n: usize) -> OutMessage {
        OutMessage::new(&json!({"pad": "x".repeat(n)}), 0)
    }

    #[test]
    fn batches_hold_at_most_one_hundred_messages() {
        let batches = split((0..250).map(|_| msg(10)).collect());
        assert_eq!(batches.iter().map(Vec::len).collect::<Vec<_>>(), vec![100, 100, 50]);
    }

    #[test]
    fn batches_stay_under_256_kb() {
        let batches = split((0..10).map(|_| msg(60 * 1024)).collect());
        assert!(batches.len() >= 3);
        for b in &batches {
            let bytes: usize = b.iter().map(|m| m.size() + PER_MESSAGE_OVERHEAD).sum();
            assert!(bytes <= MAX_BATCH_BYTES, "{bytes}");
        }
        assert_eq!(batches.iter().map(Vec::len).sum::<usize>(), 10);
    }

    #[test]
    fn order_is_kept_across_batches() {
        let msgs: Vec<OutMessage> = (0..205).map(|i| OutMessage::new(&json!(i), 0)).collect();
        let flat: Vec<Value> =
            split(msgs).into_iter().flatten().map(|m| serde_json::from_str(m.json()).unwrap()).collect();
        assert_eq!(flat, (0..205).map(|i| json!(i)).collect::<Vec<_>>());
    }

    #[test]
    fn the_limits_are_cloudflares_in_bytes_of_1000() {
        assert_eq!(MAX_MESSAGE_BYTES + PER_MESSAGE_OVERHEAD, 128_000);
        assert_eq!(MAX_BATCH_BYTES, 256_000);
        let at_limit = OutMessage { json: "x".repeat(MAX_MESSAGE_BYTES), ..msg(0) };
        assert!(at_limit.fits());
        assert!(!OutMessage { json: "x".repeat(MAX_MESSAGE_BYTES + 1), ..msg(0) }.fits());
    }

    /// A queue that keeps what it is sent.
    #[derive(Default)]
    struct Kept(std::cell::RefCell<Vec<u8>>);
    impl QueueSender for Kept {
        async fn send_batch(&self, msgs: &[OutMessage]) -> Result<(), InfraError> {
            self.0.borrow_mut().extend(msgs.iter().map(|m| m.priority));
            Ok(())
        }
    }

    #[test]
    fn urgent_jobs_take_the_urgent_lane_and_keyed_ones_only_when_the_ledger_orders_keys() {
        let m = |priority: u8, keyed: bool| OutMessage { priority, keyed, ..msg(1) };
        for (keyed_by_priority, urgent_got) in [(false, vec![0, 2]), (true, vec![0, 2, 1])] {
            let lanes =
                Lanes { main: Kept::default(), urgent: Some(Kept::default()), urgent_priority: 2, keyed_by_priority };
            let sent = vec![m(0, false), m(5, false), m(2, false), m(3, false), m(1, true), m(9, true)];
            futures::executor::block_on(send_all(&lanes, sent)).unwrap();
            assert_eq!(*lanes.urgent.as_ref().unwrap().0.borrow(), urgent_got, "keyed_by_priority {keyed_by_priority}");
            assert_eq!(lanes.main.0.borrow().len(), 6 - urgent_got.len());
        }
        let one_lane = Lanes { main: Kept::default(), urgent: None, urgent_priority: 2, keyed_by_priority: true };
        futures::executor::block_on(send_all(&one_lane, vec![m(0, false), m(0, true)])).unwrap();
        assert_eq!(*one_lane.main.0.borrow(), vec![0, 0], "without the binding everything uses one queue");
    }

    #[test]
    fn nothing_to_send_is_no_batch() {
        assert!(split(vec![]).is_empty());
    }
}
