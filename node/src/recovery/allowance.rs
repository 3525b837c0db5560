//! The operator's permission to help a recovery (`ocelli-node allow-recovery`): a file in the
//! node's data directory naming the one party that may recover from this node, until when, and
//! how many sessions it may open. A helper reads the file at every recovery call, so granting
//! or revoking (deleting the file) needs no restart, and counts each session it serves in the
//! file before it sends anything.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sdk_orb::PartyId;
use serde::{Deserialize, Serialize};

use crate::config::NodeConfig;

/// The allowance file's name in `data_dir`.
pub const ALLOWANCE_FILE: &str = "recovery-allowance.json";

/// The longest an allowance may last.
pub const MAX_ALLOWANCE: Duration = Duration::from_secs(24 * 3600);

/// What the allowance file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allowance {
    /// The party allowed to recover from this node.
    pub party: PartyId,
    /// Milliseconds since the Unix epoch after which nothing is served.
    pub expires_ms: u64,
    /// Recovery sessions allowed.
    pub sessions: u32,
    /// Recovery sessions served so far.
    pub served: u32,
}

/// Why an allowance cannot be written, or why a recovery is not allowed now.
#[derive(Debug, thiserror::Error)]
pub enum AllowanceError {
    /// The party named is this node.
    #[error("{party} cannot recover from {me}")]
    Party {
        /// The party named.
        party: PartyId,
        /// This node.
        me: PartyId,
    },
    /// The duration is zero or longer than [`MAX_ALLOWANCE`].
    #[error("an allowance lasts longer than zero and at most {} hours", MAX_ALLOWANCE.as_secs() / 3600)]
    Duration,
    /// No session allowed.
    #[error("an allowance allows at least one session")]
    Sessions,
    /// The file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file does not hold an allowance.
    #[error("{path}: not a recovery allowance")]
    Format {
        /// The file.
        path: PathBuf,
    },
    /// No allowance file.
    #[error("{me} does not serve recoveries now; its operator allows one with `ocelli-node allow-recovery --party {}`", .party.get())]
    Absent {
        /// This node.
        me: PartyId,
        /// The party asking.
        party: PartyId,
    },
    /// The allowance names another party.
    #[error("{me} allows {allowed} to recover, not {party}")]
    OtherParty {
        /// This node.
        me: PartyId,
        /// The party allowed.
        allowed: PartyId,
        /// The party asking.
        party: PartyId,
    },
    /// The allowance expired.
    #[error("the recovery allowance on {me} has expired")]
    Expired {
        /// This node.
        me: PartyId,
    },
    /// Every allowed session was served.
    #[error("the recovery allowance on {me} is used up ({sessions} sessions served)")]
    Exhausted {
        /// This node.
        me: PartyId,
        /// Sessions allowed and served.
        sessions: u32,
    },
}

impl AllowanceError {
    /// Whether this is the operator's refusal (no allowance for this party now), not a failure to
    /// read or write the file.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Self::Absent { .. }
                | Self::OtherParty { .. }
                | Self::Expired { .. }
                | Self::Exhausted { .. }
        )
    }
}

/// The allowance file of the node `config` describes.
pub fn allowance_path(config: &NodeConfig) -> PathBuf {
    config.data_dir.join(ALLOWANCE_FILE)
}

/// Allows `party` to recover from the node `config` describes for `valid_for` from now, in at
/// most `sessions` sessions (a recovery takes one session on each helper; a failed one, such
/// as helpers answering for different batches, takes another). Replaces any earlier allowance.
/// The file is private to the node's user (mode 0600).
///
/// # Errors
/// `party` is this node, a duration of zero or over [`MAX_ALLOWANCE`], zero sessions, or the
/// file cannot be written.
pub fn allow_recovery(
    config: &NodeConfig,
    party: PartyId,
    valid_for: Duration,
    sessions: u32,
) -> Result<Allowance, AllowanceError> {
    if party == config.party_id {
        return Err(AllowanceError::Party {
            party,
            me: config.party_id,
        });
    }
    if valid_for.is_zero() || valid_for > MAX_ALLOWANCE {
        return Err(AllowanceError::Duration);
    }
    if sessions == 0 {
        return Err(AllowanceError::Sessions);
    }
    let allowance = Allowance {
        party,
        expires_ms: crate::clock::now_ms()
            .saturating_add(u64::try_from(valid_for.as_millis()).unwrap_or(u64::MAX)),
        sessions,
        served: 0,
    };
    write(&allowance_path(config), &allowance)?;
    Ok(allowance)
}

/// The allowance at `path` if it lets `party` open a session at `now_ms`; `me` names this node
/// in refusals.
///
/// # Errors
/// A refusal ([`AllowanceError::is_refusal`]) or an unreadable file.
pub fn check(
    path: &Path,
    me: PartyId,
    party: PartyId,
    now_ms: u64,
) -> Result<Allowance, AllowanceError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(AllowanceError::Absent { me, party })
        }
        Err(source) => {
            return Err(AllowanceError::Io {
                path: path.to_owned(),
                source,
            })
        }
    };
    let a: Allowance = serde_json::from_slice(&bytes).map_err(|_| AllowanceError::Format {
        path: path.to_owned(),
    })?;
    if a.party != party {
        return Err(AllowanceError::OtherParty {
            me,
            allowed: a.party,
            party,
        });
    }
    if now_ms >= a.expires_ms {
        return Err(AllowanceError::Expired { me });
    }
    if a.served >= a.sessions {
        return Err(AllowanceError::Exhausted {
            me,
            sessions: a.sessions,
        });
    }
    Ok(a)
}

/// Counts one session of `party` in the allowance at `path`, durably, if [`check`] allows it.
/// Callers serialise calls on one file.
///
/// # Errors
/// As [`check`], or the file cannot be written.
pub fn take_session(
    path: &Path,
    me: PartyId,
    party: PartyId,
    now_ms: u64,
) -> Result<Allowance, AllowanceError> {
    let mut a = check(path, me, party, now_ms)?;
    a.served += 1;
    write(path, &a)?;
    Ok(a)
}

/// Replaces the file at `path` atomically: a private temporary file, synced, renamed over it,
/// then the directory synced, so a crash leaves the old count or the new one.
fn write(path: &Path, a: &Allowance) -> Result<(), AllowanceError> {
    let io = |p: &Path| {
        let p = p.to_owned();
        move |source| AllowanceError::Io { path: p, source }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io(dir))?;
    let tmp = path.with_extension("json.tmp");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    // A temporary file left by an earlier run keeps its mode through `open`.
    f.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(io(&tmp))?;
    let json = serde_json::to_vec(a).map_err(|_| AllowanceError::Format { path: tmp.clone() })?;
    f.write_all(&json).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    type Res = Result<(), Box<dyn std::error::Error>>;

    const ME: PartyId = PartyId::ALL[0];
    const ONE: PartyId = PartyId::ALL[1];
    const TWO: PartyId = PartyId::ALL[2];

    fn config(dir: &Path) -> Result<NodeConfig, Box<dyn std::error::Error>> {
        let mut c = crate::keys::sample_node_config(ME, 1);
        c.data_dir = dir.join("data");
        Ok(c)
    }

    #[test]
    fn an_allowance_serves_its_party_its_sessions_until_it_expires() -> Res {
        let dir = tempfile::tempdir()?;
        let c = config(dir.path())?;
        let path = allowance_path(&c);
        assert!(matches!(
            check(&path, ME, TWO, 0),
            Err(AllowanceError::Absent { me: ME, party: TWO })
        ));
        let a = allow_recovery(&c, TWO, Duration::from_secs(60), 2)?;
        let mode = fs::metadata(&path)?.permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let now = a.expires_ms - 1_000;
        assert!(matches!(
            check(&path, ME, ONE, now),
            Err(AllowanceError::OtherParty {
                allowed: TWO,
                party: ONE,
                ..
            })
        ));
        assert_eq!(take_session(&path, ME, TWO, now)?.served, 1);
        // Checking counts nothing; the count is on disk.
        assert_eq!(check(&path, ME, TWO, now)?.served, 1);
        assert_eq!(take_session(&path, ME, TWO, now)?.served, 2);
        let e = take_session(&path, ME, TWO, now).err();
        assert!(matches!(
            e,
            Some(AllowanceError::Exhausted { sessions: 2, .. })
        ));
        assert!(e.is_some_and(|e| e.is_refusal()));

        allow_recovery(&c, TWO, Duration::from_secs(60), 1)?;
        assert!(matches!(
            check(&path, ME, TWO, a.expires_ms + 60_000),
            Err(AllowanceError::Expired { me: ME })
        ));
        assert_eq!(check(&path, ME, TWO, now)?.served, 0);
        Ok(())
    }

    #[test]
    fn the_allowance_file_names_the_party_by_its_number() -> Res {
        let a = Allowance {
            party: TWO,
            expires_ms: 5,
            sessions: 2,
            served: 1,
        };
        let json = r#"{"party":2,"expires_ms":5,"sessions":2,"served":1}"#;
        assert_eq!(serde_json::to_string(&a)?, json);
        assert_eq!(serde_json::from_str::<Allowance>(json)?, a);
        Ok(())
    }

    #[test]
    fn allowances_that_make_no_sense_are_refused() -> Res {
        let dir = tempfile::tempdir()?;
        let c = config(dir.path())?;
        let minute = Duration::from_secs(60);
        assert!(matches!(
            allow_recovery(&c, ME, minute, 1),
            Err(AllowanceError::Party { party: ME, me: ME })
        ));
        assert!(matches!(
            allow_recovery(&c, ONE, Duration::ZERO, 1),
            Err(AllowanceError::Duration)
        ));
        assert!(matches!(
            allow_recovery(&c, ONE, MAX_ALLOWANCE + minute, 1),
            Err(AllowanceError::Duration)
        ));
        assert!(matches!(
            allow_recovery(&c, ONE, minute, 0),
            Err(AllowanceError::Sessions)
        ));
        assert!(!allowance_path(&c).exists());
        fs::create_dir_all(&c.data_dir)?;
        fs::write(allowance_path(&c), b"{\"party\": 1}")?;
        let e = check(&allowance_path(&c), ME, ONE, 0).err();
        assert!(matches!(e, Some(AllowanceError::Format { .. })));
        assert!(e.is_some_and(|e| !e.is_refusal()));
        // A file naming no party is not an allowance either.
        fs::write(
            allowance_path(&c),
            b"{\"party\": 3, \"expires_ms\": 1, \"sessions\": 1, \"served\": 0}",
        )?;
        let e = check(&allowance_path(&c), ME, ONE, 0).err();
        assert!(matches!(e, Some(AllowanceError::Format { .. })));
        Ok(())
    }
}
