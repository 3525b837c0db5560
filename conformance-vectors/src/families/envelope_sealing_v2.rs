//! `envelope_sealing_v2`: complete version 2 envelopes from a seeded RNG, with every
//! intermediate an independent implementation needs: the share seed, the seeded party, the
//! X-Wing encapsulation randomness, payload hashes, digest and signature.

use ed25519_dalek::{Signature, VerifyingKey};
use rand_core::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use sdk_orb::envelope::v2::{
    envelope_len_v2, open_payload_v2, seal_envelope_v2, MAX_ENVELOPE_LEN_V2,
};
use sdk_orb::envelope::EnvelopeView;
use sdk_orb::keys::{
    NodeHybridPublicKey, NodeHybridPublicKeys, NodeHybridSecretKey, OrbSigningKey,
    HYBRID_PUBLIC_KEY_BYTES,
};
use sdk_orb::shamir::seeded::{expand_seed, seeded_party, ShareSeed};
use sdk_orb::shamir::PartyShares;
use sdk_orb::{PartyId, RequestType, PARTIES};

use crate::common::{noisy_copy, random_template, rng, seed, PackedTemplate};
use crate::envelope::{digest_v2_from_definition, request, Request};
use crate::format::{expect_bytes, expect_eq, Flag, Hex, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// Node X-Wing keys (the 32-byte seeds and the 1,216-byte public keys) and the orb key.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HybridKeys {
    /// X-Wing seeds of parties 0, 1, 2.
    pub node_seeds: Vec<Hex>,
    /// The matching X-Wing public keys.
    pub node_public_keys: Vec<Hex>,
    /// The orb's Ed25519 secret key (the 32-byte seed).
    pub orb_secret_key: Hex,
    /// The orb's Ed25519 public key.
    pub orb_public_key: Hex,
}

impl HybridKeys {
    /// Keys derived from `label`.
    pub fn derive(label: &str) -> HybridKeys {
        let seeds: Vec<[u8; 32]> = (0..PARTIES)
            .map(|p| seed(&format!("{label}/node/{p}")))
            .collect();
        let orb = seed(&format!("{label}/orb"));
        HybridKeys {
            node_seeds: seeds.iter().map(|s| Hex(s.to_vec())).collect(),
            node_public_keys: seeds
                .iter()
                .map(|s| {
                    Hex(NodeHybridSecretKey::from_seed(s)
                        .public_key()
                        .to_bytes()
                        .to_vec())
                })
                .collect(),
            orb_secret_key: Hex(orb.to_vec()),
            orb_public_key: Hex(OrbSigningKey::from_bytes(&orb)
                .verifying_key()
                .to_bytes()
                .to_vec()),
        }
    }

    /// The secret keys, public keys and orb key, checked against each other.
    ///
    /// # Errors
    /// Wrong lengths or public keys that do not match the seeds.
    pub fn parse(
        &self,
    ) -> Result<
        (
            Vec<NodeHybridSecretKey>,
            NodeHybridPublicKeys,
            OrbSigningKey,
        ),
        String,
    > {
        expect_eq("node_seeds", &self.node_seeds.len(), &PARTIES)?;
        expect_eq("node_public_keys", &self.node_public_keys.len(), &PARTIES)?;
        let mut secret = Vec::new();
        let mut public = Vec::new();
        for (p, (s, pk)) in self
            .node_seeds
            .iter()
            .zip(&self.node_public_keys)
            .enumerate()
        {
            let key = NodeHybridSecretKey::from_seed(&s.array::<32>("node_seeds")?);
            let bytes = pk.array::<HYBRID_PUBLIC_KEY_BYTES>("node_public_keys")?;
            let parsed = NodeHybridPublicKey::from_bytes(&bytes).map_err(|e| e.to_string())?;
            expect_eq(
                &format!("node_public_keys[{p}]"),
                &key.public_key(),
                &parsed,
            )?;
            secret.push(key);
            public.push(parsed);
        }
        let public: [NodeHybridPublicKey; PARTIES] =
            public.try_into().map_err(|_| "three keys".to_string())?;
        let orb = OrbSigningKey::from_bytes(&self.orb_secret_key.array::<32>("orb_secret_key")?);
        expect_bytes(
            "orb_public_key",
            &orb.verifying_key().to_bytes(),
            &self.orb_public_key.0,
        )?;
        Ok((secret, NodeHybridPublicKeys(public), orb))
    }
}

/// A sealing vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// `seal_envelope_v2` with `ChaCha20Rng::from_seed(rng_seed)`.
    Seal {
        /// The seed of the only RNG.
        rng_seed: Hex,
        /// The request.
        request: Request,
        /// Left eye.
        left: PackedTemplate,
        /// Right eye.
        right: PackedTemplate,
        /// Node and orb keys.
        keys: HybridKeys,
        /// `seeded_party(request id)`: the request id as a big-endian integer, mod 3.
        seeded_party: u8,
        /// The first 32 stream bytes: the share seed sent to the seeded party.
        share_seed: Hex,
        /// The next 64 stream bytes per party (0, 1, 2): X-Wing encapsulation randomness.
        encapsulation_randomness: Vec<Hex>,
        /// The encapsulated keys (1,120 bytes each).
        encapsulated_keys: Vec<Hex>,
        /// SHA-256 of each party's decrypted payload.
        payload_sha256: Vec<Hex>,
        /// The envelope digest.
        digest: Hex,
        /// The Ed25519 signature over the digest.
        signature: Hex,
        /// The whole envelope.
        envelope: Hex,
    },
}

struct Sealed {
    seeded: u8,
    share_seed: Hex,
    randomness: Vec<Hex>,
    enc: Vec<Hex>,
    payload_sha256: Vec<Hex>,
    digest: Hex,
    signature: Hex,
    envelope: Vec<u8>,
}

fn seal(
    rng_seed: &[u8; 32],
    request: &Request,
    left: &PackedTemplate,
    right: &PackedTemplate,
    keys: &HybridKeys,
) -> Result<Sealed, String> {
    let meta = request.meta()?;
    let (secret, public, orb) = keys.parse()?;
    let (l, r) = (left.template()?, right.template()?);
    // Garbage first: bytes the sealer fails to write would show.
    let mut out = vec![0xA5u8; MAX_ENVELOPE_LEN_V2 + 3];
    let n = seal_envelope_v2(&mut rng(rng_seed), &meta, &l, &r, &public, &orb, &mut out)
        .map_err(|e| format!("seal: {e}"))?;
    expect_eq("envelope length", &n, &envelope_len_v2(&meta))?;
    if out[n..].iter().any(|&b| b != 0xA5) {
        return Err("sealer wrote past the envelope".to_string());
    }
    out.truncate(n);
    let view = EnvelopeView::parse_v2(&out).map_err(|e| format!("parse: {e}"))?;
    expect_eq("meta", view.meta(), &meta)?;
    let digest = view
        .verified_digest()
        .map_err(|e| format!("signature: {e}"))?;
    expect_eq(
        "digest against its definition",
        &digest.0,
        &digest_v2_from_definition(&view),
    )?;
    let vk = VerifyingKey::from_bytes(&view.orb_key()).map_err(|e| e.to_string())?;
    vk.verify_strict(&digest.0, &Signature::from_bytes(&view.signature()))
        .map_err(|e| format!("ed25519: {e}"))?;

    // The stream: the share seed, then 64 bytes of encapsulation randomness per party.
    let mut stream = rng(rng_seed);
    let mut share_seed = [0u8; 32];
    stream.fill_bytes(&mut share_seed);
    let seeded = seeded_party(&meta.request_id);
    let mut randomness = Vec::new();
    let mut enc = Vec::new();
    for party in PartyId::ALL {
        let mut b = [0u8; 64];
        stream.fill_bytes(&mut b);
        randomness.push(Hex(b.to_vec()));
        enc.push(Hex(view.payload(party).encapsulated_key.to_vec()));
    }
    let mut expanded = Box::new(PartyShares::zero());
    expand_seed(&ShareSeed(share_seed), &mut expanded);
    let mut payload_sha256 = Vec::new();
    for party in PartyId::ALL {
        let shares = open_payload_v2(&view, party, &secret[party.index()])
            .map_err(|e| format!("open {party}: {e}"))?;
        if party == seeded && shares != expanded {
            return Err(format!("{party} opens other shares than its seed's"));
        }
        payload_sha256.push(Hex(payload_hash(&view, party, &secret[party.index()])?));
    }
    Ok(Sealed {
        seeded: seeded.get(),
        share_seed: Hex(share_seed.to_vec()),
        randomness,
        enc,
        payload_sha256,
        digest: Hex(digest.0.to_vec()),
        signature: Hex(view.signature().to_vec()),
        envelope: out,
    })
}

/// SHA-256 of `party`'s decrypted payload, opened with hpke-rs (libcrux): the second HPKE
/// implementation, not the SDK's.
fn payload_hash(
    view: &EnvelopeView<'_, sdk_orb::envelope::V2>,
    party: PartyId,
    key: &NodeHybridSecretKey,
) -> Result<Vec<u8>, String> {
    use hpke_rs::hpke_types::{AeadAlgorithm, KdfAlgorithm, KemAlgorithm};
    let hpke = hpke_rs::Hpke::<hpke_rs::libcrux::HpkeLibcrux>::new(
        hpke_rs::Mode::Base,
        KemAlgorithm::XWingDraft06,
        KdfAlgorithm::HkdfSha256,
        AeadAlgorithm::ChaCha20Poly1305,
    );
    let sealed = view.payload(party);
    let plain = hpke
        .open(
            sealed.encapsulated_key,
            &hpke_rs::HpkePrivateKey::new(key.to_seed().to_vec()),
            &sdk_orb::envelope::v2::hpke_info_v2(party, &view.request_id()),
            &view.meta().header_v2(&view.orb_key()),
            sealed.ciphertext,
            None,
            None,
            None,
        )
        .map_err(|e| format!("hpke-rs opens {party}: {e:?}"))?;
    Ok(Sha256::digest(&plain).to_vec())
}

/// A request of `t` whose seeded party is `party`: the first of the labels `label/0`,
/// `label/1`, ... whose request id gives it.
pub(crate) fn request_for(
    label: &str,
    party: PartyId,
    t: RequestType,
    serial: u64,
    or_policy: bool,
) -> Request {
    (0..)
        .map(|i| request(&format!("{label}/{i}"), t, serial, or_policy))
        .find(|m| seeded_party(&m.request_id) == party)
        .map(|m| Request::of(&m))
        .unwrap_or_else(|| unreachable!("request ids are uniform"))
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::EnvelopeSealingV2;
    const DESCRIPTION: &'static str = "Complete version 2 envelopes: seal_envelope_v2 with one \
        seeded ChaCha20 RNG that supplies the 32-byte share seed and then 64 bytes per party of \
        X-Wing encapsulation randomness (RFC 9180 base mode, KEM MLKEM768-X25519 0x647a, \
        HKDF-SHA256, ChaCha20-Poly1305, info \"ocelli/payload/v2\" || party || request id, AAD \
        the version 2 header); the seeded party (request id as a big-endian integer mod 3) \
        receives the seed and its shares are the seed's ChaCha20 keystream, the others' shares \
        follow from them and the secret; the digest and the orb's Ed25519 signature as in \
        version 1; every payload opens, with a second HPKE implementation, to the given hash.";

    fn generate(_sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        let mut out = Vec::new();
        let left = random_template("envelope_sealing_v2/left", 0.15);
        let right = random_template("envelope_sealing_v2/right", 0.2);
        let cases = [
            (
                "a uniqueness request, AND policy, party 0 seeded",
                RequestType::Uniqueness,
                0,
                false,
            ),
            (
                "a uniqueness check, OR policy, party 1 seeded",
                RequestType::UniquenessCheck,
                0,
                true,
            ),
            (
                "a reset of serial id 77, party 2 seeded",
                RequestType::Reset,
                77,
                false,
            ),
        ];
        for (i, (comment, t, serial, or_policy)) in cases.into_iter().enumerate() {
            let label = format!("envelope_sealing_v2/{i}");
            let right = noisy_copy(&right, &label, 0.05);
            let request = request_for(&label, PartyId::ALL[i], t, serial, or_policy);
            let keys = HybridKeys::derive("envelope_sealing_v2");
            let s = seed(&format!("{label}/rng"));
            let (l, r) = (PackedTemplate::of(&left), PackedTemplate::of(&right));
            let sealed = seal(&s, &request, &l, &r, &keys)?;
            out.push(Vector {
                id: i as u32 + 1,
                comment: comment.to_string(),
                flags: vec![Flag::Synthetic],
                case: Case::Seal {
                    rng_seed: Hex(s.to_vec()),
                    request,
                    left: l,
                    right: r,
                    keys,
                    seeded_party: sealed.seeded,
                    share_seed: sealed.share_seed,
                    encapsulation_randomness: sealed.randomness,
                    encapsulated_keys: sealed.enc,
                    payload_sha256: sealed.payload_sha256,
                    digest: sealed.digest,
                    signature: sealed.signature,
                    envelope: Hex(sealed.envelope),
                },
            });
        }
        Ok(out)
    }

    fn verify(vector: &Vector<Case>, _all: &[Vector<Case>]) -> Result<(), String> {
        let Case::Seal {
            rng_seed,
            request,
            left,
            right,
            keys,
            seeded_party,
            share_seed,
            encapsulation_randomness,
            encapsulated_keys,
            payload_sha256,
            digest,
            signature,
            envelope,
        } = &vector.case;
        let s = seal(
            &rng_seed.array::<32>("rng_seed")?,
            request,
            left,
            right,
            keys,
        )?;
        expect_eq("seeded_party", &s.seeded, seeded_party)?;
        expect_eq("share_seed", &s.share_seed, share_seed)?;
        expect_eq(
            "encapsulation_randomness",
            &s.randomness,
            encapsulation_randomness,
        )?;
        expect_eq("encapsulated_keys", &s.enc, encapsulated_keys)?;
        expect_eq("payload_sha256", &s.payload_sha256, payload_sha256)?;
        expect_eq("digest", &s.digest, digest)?;
        expect_eq("signature", &s.signature, signature)?;
        expect_bytes("envelope", &s.envelope, &envelope.0)
    }
}
