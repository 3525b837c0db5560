//! Pieces the envelope families share: requests, keys, error kinds, the digest formula, a
//! minimal protobuf writer for hand-built payloads, and byte patches.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use sdk_orb::envelope::{EnvelopeError, EnvelopeView, RequestMeta, Version, V2};
use sdk_orb::keys::{NodePublicKeys, NodeSecretKey, OrbSigningKey, KEY_BYTES};
use sdk_orb::{RequestId, RequestType, PARTIES};

use crate::common::seed;
use crate::format::{expect_eq, Hex, Vector};

/// A request as it appears in vectors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// 16 bytes.
    pub request_id: Hex,
    /// The request type.
    pub request_type: RequestKind,
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// Target serial id, 0 if none.
    pub serial_id: u64,
    /// OR over the eyes instead of AND.
    pub or_policy: bool,
}

/// [`RequestType`] in vectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    /// 1.
    Uniqueness,
    /// 2.
    UniquenessCheck,
    /// 3.
    Deletion,
    /// 4.
    Reauth,
    /// 5.
    Reset,
}

impl RequestKind {
    /// The SDK type.
    pub fn sdk(self) -> RequestType {
        match self {
            RequestKind::Uniqueness => RequestType::Uniqueness,
            RequestKind::UniquenessCheck => RequestType::UniquenessCheck,
            RequestKind::Deletion => RequestType::Deletion,
            RequestKind::Reauth => RequestType::Reauth,
            RequestKind::Reset => RequestType::Reset,
        }
    }

    /// From the SDK type.
    pub fn of(t: RequestType) -> RequestKind {
        match t {
            RequestType::Uniqueness => RequestKind::Uniqueness,
            RequestType::UniquenessCheck => RequestKind::UniquenessCheck,
            RequestType::Deletion => RequestKind::Deletion,
            RequestType::Reauth => RequestKind::Reauth,
            RequestType::Reset => RequestKind::Reset,
        }
    }
}

impl Request {
    /// From SDK metadata.
    pub fn of(m: &RequestMeta) -> Request {
        Request {
            request_id: Hex(m.request_id.0.to_vec()),
            request_type: RequestKind::of(m.request_type),
            timestamp_ms: m.timestamp_ms,
            serial_id: m.serial_id,
            or_policy: m.or_policy,
        }
    }

    /// SDK metadata.
    ///
    /// # Errors
    /// A request id that is not 16 bytes.
    pub fn meta(&self) -> Result<RequestMeta, String> {
        Ok(RequestMeta {
            request_id: RequestId(self.request_id.array::<16>("request_id")?),
            request_type: self.request_type.sdk(),
            timestamp_ms: self.timestamp_ms,
            serial_id: self.serial_id,
            or_policy: self.or_policy,
        })
    }
}

/// A request with id from `label`.
pub fn request(label: &str, t: RequestType, serial_id: u64, or_policy: bool) -> RequestMeta {
    let mut id = [0u8; 16];
    id.copy_from_slice(&seed(&format!("{label}/request_id"))[..16]);
    RequestMeta {
        request_id: RequestId(id),
        request_type: t,
        timestamp_ms: 1_790_000_000_000,
        serial_id,
        or_policy,
    }
}

/// The nodes' keys and the orb's key, as vectors carry them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Keys {
    /// X25519 secret keys of parties 0, 1, 2 (32 bytes each).
    pub node_secret_keys: Vec<Hex>,
    /// The matching public keys.
    pub node_public_keys: Vec<Hex>,
    /// The orb's Ed25519 secret key (the 32-byte seed).
    pub orb_secret_key: Hex,
    /// The orb's Ed25519 public key.
    pub orb_public_key: Hex,
}

/// Keys parsed for the SDK.
#[derive(Debug)]
pub struct ParsedKeys {
    /// Node secret keys.
    pub secret: [NodeSecretKey; PARTIES],
    /// Node public keys.
    pub public: NodePublicKeys,
    /// The orb key.
    pub orb: OrbSigningKey,
}

impl Keys {
    /// Keys derived from `label`.
    pub fn derive(label: &str) -> Keys {
        let secret: Vec<[u8; 32]> = (0..PARTIES)
            .map(|p| seed(&format!("{label}/node/{p}")))
            .collect();
        let public = secret
            .iter()
            .map(|s| {
                NodeSecretKey::from_bytes(s)
                    .map(|k| Hex(k.public_key().to_bytes().to_vec()))
                    .unwrap_or_default()
            })
            .collect();
        let orb = seed(&format!("{label}/orb"));
        Keys {
            node_secret_keys: secret.iter().map(|s| Hex(s.to_vec())).collect(),
            node_public_keys: public,
            orb_secret_key: Hex(orb.to_vec()),
            orb_public_key: Hex(OrbSigningKey::from_bytes(&orb)
                .verifying_key()
                .to_bytes()
                .to_vec()),
        }
    }

    /// Parses the keys and checks that the public keys match the secret ones.
    ///
    /// # Errors
    /// Wrong lengths or mismatched public keys.
    pub fn parse(&self) -> Result<ParsedKeys, String> {
        expect_eq("node_secret_keys", &self.node_secret_keys.len(), &PARTIES)?;
        expect_eq("node_public_keys", &self.node_public_keys.len(), &PARTIES)?;
        let mut secret = Vec::new();
        for (p, (s, pk)) in self
            .node_secret_keys
            .iter()
            .zip(&self.node_public_keys)
            .enumerate()
        {
            let key = NodeSecretKey::from_bytes(&s.array::<KEY_BYTES>("node secret key")?)
                .map_err(|e| e.to_string())?;
            expect_eq(
                &format!("public key of node {p}"),
                &key.public_key().to_bytes().to_vec(),
                &pk.0,
            )?;
            secret.push(key);
        }
        let [s0, s1, s2]: [NodeSecretKey; PARTIES] = secret
            .try_into()
            .map_err(|_| "three node keys".to_string())?;
        let public = NodePublicKeys([s0.public_key(), s1.public_key(), s2.public_key()]);
        let orb = OrbSigningKey::from_bytes(&self.orb_secret_key.array::<KEY_BYTES>("orb key")?);
        expect_eq(
            "orb public key",
            &orb.verifying_key().to_bytes().to_vec(),
            &self.orb_public_key.0,
        )?;
        Ok(ParsedKeys {
            secret: [s0, s1, s2],
            public,
            orb,
        })
    }
}

/// [`EnvelopeError`] as it appears in vectors: the kinds a node reports for bad input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ErrorKind {
    /// Not a canonical protobuf message of the expected shape.
    Malformed {
        /// The SDK's description.
        what: String,
    },
    /// A required field is absent.
    MissingField {
        /// The field.
        field: String,
    },
    /// A field has the wrong length.
    Length {
        /// The field.
        field: String,
        /// Expected (for `envelope`: the most allowed).
        expected: usize,
        /// Found.
        actual: usize,
    },
    /// Version other than 1.
    UnsupportedVersion {
        /// The version found.
        version: u64,
    },
    /// Request type outside 1..=5.
    UnknownRequestType {
        /// The value found.
        value: u64,
    },
    /// Serial id present without a target type, or missing with one.
    SerialId,
    /// Not three payloads for parties 0, 1, 2 in order.
    PayloadParties,
    /// The signature does not verify.
    Signature,
    /// HPKE cannot open the payload (opaque).
    Decryption,
    /// The payload names another party.
    PayloadParty {
        /// The party opening.
        expected: u8,
        /// The party named.
        actual: u64,
    },
    /// The payload names another request id.
    PayloadRequestId,
}

impl ErrorKind {
    /// The vector form of an SDK error.
    ///
    /// # Errors
    /// A kind that is not a rejection of input (caller misuse) or is new to the SDK.
    pub fn from_sdk(e: EnvelopeError) -> Result<ErrorKind, String> {
        Ok(match e {
            EnvelopeError::Malformed(what) => ErrorKind::Malformed {
                what: what.to_string(),
            },
            EnvelopeError::MissingField(field) => ErrorKind::MissingField {
                field: field.to_string(),
            },
            EnvelopeError::Length {
                field,
                expected,
                actual,
            }
            | EnvelopeError::ShareLength {
                field,
                expected,
                actual,
            } => ErrorKind::Length {
                field: field.to_string(),
                expected,
                actual,
            },
            EnvelopeError::Oversized { limit, actual } => ErrorKind::Length {
                field: "envelope".to_string(),
                expected: limit,
                actual,
            },
            EnvelopeError::UnsupportedVersion(version) => ErrorKind::UnsupportedVersion { version },
            EnvelopeError::UnknownRequestType(value) => ErrorKind::UnknownRequestType { value },
            EnvelopeError::SerialId => ErrorKind::SerialId,
            EnvelopeError::PayloadParties => ErrorKind::PayloadParties,
            EnvelopeError::Signature => ErrorKind::Signature,
            EnvelopeError::Decryption => ErrorKind::Decryption,
            EnvelopeError::PayloadParty { expected, actual } => {
                ErrorKind::PayloadParty { expected, actual }
            }
            EnvelopeError::PayloadRequestId => ErrorKind::PayloadRequestId,
            other => return Err(format!("not an input rejection: {other:?}")),
        })
    }
}

/// What one stage of acceptance does with an input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Outcome {
    /// The stage passes.
    Accept,
    /// The stage fails with this error.
    Reject(ErrorKind),
}

impl Outcome {
    /// From an SDK result.
    ///
    /// # Errors
    /// As [`ErrorKind::from_sdk`].
    pub fn of<T>(r: &Result<T, EnvelopeError>) -> Result<Outcome, String> {
        match r {
            Ok(_) => Ok(Outcome::Accept),
            Err(e) => ErrorKind::from_sdk(*e).map(Outcome::Reject),
        }
    }
}

/// The envelope digest recomputed from its definition, independently of the SDK:
/// `SHA-256(header || for p in 0, 1, 2: [p] || enc_p || u32be(len ct_p) || ct_p)`.
pub fn digest_from_definition(view: &EnvelopeView<'_>) -> [u8; 32] {
    digest_with_header(view, &view.meta().header(&view.orb_key()), Binding::Whole)
}

/// The version 2 digest from its definition: version 1's with `header_v2` and each
/// ciphertext's last 16 bytes (its AEAD tag) where version 1 takes the whole ciphertext.
pub fn digest_v2_from_definition(view: &EnvelopeView<'_, V2>) -> [u8; 32] {
    digest_with_header(view, &view.meta().header_v2(&view.orb_key()), Binding::Tag)
}

/// What a digest takes of each ciphertext.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// Every byte (version 1).
    Whole,
    /// The last 16 bytes (version 2).
    Tag,
}

/// The digest formula over the payloads of an envelope of any version, with `header`.
pub fn digest_with_header<V: Version>(
    view: &EnvelopeView<'_, V>,
    header: &[u8],
    binding: Binding,
) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(header);
    for party in sdk_orb::PartyId::ALL {
        let p = view.payload(party);
        h.update([party.get()]);
        h.update(p.encapsulated_key);
        h.update((p.ciphertext.len() as u32).to_be_bytes());
        h.update(match binding {
            Binding::Whole => p.ciphertext,
            Binding::Tag => &p.ciphertext[p.ciphertext.len() - 16..],
        });
    }
    h.finalize().into()
}

/// A minimal protobuf writer for hand-built payloads (canonical proto3: zero scalars
/// omitted). Independent of the SDK's private one.
#[derive(Debug, Default)]
pub struct Pb(pub Vec<u8>);

impl Pb {
    /// A varint.
    pub fn varint(&mut self, mut v: u64) -> &mut Pb {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
        self
    }

    /// A varint field, omitted when zero.
    pub fn uint(&mut self, field: u8, v: u64) -> &mut Pb {
        if v != 0 {
            self.0.push(field << 3);
            self.varint(v);
        }
        self
    }

    /// A length-delimited field.
    pub fn bytes(&mut self, field: u8, content: &[u8]) -> &mut Pb {
        self.0.push((field << 3) | 2);
        self.varint(content.len() as u64);
        self.0.extend_from_slice(content);
        self
    }
}

/// An eye message: code share bytes (field 1), mask share bytes (field 2).
pub fn eye(code: Option<&[u8]>, mask: Option<&[u8]>) -> Vec<u8> {
    let mut pb = Pb::default();
    if let Some(c) = code {
        pb.bytes(1, c);
    }
    if let Some(m) = mask {
        pb.bytes(2, m);
    }
    pb.0
}

/// A payload: version (1), party (2), request id (3), left eye (4), right eye (5).
pub fn payload(
    version: u64,
    party: u64,
    request_id: &[u8],
    left: Option<&[u8]>,
    right: Option<&[u8]>,
) -> Vec<u8> {
    let mut pb = Pb::default();
    pb.uint(1, version).uint(2, party).bytes(3, request_id);
    if let Some(l) = left {
        pb.bytes(4, l);
    }
    if let Some(r) = right {
        pb.bytes(5, r);
    }
    pb.0
}

/// Bytes to overwrite at an offset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Patch {
    /// Where the bytes go.
    pub offset: usize,
    /// The bytes.
    pub bytes: Hex,
}

/// `changed` as `(length, patches)` over `base`: runs of differing bytes, merged across gaps
/// shorter than 16 bytes; bytes past the end of `base` are one patch.
pub fn diff(base: &[u8], changed: &[u8]) -> (usize, Vec<Patch>) {
    let mut patches: Vec<Patch> = Vec::new();
    let common = base.len().min(changed.len());
    let mut i = 0;
    while i < common {
        if base[i] == changed[i] {
            i += 1;
            continue;
        }
        let start = i;
        let mut end = i + 1;
        let mut j = end;
        while j < common && j < end + 16 {
            if base[j] != changed[j] {
                end = j + 1;
            }
            j += 1;
        }
        patches.push(Patch {
            offset: start,
            bytes: Hex(changed[start..end].to_vec()),
        });
        i = end;
    }
    if changed.len() > base.len() {
        patches.push(Patch {
            offset: base.len(),
            bytes: Hex(changed[base.len()..].to_vec()),
        });
    }
    (changed.len(), patches)
}

/// `base` cut or zero-extended to `length`, then patched.
///
/// # Errors
/// A patch past `length`.
pub fn apply(base: &[u8], length: usize, patches: &[Patch]) -> Result<Vec<u8>, String> {
    let mut out = base.to_vec();
    out.resize(length, 0);
    for p in patches {
        let end = p
            .offset
            .checked_add(p.bytes.0.len())
            .filter(|&e| e <= length)
            .ok_or_else(|| format!("patch at {} runs past the length {length}", p.offset))?;
        out[p.offset..end].copy_from_slice(&p.bytes.0);
    }
    Ok(out)
}

/// `base` with the byte at `at` changed by `f`.
pub fn patched(base: &[u8], at: usize, f: impl FnOnce(&mut u8)) -> Vec<u8> {
    let mut b = base.to_vec();
    f(&mut b[at]);
    b
}

/// Checks each vector's reference to a base vector: `base_id` gives it where a case has one,
/// and `is_base` must hold for the case it names.
///
/// # Errors
/// The first reference to a vector that is missing or not a base.
pub fn check_bases<C>(
    vectors: &[Vector<C>],
    base_id: impl Fn(&C) -> Option<u32>,
    is_base: impl Fn(&C) -> bool,
) -> Result<(), String> {
    for v in vectors {
        if let Some(id) = base_id(&v.case) {
            let named = vectors.get((id as usize).wrapping_sub(1));
            if !named.is_some_and(|b| is_base(&b.case)) {
                return Err(format!(
                    "vector {}: base {id} is not a base vector of this file",
                    v.id
                ));
            }
        }
    }
    Ok(())
}
