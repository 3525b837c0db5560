//! The node-to-node gRPC service. The caller's party id comes from its TLS
//! client certificate (already pinned during the handshake); batch calls are
//! accepted from party 0 only.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use sdk_orb::PartyId;
use shared_proto::v1::peer_service_server::PeerService;
use shared_proto::v1::{
    BatchAbort, BatchAbortAck, BatchCommit, BatchCommitAck, BatchProposal, BatchVote,
    FetchBatchRequest, PingRequest, PingResponse, RecoverChunk, RecoverRequest, RecoveryPadAck,
    RecoveryPadOffer,
};
use tonic::{Request, Response, Status};

use crate::agreement::coordinator::{self, COORDINATOR};
use crate::agreement::{apply_commit, evaluate_commit};
use crate::batch::ApplyError;
use crate::node::NodeState;
use crate::recovery::RecoveryError;
use crate::tls::PeerCerts;

/// `PeerService` over one node state.
#[derive(Debug, Clone)]
pub struct PeerApi {
    state: Arc<NodeState>,
    certs: PeerCerts,
}

impl PeerApi {
    /// Wraps the state and the configured peer certificates.
    pub fn new(state: Arc<NodeState>, certs: PeerCerts) -> Self {
        Self { state, certs }
    }

    fn caller<T>(&self, req: &Request<T>) -> Result<PartyId, Status> {
        let certs = crate::tls::client_certs(req)
            .ok_or_else(|| Status::unauthenticated("no client certificate"))?;
        let first = certs
            .first()
            .ok_or_else(|| Status::unauthenticated("no client certificate"))?;
        self.certs
            .party_of(first)
            .ok_or_else(|| Status::permission_denied("certificate is not a configured peer's"))
    }

    fn require_party0<T>(&self, req: &Request<T>) -> Result<(), Status> {
        match self.caller(req)? {
            COORDINATOR => Ok(()),
            p => Err(Status::permission_denied(format!(
                "only {COORDINATOR} coordinates batches; caller is {p}"
            ))),
        }
    }
}

type RecoverStream = Pin<Box<dyn Stream<Item = Result<RecoverChunk, Status>> + Send>>;

#[tonic::async_trait]
impl PeerService for PeerApi {
    async fn propose_batch(
        &self,
        request: Request<BatchProposal>,
    ) -> Result<Response<BatchVote>, Status> {
        self.require_party0(&request)?;
        if self.state.party == COORDINATOR {
            return Err(Status::failed_precondition("party 0 does not vote"));
        }
        let proposal = request.into_inner();
        self.state
            .store_call(move |s| coordinator::vote(s, &proposal))
            .await
            .map(Response::new)
            .map_err(|e| Status::internal(e.to_string()))
    }

    async fn commit_batch(
        &self,
        request: Request<BatchCommit>,
    ) -> Result<Response<BatchCommitAck>, Status> {
        self.require_party0(&request)?;
        let commit = request.into_inner();
        let batch_id = commit.batch_id;
        // A fresh commit is evaluated and signed; its outcomes come back, attested by the two
        // others, to be applied.
        let done = if commit.outcomes_recorded {
            apply_commit(&self.state, commit)
                .await
                .map(|a| (a.results_digest.to_vec(), a.signature))
        } else {
            evaluate_commit(&self.state, commit)
                .await
                .map(|e| (Vec::new(), e.signature))
        };
        match done {
            Ok((results_digest, signature)) => Ok(Response::new(BatchCommitAck {
                batch_id,
                results_digest,
                signature: Some(signature),
                evaluation_failed: false,
            })),
            // Party 0 counts this against the batch's requests; a network fault is never
            // reported so.
            Err(e) if e.is_deterministic() => {
                tracing::error!(batch_id, error = %e, "the evaluation failed deterministically");
                if matches!(e, ApplyError::Panicked) {
                    self.state.metrics.batch_aborted("panic");
                }
                Ok(Response::new(BatchCommitAck {
                    batch_id,
                    evaluation_failed: true,
                    ..BatchCommitAck::default()
                }))
            }
            Err(
                e @ (ApplyError::Unattested { .. }
                | ApplyError::NotAttestedHere { .. }
                | ApplyError::StaleAttempt { .. }
                | ApplyError::Unfounded { .. }),
            ) => Err(Status::permission_denied(e.to_string())),
            Err(e @ ApplyError::Behind { .. }) => Err(Status::failed_precondition(e.to_string())),
            Err(e @ ApplyError::SerialMismatch { .. }) => {
                tracing::error!(batch_id, error = %e, "refusing a commit");
                Err(Status::failed_precondition(e.to_string()))
            }
            Err(e @ ApplyError::RepeatedRequest(_)) => {
                tracing::error!(batch_id, error = %e, "refusing a commit");
                Err(Status::invalid_argument(e.to_string()))
            }
            Err(e) => Err(Status::internal(e.to_string())),
        }
    }

    async fn abort_batch(
        &self,
        request: Request<BatchAbort>,
    ) -> Result<Response<BatchAbortAck>, Status> {
        self.require_party0(&request)?;
        self.state.queue().release_all_but(None);
        Ok(Response::new(BatchAbortAck {}))
    }

    async fn fetch_batch(
        &self,
        request: Request<FetchBatchRequest>,
    ) -> Result<Response<BatchCommit>, Status> {
        self.require_party0(&request)?;
        let id = request.get_ref().batch_id;
        let b = self
            .state
            .store_call(move |s| s.store.batch(id))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .ok_or_else(|| Status::not_found(format!("batch {id} is not in the batch log")))?;
        let commit = <BatchCommit as prost::Message>::decode(b.commit.as_slice())
            .map_err(|_| Status::data_loss(format!("batch {id} is corrupt in the batch log")))?;
        Ok(Response::new(commit))
    }

    type RecoverSharesStream = RecoverStream;

    async fn recover_shares(
        &self,
        request: Request<RecoverRequest>,
    ) -> Result<Response<Self::RecoverSharesStream>, Status> {
        // The caller recovers its own shares only: its party id comes from its certificate.
        let caller = self.caller(&request)?;
        let party = caller.get();
        let chunks = super::recovery::helper_stream(self.state.clone(), caller, request.get_ref())
            .await
            .map_err(|e| {
                tracing::warn!(party, error = %e, "recovery request refused");
                recovery_status(e)
            })?;
        tracing::info!(party, "streaming masked recovery contributions");
        let stream = tokio_stream::StreamExt::map(
            tokio_stream::wrappers::ReceiverStream::new(chunks),
            move |item| {
                item.map_err(|e| {
                    tracing::warn!(party, error = %e, "recovery stream failed");
                    Status::internal(e.to_string())
                })
            },
        );
        Ok(Response::new(Box::pin(stream)))
    }

    async fn share_recovery_pad(
        &self,
        request: Request<RecoveryPadOffer>,
    ) -> Result<Response<RecoveryPadAck>, Status> {
        let from = self.caller(&request)?;
        let target = request.get_ref().target_party;
        super::recovery::accept_pad(&self.state, from, request.get_ref()).map_err(|e| {
            tracing::warn!(from = from.get(), target, error = %e, "recovery pad refused");
            recovery_status(e)
        })?;
        Ok(Response::new(RecoveryPadAck {}))
    }

    async fn ping(&self, request: Request<PingRequest>) -> Result<Response<PingResponse>, Status> {
        // A configured peer's certificate only: strangers learn nothing, not even the party id.
        self.caller(&request)?;
        Ok(Response::new(PingResponse {
            party_id: u32::from(self.state.party.get()),
        }))
    }
}

/// A helper's refusal as the caller reads it. A file or store failure names no path.
fn recovery_status(e: RecoveryError) -> Status {
    use tonic::Code;
    let code = match &e {
        RecoveryError::Allowance(a) if a.is_refusal() => Code::PermissionDenied,
        RecoveryError::Allowance(_) => {
            return Status::internal("this node's recovery allowance cannot be read or written")
        }
        RecoveryError::SelfRecovery | RecoveryError::NotLowHelper => Code::PermissionDenied,
        RecoveryError::Nonce | RecoveryError::PadSecret(_) => Code::InvalidArgument,
        RecoveryError::NonceReused
        | RecoveryError::NoPad { .. }
        | RecoveryError::PadOfferedTwice => Code::FailedPrecondition,
        RecoveryError::TooManyPadOffers => Code::ResourceExhausted,
        // The other helper's refusal, passed on with its code.
        RecoveryError::PadRefused { code, .. } => *code,
        _ => return Status::internal("recovery failed on this node"),
    };
    Status::new(code, e.to_string())
}
