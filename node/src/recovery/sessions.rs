//! What a helper remembers between recovery calls, in memory: the nonces it served, and the
//! pad secrets the lower helper offered that wait for the recovering node's call.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ocelli_mpc::recovery::PadSecret;
use sdk_orb::PartyId;
use tokio::sync::Notify;

use super::allowance::{self, Allowance};
use super::RecoveryError;

/// How long an offered secret waits for the recovering node's call to the higher helper.
pub const OFFER_TTL: Duration = Duration::from_secs(30);

/// How long the higher helper waits for the lower helper's secret: the recovering node calls
/// both at once, and the lower helper offers the secret before it answers.
pub const PAD_WAIT: Duration = Duration::from_secs(5);

/// Offers held at once. A recovery needs one; the bound keeps what a peer can make this node
/// hold small.
const MAX_OFFERS: usize = 8;

/// A recovery session's name: the recovering party and its nonce.
type Key = (PartyId, [u8; 32]);

/// The helper's memory of recovery sessions (one per node, in [`crate::node::NodeState`]).
#[derive(Default)]
pub struct Sessions {
    inner: Mutex<Inner>,
    offered: Notify,
    /// Serialises reading and counting the allowance file.
    allowance: Mutex<()>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Inner {
    /// Sessions this node streamed contributions for (or began to): a nonce is served once.
    served: HashSet<Key>,
    /// Secrets from the lower helper, with when they arrived.
    offers: HashMap<Key, (Instant, PadSecret)>,
}

impl Sessions {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Refuses a nonce of `target` this node served already.
    ///
    /// # Errors
    /// [`RecoveryError::NonceReused`].
    pub fn check_fresh(&self, target: PartyId, nonce: &[u8; 32]) -> Result<(), RecoveryError> {
        if self.inner().served.contains(&(target, *nonce)) {
            return Err(RecoveryError::NonceReused);
        }
        Ok(())
    }

    /// Admits one session: the nonce not served before, and a session of the allowance at
    /// `path` taken (durably) for `target`; records the nonce as served. Blocking (the file).
    ///
    /// # Errors
    /// A repeated nonce, or the allowance refuses or cannot be read or written.
    pub fn admit(
        &self,
        path: &Path,
        me: PartyId,
        target: PartyId,
        nonce: &[u8; 32],
        now_ms: u64,
    ) -> Result<Allowance, RecoveryError> {
        let _file = self.allowance.lock().unwrap_or_else(|p| p.into_inner());
        self.check_fresh(target, nonce)?;
        let a = allowance::take_session(path, me, target, now_ms)?;
        self.inner().served.insert((target, *nonce));
        Ok(a)
    }

    /// Keeps the lower helper's `secret` for the session (`target`, `nonce`) until the
    /// recovering node's call takes it, or [`OFFER_TTL`] passes.
    ///
    /// # Errors
    /// The session was served already, a secret for it is waiting already, or too many are.
    pub fn offer(
        &self,
        target: PartyId,
        nonce: &[u8; 32],
        secret: PadSecret,
        now: Instant,
    ) -> Result<(), RecoveryError> {
        let mut inner = self.inner();
        inner
            .offers
            .retain(|_, (at, _)| now.saturating_duration_since(*at) < OFFER_TTL);
        let key = (target, *nonce);
        if inner.served.contains(&key) {
            return Err(RecoveryError::NonceReused);
        }
        if inner.offers.contains_key(&key) {
            return Err(RecoveryError::PadOfferedTwice);
        }
        if inner.offers.len() >= MAX_OFFERS {
            return Err(RecoveryError::TooManyPadOffers);
        }
        inner.offers.insert(key, (now, secret));
        drop(inner);
        self.offered.notify_waiters();
        Ok(())
    }

    /// Takes the secret offered for (`target`, `nonce`), waiting at most `wait` for it.
    ///
    /// # Errors
    /// [`RecoveryError::NoPad`] when none arrives in time.
    pub async fn take_offer(
        &self,
        target: PartyId,
        nonce: &[u8; 32],
        low: PartyId,
        wait: Duration,
    ) -> Result<PadSecret, RecoveryError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before looking, so an offer made in between still wakes this task.
            let notified = self.offered.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(secret) = self.take_now(target, nonce) {
                return Ok(secret);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(RecoveryError::NoPad {
                    party: low,
                    seconds: wait.as_secs(),
                });
            }
        }
    }

    fn take_now(&self, target: PartyId, nonce: &[u8; 32]) -> Option<PadSecret> {
        let mut inner = self.inner();
        let (at, secret) = inner.offers.remove(&(target, *nonce))?;
        (at.elapsed() < OFFER_TTL).then_some(secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::OsRng;

    type Res = Result<(), Box<dyn std::error::Error>>;

    const ME: PartyId = PartyId::ALL[0];
    const ONE: PartyId = PartyId::ALL[1];
    const TWO: PartyId = PartyId::ALL[2];

    #[tokio::test]
    async fn an_offer_is_taken_once_and_a_served_nonce_is_refused() -> Res {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join(allowance::ALLOWANCE_FILE);
        let s = Sessions::default();
        let nonce = [7; 32];
        s.offer(TWO, &nonce, PadSecret::random(&mut OsRng), Instant::now())?;
        assert!(matches!(
            s.offer(TWO, &nonce, PadSecret::random(&mut OsRng), Instant::now()),
            Err(RecoveryError::PadOfferedTwice)
        ));
        s.take_offer(TWO, &nonce, ME, Duration::ZERO).await?;
        assert!(matches!(
            s.take_offer(TWO, &nonce, ME, Duration::from_millis(50))
                .await,
            Err(RecoveryError::NoPad { party: ME, .. })
        ));

        // Without an allowance the nonce stays unserved; with one, it is served once.
        assert!(matches!(
            s.admit(&path, ME, TWO, &nonce, 0),
            Err(RecoveryError::Allowance(_))
        ));
        s.check_fresh(TWO, &nonce)?;
        let mut c = crate::keys::sample_node_config(ME, 1);
        c.data_dir = dir.path().to_owned();
        allowance::allow_recovery(&c, TWO, Duration::from_secs(60), 5)?;
        let now = crate::clock::now_ms();
        s.admit(&path, ME, TWO, &nonce, now)?;
        assert!(matches!(
            s.admit(&path, ME, TWO, &nonce, now),
            Err(RecoveryError::NonceReused)
        ));
        assert!(matches!(
            s.check_fresh(TWO, &nonce),
            Err(RecoveryError::NonceReused)
        ));
        assert!(matches!(
            s.offer(TWO, &nonce, PadSecret::random(&mut OsRng), Instant::now()),
            Err(RecoveryError::NonceReused)
        ));
        // The refusal took no session.
        assert_eq!(allowance::check(&path, ME, TWO, now)?.served, 1);
        Ok(())
    }

    #[tokio::test]
    async fn a_waiting_call_gets_an_offer_made_while_it_waits() -> Res {
        let s = std::sync::Arc::new(Sessions::default());
        let nonce = [9; 32];
        let waiter = tokio::spawn({
            let s = s.clone();
            async move { s.take_offer(ONE, &nonce, ME, Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        s.offer(ONE, &nonce, PadSecret::random(&mut OsRng), Instant::now())?;
        let secret = tokio::time::timeout(Duration::from_secs(5), waiter).await??;
        assert!(secret.is_ok());
        Ok(())
    }

    #[test]
    fn offers_expire_and_are_bounded() -> Res {
        let s = Sessions::default();
        let long_ago = Instant::now()
            .checked_sub(OFFER_TTL + Duration::from_secs(1))
            .ok_or("clock too young")?;
        s.offer(TWO, &[0; 32], PadSecret::random(&mut OsRng), long_ago)?;
        assert!(s.take_now(TWO, &[0; 32]).is_none(), "expired");
        for i in 0..MAX_OFFERS as u8 {
            s.offer(TWO, &[i; 32], PadSecret::random(&mut OsRng), Instant::now())?;
        }
        assert!(matches!(
            s.offer(
                TWO,
                &[0xff; 32],
                PadSecret::random(&mut OsRng),
                Instant::now()
            ),
            Err(RecoveryError::TooManyPadOffers)
        ));
        Ok(())
    }
}
