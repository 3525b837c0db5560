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


def _quarter(s: List[int], a: int, b: int, c: int, d: int) -> None:
    m = 0xFFFFFFFF
    s[a] = (s[a] + s[b]) & m
    s[d] ^= s[a]
    s[d] = ((s[d] << 16) | (s[d] >> 16)) & m
    s[c] = (s[c] + s[d]) & m
    s[b] ^= s[c]
    s[b] = ((s[b] << 12) | (s[b] >> 20)) & m
    s[a] = (s[a] + s[b]) & m
    s[d] ^= s[a]
    s[d] = ((s[d] << 8) | (s[d] >> 24)) & m
    s[c] = (s[c] + s[d]) & m
    s[b] ^= s[c]
    s[b] = ((s[b] << 7) | (s[b] >> 25)) & m


def chacha_block(key: bytes, counter: int, rounds: int) -> bytes:
    """The RFC 8439 block function with `rounds` rounds, a 64-bit counter and a zero 64-bit nonce."""
    const = [0x61707865, 0x3320646E, 0x79622D32, 0x6B206574]
    k = [int.from_bytes(key[4 * i : 4 * i + 4], "little") for i in range(8)]
    state = const + k + [counter & 0xFFFFFFFF, counter >> 32, 0, 0]
    s = list(state)
    for _ in range(rounds // 2):
        _quarter(s, 0, 4, 8, 12)
        _quarter(s, 1, 5, 9, 13)
        _quarter(s, 2, 6, 10, 14)
        _quarter(s, 3, 7, 11, 15)
        _quarter(s, 0, 5, 10, 15)
        _quarter(s, 1, 6, 11, 12)
        _quarter(s, 2, 7, 8, 13)
        _quarter(s, 3, 4, 9, 14)
    return b"".join(((x + y) & 0xFFFFFFFF).to_bytes(4, "little") for x, y in zip(s, state))


class ChaChaStream:
    """A ChaCha keystream read as bytes (ChaCha12 for the PRF streams of the node families)."""

    def __init__(self, seed: bytes, rounds: int = 12) -> None:
        self.seed, self.rounds, self.counter, self.buffer = seed, rounds, 0, b""

    def bytes(self, n: int) -> bytes:
        """The next n bytes; a draw takes whole 4-byte words, so a draw of n bytes moves ceil(n / 4) words."""
        take = -(-n // 4) * 4
        while len(self.buffer) < take:
            self.buffer += chacha_block(self.seed, self.counter, self.rounds)
            self.counter += 1
        out, self.buffer = self.buffer[:n], self.buffer[take:]
        return out

    def u16s(self, n: int) -> List[int]:
        data = self.bytes(2 * n)
        return [int.from_bytes(data[2 * i : 2 * i + 2], "little") for i in range(n)]

    def u64s(self, n: int) -> List[int]:
        data = self.bytes(8 * n)
        return [int.from_bytes(data[8 * i : 8 * i + 8], "little") for i in range(n)]
