"""The vectors' RNG: the ChaCha20 keystream, key = seed, nonce 0, counter from 0."""

from __future__ import annotations

from typing import List

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms


class ChaCha20Stream:
    def __init__(self, seed: bytes) -> None:
        self._enc = Cipher(algorithms.ChaCha20(seed, bytes(16)), mode=None).encryptor()

    def bytes(self, n: int) -> bytes:
        return self._enc.update(bytes(n))

    def elements(self, n: int) -> List[tuple]:
        data = self.bytes(8 * n)
        return [
            tuple(int.from_bytes(data[8 * e + 2 * j : 8 * e + 2 * j + 2], "little") for j in range(4))
            for e in range(n)
        ]
