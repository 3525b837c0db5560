"""RFC 9180 base mode, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305."""

from __future__ import annotations

import hashlib
import hmac
from typing import Tuple

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

KEM_ID, KDF_ID, AEAD_ID = 0x0020, 0x0001, 0x0003
KEM_SUITE = b"KEM" + KEM_ID.to_bytes(2, "big")
HPKE_SUITE = b"HPKE" + KEM_ID.to_bytes(2, "big") + KDF_ID.to_bytes(2, "big") + AEAD_ID.to_bytes(2, "big")
MODE_BASE = 0


def _extract(salt: bytes, ikm: bytes) -> bytes:
    return hmac.new(salt or bytes(32), ikm, hashlib.sha256).digest()


def _expand(prk: bytes, info: bytes, length: int) -> bytes:
    return HKDFExpand(hashes.SHA256(), length, info).derive(prk)


def labeled_extract(suite: bytes, salt: bytes, label: bytes, ikm: bytes) -> bytes:
    return _extract(salt, b"HPKE-v1" + suite + label + ikm)


def labeled_expand(suite: bytes, prk: bytes, label: bytes, info: bytes, length: int) -> bytes:
    return _expand(prk, length.to_bytes(2, "big") + b"HPKE-v1" + suite + label + info, length)


def public_bytes(key: X25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def derive_key_pair(ikm: bytes) -> X25519PrivateKey:
    prk = labeled_extract(KEM_SUITE, b"", b"dkp_prk", ikm)
    return X25519PrivateKey.from_private_bytes(labeled_expand(KEM_SUITE, prk, b"sk", b"", 32))


def _shared_secret(dh: bytes, enc: bytes, pk_r: bytes) -> bytes:
    prk = labeled_extract(KEM_SUITE, b"", b"eae_prk", dh)
    return labeled_expand(KEM_SUITE, prk, b"shared_secret", enc + pk_r, 32)


def _key_schedule(shared_secret: bytes, info: bytes) -> Tuple[bytes, bytes]:
    psk_id_hash = labeled_extract(HPKE_SUITE, b"", b"psk_id_hash", b"")
    info_hash = labeled_extract(HPKE_SUITE, b"", b"info_hash", info)
    context = bytes([MODE_BASE]) + psk_id_hash + info_hash
    secret = labeled_extract(HPKE_SUITE, shared_secret, b"secret", b"")
    key = labeled_expand(HPKE_SUITE, secret, b"key", context, 32)
    nonce = labeled_expand(HPKE_SUITE, secret, b"base_nonce", context, 12)
    return key, nonce


def seal(pk_r: bytes, info: bytes, aad: bytes, plaintext: bytes, ephemeral: X25519PrivateKey) -> Tuple[bytes, bytes]:
    """(encapsulated key, ciphertext) of the first message of a base-mode context."""
    enc = public_bytes(ephemeral)
    dh = ephemeral.exchange(X25519PublicKey.from_public_bytes(pk_r))
    key, nonce = _key_schedule(_shared_secret(dh, enc, pk_r), info)
    return enc, ChaCha20Poly1305(key).encrypt(nonce, plaintext, aad)


def open_(sk_r: X25519PrivateKey, enc: bytes, info: bytes, aad: bytes, ciphertext: bytes) -> bytes:
    """Raises cryptography's InvalidTag (or ValueError for a small-order key) on failure."""
    dh = sk_r.exchange(X25519PublicKey.from_public_bytes(enc))
    key, nonce = _key_schedule(_shared_secret(dh, enc, public_bytes(sk_r)), info)
    return ChaCha20Poly1305(key).decrypt(nonce, ciphertext, aad)
