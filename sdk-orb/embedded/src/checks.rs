//! One check per case, mirroring `conformance-vectors verify` for the SDK's families.

use core::fmt::Write as _;

use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use sdk_orb::envelope::v2::{decode_payload_v2, envelope_len_v2, seal_envelope_v2};
use sdk_orb::envelope::{
    decode_payload, envelope_len, seal_envelope, EnvelopeView, MAX_ENVELOPE_LEN,
};
use sdk_orb::keys::{
    NodeHybridPublicKeys, NodeHybridSecretKey, NodePublicKeys, NodeSecretKey, OrbSigningKey,
};
use sdk_orb::plaintext::{
    dot_products, masked_bitvector, masked_value, min_distance_over_rotations,
    threshold_coefficient,
};
use sdk_orb::preprocess::{preprocess_code, preprocess_coefs, preprocess_mask, LAGRANGE_AT_ZERO};
use sdk_orb::ring::{GaloisRingElement as El, M, S, S_INV};
use sdk_orb::rotation::{rotate_bits, rotate_coefs, rotations};
use sdk_orb::shamir::{
    code_coefs, hazmat_share_with_randomness, mask_coefs, share_element, share_eye, EyeShares,
    PartyShares, EVALUATION_POINTS,
};
use sdk_orb::template::{IrisBits, IrisTemplate, TemplatePolicy, DEFAULT_VERSION, PACKED_BYTES};
use sdk_orb::{PartyId, RequestId, CODE_BITS, CODE_COEFS, MASK_COEFS, PARTIES};
use sha2::{Digest as _, Sha256};

use crate::cases::{Case, Digest16, Dots, Keys, Packed, RingOp, SealV2, Vector, CASES};

/// Why a check failed, for the log.
pub struct Fail(pub heapless::String<200>);

impl Fail {
    pub fn msg(text: &str) -> Fail {
        let mut s = heapless::String::new();
        let _ = s.push_str(text);
        Fail(s)
    }
}

pub type Check = Result<(), Fail>;

macro_rules! fail {
    ($($arg:tt)*) => {{
        let mut s = heapless::String::new();
        // A message longer than the buffer is cut; the log still names the check.
        let _ = write!(s, $($arg)*);
        return Err(Fail(s))
    }};
}

fn expect<T: PartialEq + core::fmt::Debug>(what: &str, got: T, want: T) -> Check {
    if got != want {
        fail!("{what}: got {got:?}, expected {want:?}");
    }
    Ok(())
}

fn expect_bytes(what: &str, got: &[u8], want: &[u8]) -> Check {
    if got.len() != want.len() {
        fail!("{what}: {} bytes, expected {}", got.len(), want.len());
    }
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        fail!("{what}: first difference at byte {i}");
    }
    Ok(())
}

/// `Debug` text of an error, as the vectors name it.
fn debug<E: core::fmt::Debug>(e: &E) -> heapless::String<120> {
    let mut s = heapless::String::new();
    let _ = write!(s, "{e:?}");
    s
}

fn check16(what: &str, values: &[u16], want: &Digest16) -> Check {
    expect(what, values.len(), want.len)?;
    let mut h = Sha256::new();
    for v in values {
        h.update(v.to_le_bytes());
    }
    let got: [u8; 32] = h.finalize().into();
    if got != want.sha256 {
        fail!("{what}: SHA-256 differs");
    }
    Ok(())
}

fn template(p: &Packed) -> Result<IrisTemplate, Fail> {
    IrisTemplate::new(
        IrisBits::from_packed(p.code),
        IrisBits::from_packed(p.mask),
        DEFAULT_VERSION,
        &TemplatePolicy { min_usable_bits: 0 },
    )
    .or_else(|e| fail!("template: {e:?}"))
}

fn packed(bits: &IrisBits) -> [u8; PACKED_BYTES] {
    let mut out = [0u8; PACKED_BYTES];
    bits.to_packed(&mut out);
    out
}

fn party(p: u8) -> Result<PartyId, Fail> {
    PartyId::try_from(p).or_else(|e| fail!("{e:?}"))
}

/// Node secret keys, node public keys (checked against the secrets) and the orb key.
pub fn keys(k: &Keys) -> Result<([NodeSecretKey; PARTIES], NodePublicKeys, OrbSigningKey), Fail> {
    let secret =
        |p: usize| NodeSecretKey::from_bytes(&k.node_secret[p]).or_else(|e| fail!("{e:?}"));
    let secret = [secret(0)?, secret(1)?, secret(2)?];
    let public = NodePublicKeys::from_bytes(&k.node_public).or_else(|e| fail!("{e:?}"))?;
    for (s, p) in secret.iter().zip(&public.0) {
        expect("node public key", s.public_key().to_bytes(), p.to_bytes())?;
    }
    let orb = OrbSigningKey::from_bytes(&k.orb_seed);
    expect(
        "orb public key",
        orb.verifying_key().to_bytes(),
        k.orb_public,
    )?;
    Ok((secret, public, orb))
}

/// Buffers too large for the stack of every check, lent by `main`.
pub struct Buffers {
    pub envelope: &'static mut [u8; MAX_ENVELOPE_LEN + 3],
    pub scratch: &'static mut [u8; 80 * 1024],
    pub shares: &'static mut PartyShares,
}

pub fn run(v: &Vector, buf: &mut Buffers) -> Check {
    match &v.case {
        Case::TemplateAccept {
            input,
            min_usable_bits,
            code_mask,
            version,
            usable_bits,
            serialised,
            canonical,
            non_canonical,
        } => {
            let policy = TemplatePolicy {
                min_usable_bits: *min_usable_bits,
            };
            let t = IrisTemplate::from_open_iris_json(input, &policy)
                .or_else(|e| fail!("rejected: {e:?}"))?;
            expect_bytes("code", &packed(t.code()), &code_mask[..PACKED_BYTES])?;
            expect_bytes("mask", &packed(t.mask()), &code_mask[PACKED_BYTES..])?;
            expect("version", t.version(), version)?;
            expect("usable_bits", t.usable_bits(), *usable_bits)?;
            // Garbage first: bytes the writer fails to write would show.
            let out = &mut buf.scratch[..t.json_len() + 7];
            out.fill(0xA5);
            let n = t.to_open_iris_json(out).or_else(|e| fail!("{e:?}"))?;
            expect("serialised length", n, t.json_len())?;
            if out[n..].iter().any(|&b| b != 0xA5) {
                fail!("serialiser wrote past its length");
            }
            expect_bytes("serialised", &out[..n], serialised)?;
            if *canonical {
                expect_bytes("serialised (canonical input)", &out[..n], input)?;
            }
            if *non_canonical && out[..n] == input[..] {
                fail!("flagged non-canonical, but serialises to the input");
            }
            Ok(())
        }
        Case::TemplateReject {
            input,
            min_usable_bits,
            error,
        } => {
            let policy = TemplatePolicy {
                min_usable_bits: *min_usable_bits,
            };
            match IrisTemplate::from_open_iris_json(input, &policy) {
                Ok(_) => fail!("accepted"),
                Err(e) => expect("error", debug(&e).as_str(), error),
            }
        }
        Case::MaskedValue { code, mask, value } => {
            expect("value", masked_value(*code, *mask), *value)
        }
        Case::Threshold { threshold, a } => {
            if !(0.0..=0.5).contains(threshold) {
                fail!("threshold outside 0..=0.5");
            }
            expect("a", threshold_coefficient(*threshold), *a)
        }
        Case::MaskedPair(pair) => {
            let (p, g) = (template(&pair.probe)?, template(&pair.gallery)?);
            let mut bv = [0u16; CODE_BITS];
            masked_bitvector(&p, &mut bv);
            check16("probe_bitvector", &bv, &pair.probe_bitvector)?;
            let dots = |probe: &IrisTemplate, want: &Dots| -> Check {
                let d = dot_products(probe, &g);
                expect("cd", d.cd, want.cd)?;
                expect("md", d.md, want.md)?;
                expect("distance", d.distance(), want.distance)?;
                expect("matches", d.matches(pair.a), want.matches)
            };
            dots(&p, &pair.unrotated)?;
            for (k, want) in rotations().zip(&pair.rotated) {
                dots(&p.rotated(k), want)?;
            }
            expect(
                "min_over_rotations",
                min_distance_over_rotations(&p, &g),
                pair.min_over_rotations,
            )?;
            let any = pair.rotated.iter().any(|d| d.matches);
            expect("matches", any, pair.matches)?;
            expect("match flag", pair.flag_match, pair.matches)?;
            if pair.flag_no_common_bits && pair.rotated.iter().any(|d| d.md != 0) {
                fail!("flagged no_common_bits, but a rotation has some");
            }
            Ok(())
        }
        Case::RotationsAll {
            input,
            rotations: want,
        } => {
            let bits = IrisBits::from_packed(input);
            for (i, k) in rotations().enumerate() {
                let want = &want[i * PACKED_BYTES..(i + 1) * PACKED_BYTES];
                expect_bytes("rotation", &packed(&rotate_bits(&bits, k)), want)?;
            }
            Ok(())
        }
        Case::RotationBits { input, k, expected } => expect_bytes(
            "rotated",
            &packed(&rotate_bits(&IrisBits::from_packed(input), *k)),
            &expected[..],
        ),
        Case::RotationCoefs {
            template: t,
            k,
            code,
            mask,
        } => {
            let t = template(t)?;
            let (mut c, mut m) = ([0u16; CODE_COEFS], [0u16; MASK_COEFS]);
            code_coefs(&t, &mut c);
            mask_coefs(&t, &mut m);
            // Garbage first: coefficients the rotation fails to write would show.
            let (mut rc, mut rm) = ([0xA5A5u16; CODE_COEFS], [0xA5A5u16; MASK_COEFS]);
            rotate_coefs(&c, *k, &mut rc);
            rotate_coefs(&m, *k, &mut rm);
            check16("code", &rc, code)?;
            check16("trimmed_mask", &rm, mask)?;
            // The rotation of share coefficients is the rotation of the template.
            let r = t.rotated(*k);
            code_coefs(&r, &mut c);
            mask_coefs(&r, &mut m);
            if c != rc || m != rm {
                fail!("rotated coefficients differ from the rotated template's");
            }
            Ok(())
        }
        Case::RingConstants {
            s,
            s_inv,
            m,
            evaluation_points,
            lagrange_at_zero,
        } => {
            expect("S", &S, s)?;
            expect("S^-1", &S_INV, s_inv)?;
            expect("M", &M, m)?;
            for (got, want) in EVALUATION_POINTS.iter().zip(evaluation_points) {
                expect("evaluation point", &got.0, want)?;
            }
            for (got, want) in LAGRANGE_AT_ZERO.iter().zip(lagrange_at_zero) {
                expect("Lagrange coefficient", &got.0, want)?;
            }
            Ok(())
        }
        Case::Ring {
            op,
            a,
            b,
            expected,
            non_unit,
        } => {
            let (a, b) = (El(*a), El(*b));
            let got = match op {
                RingOp::Add => Some((a + b).0),
                RingOp::Sub => Some((a - b).0),
                RingOp::Mul => Some((a * b).0),
                RingOp::MulX => Some(a.mul_x().0),
                RingOp::Inverse => {
                    let inv = a.inverse_vartime();
                    expect("non_unit flag", *non_unit, inv.is_none())?;
                    inv.map(|e| e.0)
                }
                RingOp::FromBasisA => Some(El::from_basis_a(&a.0).0),
                RingOp::ToBasisA => Some(a.to_basis_a()),
                RingOp::ToBasisB => Some(a.to_basis_b()),
            };
            expect("result", got, *expected)
        }
        Case::ShamirElement {
            plain,
            randomness,
            shares,
            zero_randomness,
        } => {
            let r = El(*randomness);
            let got = share_element(plain, r);
            for (g, w) in got.iter().zip(shares) {
                expect("share", &g.0, w)?;
            }
            let mut o = [[0xA5A5u16; 4]; PARTIES];
            let [x, y, z] = &mut o;
            hazmat_share_with_randomness(plain, &[r], [x, y, z]);
            expect("shares (hazmat_share_with_randomness)", &o, shares)?;
            if *zero_randomness {
                expect("zero randomness", r.0, [0; 4])?;
            }
            Ok(())
        }
        Case::ShamirEye {
            template: t,
            rng_seed,
            plain_code,
            plain_mask,
            code_shares,
            mask_shares,
        } => {
            let t = template(t)?;
            let out = eye_shares(&t, rng_seed);
            let (mut c, mut m) = ([0u16; CODE_COEFS], [0u16; MASK_COEFS]);
            code_coefs(&t, &mut c);
            mask_coefs(&t, &mut m);
            check16("plain_code", &c, plain_code)?;
            check16("plain_mask", &m, plain_mask)?;
            for (p, s) in out.iter().enumerate() {
                check16("code share", &s.code.0, &code_shares[p])?;
                check16("mask share", &s.mask.0, &mask_shares[p])?;
            }
            Ok(())
        }
        Case::PreprocessElement {
            party: p,
            share,
            expected,
        } => {
            let mut c = *share;
            preprocess_coefs(party(*p)?, &mut c);
            expect("preprocessed", &c, expected)
        }
        Case::PreprocessEye {
            template: t,
            rng_seed,
            code,
            mask,
        } => {
            let t = template(t)?;
            let out = eye_shares(&t, rng_seed);
            for (id, s) in PartyId::ALL.into_iter().zip(out.iter()) {
                check16("code", &preprocess_code(id, &s.code).0, &code[id.index()])?;
                check16("mask", &preprocess_mask(id, &s.mask).0, &mask[id.index()])?;
            }
            Ok(())
        }
        Case::Seal(s) => {
            let (_, public, orb) = keys(&s.keys)?;
            let (l, r) = (template(&s.left)?, template(&s.right)?);
            // Garbage first: bytes the sealer fails to write would show.
            buf.envelope.fill(0xA5);
            let mut rng = ChaCha20Rng::from_seed(s.rng_seed);
            let n = seal_envelope(
                &mut rng,
                &s.request,
                &l,
                &r,
                &public,
                &orb,
                &mut buf.envelope[..],
            )
            .or_else(|e| fail!("seal: {e:?}"))?;
            check_sealed(s, &buf.envelope[..], n)
        }
        Case::SealV2(s) => seal_v2(s, buf),
        Case::EnvelopeBase(b) => {
            for p in 0..PARTIES as u8 {
                let got = stages_of(b.envelope, p, &b.keys, &mut buf.scratch[..], buf.shares)?;
                expect("stages", got, (accept(), accept(), accept()))?;
            }
            let view = EnvelopeView::parse(b.envelope).or_else(|e| fail!("parse: {e:?}"))?;
            expect("request", view.meta(), &b.request)
        }
        Case::EnvelopeReject {
            base,
            length,
            patches,
            party: p,
            parse,
            signature,
            open,
            valid_signature,
        } => {
            let base = base_vector("envelope_rejections", *base, |c| match c {
                Case::EnvelopeBase(b) => Some(*b),
                _ => None,
            })?;
            patch_into(&mut buf.envelope[..], base.envelope, *length, patches)?;
            let got = stages_in_place(*length, *p, &base.keys, buf)?;
            expect_stages(&got, *parse, *signature, *open)?;
            if *valid_signature {
                expect("valid signature", got.1.as_deref(), Some("accept"))?;
            }
            Ok(())
        }
        Case::PayloadReject {
            party: p,
            request_id,
            payload,
            error,
        } => match decode_payload(payload, party(*p)?, &RequestId(*request_id), buf.shares) {
            Ok(()) => fail!("accepted"),
            Err(e) => expect("error", debug(&e).as_str(), error),
        },
        Case::EnvelopeBaseV2(b) => {
            let view = EnvelopeView::parse_v2(b.envelope).or_else(|e| fail!("parse: {e:?}"))?;
            expect("request", view.meta(), &b.request)?;
            expect("signature", outcome(&view.verify_signature()), accept())?;
            for p in PartyId::ALL {
                let key = NodeHybridSecretKey::from_seed(&b.node_seeds[p.index()]);
                if let Err(e) = view.open_into(p, &key, &mut buf.scratch[..], buf.shares) {
                    fail!("party {}: open: {e:?}", p.index());
                }
                expect(
                    "opened shares",
                    shares_sha256(buf.shares),
                    b.opened_sha256[p.index()],
                )?;
            }
            Ok(())
        }
        Case::EnvelopeRejectV2 {
            base,
            length,
            patches,
            party: p,
            parse,
            signature,
            open,
        } => {
            let base = base_vector("envelope_rejections_v2", *base, |c| match c {
                Case::EnvelopeBaseV2(b) => Some(*b),
                _ => None,
            })?;
            patch_into(&mut buf.envelope[..], base.envelope, *length, patches)?;
            let got = stages_v2(*length, *p, &base.node_seeds, buf)?;
            expect_stages(&got, *parse, *signature, *open)
        }
        Case::PayloadRejectV2 {
            party: p,
            request_id,
            payload,
            error,
        } => match decode_payload_v2(payload, party(*p)?, &RequestId(*request_id), buf.shares) {
            Ok(()) => fail!("accepted"),
            Err(e) => expect("error", debug(&e).as_str(), error),
        },
    }
}

/// Each acceptance stage's outcome against the vector's.
/// The base vector `id` of `family` that a rejection case patches, as `pick` takes it.
fn base_vector<T>(family: &str, id: u32, pick: impl Fn(&Case) -> Option<T>) -> Result<T, Fail> {
    let found = CASES
        .iter()
        .filter(|v| v.family == family && v.id == id)
        .find_map(|v| pick(&v.case));
    match found {
        Some(b) => Ok(b),
        None => fail!("base {id} is not a base vector"),
    }
}

fn expect_stages(
    got: &Stages,
    parse: Option<&str>,
    signature: Option<&str>,
    open: Option<&str>,
) -> Check {
    expect("parse", got.0.as_deref(), parse)?;
    expect("signature", got.1.as_deref(), signature)?;
    expect("open", got.2.as_deref(), open)
}

/// Writes `base` cut or zero-extended to `length` into `bytes`, then the patches.
fn patch_into(bytes: &mut [u8], base: &[u8], length: usize, patches: &[(usize, &[u8])]) -> Check {
    if length > bytes.len() {
        fail!("length {length} exceeds the buffer");
    }
    let keep = base.len().min(length);
    bytes[..keep].copy_from_slice(&base[..keep]);
    bytes[keep..length].fill(0);
    for (offset, patch) in patches {
        let Some(dst) = bytes[..length].get_mut(*offset..offset + patch.len()) else {
            fail!("patch at {offset} runs past the length");
        };
        dst.copy_from_slice(patch);
    }
    Ok(())
}

/// SHA-256 of opened shares: left code, left mask, right code, right mask, little-endian u16.
fn shares_sha256(s: &PartyShares) -> [u8; 32] {
    let mut h = Sha256::new();
    for eye in [&s.left, &s.right] {
        for c in eye.code.0.iter().chain(eye.mask.0.iter()) {
            h.update(c.to_le_bytes());
        }
    }
    h.finalize().into()
}

/// Parse, signature and opening of `party`'s version 2 payload in the first `length` bytes of
/// the envelope buffer, as a node runs them.
fn stages_v2(
    length: usize,
    p: u8,
    seeds: &[[u8; 32]; 3],
    buf: &mut Buffers,
) -> Result<Stages, Fail> {
    let id = party(p)?;
    let view = match EnvelopeView::parse_v2(&buf.envelope[..length]) {
        Ok(v) => v,
        Err(e) => return Ok((Some(debug(&e)), None, None)),
    };
    let sig = outcome(&view.verify_signature());
    let key = NodeHybridSecretKey::from_seed(&seeds[id.index()]);
    let open = outcome(&view.open_into(id, &key, &mut buf.scratch[..], buf.shares));
    Ok((accept(), sig, open))
}

/// Seals an `envelope_sealing_v2` vector with the stack painted and the timer running, prints
/// the figures (named as this image's), and checks the envelope byte for byte.
fn seal_v2(s: &SealV2, buf: &mut Buffers) -> Check {
    let nodes = NodeHybridPublicKeys(core::array::from_fn(|p| {
        NodeHybridSecretKey::from_seed(&s.node_seeds[p]).public_key()
    }));
    let orb = OrbSigningKey::from_bytes(&s.orb_seed);
    let (l, r) = (template(&s.left)?, template(&s.right)?);
    buf.envelope.fill(0xA5);
    let mut rng = ChaCha20Rng::from_seed(s.rng_seed);
    let counter = crate::measure::Counter::start();
    let (sealed, insns) = counter.count(|| {
        seal_envelope_v2(
            &mut rng,
            &s.request,
            &l,
            &r,
            &nodes,
            &orb,
            &mut buf.envelope[..],
        )
    });
    // Each vector seals for another seeded party. Not the orb's figures (the seal-measured
    // image's): this image also opens version 2 envelopes, which changes how the seal inlines.
    cortex_m_semihosting::hprintln!("test image seal_envelope v2 instructions: {}", insns);
    cortex_m_semihosting::hprintln!(
        "test image seal_envelope v2 stack bytes: {}",
        counter.last_stack()
    );
    let n = sealed.or_else(|e| fail!("seal: {e:?}"))?;
    expect("envelope length", n, envelope_len_v2(&s.request))?;
    if buf.envelope[n..].iter().any(|&b| b != 0xA5) {
        fail!("sealer wrote past the envelope");
    }
    expect_bytes("envelope", &buf.envelope[..n], s.envelope)?;
    let view = EnvelopeView::parse_v2(&buf.envelope[..n]).or_else(|e| fail!("parse: {e:?}"))?;
    let digest = view
        .verified_digest()
        .or_else(|e| fail!("signature: {e:?}"))?;
    expect("digest", digest.0, s.digest)
}

/// The sealed envelope in `out[..n]` against the vector, byte for byte.
pub fn check_sealed(s: &crate::cases::Seal, out: &[u8], n: usize) -> Check {
    expect("envelope length", n, envelope_len(&s.request))?;
    if out[n..].iter().any(|&b| b != 0xA5) {
        fail!("sealer wrote past the envelope");
    }
    expect_bytes("envelope", &out[..n], s.envelope)?;
    let view = EnvelopeView::parse(&out[..n]).or_else(|e| fail!("parse: {e:?}"))?;
    expect("meta", view.meta(), &s.request)?;
    view.verify_signature()
        .or_else(|e| fail!("signature: {e:?}"))?;
    expect("digest", view.digest().0, s.digest)?;
    expect("signature", view.signature(), s.signature)?;
    for p in PartyId::ALL {
        expect(
            "encapsulated key",
            view.payload(p).encapsulated_key,
            &s.encapsulated_keys[p.index()],
        )?;
    }
    Ok(())
}

fn eye_shares(t: &IrisTemplate, seed: &[u8; 32]) -> [EyeShares; PARTIES] {
    let mut out = [EyeShares::zero(), EyeShares::zero(), EyeShares::zero()];
    for o in out.iter_mut() {
        o.code.0.fill(0xA5A5);
        o.mask.0.fill(0xA5A5);
    }
    share_eye(&mut ChaCha20Rng::from_seed(*seed), t, &mut out);
    out
}

/// `"accept"`, the `Debug` text of the error, or `None` for a stage not reached.
type Outcome = Option<heapless::String<120>>;
/// Parse, signature, opening.
type Stages = (Outcome, Outcome, Outcome);

fn accept() -> Outcome {
    heapless::String::try_from("accept").ok()
}

fn outcome<T, E: core::fmt::Debug>(r: &Result<T, E>) -> Outcome {
    match r {
        Ok(_) => accept(),
        Err(e) => Some(debug(e)),
    }
}

/// Parse, signature and opening of `party`'s payload, as a node runs them.
fn stages_of(
    bytes: &[u8],
    p: u8,
    k: &Keys,
    scratch: &mut [u8],
    shares: &mut PartyShares,
) -> Result<Stages, Fail> {
    let (secret, _, _) = keys(k)?;
    let id = party(p)?;
    let view = match EnvelopeView::parse(bytes) {
        Ok(v) => v,
        Err(e) => return Ok((Some(debug(&e)), None, None)),
    };
    let sig = outcome(&view.verify_signature());
    let open = outcome(&view.open_into(id, &secret[id.index()], scratch, shares));
    Ok((accept(), sig, open))
}

fn stages_in_place(length: usize, p: u8, k: &Keys, buf: &mut Buffers) -> Result<Stages, Fail> {
    stages_of(
        &buf.envelope[..length],
        p,
        k,
        &mut buf.scratch[..],
        buf.shares,
    )
}
