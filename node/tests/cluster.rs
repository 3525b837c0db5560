//! Three real nodes (keygen certificates, TLS, redb) on 127.0.0.1 port 0.

#[path = "support/cluster.rs"]
mod cluster;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster::{Cluster, Res};
use ocelli_node::batch::{DangerEnrolEverythingForTests, NotEvaluated};
use ocelli_node::client::{agree, verify_result};
use ocelli_node::clock::now_ms;
use ocelli_node::links::MpcDialer;
use ocelli_node::tls::NodeTls;
use prost::Message;
use sdk_orb::{PartyId, RequestType};
use shared_proto::v1::peer_service_client::PeerServiceClient;
use shared_proto::v1::{
    BatchAbort, BatchProposal, GetResultRequest, NodeResult, ResultStatus, StreamResultsRequest,
    SubmitRequest,
};
use tokio_stream::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_envelopes_are_stored_identically_and_answered_not_evaluated() -> Res {
    let mut c = Cluster::start(Arc::new(NotEvaluated)).await?;
    let t = Instant::now();
    let envs: Vec<Vec<u8>> = (0..5).map(|_| c.envelope()).collect();
    eprintln!("sealed 5 envelopes in {:?}", t.elapsed());
    for e in &envs {
        for r in c.submit_all(e).await {
            r?;
        }
    }
    c.wait_drained(Duration::from_secs(20)).await?;
    let s = c.assert_stores_agree();
    assert_eq!(s.requests.len(), 5);
    assert!(s.serials.is_empty(), "nothing may be enrolled unevaluated");
    for r in s.requests.values() {
        let r = NodeResult::decode(r.result.as_deref().ok_or("missing result")?)?;
        assert_eq!(r.status, ResultStatus::NotEvaluated as i32);
    }
    c.stop_all().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enrolments_get_identical_serial_ids_and_signed_identical_results() -> Res {
    let mut c = Cluster::start(Arc::new(DangerEnrolEverythingForTests)).await?;
    let mut ids = Vec::new();
    for _ in 0..4 {
        let e = c.envelope();
        ids.push(EnvelopeId::of(&e));
        for r in c.submit_all(&e).await {
            r?;
        }
    }
    c.wait_drained(Duration::from_secs(20)).await?;
    // Delete serial 2, reset serial 3, delete a serial that does not exist.
    for (t, serial) in [
        (RequestType::Deletion, 2),
        (RequestType::Reset, 3),
        (RequestType::Deletion, 99),
    ] {
        let meta = c.meta(t, serial, now_ms());
        let e = c.seal(&meta);
        ids.push(EnvelopeId::of(&e));
        for r in c.submit_all(&e).await {
            r?;
        }
        c.wait_drained(Duration::from_secs(20)).await?;
    }
    let s = c.assert_stores_agree();
    assert_eq!(s.serials, vec![1, 3, 4]);
    assert_eq!(s.next_serial, 5);
    for i in 0..3 {
        assert_eq!(c.state(i).shares().len(), 3);
    }
    // Every node signs the same result bytes; all three signatures verify.
    let want = [
        ResultStatus::UniqueEnrolled,
        ResultStatus::UniqueEnrolled,
        ResultStatus::UniqueEnrolled,
        ResultStatus::UniqueEnrolled,
        ResultStatus::Deleted,
        ResultStatus::Reset,
        ResultStatus::UnknownSerialId,
    ];
    let keys = [0, 1, 2].map(|i| c.state(i).result_verifying_key());
    let mut serials = Vec::new();
    for (k, id) in ids.iter().enumerate() {
        let mut results = Vec::new();
        let mut signed_all = Vec::new();
        for i in 0..3 {
            let signed = c
                .client(i)
                .orb
                .get_result(GetResultRequest {
                    request_id: id.0.to_vec(),
                })
                .await?
                .into_inner();
            let key = c.state(i).result_verifying_key();
            let r = verify_result(&signed, &key)?;
            assert_eq!(signed.party_id, i as u32);
            results.push(signed.result.clone());
            signed_all.push(signed.clone());
            if k == 0 {
                assert_eq!(r.status, want[k] as i32);
            }
            assert_eq!(r.status, want[k] as i32, "request {k}");
            if i == 0 {
                serials.push(r.serial_id);
            }
        }
        assert_eq!(results[0], results[1]);
        assert_eq!(results[1], results[2]);
        assert_eq!(agree(&signed_all, &keys, &id.0)?.status, want[k] as i32);
        // A tampered result is refused.
        let mut bad = signed_all.clone();
        bad[1].result.push(0);
        assert!(agree(&bad, &keys, &id.0).is_err());
    }
    assert_eq!(&serials[..4], &[1, 2, 3, 4]);
    // Unknown request ids are NOT_FOUND.
    let s = c
        .client(0)
        .orb
        .get_result(GetResultRequest {
            request_id: vec![0; 16],
        })
        .await
        .err()
        .ok_or("unknown id found")?;
    assert_eq!(s.code(), tonic::Code::NotFound);
    // Enrolled shares survive a restart (loaded at start).
    c.restart_node(2).await?;
    assert_eq!(c.state(2).shares().len(), 3);
    c.stop_all().await?;
    Ok(())
}

/// The request id of an envelope.
struct EnvelopeId([u8; 16]);

impl EnvelopeId {
    fn of(env: &[u8]) -> Self {
        let v = sdk_orb::envelope::EnvelopeView::parse(env).expect("parses");
        Self(v.request_id().0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_one_node_lacks_times_out_everywhere_and_results_stream() -> Res {
    let mut c = Cluster::start_with(Arc::new(NotEvaluated), &|cfg| {
        cfg.batch.request_timeout_ms = 1_000;
    })
    .await?;
    let e = c.envelope();
    let id = EnvelopeId::of(&e);
    let mut stream = c
        .client(0)
        .orb
        .stream_results(StreamResultsRequest {
            request_ids: vec![id.0.to_vec()],
        })
        .await?
        .into_inner();
    for i in [0, 1] {
        c.client(i)
            .orb
            .submit(SubmitRequest {
                envelope: e.clone(),
                or_serial_ids: Vec::new(),
            })
            .await?;
    }
    // Pending: GetResult says so.
    let s = c
        .client(0)
        .orb
        .get_result(GetResultRequest {
            request_id: id.0.to_vec(),
        })
        .await
        .err()
        .ok_or("result before the batch")?;
    assert_eq!(s.code(), tonic::Code::Unavailable);
    let signed = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await?
        .ok_or("stream ended")??;
    let r = NodeResult::decode(signed.result.as_slice())?;
    assert_eq!(r.status, ResultStatus::TimedOut as i32);
    assert!(r.detail.contains("timed out"));
    c.wait_drained(Duration::from_secs(10)).await?;
    // Node 2 never saw it, yet records the same result, and refuses it now.
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.assert_stores_agree();
    let st = c
        .client(2)
        .orb
        .submit(SubmitRequest {
            envelope: e,
            or_serial_ids: Vec::new(),
        })
        .await
        .err()
        .ok_or("timed-out request accepted later")?;
    assert_eq!(st.code(), tonic::Code::AlreadyExists);
    c.stop_all().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_refuse_peers_with_the_wrong_certificate() -> Res {
    let mut c = Cluster::start(Arc::new(NotEvaluated)).await?;
    let timeout = Duration::from_secs(3);
    let peer_client = |tls: &NodeTls, as_party: PartyId, addr| -> Res<PeerServiceClient<_>> {
        let cfg = tls.peer_clients.get(&as_party).ok_or("no client")?.clone();
        let ch = ocelli_node::tls::channel(addr, "127.0.0.1", cfg, timeout)?;
        Ok(PeerServiceClient::new(ch))
    };
    // Party 2 (a valid peer) may not act as party 0 towards party 1.
    let tls2 = NodeTls::load(&c.configs[2])?;
    let mut to1 = peer_client(&tls2, PartyId::ALL[1], c.configs[1].listen.peer)?;
    let s = to1
        .propose_batch(BatchProposal {
            batch_id: 1,
            items: Vec::new(),
        })
        .await
        .err()
        .ok_or("party 2 allowed to propose")?;
    assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");
    // Party 0 dialling "party 1" but reaching party 2 refuses the handshake.
    let tls0 = NodeTls::load(&c.configs[0])?;
    let mut wrong = peer_client(&tls0, PartyId::ALL[1], c.configs[2].listen.peer)?;
    let s = wrong
        .abort_batch(BatchAbort { batch_id: 1 })
        .await
        .err()
        .ok_or("connected to the wrong party")?;
    assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
    // A node of another deployment (other CA) is refused by the server.
    let other = tempfile::tempdir()?;
    let addrs = [(
        c.configs[0].listen.orb,
        c.configs[0].listen.peer,
        c.configs[0].listen.metrics,
    ); 3];
    let (_, foreign) = cluster::configs_for(other.path(), &addrs, &|_| {})?;
    let foreign0 = NodeTls::load(&foreign[0])?;
    let mut f = peer_client(&foreign0, PartyId::ALL[1], c.configs[1].listen.peer)?;
    assert!(f.abort_batch(BatchAbort { batch_id: 1 }).await.is_err());
    // The legitimate path still works.
    let e = c.envelope();
    for r in c.submit_all(&e).await {
        r?;
    }
    c.wait_drained(Duration::from_secs(20)).await?;
    c.stop_all().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_concurrent_load_loses_nothing_and_survives_a_graceful_restart() -> Res {
    let mut c = Cluster::start(Arc::new(NotEvaluated)).await?;
    let envs: Vec<Vec<u8>> = (0..24).map(|_| c.envelope()).collect();
    let (first, second) = envs.split_at(12);
    submit_concurrently(&c, first).await?;
    // Graceful restart of party 0 while requests may be pending.
    c.restart_node(0).await?;
    submit_concurrently(&c, second).await?;
    c.wait_drained(Duration::from_secs(30)).await?;
    let s = c.assert_stores_agree();
    assert_eq!(s.requests.len(), 24);
    let h = c
        .client(1)
        .health
        .check(shared_proto::v1::HealthCheckRequest {})
        .await?
        .into_inner();
    assert!(h.live && h.ready && h.pending == 0);
    c.stop_all().await?;
    Ok(())
}

async fn submit_concurrently(c: &Cluster, envs: &[Vec<u8>]) -> Res {
    let mut tasks = Vec::new();
    for i in 0..3 {
        let client = c.client(i);
        for e in envs {
            let mut client = client.clone();
            let e = e.clone();
            tasks.push(tokio::spawn(async move {
                client
                    .orb
                    .submit(SubmitRequest {
                        envelope: e,
                        or_serial_ids: Vec::new(),
                    })
                    .await
            }));
        }
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpc_links_carry_bytes_both_ways_bound_to_the_peer_identity() -> Res {
    let mut c = Cluster::start(Arc::new(NotEvaluated)).await?;
    let timeout = Duration::from_secs(5);
    let [zero, one, two] = PartyId::ALL;
    let dialer_to = |from: PartyId, to: PartyId, port: SocketAddr| -> Res<MpcDialer> {
        let tls = NodeTls::load(&c.configs[from.index()])?;
        let cfg = tls.peer_clients.get(&to).ok_or("no client")?;
        Ok(MpcDialer::new(to, port, "127.0.0.1", cfg, timeout)?)
    };
    let peer_port = |to: PartyId| c.configs[to.index()].listen.peer;
    // Party 0 dials party 1 for session 42.
    let dialer = dialer_to(zero, one, peer_port(one))?.dial(42).await?;
    let acceptor = c.state(1).links.accept(42, zero, timeout).await?;
    // Party 2 opening session 43 is not party 0's session 43.
    let other = dialer_to(two, one, peer_port(one))?.dial(43).await?;
    assert!(c
        .state(1)
        .links
        .accept(43, zero, Duration::from_millis(300))
        .await
        .is_err());
    let from_2 = c.state(1).links.accept(43, two, timeout).await?;
    // The orb port does not speak the link protocol.
    let orb_port = c.configs[1].listen.orb;
    assert!(dialer_to(zero, one, orb_port)?.dial(44).await.is_err());
    const N: usize = 8;
    const SIZE: usize = 1 << 20;
    let started = Instant::now();
    let a = tokio::task::spawn_blocking(move || -> Result<(), String> {
        for i in 0..N {
            if !(dialer.send)(vec![i as u8; SIZE]) {
                return Err("send".into());
            }
        }
        for i in 0..N {
            let m = dialer
                .recv
                .recv_timeout(Duration::from_secs(20))
                .map_err(|e| e.to_string())?;
            if m.len() != SIZE || m[0] != 100 + i as u8 {
                return Err(format!("bad message {i}"));
            }
        }
        Ok(())
    });
    let b = tokio::task::spawn_blocking(move || -> Result<(), String> {
        for i in 0..N {
            let m = acceptor
                .recv
                .recv_timeout(Duration::from_secs(20))
                .map_err(|e| e.to_string())?;
            if m.len() != SIZE || m[SIZE - 1] != i as u8 {
                return Err(format!("bad message {i}"));
            }
            if !(acceptor.send)(vec![100 + i as u8; SIZE]) {
                return Err("send".into());
            }
        }
        Ok(())
    });
    a.await??;
    b.await??;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "mpc link: {N} x {} KiB each way in {secs:.2} s ({:.0} MiB/s each way, debug build)",
        SIZE / 1024,
        (N * SIZE) as f64 / 1048576.0 / secs
    );
    // Either side closing ends the other's receiver.
    drop(other);
    let closed = tokio::task::spawn_blocking(move || from_2.recv.recv_timeout(timeout)).await?;
    assert_eq!(closed, Err(std::sync::mpsc::RecvTimeoutError::Disconnected));
    c.stop_all().await?;
    Ok(())
}
