/* The plaintext matcher as a C programmer would write it, built -O3 -march=native for the
   build host: the baseline `bench` holds the Rust matcher (src/bench/plaintext.rs) against.
   Same layout and decision rule: each iris 400 words, code then mask; a pair matches when
   b * (common - 2 * differing) > a * common. */
#include <stddef.h>
#include <stdint.h>

#define WORDS 200

size_t ocelli_plain_count(const uint64_t *queries, size_t nq, const uint64_t *db, size_t n,
                          int64_t b, int64_t a) {
    size_t total = 0;
    for (size_t i = 0; i < nq; i++) {
        const uint64_t *qc = queries + i * 2 * WORDS, *qm = qc + WORDS;
        for (size_t j = 0; j < n; j++) {
            const uint64_t *ec = db + j * 2 * WORDS, *em = ec + WORDS;
            int64_t common = 0, differing = 0;
            for (size_t w = 0; w < WORDS; w++) {
                uint64_t both = qm[w] & em[w];
                common += __builtin_popcountll(both);
                differing += __builtin_popcountll((qc[w] ^ ec[w]) & both);
            }
            total += b * (common - 2 * differing) > a * common;
        }
    }
    return total;
}

/* The instruction sets the compiler was allowed, so a binary built elsewhere skips the
   matcher on a core without them. Bits as in `c_features` in plaintext.rs. */
uint32_t ocelli_plain_features(void) {
    uint32_t f = 0;
#ifdef __POPCNT__
    f |= 1u << 0;
#endif
#ifdef __AVX__
    f |= 1u << 1;
#endif
#ifdef __AVX2__
    f |= 1u << 2;
#endif
#ifdef __BMI2__
    f |= 1u << 3;
#endif
#ifdef __AVX512F__
    f |= 1u << 4;
#endif
#ifdef __AVX512BW__
    f |= 1u << 5;
#endif
#ifdef __AVX512VL__
    f |= 1u << 6;
#endif
#ifdef __AVX512DQ__
    f |= 1u << 7;
#endif
#ifdef __AVX512VPOPCNTDQ__
    f |= 1u << 8;
#endif
#ifdef __AVX512BITALG__
    f |= 1u << 9;
#endif
    return f;
}
