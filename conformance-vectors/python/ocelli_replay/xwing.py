"""X-Wing (MLKEM768-X25519, draft-connolly-cfrg-xwing-kem) and RFC 9180 base mode with it
(KEM 0x647a, HKDF-SHA256, ChaCha20-Poly1305): the HPKE of envelope version 2. ML-KEM-768 is
kyber-py's FIPS 203 implementation."""

from __future__ import annotations

import hashlib
from typing import Tuple

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from kyber_py.ml_kem import ML_KEM_768

from . import hpke

KEM_ID = 0x647A
HPKE_SUITE = b"HPKE" + KEM_ID.to_bytes(2, "big") + hpke.KDF_ID.to_bytes(2, "big") + hpke.AEAD_ID.to_bytes(2, "big")
LABEL = b"\\.//^\\"
PUBLIC_KEY_BYTES = 1216
ENCAPSULATED_KEY_BYTES = 1120


def _x25519_public(secret: bytes) -> bytes:
    return X25519PrivateKey.from_private_bytes(secret).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _expand(seed: bytes) -> Tuple[bytes, bytes, bytes, bytes]:
    """(ML-KEM decapsulation key, ML-KEM encapsulation key, X25519 secret, X25519 public)."""
    expanded = hashlib.shake_256(seed).digest(96)
    ek_m, dk_m = ML_KEM_768._keygen_internal(expanded[:32], expanded[32:64])
    sk_x = expanded[64:96]
    return dk_m, ek_m, sk_x, _x25519_public(sk_x)


def public_key(seed: bytes) -> bytes:
    _, ek_m, _, pk_x = _expand(seed)
    return ek_m + pk_x


def _combine(ss_m: bytes, ss_x: bytes, ct_x: bytes, pk_x: bytes) -> bytes:
    return hashlib.sha3_256(ss_m + ss_x + ct_x + pk_x + LABEL).digest()


def encapsulate(pk: bytes, eseed: bytes) -> Tuple[bytes, bytes]:
    """(shared secret, ciphertext) with the 64 bytes of randomness `eseed`."""
    pk_m, pk_x = pk[:1184], pk[1184:]
    ct_x = _x25519_public(eseed[32:64])
    ss_x = X25519PrivateKey.from_private_bytes(eseed[32:64]).exchange(X25519PublicKey.from_public_bytes(pk_x))
    ss_m, ct_m = ML_KEM_768._encaps_internal(pk_m, eseed[:32])
    return _combine(ss_m, ss_x, ct_x, pk_x), ct_m + ct_x


def decapsulate(seed: bytes, ct: bytes) -> bytes:
    dk_m, _, sk_x, pk_x = _expand(seed)
    ct_m, ct_x = ct[:1088], ct[1088:]
    ss_m = ML_KEM_768.decaps(dk_m, ct_m)
    ss_x = X25519PrivateKey.from_private_bytes(sk_x).exchange(X25519PublicKey.from_public_bytes(ct_x))
    return _combine(ss_m, ss_x, ct_x, pk_x)


def _key_schedule(shared_secret: bytes, info: bytes) -> Tuple[bytes, bytes]:
    psk_id_hash = hpke.labeled_extract(HPKE_SUITE, b"", b"psk_id_hash", b"")
    info_hash = hpke.labeled_extract(HPKE_SUITE, b"", b"info_hash", info)
    context = bytes([hpke.MODE_BASE]) + psk_id_hash + info_hash
    secret = hpke.labeled_extract(HPKE_SUITE, shared_secret, b"secret", b"")
    key = hpke.labeled_expand(HPKE_SUITE, secret, b"key", context, 32)
    nonce = hpke.labeled_expand(HPKE_SUITE, secret, b"base_nonce", context, 12)
    return key, nonce


def seal(pk: bytes, info: bytes, aad: bytes, plaintext: bytes, eseed: bytes) -> Tuple[bytes, bytes]:
    """(encapsulated key, ciphertext) of the first message of a base-mode context."""
    shared, enc = encapsulate(pk, eseed)
    key, nonce = _key_schedule(shared, info)
    return enc, ChaCha20Poly1305(key).encrypt(nonce, plaintext, aad)


def open_(seed: bytes, enc: bytes, info: bytes, aad: bytes, ciphertext: bytes) -> bytes:
    """Raises cryptography's InvalidTag on failure."""
    key, nonce = _key_schedule(decapsulate(seed, enc), info)
    return ChaCha20Poly1305(key).decrypt(nonce, ciphertext, aad)


# draft-connolly-cfrg-xwing-kem, appendix C, vector 1 (the public key and ciphertext by SHA-256).
KAT = {
    "seed": "7f9c2ba4e88f827d616045507605853ed73b8093f6efbc88eb1a6eacfa66ef26",
    "eseed": "3cb1eea988004b93103cfb0aeefd2a686e01fa4a58e8a3639ca8a1e3f9ae57e2"
    "35b8cc873c23dc62b8d260169afa2f75ab916a58d974918835d25e6a435085b2",
    "ss": "d2df0522128f09dd8e2c92b1e905c793d8f57a54c3da25861f10bf4ca613e384",
    "pk_sha256": "2e816deebcd76c5c80d0cd2d174478871658e8e2ff42bc9d4a6e486372e856bb",
    "ct_sha256": "17cd532d657e44c897ca6583e548a5424fc70bf54f99515a4d2bcf99e3469f33",
}


def self_check() -> None:
    """Replays the specification's vector; raises AssertionError on a mismatch."""
    seed = bytes.fromhex(KAT["seed"])
    pk = public_key(seed)
    assert hashlib.sha256(pk).hexdigest() == KAT["pk_sha256"], "X-Wing public key"
    ss, ct = encapsulate(pk, bytes.fromhex(KAT["eseed"]))
    assert ss.hex() == KAT["ss"], "X-Wing shared secret"
    assert hashlib.sha256(ct).hexdigest() == KAT["ct_sha256"], "X-Wing ciphertext"
    assert decapsulate(seed, ct) == ss, "X-Wing decapsulation"
