//! `ocelli-node demo`: a three-node deployment on this machine with embedded
//! stores and real TLS; enrols synthetic people through real envelopes, then
//! submits new people, re-captures of enrolled ones and mirrored re-captures
//! (one probe in ten), and reports what the three-party matching decided
//! against what the synthetic model says is true. The synthetic model is documented in [`ocelli_mpc::synthetic`].

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use rand_chacha::ChaCha20Rng;
use rand_core::{OsRng, RngCore, SeedableRng};
use sdk_orb::envelope::RequestMeta;
use sdk_orb::{IrisTemplate, RequestId, RequestType};
use shared_proto::v1::{NodeResult, ResultStatus};

use crate::clock::now_ms;
use crate::cluster::{Deployment, LocalCluster, Orb, ToolError};
use ocelli_mpc::synthetic;

/// What the demo runs.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// People enrolled first.
    pub people: usize,
    /// Requests submitted afterwards: half new people, half re-captures, and one in ten a
    /// mirrored capture of an enrolled person (a mirror attack).
    pub probes: usize,
    /// Deployment directory (default: a temporary one, removed afterwards).
    pub dir: Option<PathBuf>,
    /// Seed of the synthetic irises.
    pub seed: u64,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Show progress bars.
    pub progress: bool,
    /// Re-authentications of enrolled people submitted at the end (the uncensored genuine
    /// population of the distance statistics; the default 40 is past the 30 pairs the false
    /// non-match estimate needs).
    pub reauthentications: usize,
    /// Count and open distance statistics.
    pub stats: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            people: 2000,
            probes: 200,
            dir: None,
            seed: 1,
            concurrency: 128,
            progress: true,
            reauthentications: 40,
            stats: true,
        }
    }
}

/// The closing table.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct DemoReport {
    /// Requests answered.
    pub requests: usize,
    /// People enrolled.
    pub enrolled: usize,
    /// Re-captures submitted.
    pub recaptures: usize,
    /// Re-captures matched to the right person.
    pub duplicates_found: usize,
    /// Requests matched to someone they are not.
    pub false_matches: usize,
    /// Re-captures not matched to their person.
    pub false_non_matches: usize,
    /// Mirrored captures of enrolled people submitted.
    pub mirrored_captures: usize,
    /// Mirrored captures flagged as mirror attacks (and not enrolled).
    pub mirror_attacks_flagged: usize,
    /// Other requests (enrolments, new people, re-captures) flagged as mirror attacks.
    pub false_mirror_flags: usize,
    /// (query rotation, enrolled iris) pairs compared in MPC.
    pub comparisons: u64,
    /// Wall time of the whole run, seconds.
    pub seconds: f64,
    /// `comparisons / seconds`, three parties on this one machine.
    pub comparisons_per_second: f64,
    /// Re-authentications of enrolled people submitted.
    pub reauthentications: usize,
    /// Re-authentications refused.
    pub failed_reauthentications: usize,
    /// The distance statistics the demo's one period opened.
    #[serde(skip)]
    pub stats: Option<crate::stats::OpenedHistograms>,
    /// Impostor, genuine and re-authentication pairs in the opened statistics.
    pub stats_pairs: Option<[u64; 3]>,
}

impl std::fmt::Display for DemoReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rows: [(&str, String); 14] = [
            ("requests", self.requests.to_string()),
            ("enrolled", self.enrolled.to_string()),
            ("re-captures submitted", self.recaptures.to_string()),
            ("duplicates found", self.duplicates_found.to_string()),
            ("false matches", self.false_matches.to_string()),
            ("false non-matches", self.false_non_matches.to_string()),
            ("mirrored captures", self.mirrored_captures.to_string()),
            (
                "mirror attacks flagged",
                self.mirror_attacks_flagged.to_string(),
            ),
            ("false mirror flags", self.false_mirror_flags.to_string()),
            ("re-authentications", self.reauthentications.to_string()),
            ("failed re-auths", self.failed_reauthentications.to_string()),
            ("comparisons (MPC)", self.comparisons.to_string()),
            ("wall time", format!("{:.1} s", self.seconds)),
            (
                "comparisons per second",
                format!("{:.0}", self.comparisons_per_second),
            ),
        ];
        writeln!(f, "+------------------------+----------------+")?;
        for (k, v) in rows {
            writeln!(f, "| {k:<22} | {v:>14} |")?;
        }
        write!(f, "+------------------------+----------------+")
    }
}

/// One person to submit and what the truth is.
struct Probe {
    left: IrisTemplate,
    right: IrisTemplate,
    /// For a re-capture: the position of the enrolled original.
    original: Option<usize>,
    /// A mirrored capture (of `original`).
    mirrored: bool,
    /// A re-authentication of this serial id rather than a uniqueness request.
    reauth: Option<u64>,
}

fn bar(show: bool, len: usize, what: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len as u64);
    b.set_style(
        ProgressStyle::with_template("{msg:<10} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    b.set_message(what.to_owned());
    b
}

/// Submits every probe (bounded concurrency) and returns the agreed results in
/// probe order.
async fn run_phase(
    orb: &Orb,
    probes: &[Probe],
    concurrency: usize,
    bar: &ProgressBar,
) -> Result<Vec<NodeResult>, ToolError> {
    let results = futures::stream::iter(probes.iter().enumerate())
        .map(|(i, p)| async move {
            let meta = RequestMeta {
                request_id: RequestId::random(&mut OsRng),
                request_type: p
                    .reauth
                    .map_or(RequestType::Uniqueness, |_| RequestType::Reauth),
                timestamp_ms: now_ms(),
                serial_id: p.reauth.unwrap_or(0),
                or_policy: false,
            };
            let envelope = orb.envelope(&mut OsRng, &meta, &p.left, &p.right)?;
            orb.submit(&envelope).await?;
            let r = orb
                .result(&meta.request_id, Duration::from_secs(600))
                .await?;
            bar.inc(1);
            Ok::<_, ToolError>((i, r))
        })
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<_>>()
        .await;
    let mut ordered: Vec<Option<NodeResult>> = vec![None; probes.len()];
    for r in results {
        let (i, r) = r?;
        ordered[i] = Some(r);
    }
    bar.finish();
    Ok(ordered.into_iter().flatten().collect())
}

/// The privacy budget the demo opens its one period with. At a deployment's default of 1 the
/// noise (a standard deviation of about 157 pairs per count) would bury the demo's 119 genuine
/// and re-authentication pairs; the demo's people are synthetic, so it shows the histograms
/// themselves, and says so.
pub const DEMO_EPSILON: f64 = 100.0;

/// Opens the demo's statistics period: restarts the nodes with a period of one batch and
/// submits one closing request (a new person's uniqueness check), whose batch opens it.
async fn close_period(
    deployment: &mut Deployment,
    orb: &Orb,
    rng: &mut ChaCha20Rng,
) -> Result<Option<crate::stats::OpenedHistograms>, ToolError> {
    for c in &mut deployment.configs {
        c.stats.period_batches = 1;
    }
    let cluster = LocalCluster::start(deployment, None).await?;
    let meta = RequestMeta {
        request_id: RequestId::random(&mut OsRng),
        request_type: RequestType::UniquenessCheck,
        timestamp_ms: now_ms(),
        serial_id: 0,
        or_policy: false,
    };
    let envelope = orb.envelope(
        &mut OsRng,
        &meta,
        &synthetic::eye(rng),
        &synthetic::eye(rng),
    )?;
    orb.submit(&envelope).await?;
    orb.result(&meta.request_id, Duration::from_secs(600))
        .await?;
    let store = cluster.states()[0].store().clone();
    let opened = tokio::task::spawn_blocking(move || store.opened_histograms(None))
        .await
        .map_err(|e| e.to_string())??;
    cluster.shutdown().await?;
    Ok(opened)
}

/// Runs the demo.
///
/// # Errors
/// A node fails to start, or a request is refused or not answered.
pub async fn run(opts: &DemoOptions) -> Result<DemoReport, ToolError> {
    let started = Instant::now();
    let temp;
    let dir = match &opts.dir {
        Some(d) => d.clone(),
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_owned()
        }
    };
    let (mut deployment, listeners) = Deployment::open_or_create(&dir, &|_| {}).await?;
    // One statistics period over the whole demo: it cannot open while the demo runs (no
    // number of batches reaches the minimum) and opens with one closing batch after a restart
    // with a period of one batch.
    for c in &mut deployment.configs {
        c.stats.enabled = opts.stats;
        c.stats.period_batches = u64::MAX;
        c.stats.period_s = 0;
        c.stats.min_pairs = 0;
        c.stats.epsilon = DEMO_EPSILON;
    }
    let cluster = LocalCluster::start(&deployment, listeners).await?;
    let orb = deployment.orb()?;
    let enrolled_before = cluster.states()[0].shares().len();

    let mut rng = ChaCha20Rng::seed_from_u64(opts.seed);
    let person = |rng: &mut ChaCha20Rng| Probe {
        left: synthetic::eye(rng),
        right: synthetic::eye(rng),
        original: None,
        mirrored: false,
        reauth: None,
    };
    let people: Vec<Probe> = (0..opts.people).map(|_| person(&mut rng)).collect();
    let mut report = DemoReport::default();

    let enrol_bar = bar(opts.progress, people.len(), "enrolling");
    let enrolment = run_phase(&orb, &people, opts.concurrency, &enrol_bar).await?;
    let mut serial_of = vec![None; people.len()];
    for (i, r) in enrolment.iter().enumerate() {
        report.false_mirror_flags += usize::from(r.mirror_attack);
        match ResultStatus::try_from(r.status) {
            Ok(ResultStatus::UniqueEnrolled) => serial_of[i] = Some(r.serial_id),
            Ok(ResultStatus::Match | ResultStatus::MirrorAttack) => report.false_matches += 1,
            _ => return Err(format!("unexpected result for an enrolment: {}", r.detail).into()),
        }
    }

    let enrolled: Vec<usize> = (0..people.len())
        .filter(|&i| serial_of[i].is_some())
        .collect();
    let mut probes = Vec::with_capacity(opts.probes);
    for k in 0..opts.probes {
        if k % 10 == 4 && !enrolled.is_empty() {
            // The enrolled person's eyes captured again, the image flipped: the left eye's
            // code appears mirrored as the right eye's and the other way round.
            let i = enrolled[(rng.next_u64() % enrolled.len() as u64) as usize];
            probes.push(Probe {
                left: synthetic::recapture(&mut rng, &people[i].right)
                    .0
                    .mirrored(),
                right: synthetic::recapture(&mut rng, &people[i].left).0.mirrored(),
                original: Some(i),
                mirrored: true,
                reauth: None,
            });
        } else if k % 2 == 1 && !enrolled.is_empty() {
            let i = enrolled[(rng.next_u64() % enrolled.len() as u64) as usize];
            probes.push(Probe {
                left: synthetic::recapture(&mut rng, &people[i].left).0,
                right: synthetic::recapture(&mut rng, &people[i].right).0,
                original: Some(i),
                mirrored: false,
                reauth: None,
            });
        } else {
            probes.push(person(&mut rng));
        }
    }
    let probe_bar = bar(opts.progress, probes.len(), "probing");
    let answers = run_phase(&orb, &probes, opts.concurrency, &probe_bar).await?;
    for (p, r) in probes.iter().zip(&answers) {
        let status = ResultStatus::try_from(r.status).unwrap_or(ResultStatus::Unspecified);
        if p.mirrored {
            report.mirrored_captures += 1;
            report.mirror_attacks_flagged += usize::from(r.mirror_attack);
            if status == ResultStatus::UniqueEnrolled {
                report.false_non_matches += 1;
            }
            continue;
        }
        report.false_mirror_flags += usize::from(r.mirror_attack);
        match (p.original, status) {
            (Some(i), ResultStatus::Match) => {
                report.recaptures += 1;
                let serial = serial_of[i].unwrap_or(0);
                if r.matched_serial_ids.contains(&serial) {
                    report.duplicates_found += 1;
                } else {
                    report.false_non_matches += 1;
                }
                report.false_matches += r
                    .matched_serial_ids
                    .iter()
                    .filter(|&&s| s != serial)
                    .count();
            }
            (Some(_), _) => {
                report.recaptures += 1;
                report.false_non_matches += 1;
            }
            (None, ResultStatus::Match) => report.false_matches += 1,
            (None, _) => {}
        }
    }

    // Each of another person: a period counts one re-authentication pair per enrolled row.
    let n_reauths = opts.reauthentications.min(enrolled.len());
    let reauths: Vec<Probe> = (0..n_reauths)
        .map(|k| {
            let i = enrolled[k * enrolled.len() / n_reauths];
            Probe {
                left: synthetic::recapture(&mut rng, &people[i].left).0,
                right: synthetic::recapture(&mut rng, &people[i].right).0,
                original: Some(i),
                mirrored: false,
                reauth: serial_of[i],
            }
        })
        .collect();
    let reauth_bar = bar(opts.progress, reauths.len(), "re-auth");
    let reauthenticated = run_phase(&orb, &reauths, opts.concurrency, &reauth_bar).await?;
    report.reauthentications = reauthenticated.len();
    report.failed_reauthentications = reauthenticated
        .iter()
        .filter(|r| r.status != ResultStatus::ReauthMatch as i32)
        .count();

    let states = cluster.states();
    report.requests = enrolment.len() + answers.len() + reauthenticated.len();
    report.enrolled = states[0].shares().len() - enrolled_before;
    report.comparisons = states[0].metrics().comparisons.get();
    // The nodes' state holds their stores open.
    drop(states);
    cluster.shutdown().await?;
    if opts.stats {
        report.stats = close_period(&mut deployment, &orb, &mut rng).await?;
        report.stats_pairs = report
            .stats
            .as_ref()
            .map(|h| [h.impostor_pairs, h.genuine_pairs, h.reauthentication_pairs]);
    }
    report.seconds = started.elapsed().as_secs_f64();
    report.comparisons_per_second = report.comparisons as f64 / report.seconds;
    Ok(report)
}
