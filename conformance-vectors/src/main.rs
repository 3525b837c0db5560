//! `conformance-vectors generate | verify | corpus`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use conformance_vectors::{
    corpus, default_vectors_dir, families_in, generate_dir, verify_file, Family, Report, Sources,
};

/// Known-answer vectors for ocelli: generate them, replay them against the SDK and the node
/// library, or build the fuzz seed corpus from them.
#[derive(Debug, Parser)]
#[command(name = "conformance-vectors", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Writes every family's vector file (deterministic: the same bytes every time).
    Generate {
        /// Output directory [default: the crate's vectors/].
        #[arg(long)]
        out: Option<PathBuf>,
        /// The open-iris fixtures [default: sdk-orb/testdata/open-iris in the repository].
        #[arg(long)]
        open_iris: Option<PathBuf>,
    },
    /// Replays the vectors against the SDK and the node library; exits non-zero on any failure.
    Verify {
        /// Only this family (its file must exist).
        #[arg(long)]
        family: Option<Family>,
        /// Directory of the vector files [default: the crate's vectors/].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Writes the fuzz seed corpus (fuzz/corpus/<target>/) from the vectors.
    Corpus {
        /// Directory of the vector files [default: the crate's vectors/].
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Corpus root [default: fuzz/corpus in the repository].
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn print_table(reports: &[Report]) {
    println!(
        "{:<22} {:>8} {:>8} {:>8}",
        "family", "vectors", "passed", "failed"
    );
    for r in reports {
        println!(
            "{:<22} {:>8} {:>8} {:>8}",
            r.family.name(),
            r.vectors,
            r.passed,
            r.vectors - r.passed
        );
    }
    let total: usize = reports.iter().map(|r| r.vectors).sum();
    let passed: usize = reports.iter().map(|r| r.passed).sum();
    println!(
        "{:<22} {:>8} {:>8} {:>8}",
        "total",
        total,
        passed,
        total - passed
    );
    for r in reports {
        for (id, why) in &r.failures {
            println!("FAIL {} #{id}: {why}", r.family.name());
        }
    }
}

fn run(cli: Cli) -> Result<bool, conformance_vectors::Error> {
    match cli.command {
        Command::Generate { out, open_iris } => {
            let out = out.unwrap_or_else(default_vectors_dir);
            let sources = Sources::load(&open_iris.unwrap_or_else(Sources::default_dir))?;
            generate_dir(&out, &sources)?;
            println!("wrote {} families to {}", Family::ALL.len(), out.display());
            Ok(true)
        }
        Command::Verify { family, dir } => {
            let dir = dir.unwrap_or_else(default_vectors_dir);
            let families = match family {
                Some(f) => vec![f],
                None => families_in(&dir)?,
            };
            let mut reports = Vec::new();
            for f in families {
                reports.push(verify_file(&dir, f)?);
            }
            print_table(&reports);
            Ok(reports.iter().all(Report::ok))
        }
        Command::Corpus { dir, out } => {
            let dir = dir.unwrap_or_else(default_vectors_dir);
            let out = out.unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus")
            });
            let summary = corpus::write_corpus(&dir, &out)?;
            for (target, n) in summary.targets {
                println!("{target}: {n} seed files");
            }
            Ok(true)
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
