// The local steps of the comparison phase (src/compare.rs, src/binary.rs): the pairwise
// ChaCha12 streams, the split into two parts, the cross term's three-party OT, the lifted
// value x and its bit planes, AND gates, and the word operations of the OR trees. One thread
// per element or per word; every launch is guarded by its length, so any grid covers it.

DEVICE u32 rotl32(u32 x, int n) { return (x << n) | (x >> (32 - n)); }

// Element i of a run of u16 drawn from a stream: the streams are read as little-endian bytes.
DEVICE u16 stream_u16(const u32* __restrict__ words, u64 i)
{
    return (u16)(words[i >> 1] >> ((i & 1) * 16));
}

// Word i of a run of u64 drawn from a stream.
DEVICE u64 stream_u64(const u32* __restrict__ words, u64 i)
{
    return (u64)words[2 * i] | ((u64)words[2 * i + 1] << 32);
}

#define QUARTER(a, b, c, d)                                 \
    a += b; d ^= a; d = rotl32(d, 16);                      \
    c += d; b ^= c; b = rotl32(b, 12);                      \
    a += b; d ^= a; d = rotl32(d, 8);                       \
    c += d; b ^= c; b = rotl32(b, 7);

// Words word_pos .. word_pos + count of the ChaCha12 stream with key k0..k7, stream id 0 and
// a 64-bit block counter (rand_chacha's ChaCha12Rng: word w is word w % 16 of block w / 16).
// One thread per 16-word block that the range touches.
KERNEL chacha12(u32 k0, u32 k1, u32 k2, u32 k3, u32 k4, u32 k5, u32 k6, u32 k7,
                u64 word_pos, u64 count, u32* __restrict__ out)
{
    u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 block = (word_pos >> 4) + t;
    u64 start = block * 16;
    if (count == 0 || start >= word_pos + count) return;
    u32 s[16] = {0x61707865u, 0x3320646eu, 0x79622d32u, 0x6b206574u,
                 k0, k1, k2, k3, k4, k5, k6, k7,
                 (u32)block, (u32)(block >> 32), 0u, 0u};
    u32 x[16];
    for (int i = 0; i < 16; ++i) x[i] = s[i];
    for (int round = 0; round < 6; ++round) {
        QUARTER(x[0], x[4], x[8], x[12]);
        QUARTER(x[1], x[5], x[9], x[13]);
        QUARTER(x[2], x[6], x[10], x[14]);
        QUARTER(x[3], x[7], x[11], x[15]);
        QUARTER(x[0], x[5], x[10], x[15]);
        QUARTER(x[1], x[6], x[11], x[12]);
        QUARTER(x[2], x[7], x[8], x[13]);
        QUARTER(x[3], x[4], x[9], x[14]);
    }
    for (int i = 0; i < 16; ++i) {
        u64 w = start + i;
        if (w >= word_pos && w < word_pos + count) out[w - word_pos] = x[i] + s[i];
    }
}

// out = x + y + plus - minus over Z_{2^16}, where y, plus and minus may be absent (null):
// the split's local step at each party, plus and minus being stream draws.
KERNEL add_u16(u16* __restrict__ out, const u16* __restrict__ x, const u16* __restrict__ y,
               const u32* __restrict__ plus, const u32* __restrict__ minus, u64 n)
{
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u16 v = x[i];
    if (y) v = (u16)(v + y[i]);
    if (plus) v = (u16)(v + stream_u16(plus, i));
    if (minus) v = (u16)(v - stream_u16(minus, i));
    out[i] = v;
}

// The cross term's local step (compare.rs, cross_term). md is the party's part of md, whose
// top bit is u (party 1) or v (parties 0, 2). Party 0: msg = W_v. Party 1: part = p = W_0 + p_2,
// msg = k_1 = W_1 + A u - p. Party 2: part = q = (v ? k_1 : -p_2) - W_v, from the received k1
// and chosen. Absent arguments are null.
KERNEL cross_term(u32 party, const u16* __restrict__ md, const u32* __restrict__ w0,
                  const u32* __restrict__ w1, const u32* __restrict__ p2,
                  const u16* __restrict__ k1, const u16* __restrict__ chosen,
                  u16* __restrict__ msg, u16* __restrict__ part, u32 a, u64 n)
{
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u16 top = md[i] >> 15;
    if (party == 0) {
        msg[i] = top ? stream_u16(w1, i) : stream_u16(w0, i);
    } else if (party == 1) {
        u16 p = (u16)(stream_u16(w0, i) + stream_u16(p2, i));
        msg[i] = (u16)(stream_u16(w1, i) + (u16)a * top - p);
        part[i] = p;
    } else {
        u16 k = top ? k1[i] : (u16)(0 - stream_u16(p2, i));
        part[i] = (u16)(k - chosen[i]);
    }
}

// A holder's part of x = A md - 2^16 cd in Z_{2^32} (compare.rs, x_part).
KERNEL x_part(const u16* __restrict__ md, const u16* __restrict__ cd,
              const u16* __restrict__ cross, u32 a, u32* __restrict__ x, u64 n)
{
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u16 top = md[i] >> 15;
    u16 high = (u16)(cd[i] + (u16)a * top - cross[i]);
    x[i] = a * (u32)md[i] - ((u32)high << 16);
}

// The low `bits` bits of n u32 values as bit planes of w words (bits.rs, to_planes): bit b
// of word k of plane j is bit j of value 64 k + b. XORed with a stream draw where `mask` is
// not null. One thread per plane word.
KERNEL to_planes(const u32* __restrict__ x, u64 n, u64 w, u32 bits,
                 const u32* __restrict__ mask, u64* __restrict__ out)
{
    u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (u64)bits * w) return;
    u64 j = t / w, k = t % w;
    u64 word = 0;
    for (u64 b = 0; b < 64; ++b) {
        u64 i = 64 * k + b;
        if (i < n) word |= (u64)((x[i] >> j) & 1u) << b;
    }
    if (mask) word ^= stream_u64(mask, t);
    out[t] = word;
}

// This party's component of x AND y (session.rs, and): x_i y_i ^ x_i y_{i-1} ^ x_{i-1} y_i
// ^ alpha_i, alpha being the zero sharing next ^ prev of the two streams.
KERNEL and_gate(const u64* __restrict__ x_own, const u64* __restrict__ x_prev,
                const u64* __restrict__ y_own, const u64* __restrict__ y_prev,
                const u32* __restrict__ next, const u32* __restrict__ prev,
                u64* __restrict__ out, u64 n)
{
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u64 alpha = stream_u64(next, i) ^ stream_u64(prev, i);
    out[i] = (x_own[i] & y_own[i]) ^ (x_own[i] & y_prev[i]) ^ (x_prev[i] & y_own[i]) ^ alpha;
}

KERNEL xor_words(u64* __restrict__ out, const u64* __restrict__ x, const u64* __restrict__ y,
                 u64 n)
{
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = x[i] ^ y[i];
}

// out = x & mask: a component of a shared value ANDed with a public one (the OR rule's mask).
KERNEL and_words(u64* __restrict__ out, const u64* __restrict__ x, const u64* __restrict__ mask,
                 u64 n)
{
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = x[i] & mask[i];
}

KERNEL copy_words(u64* __restrict__ out, const u64* __restrict__ x, u64 n)
{
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = x[i];
}

// Bit i of out is bit positions[i] of x, or 0 where positions[i] is 0xffffffff; count bits.
// One thread per output word.
KERNEL gather_bits(u64* __restrict__ out, const u64* __restrict__ x,
                   const u32* __restrict__ positions, u64 count)
{
    u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (k * 64 >= count) return;
    u64 word = 0;
    for (u64 b = 0; b < 64 && 64 * k + b < count; ++b) {
        u32 p = positions[64 * k + b];
        if (p != 0xffffffffu) word |= ((x[p / 64] >> (p % 64)) & 1u) << b;
    }
    out[k] = word;
}
