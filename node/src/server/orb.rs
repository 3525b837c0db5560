//! The orb-facing gRPC services: `OrbService` and `Health`.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::Stream;
use prost::Message;
use shared_proto::v1::health_server::Health;
use shared_proto::v1::orb_service_server::OrbService;
use shared_proto::v1::{
    GetResultRequest, HealthCheckRequest, HealthCheckResponse, SignedResult, StreamResultsRequest,
    SubmitRequest, SubmitResponse,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::{Request, Response, Status};

use crate::clock::now_ms;
use crate::ids::{RequestId, SerialId};
use crate::intake::{RejectReason, Rejection};
use crate::node::NodeState;
use crate::store::{RequestRecord, RequestState};
use crate::tls::{OrbCaller, OrbClients, OrbRole};

use super::results::{self, ResultWaiters};

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

/// Whether `caller` may read the result of a request whose record is `record`: a results
/// consumer reads every result, a gateway those of the requests it submitted here, and those
/// this node finalised without ever receiving them (a batch timed out a request only the
/// other nodes held: no submitter is known here, and the gateway needs all three results).
pub(crate) fn may_read(caller: &OrbCaller, record: Option<&RequestRecord>) -> bool {
    match caller.role {
        OrbRole::ResultsConsumer => true,
        OrbRole::Gateway => {
            record.is_some_and(|r| r.submitter == caller.id || r.submitter.is_empty())
        }
    }
}

/// `OrbService` and `Health` over one node state.
#[derive(Debug, Clone)]
pub struct OrbApi {
    state: Arc<NodeState>,
    limit: Arc<Semaphore>,
    waiters: Arc<ResultWaiters>,
    streams: Arc<StreamLimits>,
}

impl OrbApi {
    /// Wraps the state; at most `intake.max_concurrent` submissions run at once, and each
    /// client holds at most `connections.max_result_streams_per_client` result streams.
    pub fn new(state: Arc<NodeState>) -> Self {
        let n = state.config.intake.max_concurrent;
        let streams = StreamLimits {
            per_client: state.config.connections.max_result_streams_per_client,
            open: Mutex::default(),
        };
        Self {
            state,
            limit: Arc::new(Semaphore::new(n)),
            waiters: Arc::default(),
            streams: Arc::new(streams),
        }
    }

    /// Hands finalised results to the `StreamResults` calls that named them; runs until the
    /// node state is dropped. Calls naming ids receive nothing without it.
    pub fn dispatch_results(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let results = self.state.results_tx.subscribe();
        let waiters = self.waiters.clone();
        async move { waiters.dispatch(results).await }
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

/// The most request ids one `StreamResults` call may name.
pub const MAX_STREAM_IDS: usize = 1_000;

/// The request ids of `StreamResults` (empty: every new result), at most [`MAX_STREAM_IDS`].
pub(crate) fn parse_ids(ids: &[Vec<u8>]) -> Result<HashSet<RequestId>, Status> {
    if ids.len() > MAX_STREAM_IDS {
        return Err(Status::invalid_argument(format!(
            "at most {MAX_STREAM_IDS} request ids per call"
        )));
    }
    ids.iter().map(|b| parse_id(b)).collect()
}

/// The `StreamResults` calls each orb client holds open, at most `per_client`.
#[derive(Debug)]
struct StreamLimits {
    per_client: usize,
    /// By client id; as many entries as configured clients.
    open: Mutex<HashMap<[u8; 32], Arc<Semaphore>>>,
}

impl StreamLimits {
    fn open(&self, who: &OrbCaller) -> Result<OwnedSemaphorePermit, Status> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let client = open
            .entry(who.id)
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_client)));
        client.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "at most {} result streams open at once per client",
                self.per_client
            ))
        })
    }
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
        if who.role == OrbRole::Gateway && ids.is_empty() {
            return Err(Status::permission_denied(
                "only a results consumer streams every result; a gateway names its requests",
            ));
        }
        let permit = self.streams.open(&who)?;
        let (tx, out) = tokio::sync::mpsc::channel::<Result<SignedResult, Status>>(64);
        let st = self.state.clone();
        if ids.is_empty() {
            let results = self.state.results_tx.subscribe();
            tokio::spawn(results::stream_all(st, results, tx, permit));
        } else {
            // Ids are not checked against the store here: one not received yet may be waited
            // for, and another gateway's reads exactly like it (waited for, never sent).
            let waiters = self.waiters.clone();
            tokio::spawn(results::stream_named(st, who, waiters, ids, tx, permit));
        }
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
        party_id: u32::from(state.party.get()),
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
        let mut cfg = NodeConfig::load(&keys.config(sdk_orb::PartyId::ALL[0]))?;
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
