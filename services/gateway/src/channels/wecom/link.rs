//! The live long connection as the rest of the channel uses it: requests (replies, the welcome,
//! pushes) written to the socket and matched to WeCom's answer by `req_id`. Requests sharing a
//! `req_id` (several replies to one message) go one at a time, each after the previous one was
//! answered, as WeCom requires.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::frame::{self, Frame};

/// How long WeCom has to answer a request.
pub(super) const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum LinkError {
    /// The connection closed (or was never open) before an answer.
    #[error("the WeCom connection closed")]
    Closed,
    /// No answer within [`ANSWER_TIMEOUT`].
    #[error("WeCom did not answer within {0:?}")]
    Timeout(Duration),
    /// WeCom refused it.
    #[error("WeCom refused the request: errcode {code}, {msg}")]
    Refused {
        /// WeCom's error code.
        code: i64,
        /// WeCom's message.
        msg: String,
    },
}

/// One open, subscribed connection.
#[derive(Debug)]
pub(super) struct Link {
    out: mpsc::UnboundedSender<String>,
    pending: Mutex<HashMap<String, oneshot::Sender<Frame>>>,
    lanes: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Link {
    /// Returns the link writing frames into `out` (the socket writer).
    pub fn new(out: mpsc::UnboundedSender<String>) -> Self {
        Self {
            out,
            pending: Mutex::default(),
            lanes: Mutex::default(),
        }
    }

    /// Sends `cmd` under `req_id` and waits for WeCom's answer (after any earlier request of
    /// the same `req_id`).
    pub async fn request(&self, cmd: &str, req_id: &str, body: Value) -> Result<Frame, LinkError> {
        let lane = self.lane(req_id);
        let turn = lane.lock().await;
        let (tx, rx) = oneshot::channel();
        self.lock_pending().insert(req_id.to_string(), tx);
        let answer = if self
            .out
            .send(frame::request(cmd, req_id, Some(body)))
            .is_err()
        {
            Err(LinkError::Closed)
        } else {
            match tokio::time::timeout(ANSWER_TIMEOUT, rx).await {
                Ok(Ok(answer)) => Ok(answer),
                Ok(Err(_)) => Err(LinkError::Closed),
                Err(_) => Err(LinkError::Timeout(ANSWER_TIMEOUT)),
            }
        };
        self.lock_pending().remove(req_id);
        drop(turn);
        self.forget_lane(req_id, lane);
        let answer = answer?;
        match answer.errcode {
            Some(0) | None => Ok(answer),
            Some(code) => Err(LinkError::Refused {
                code,
                msg: answer.errmsg,
            }),
        }
    }

    /// Hands an answer to its waiting request; false when nobody waits for its `req_id`.
    pub fn answer(&self, frame: Frame) -> bool {
        let waiter = self.lock_pending().remove(&frame.headers.req_id);
        match waiter {
            Some(tx) => {
                let _ = tx.send(frame);
                true
            }
            None => false,
        }
    }

    fn lane(&self, req_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        lanes.entry(req_id.to_string()).or_default().clone()
    }

    fn forget_lane(&self, req_id: &str, lane: Arc<tokio::sync::Mutex<()>>) {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        // Two references left (the map's and ours): nobody else waits on this req_id.
        if Arc::strong_count(&lane) == 2 {
            lanes.remove(req_id);
        }
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Frame>>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ack(req_id: &str, errcode: i64) -> Frame {
        Frame::parse(
            &json!({"headers": {"req_id": req_id}, "errcode": errcode, "errmsg": "x"}).to_string(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn requests_of_one_req_id_wait_for_the_previous_answer() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let link = Arc::new(Link::new(tx));
        let first = tokio::spawn({
            let link = link.clone();
            async move { link.request(frame::RESPOND, "r1", json!({"n": 1})).await }
        });
        let sent = rx.recv().await.unwrap();
        assert!(sent.contains("\"n\":1"));
        let second = tokio::spawn({
            let link = link.clone();
            async move { link.request(frame::RESPOND, "r1", json!({"n": 2})).await }
        });
        tokio::task::yield_now().await;
        assert!(
            rx.try_recv().is_err(),
            "the second waits for the first answer"
        );
        assert!(link.answer(ack("r1", 0)));
        first.await.unwrap().unwrap();
        let sent = rx.recv().await.unwrap();
        assert!(sent.contains("\"n\":2"));
        link.answer(ack("r1", 846605));
        let refused = second.await.unwrap().unwrap_err();
        assert!(matches!(refused, LinkError::Refused { code: 846605, .. }));
        assert!(!link.answer(ack("r1", 0)), "nobody waits any more");
        assert!(link.lanes.lock().unwrap().is_empty());
    }
}
