//! `ocelli-node`: `keygen` and `serve`. Only parses arguments and config and
//! sets up logging; everything else lives in the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ocelli_node::config::NodeConfig;
use ocelli_node::keys::{keygen, KeygenOptions};
use ocelli_node::node::NodeState;
use ocelli_node::server::{self, Listeners};

#[derive(Debug, Parser)]
#[command(name = "ocelli-node", version, about = "The ocelli verifier node")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a CA, node certificates and keys, an orb key, the public key
    /// bundle and three node configs for a local deployment.
    Keygen {
        /// Output directory.
        #[arg(long, default_value = "ocelli-keys")]
        out: PathBuf,
        /// Subject alternative names of the node certificates.
        #[arg(long = "host", default_values_t = ["localhost".to_owned(), "127.0.0.1".to_owned()])]
        hosts: Vec<String>,
        /// First port of the generated configs.
        #[arg(long, default_value_t = 50050)]
        base_port: u16,
        /// Overwrite existing files.
        #[arg(long)]
        force: bool,
    },
    /// Run a node.
    Serve {
        /// TOML config file (OCELLI_* environment variables override it).
        #[arg(long)]
        config: PathBuf,
        /// Log as JSON lines.
        #[arg(long, env = "OCELLI_LOG_JSON")]
        json_logs: bool,
    },
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("OCELLI_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        b.json().init();
    } else {
        b.init();
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! {
                _ = t.recv() => tracing::info!("SIGTERM received"),
                _ = i.recv() => tracing::info!("SIGINT received"),
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Keygen {
            out,
            hosts,
            base_port,
            force,
        } => {
            let opts = KeygenOptions {
                out_dir: out.clone(),
                hosts,
                base_port,
                force,
            };
            match keygen(&opts) {
                Ok(_) => {
                    println!(
                        "wrote keys, certificates and party0.toml..party2.toml to {}",
                        out.display()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("keygen failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Serve { config, json_logs } => {
            init_logging(json_logs);
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the runtime");
                    return ExitCode::FAILURE;
                }
            };
            match rt.block_on(serve(config)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "node failed");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

async fn serve(path: PathBuf) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = NodeConfig::load(&path)?;
    let listeners = Listeners::bind(&cfg.listen).await?;
    let evaluator = ocelli_node::matching::evaluator_for(&cfg)?;
    let state = tokio::task::spawn_blocking(move || NodeState::open(cfg, evaluator)).await??;
    server::run(state, listeners, shutdown_signal()).await?;
    Ok(())
}
