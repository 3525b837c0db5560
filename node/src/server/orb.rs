//! The orb-facing gRPC services: `OrbService` and `Health`.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use prost::Message;
use shared_proto::v1::health_server::Health;
use shared_proto::v1::orb_service_server::OrbService;
use shared_proto::v1::{
    GetResultRequest, HealthCheckRequest, HealthCheckResponse, SignedResult, StreamResultsRequest,
    SubmitRequest, SubmitResponse,
};
use tokio::sync::{broadcast, Semaphore};
use tonic::{Request, Response, Status};

use crate::ids::{RequestId, SerialId};
use crate::intake::{RejectReason, Rejection};
use crate::node::{now_ms, NodeState};
use crate::store::{RequestRecord, RequestState};
use crate::tls::{OrbCaller, OrbClients, OrbRole};

/// Authenticates every orb-API call (`OrbService` and `Health`) by the client certificate the
/// TLS handshake verified and pinned, and hands the [`OrbCaller`] to the handlers. A caller
/// without one gets UNAUTHENTICATED and nothing else, and its connection closes soon after.
#[derive(Clone, Debug)]
pub struct Authenticate(pub OrbClients);

impl tonic::service::Interceptor for Authenticate {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let caller = crate::tls::client_certs(&request)
            .and_then(|certs| certs.first().and_then(|c| self.0.caller_of(c)));
        let Some(caller) = caller else {
            if let Some(connection) = crate::tls::connection(&request) {
                connection.get_ref().refused();
            }
            return Err(Status::unauthenticated(
                "the orb API needs a gateway or results-consumer client certificate",
            ));
        };
        request.extensions_mut().insert(caller);
        Ok(request)
    }
}

fn caller<T>(request: &Request<T>) -> Result<OrbCaller, Status> {
    request
        .extensions()
        .get::<OrbCaller>()
        .copied()
        .ok_or_else(|| Status::unauthenticated("no authenticated caller"))
}

/// [`may_read`] by the request's record in the store.
fn may_read_now(state: &NodeState, caller: &OrbCaller, id: &RequestId) -> bool {
    caller.role == OrbRole::ResultsConsumer
        || matches!(state.store.request(id), Ok(r) if may_read(caller, r.as_ref()))
}

/// Whether `caller` may read the result of a request whose record is `record`: a results
/// consumer reads every result, a gateway only those of the requests it submitted.
fn may_read(caller: &OrbCaller, record: Option<&RequestRecord>) -> bool {
    match caller.role {
        OrbRole::ResultsConsumer => true,
        OrbRole::Gateway => record.is_some_and(|r| r.submitter == caller.id),
    }
}

/// `OrbService` and `Health` over one node state.
#[derive(Debug, Clone)]
pub struct OrbApi {
    state: Arc<NodeState>,
    limit: Arc<Semaphore>,
}

impl OrbApi {
    /// Wraps the state; at most `intake.max_concurrent` submissions run at once.
    pub fn new(state: Arc<NodeState>) -> Self {
        let n = state.config.intake.max_concurrent;
        Self {
            state,
            limit: Arc::new(Semaphore::new(n)),
        }
    }

    fn reject(&self, r: Rejection) -> Status {
        self.state
            .metrics
            .intake
            .with_label_values(&[r.reason.as_str()])
            .inc();
        if r.reason == RejectReason::Replay {
            tracing::warn!(reason = r.reason.as_str(), detail = %r.message, "envelope rejected");
        } else {
            tracing::info!(reason = r.reason.as_str(), detail = %r.message, "envelope rejected");
        }
        r.into()
    }
}

/// The request id of `GetResult`.
pub(crate) fn parse_id(b: &[u8]) -> Result<RequestId, Status> {
    RequestId::from_slice(b)
        .ok_or_else(|| Status::invalid_argument("request_id must be exactly 16 bytes"))
}

/// The request ids of `StreamResults` (empty: every new result).
pub(crate) fn parse_ids(ids: &[Vec<u8>]) -> Result<HashSet<RequestId>, Status> {
    ids.iter().map(|b| parse_id(b)).collect()
}

type ResultStream = Pin<Box<dyn Stream<Item = Result<SignedResult, Status>> + Send>>;

#[tonic::async_trait]
impl OrbService for OrbApi {
    async fn submit(
        &self,
        request: Request<SubmitRequest>,
    ) -> Result<Response<SubmitResponse>, Status> {
        if self.state.is_draining() {
            return Err(self.reject(Rejection::new(
                RejectReason::ShuttingDown,
                "node is shutting down; retry on restart",
            )));
        }
        let who = caller(&request)?;
        if who.role != OrbRole::Gateway {
            return Err(Status::permission_denied(
                "only a gateway submits envelopes",
            ));
        }
        let _permit = self
            .limit
            .acquire()
            .await
            .map_err(|_| Status::unavailable("node is shutting down"))?;
        let request = request.into_inner();
        let (envelope, or_serial_ids) = (request.envelope, request.or_serial_ids);
        let st = self.state.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            let now = now_ms();
            let mut accepted = st.intake.check(&envelope, now, |id| {
                if st.queue().contains(id) {
                    return Ok(true);
                }
                st.store.request(id).map(|r| r.is_some())
            })?;
            crate::intake::or_rule::check(&or_serial_ids, accepted.request_type, |id| {
                st.shares().contains(SerialId(id))
            })?;
            accepted.digest =
                crate::intake::or_rule::request_digest(accepted.digest, &or_serial_ids);
            let record = RequestRecord {
                state: RequestState::Pending as u32,
                digest: accepted.digest.0.to_vec(),
                received_ms: now,
                request_type: RequestRecord::encode_request_type(accepted.request_type),
                serial_id: accepted.serial_id,
                or_policy: accepted.or_policy,
                batch_id: 0,
                submitter: who.id.to_vec(),
                or_serial_ids,
            };
            let inserted = st
                .store
                .insert_request(&accepted.id, &record, &envelope)
                .map_err(|e| Rejection::new(RejectReason::Internal, e.to_string()))?;
            if !inserted {
                return Err(Rejection::new(
                    RejectReason::Replay,
                    format!("request id {} was already received", accepted.id),
                ));
            }
            let len = {
                let mut q = st.queue();
                q.push(accepted.id, accepted.digest, now, Some(accepted.shares));
                q.len()
            };
            st.metrics
                .pending
                .set(i64::try_from(len).unwrap_or(i64::MAX));
            if len >= st.config.batch.max_size {
                st.batch_wakeup.notify_one();
            }
            Ok((accepted.id, accepted.digest))
        })
        .await
        .map_err(|_| Status::internal("intake task failed"))?;
        match outcome {
            Ok((id, digest)) => {
                self.state
                    .metrics
                    .intake
                    .with_label_values(&["accepted"])
                    .inc();
                tracing::debug!(request_id = %id, "envelope accepted");
                Ok(Response::new(SubmitResponse {
                    request_id: id.0.to_vec(),
                    envelope_digest: digest.0.to_vec(),
                }))
            }
            Err(r) => Err(self.reject(r)),
        }
    }

    async fn get_result(
        &self,
        request: Request<GetResultRequest>,
    ) -> Result<Response<SignedResult>, Status> {
        let who = caller(&request)?;
        let id = parse_id(&request.into_inner().request_id)?;
        let st = self.state.clone();
        let (result, known) = tokio::task::spawn_blocking(move || {
            let record = st.store.request(&id)?;
            // Another gateway's request reads exactly like an unknown one.
            if !may_read(&who, record.as_ref()) {
                return Ok((None, false));
            }
            Ok::<_, crate::store::StoreError>((st.store.result(&id)?, record.is_some()))
        })
        .await
        .map_err(|_| Status::internal("lookup failed"))?
        .map_err(|e| Status::internal(e.to_string()))?;
        match result {
            Some(bytes) => SignedResult::decode(bytes.as_slice())
                .map(Response::new)
                .map_err(|_| Status::internal("stored result is corrupt")),
            None if known => Err(Status::unavailable(
                "request is pending: it waits for its batch",
            )),
            None => Err(Status::not_found("unknown request id")),
        }
    }

    type StreamResultsStream = ResultStream;

    async fn stream_results(
        &self,
        request: Request<StreamResultsRequest>,
    ) -> Result<Response<Self::StreamResultsStream>, Status> {
        let who = caller(&request)?;
        let ids = parse_ids(&request.into_inner().request_ids)?;
        match who.role {
            OrbRole::ResultsConsumer => {}
            OrbRole::Gateway if ids.is_empty() => {
                return Err(Status::permission_denied(
                    "only a results consumer streams every result; a gateway names its requests",
                ))
            }
            OrbRole::Gateway => {
                let st = self.state.clone();
                let wanted = ids.clone();
                // An id not received yet may be waited for (its result is checked again
                // before it is sent); one another gateway submitted reads as unknown.
                let all_own = tokio::task::spawn_blocking(move || {
                    wanted.iter().all(|id| match st.store.request(id) {
                        Ok(None) => true,
                        Ok(r) => may_read(&who, r.as_ref()),
                        Err(_) => false,
                    })
                })
                .await
                .map_err(|_| Status::internal("lookup failed"))?;
                if !all_own {
                    return Err(Status::not_found("unknown request id"));
                }
            }
        }
        // Subscribe before reading the store so nothing falls in between.
        let mut rx = self.state.results_tx.subscribe();
        let (tx, out) = tokio::sync::mpsc::channel::<Result<SignedResult, Status>>(64);
        let st = self.state.clone();
        tokio::spawn(async move {
            let mut waiting = ids.clone();
            let filtered = !ids.is_empty();
            for id in &ids {
                if !may_read_now(&st, &who, id) {
                    continue;
                }
                if let Ok(Some(b)) = st.store.result(id) {
                    if let Ok(s) = SignedResult::decode(b.as_slice()) {
                        waiting.remove(id);
                        if tx.send(Ok(s)).await.is_err() {
                            return;
                        }
                    }
                }
            }
            let drained = st.drained();
            tokio::pin!(drained);
            while !filtered || !waiting.is_empty() {
                let received = tokio::select! {
                    r = rx.recv() => r,
                    // A graceful shutdown waits on open calls: end this one, so the server
                    // stops and the orb, told why, asks the restarted node with GetResult.
                    () = &mut drained => {
                        let _ = tx
                            .send(Err(Status::unavailable(
                                "node shutting down; use GetResult once it is back",
                            )))
                            .await;
                        return;
                    }
                };
                match received {
                    Ok(s) => {
                        let id = shared_proto::v1::NodeResult::decode(s.result.as_slice())
                            .ok()
                            .and_then(|r| RequestId::from_slice(&r.request_id));
                        let wanted = match id {
                            Some(id) => {
                                (!filtered || waiting.contains(&id))
                                    && may_read_now(&st, &who, &id)
                                    && (!filtered || waiting.remove(&id))
                            }
                            None => false,
                        };
                        if wanted && tx.send(Ok((*s).clone())).await.is_err() {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        let _ = tx
                            .send(Err(Status::resource_exhausted(format!(
                                "stream fell behind by {n} results; use GetResult"
                            ))))
                            .await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(out),
        )))
    }
}

#[tonic::async_trait]
impl Health for OrbApi {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        caller(&request)?;
        Ok(Response::new(health(&self.state)))
    }
}

/// The current health report.
pub fn health(state: &NodeState) -> HealthCheckResponse {
    let ready = state.is_ready();
    HealthCheckResponse {
        live: true,
        ready,
        party_id: u32::from(state.party),
        pending: state.pending_len() as u64,
        detail: if state.is_draining() {
            "shutting down".to_owned()
        } else if ready {
            "ready".to_owned()
        } else {
            "starting".to_owned()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::NotEvaluated;
    use crate::config::NodeConfig;
    use crate::keys::{keygen, KeygenOptions};

    #[tokio::test]
    async fn a_draining_node_refuses_submissions_and_is_not_ready(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let keys = keygen(&KeygenOptions::local(dir.path().join("keys")))?;
        let mut cfg = NodeConfig::load(&keys.config(0))?;
        cfg.data_dir = dir.path().join("data");
        let state = NodeState::open(cfg, Arc::new(NotEvaluated))?;
        state.set_ready(true);
        let api = OrbApi::new(state.clone());
        assert!(health(&state).ready);
        state.set_draining();
        assert!(!health(&state).ready);
        let s = api
            .submit(Request::new(SubmitRequest {
                envelope: vec![1, 2, 3],
                or_serial_ids: Vec::new(),
            }))
            .await
            .err()
            .ok_or("accepted while draining")?;
        assert_eq!(s.code(), tonic::Code::Unavailable);
        assert_eq!(state.metrics.intake_count("shutting_down"), 1);
        Ok(())
    }
}
