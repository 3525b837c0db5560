//! `ocelli-node bench --self-check`: what the engines and the comparison phase compute,
//! reconstructed from the three parties' shares and checked against the plaintext reference
//! on synthetic people: sampled dot products, the match bits of those products, and the
//! whole pipeline's decisions. A benchmark figure is worth nothing from an engine that
//! computes something else; this says, on the machine that measured it, that it does not.

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use sdk_orb::plaintext::{dot_products, threshold_coefficient, DotProducts, DEFAULT_THRESHOLD};
use sdk_orb::rotation::ROTATION_COUNT;
use sdk_orb::shamir::PartyShares;
use sdk_orb::{IrisTemplate, PartyId};

use crate::device::{ComparisonPlace, PartyData};
use crate::timing::PassTimers;
use crate::BenchError;
use ocelli_mpc::backend::Backend;
use ocelli_mpc::bits::plane_to_bits;
use ocelli_mpc::db::{Eye, MatchDb, Part};
use ocelli_mpc::local::{run_three_wrapped, Link};
use ocelli_mpc::pipeline::query::QueryMatrix;
use ocelli_mpc::pipeline::{PipelineConfig, PipelineRequest};
use ocelli_mpc::scratch::ScratchPool;
use ocelli_mpc::synthetic;

type Person = (IrisTemplate, IrisTemplate);

/// Sizes of a self-check.
#[derive(Clone, Copy, Debug)]
pub struct SelfCheckConfig {
    /// Enrolled people.
    pub enrolled: usize,
    /// Queries; the first half are re-captures of enrolled people, the rest new people.
    pub queries: usize,
    /// Products sampled (a multiple of 64): every rotation of each re-capture against the
    /// person it re-captures, the rest at random.
    pub samples: usize,
}

impl Default for SelfCheckConfig {
    fn default() -> Self {
        SelfCheckConfig {
            enrolled: 48,
            queries: 8,
            samples: 4_096,
        }
    }
}

/// What the self-check found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SelfCheckReport {
    /// The engine (device name).
    pub engine: String,
    /// Where the comparison phase ran.
    pub comparison_on: String,
    /// Code and mask products reconstructed (each sample one of each).
    pub products_checked: usize,
    /// Of those, products unequal to the plaintext's.
    pub products_wrong: usize,
    /// Match bits opened from the sampled products' shares.
    pub bits_checked: usize,
    /// Of those, bits unequal to the plaintext rule's; and how many the plaintext sets.
    pub bits_wrong: usize,
    /// Match bits the plaintext rule sets among those checked.
    pub bits_set: usize,
    /// (query, enrolled person) decisions of the whole pipeline.
    pub decisions_checked: usize,
    /// Of those, decisions unequal to the plaintext's.
    pub decisions_wrong: usize,
    /// Matches among the plaintext decisions.
    pub decisions_matching: usize,
}

impl SelfCheckReport {
    /// Whether everything reconstructed equals the plaintext reference.
    pub fn passed(&self) -> bool {
        self.products_wrong == 0
            && self.bits_wrong == 0
            && self.decisions_wrong == 0
            && self.products_checked > 0
            && self.bits_set > 0
            && self.decisions_matching > 0
    }
}

impl std::fmt::Display for SelfCheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "self-check on {} (comparison phase on {}): {}",
            self.engine,
            self.comparison_on,
            if self.passed() { "passed" } else { "FAILED" }
        )?;
        writeln!(
            f,
            "  products   {:>6} checked, {} wrong",
            self.products_checked, self.products_wrong
        )?;
        writeln!(
            f,
            "  match bits {:>6} checked ({} set), {} wrong",
            self.bits_checked, self.bits_set, self.bits_wrong
        )?;
        write!(
            f,
            "  decisions  {:>6} checked ({} matching), {} wrong",
            self.decisions_checked, self.decisions_matching, self.decisions_wrong
        )
    }
}

/// One sampled product: eye, query row (query `row / 31`, rotation `row % 31 - 15`), entry.
#[derive(Clone, Copy, Debug)]
struct Sample {
    eye: Eye,
    row: usize,
    entry: usize,
}

fn eye_of(person: &Person, eye: Eye) -> &IrisTemplate {
    match eye {
        Eye::Left => &person.0,
        Eye::Right => &person.1,
    }
}

/// The plaintext products of one eye of `query`, rotation index `k` (rotation `k - 15`),
/// against `enrolled`.
fn plain_products(query: &Person, enrolled: &Person, eye: Eye, k: usize) -> DotProducts {
    let rotation = k as i32 - (ROTATION_COUNT as i32 / 2);
    dot_products(&eye_of(query, eye).rotated(rotation), eye_of(enrolled, eye))
}

/// The plaintext products of a sample.
fn reference(queries: &[Person], enrolled: &[Person], s: Sample) -> DotProducts {
    let (q, k) = (s.row / ROTATION_COUNT, s.row % ROTATION_COUNT);
    plain_products(&queries[q], &enrolled[s.entry], s.eye, k)
}

/// Runs the self-check on `engines` (one per party), the comparison phase at `place`.
///
/// # Errors
/// An engine cannot hold the database, or a run failed.
///
/// # Panics
/// If `config.samples` is not a positive multiple of 64.
pub fn self_check<B: Backend, P: ComparisonPlace>(
    config: SelfCheckConfig,
    engines: [&B; 3],
    place: &P,
    mut progress: impl FnMut(&str),
) -> Result<SelfCheckReport, BenchError> {
    assert!(config.samples > 0 && config.samples.is_multiple_of(64));
    let mut rng = ChaCha20Rng::seed_from_u64(4_099);
    let failed = |e: ocelli_mpc::network::NetworkError| BenchError::Bench(e.to_string());

    progress("self-check: synthetic people, shared");
    let enrolled: Vec<Person> = (0..config.enrolled.max(1))
        .map(|_| (synthetic::eye(&mut rng), synthetic::eye(&mut rng)))
        .collect();
    let recaptures = config.queries / 2;
    // Re-capture j is of enrolled person `recaptured[j]`.
    let recaptured: Vec<usize> = (0..recaptures).map(|j| (j * 7) % enrolled.len()).collect();
    let mut queries: Vec<Person> = recaptured
        .iter()
        .map(|&e| {
            let (l, _) = synthetic::recapture(&mut rng, &enrolled[e].0);
            let (r, _) = synthetic::recapture(&mut rng, &enrolled[e].1);
            (l, r)
        })
        .collect();
    while queries.len() < config.queries.max(1) {
        queries.push((synthetic::eye(&mut rng), synthetic::eye(&mut rng)));
    }
    let share = |rng: &mut ChaCha20Rng, people: &[Person]| -> Vec<Vec<PartyShares>> {
        people
            .iter()
            .map(|p| synthetic::share_person(rng, &p.0, &p.1))
            .collect()
    };
    let (enrolled_shares, query_shares) = (share(&mut rng, &enrolled), share(&mut rng, &queries));
    let dbs: Vec<MatchDb> = (0..3)
        .map(|i| {
            let mut db = crate::advised_db();
            for (d, shares) in enrolled_shares.iter().enumerate() {
                db.push(d as u64 + 1, &shares[i]);
            }
            db
        })
        .collect();
    for (engine, db) in engines.iter().zip(&dbs) {
        engine.prepare(db)?;
    }

    progress("self-check: products");
    let (rows, n) = (queries.len() * ROTATION_COUNT, enrolled.len());
    // [party][eye][code, mask]: every query row against every entry.
    let products: Vec<[[Vec<u16>; 2]; 2]> = (0..3)
        .map(|i| {
            let people: Vec<(&PartyShares, bool)> =
                query_shares.iter().map(|s| (&s[i], false)).collect();
            let prepared = QueryMatrix::new(PartyId::ALL[i], &people, &ScratchPool::default())
                .prepare_all(engines[i]);
            core::array::from_fn(|eye| {
                core::array::from_fn(|p| {
                    let part = [Part::Code, Part::Mask][p];
                    let mut out = vec![0u16; rows * n];
                    engines[i].dot_db_prepared(
                        &prepared[eye][p],
                        &dbs[i],
                        Eye::BOTH[eye],
                        part,
                        0..n,
                        &mut out,
                    );
                    out
                })
            })
        })
        .collect();
    let mut samples: Vec<Sample> = recaptured
        .iter()
        .enumerate()
        .flat_map(|(q, &entry)| {
            Eye::BOTH.into_iter().flat_map(move |eye| {
                (0..ROTATION_COUNT).map(move |k| Sample {
                    eye,
                    row: q * ROTATION_COUNT + k,
                    entry,
                })
            })
        })
        .take(config.samples)
        .collect();
    while samples.len() < config.samples {
        let pick = |rng: &mut ChaCha20Rng, m: usize| (rng.next_u64() % m as u64) as usize;
        samples.push(Sample {
            eye: Eye::BOTH[pick(&mut rng, 2)],
            row: pick(&mut rng, rows),
            entry: pick(&mut rng, n),
        });
    }
    let share_of =
        |i: usize, s: Sample, part: usize| products[i][s.eye.index()][part][s.row * n + s.entry];
    let expected: Vec<DotProducts> = samples
        .iter()
        .map(|&s| reference(&queries, &enrolled, s))
        .collect();
    let mut report = SelfCheckReport {
        engine: engines[0].name(),
        comparison_on: place.label(),
        products_checked: samples.len(),
        ..SelfCheckReport::default()
    };
    for (&s, e) in samples.iter().zip(&expected) {
        let sum = |part| (0..3).fold(0u16, |acc, i| acc.wrapping_add(share_of(i, s, part)));
        // The code product is signed; the trimmed mask holds each pair of equal real and
        // imaginary mask bits once, so its product is half the common bits.
        if sum(0) != e.cd as u16 || sum(1) != (e.md / 2) as u16 {
            report.products_wrong += 1;
        }
    }

    progress("self-check: match bits");
    let a = threshold_coefficient(DEFAULT_THRESHOLD);
    // Each party's own shares, as a pass lays them out: mask products doubled.
    let cd: Vec<Vec<u16>> = (0..3)
        .map(|i| samples.iter().map(|&s| share_of(i, s, 0)).collect())
        .collect();
    let md: Vec<Vec<u16>> = (0..3)
        .map(|i| {
            samples
                .iter()
                .map(|&s| share_of(i, s, 1).wrapping_mul(2))
                .collect()
        })
        .collect();
    let opened = run_three_wrapped(7, Link::Live, |s| {
        let i = s.party().index();
        place.open_match_bits(s, &cd[i], &md[i], a)
    });
    let mut planes = Vec::with_capacity(3);
    for (r, _, _) in opened {
        planes.push(r.map_err(failed)?);
    }
    let bits = plane_to_bits(&planes[0], samples.len());
    report.bits_checked = bits.len();
    for (bit, e) in bits.iter().zip(&expected) {
        report.bits_set += usize::from(e.matches(a));
        if *bit != e.matches(a) || planes.iter().any(|p| *p != planes[0]) {
            report.bits_wrong += 1;
        }
    }

    progress("self-check: whole pipeline");
    let pipeline_config = PipelineConfig::with_threshold(DEFAULT_THRESHOLD);
    let results = run_three_wrapped(8, Link::Live, |s| {
        let i = s.party().index();
        let requests: Vec<PipelineRequest<'_>> = query_shares
            .iter()
            .map(|shares| PipelineRequest::against_database(&shares[i]))
            .collect();
        place.evaluate(
            s,
            engines[i],
            PartyData {
                db: &dbs[i],
                scratch: &ScratchPool::default(),
            },
            &requests,
            &pipeline_config,
            &PassTimers::default(),
        )
    });
    let mut opened = Vec::with_capacity(3);
    for (r, _, _) in results {
        opened.push(r.map_err(failed)?);
    }
    for (q, query) in queries.iter().enumerate() {
        for (entry, person) in enrolled.iter().enumerate() {
            let eye_matches =
                |eye| (0..ROTATION_COUNT).any(|k| plain_products(query, person, eye, k).matches(a));
            let expected = eye_matches(Eye::Left) && eye_matches(Eye::Right);
            let found = opened.iter().map(|r| r[q].entries.contains(&entry));
            report.decisions_checked += 1;
            report.decisions_matching += usize::from(expected);
            if found.into_iter().any(|f| f != expected) {
                report.decisions_wrong += 1;
            }
        }
    }
    Ok(report)
}

/// [`self_check`] on three GPU engines (one per party) and the
/// comparison phase on their kernels.
///
/// # Errors
/// No usable GPU (the message says why), or a run failed.
#[cfg(feature = "gpu")]
pub fn self_check_gpu(
    devices: &[usize],
    progress: impl FnMut(&str),
) -> Result<SelfCheckReport, BenchError> {
    use crate::device::OnDevices;
    use ocelli_gpu::GpuEngine;
    let engine = |_| GpuEngine::with_devices(devices);
    let engines = [engine(0)?, engine(1)?, engine(2)?];
    let place = OnDevices::new(
        [
            engines[0].kernels(),
            engines[1].kernels(),
            engines[2].kernels(),
        ],
        format!("the GPU, {}", engines[0].device_name()?),
    );
    self_check(
        SelfCheckConfig::default(),
        [&engines[0], &engines[1], &engines[2]],
        &place,
        progress,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::OnHost;
    use ocelli_cpu::CpuEngine;
    use ocelli_mpc::backend::{RowBackend, RowDot};

    fn small() -> SelfCheckConfig {
        SelfCheckConfig {
            enrolled: 12,
            queries: 4,
            samples: 256,
        }
    }

    #[test]
    fn the_cpu_engine_passes_the_self_check() {
        let cpu = CpuEngine::new();
        let report = self_check(small(), [&cpu, &cpu, &cpu], &OnHost, |_| {}).expect("self-check");
        assert!(report.passed(), "{report}");
        assert_eq!(report.products_checked, 256);
        assert_eq!(report.decisions_checked, 48);
    }

    /// An engine off by one in one product of many fails the check.
    #[test]
    fn an_engine_with_one_wrong_product_fails_the_self_check() {
        /// The CPU engine's products, the last of each call off by one where `wrong`.
        #[derive(Debug)]
        struct OffByOne {
            cpu: CpuEngine,
            wrong: bool,
        }
        impl RowDot for OffByOne {
            fn name(&self) -> String {
                "off by one".into()
            }
            fn dot(&self, queries: &[u16], db: &[u16], len: usize, out: &mut [u16]) {
                self.cpu.dot(queries, db, len, out);
                if let Some(last) = out.last_mut().filter(|_| self.wrong) {
                    *last = last.wrapping_add(1);
                }
            }
        }
        let engine = |wrong| {
            RowBackend(OffByOne {
                cpu: CpuEngine::new(),
                wrong,
            })
        };
        let (cpu, wrong) = (engine(false), engine(true));
        let config = SelfCheckConfig {
            samples: 4_096,
            ..small()
        };
        let report = self_check(config, [&cpu, &wrong, &cpu], &OnHost, |_| {}).expect("self-check");
        assert!(!report.passed(), "{report}");
        assert!(report.products_wrong > 0, "{report}");
    }

    #[cfg(feature = "host-kernels")]
    #[test]
    fn the_host_run_kernels_pass_the_self_check() {
        use crate::device::OnDevices;
        let cpu = CpuEngine::new();
        let dev = std::sync::Arc::new(ocelli_device::host::HostDevice::default());
        let place = OnDevices::new([dev.clone(), dev.clone(), dev], "host-run kernels".into());
        let report = self_check(small(), [&cpu, &cpu, &cpu], &place, |_| {}).expect("self-check");
        assert!(report.passed(), "{report}");
    }
}
