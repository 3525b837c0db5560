//! `envelope_sealing`: complete envelopes from a seeded RNG, with every intermediate an
//! independent implementation needs: share randomness, HPKE ephemeral keys, payload hashes,
//! digest and signature.

use ed25519_dalek::{Signature, VerifyingKey};
use hpke::{Kem as _, Serializable};
use rand_core::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use sdk_orb::envelope::{
    encode_payload, envelope_len, open_payload, payload_len, seal_envelope, EnvelopeView,
    MAX_ENVELOPE_LEN,
};
use sdk_orb::shamir::PartyShares;
use sdk_orb::{PartyId, RequestType, CODE_COEFS, MASK_COEFS, PARTIES};

use crate::common::{noisy_copy, random_template, rng, seed, PackedTemplate};
use crate::envelope::{digest_from_definition, request, Keys, Request};
use crate::families::shamir::shares_from_stream;
use crate::format::{expect_bytes, expect_eq, Flag, Hex, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// Bytes of the RNG stream the sharing of both eyes consumes before the HPKE ephemeral keys:
/// (3,200 + 1,600) elements per eye, 8 bytes each.
pub const SHARE_RANDOMNESS_BYTES: usize = 2 * (CODE_COEFS + MASK_COEFS) / 4 * 8;

/// A sealing vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// `seal_envelope` with `ChaCha20Rng::from_seed(rng_seed)`.
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
        keys: Keys,
        /// Stream bytes used for shares: left code, left mask, right code, right mask.
        share_randomness_bytes: usize,
        /// The next 32 stream bytes per party (0, 1, 2): HPKE DeriveKeyPair input of the
        /// ephemeral key.
        ephemeral_ikm: Vec<Hex>,
        /// The encapsulated (ephemeral public) keys.
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
    ikm: Vec<Hex>,
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
    keys: &Keys,
) -> Result<Sealed, String> {
    let meta = request.meta()?;
    let k = keys.parse()?;
    let (l, r) = (left.template()?, right.template()?);
    // Garbage first: bytes the sealer fails to write would show.
    let mut out = vec![0xA5u8; MAX_ENVELOPE_LEN + 3];
    let n = seal_envelope(
        &mut rng(rng_seed),
        &meta,
        &l,
        &r,
        &k.public,
        &k.orb,
        &mut out,
    )
    .map_err(|e| format!("seal: {e}"))?;
    expect_eq("envelope length", &n, &envelope_len(&meta))?;
    if out[n..].iter().any(|&b| b != 0xA5) {
        return Err("sealer wrote past the envelope".to_string());
    }
    out.truncate(n);
    let view = EnvelopeView::parse(&out).map_err(|e| format!("parse: {e}"))?;
    expect_eq("meta", view.meta(), &meta)?;
    view.verify_signature()
        .map_err(|e| format!("signature: {e}"))?;
    let digest = digest_from_definition(&view);
    expect_eq("digest", &view.digest().0, &digest)?;
    let vk = VerifyingKey::from_bytes(&view.orb_key()).map_err(|e| e.to_string())?;
    vk.verify_strict(&digest, &Signature::from_bytes(&view.signature()))
        .map_err(|e| format!("ed25519: {e}"))?;

    // The stream after the share randomness holds the ephemeral keys' input.
    let mut stream = rng(rng_seed);
    let expected_shares = [
        shares_from_stream(&l, &mut stream)?,
        shares_from_stream(&r, &mut stream)?,
    ];
    let mut ikm = Vec::new();
    let mut enc = Vec::new();
    for party in PartyId::ALL {
        let mut b = [0u8; 32];
        stream.fill_bytes(&mut b);
        let (_, pk) = hpke::kem::X25519HkdfSha256::derive_keypair(&b);
        let e = view.payload(party).encapsulated_key;
        expect_bytes(&format!("encapsulated key of {party}"), &pk.to_bytes(), e)?;
        ikm.push(Hex(b.to_vec()));
        enc.push(Hex(e.to_vec()));
    }
    let mut payload_sha256 = Vec::new();
    for party in PartyId::ALL {
        let shares: Box<PartyShares> = open_payload(&view, party, &k.secret[party.index()])
            .map_err(|e| format!("open {party}: {e}"))?;
        let p = party.index();
        if shares.left != expected_shares[0][p] || shares.right != expected_shares[1][p] {
            return Err(format!(
                "{party}'s shares differ from sharing with the stream's randomness"
            ));
        }
        let mut buf = vec![0xA5u8; payload_len(party)];
        encode_payload(party, &meta.request_id, &shares, &mut buf).map_err(|e| e.to_string())?;
        payload_sha256.push(Hex(Sha256::digest(&buf).to_vec()));
    }
    Ok(Sealed {
        ikm,
        enc,
        payload_sha256,
        digest: Hex(digest.to_vec()),
        signature: Hex(view.signature().to_vec()),
        envelope: out,
    })
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::EnvelopeSealing;
    const DESCRIPTION: &'static str = "Complete envelopes: seal_envelope with one seeded \
        ChaCha20 RNG that supplies the share randomness (left code, left mask, right code, \
        right mask) and then 32 bytes per party of HPKE ephemeral key material (RFC 9180 base \
        mode, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305); the digest \
        SHA-256(header || per party: id || enc || u32be(len ct) || ct) and the orb's Ed25519 \
        signature over it; each party's payload opens to the shares the stream defines.";

    fn generate(_sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        let mut out = Vec::new();
        let left = random_template("envelope_sealing/left", 0.15);
        let right = random_template("envelope_sealing/right", 0.2);
        let cases = [
            (
                "a uniqueness request, AND policy",
                RequestType::Uniqueness,
                0,
                false,
            ),
            (
                "a reset of serial id 77, OR policy",
                RequestType::Reset,
                77,
                true,
            ),
        ];
        for (i, (comment, t, serial, or_policy)) in cases.into_iter().enumerate() {
            let label = format!("envelope_sealing/{i}");
            let right = if i == 0 {
                right.clone()
            } else {
                noisy_copy(&right, &label, 0.05)
            };
            let request = Request::of(&request(&label, t, serial, or_policy));
            let keys = Keys::derive("envelope_sealing");
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
                    share_randomness_bytes: SHARE_RANDOMNESS_BYTES,
                    ephemeral_ikm: sealed.ikm,
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
            share_randomness_bytes,
            ephemeral_ikm,
            encapsulated_keys,
            payload_sha256,
            digest,
            signature,
            envelope,
        } = &vector.case;
        expect_eq(
            "share_randomness_bytes",
            &SHARE_RANDOMNESS_BYTES,
            share_randomness_bytes,
        )?;
        let s = seal(
            &rng_seed.array::<32>("rng_seed")?,
            request,
            left,
            right,
            keys,
        )?;
        expect_eq("parties", &ephemeral_ikm.len(), &PARTIES)?;
        expect_eq("ephemeral_ikm", &s.ikm, ephemeral_ikm)?;
        expect_eq("encapsulated_keys", &s.enc, encapsulated_keys)?;
        expect_eq("payload_sha256", &s.payload_sha256, payload_sha256)?;
        expect_eq("digest", &s.digest, digest)?;
        expect_eq("signature", &s.signature, signature)?;
        expect_bytes("envelope", &s.envelope, &envelope.0)
    }
}
