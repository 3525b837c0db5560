//! Issue 12, one test per finding: who may read results, which outcomes a node signs, how
//! time-outs and undecryptable requests are decided, and what a round message may carry.
//! Three real nodes over real TLS wherever the finding is about the service.

#[path = "support/cluster.rs"]
mod cluster;

use std::sync::Arc;
use std::time::Duration;

use cluster::{Cluster, Res};
use ocelli_node::batch::NotEvaluated;
use ocelli_node::config::{
    max_pass_comparisons_allowed, ConfigError, NodeConfig, PEER_MESSAGE_CAP,
};
use ocelli_node::keys::sample_config;
use ocelli_node::tls::NodeTls;
use shared_proto::v1::peer_service_client::PeerServiceClient;

/// Finding 5: the pass size the docs recommended (16,777,216) is refused when the config is
/// validated, with the largest allowed value in the error; at the largest allowed value the
/// largest round message of a batch of `batch.max_size` requests crosses a real node-to-node
/// link in one frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn largest_pass_fits_messages() -> Res {
    let mut cfg = NodeConfig::from_toml(&sample_config(0, 1))?;
    cfg.matching.max_pass_comparisons = 16_777_216;
    match cfg.validate() {
        Err(ConfigError::PassTooLarge { allowed, .. }) => {
            assert_eq!(allowed, max_pass_comparisons_allowed())
        }
        other => return Err(format!("16,777,216 comparisons per pass accepted: {other:?}").into()),
    }
    let allowed = max_pass_comparisons_allowed();
    cfg.matching.max_pass_comparisons = allowed;
    cfg.validate()?;
    cfg.matching.max_pass_comparisons = allowed + 62 * 64;
    assert!(matches!(
        cfg.validate(),
        Err(ConfigError::PassTooLarge { .. })
    ));

    let mut c = Cluster::start_with(Arc::new(NotEvaluated), &|c| {
        c.matching.max_pass_comparisons = allowed;
    })
    .await?;
    let pipeline = ocelli_mpc::pipeline::PipelineConfig {
        max_pass_comparisons: allowed,
        ..ocelli_mpc::pipeline::PipelineConfig::with_threshold(0.345)
    };
    let size = pipeline.largest_message_bytes(c.configs[0].batch.max_size);
    assert!(size > 60 << 20, "the bound is tight: {size}");
    let timeout = Duration::from_secs(10);
    let tls = NodeTls::load(&c.configs[0])?;
    let cfg1 = tls.peer_clients.get(&1).ok_or("no client")?.clone();
    let ch = ocelli_node::tls::channel(c.configs[1].listen.peer, "127.0.0.1", cfg1, timeout)?;
    let dialer = ocelli_node::links::dial(
        &PeerServiceClient::new(ch).max_encoding_message_size(PEER_MESSAGE_CAP),
        77,
    )
    .await?;
    let acceptor = c.state(1).links.accept(77, 0, timeout).await?;
    let got = tokio::task::spawn_blocking(move || {
        let sent = (dialer.send)(vec![0xA5; size]);
        let got = acceptor.recv.recv_timeout(Duration::from_secs(60));
        (sent, got.map(|m| m.len()))
    })
    .await?;
    assert!(got.0, "send failed");
    assert_eq!(got.1.map_err(|e| e.to_string())?, size);
    c.stop_all().await?;
    Ok(())
}
