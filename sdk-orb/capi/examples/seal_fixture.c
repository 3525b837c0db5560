/* Seals the fixture person through the C interface and writes the envelopes, version 1 and
 * version 2.
 *
 * Usage: seal_fixture LEFT.json RIGHT.json OUT_V1.envelope OUT_V2.envelope
 *
 * The fixture, as in seal_fixture.rs: node p's X25519 secret key is 32 bytes of
 * 0x11 * (p + 1) and its X-Wing seed 32 bytes of 0x55 + p, the orb seed 32 bytes of 0x42, the
 * RNG seed the bytes 1..=32 for each envelope (the deterministic test generator, never for
 * enrolment), the request id the bytes 0xA0..=0xAF; a uniqueness request at
 * 1,790,000,000,000 ms, AND policy. check.sh compares the outputs with the Rust path's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ocelli_sdk.h"

/* Templates must have at least 70 % usable bits, the SDK's default policy. */
#define MIN_USABLE_BITS 8960u

static unsigned char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *buf = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
      *len = fread(buf, 1, (size_t)n, f);
    }
  }
  fclose(f);
  return buf;
}

static int write_file(const char *path, const uint8_t *bytes, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(bytes, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "%s: cannot write\n", path);
    return 1;
  }
  return 0;
}

static int load(const char *path, OcelliTemplate *out) {
  size_t len = 0;
  unsigned char *json = read_file(path, &len);
  if (!json) {
    fprintf(stderr, "%s: cannot read\n", path);
    return 1;
  }
  OcelliStatus s = ocelli_template_parse(json, len, MIN_USABLE_BITS, out);
  free(json);
  if (s != OCELLI_STATUS_OK) {
    fprintf(stderr, "%s: template rejected (status %d)\n", path, (int)s);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s LEFT.json RIGHT.json OUT_V1.envelope OUT_V2.envelope\n", argv[0]);
    return 2;
  }
  static OcelliTemplate left, right;
  if (load(argv[1], &left) || load(argv[2], &right)) return 1;

  uint8_t bundle[OCELLI_NODE_KEYS_BYTES];
  for (int p = 0; p < 3; p++) {
    uint8_t secret[OCELLI_KEY_BYTES];
    memset(secret, 0x11 * (p + 1), sizeof secret);
    if (ocelli_node_public_key_from_secret(secret, bundle + p * OCELLI_KEY_BYTES) != OCELLI_STATUS_OK)
      return 1;
  }
  OcelliNodePublicKeys nodes;
  if (ocelli_node_public_keys_from_bytes(bundle, &nodes) != OCELLI_STATUS_OK) return 1;

  static uint8_t hybrid_bundle[OCELLI_NODE_HYBRID_KEYS_BYTES];
  for (int p = 0; p < 3; p++) {
    uint8_t seed[OCELLI_KEY_BYTES];
    memset(seed, 0x55 + p, sizeof seed);
    if (ocelli_node_hybrid_public_key_from_seed(seed, hybrid_bundle + p * OCELLI_HYBRID_PUBLIC_KEY_BYTES) !=
        OCELLI_STATUS_OK)
      return 1;
  }
  static OcelliNodeHybridPublicKeys hybrid_nodes;
  if (ocelli_node_hybrid_public_keys_from_bytes(hybrid_bundle, &hybrid_nodes) != OCELLI_STATUS_OK) return 1;

  uint8_t orb_seed[OCELLI_KEY_BYTES];
  memset(orb_seed, 0x42, sizeof orb_seed);
  OcelliOrbSigningKey orb;
  if (ocelli_orb_signing_key_from_seed(orb_seed, &orb) != OCELLI_STATUS_OK) return 1;

  OcelliRequest request = {0};
  for (int i = 0; i < 16; i++) request.request_id[i] = (uint8_t)(0xA0 + i);
  request.timestamp_ms = 1790000000000ull;
  request.request_type = 1; /* uniqueness */

  uint8_t seed[32];
  for (int i = 0; i < 32; i++) seed[i] = (uint8_t)(i + 1);
  OcelliTestRng rng;
  if (ocelli_test_rng_init(&rng, seed) != OCELLI_STATUS_OK) return 1;

  size_t len = ocelli_envelope_len(&request);
  uint8_t *envelope = malloc(len);
  if (!envelope) return 1;
  size_t written = 0;
  OcelliStatus s = ocelli_seal_envelope(ocelli_test_rng_fill, &rng, &request, &left, &right,
                                        &nodes, &orb, envelope, len, &written);
  if (s != OCELLI_STATUS_OK) {
    fprintf(stderr, "seal failed (status %d)\n", (int)s);
    return 1;
  }
  if (write_file(argv[3], envelope, written)) return 1;
  free(envelope);

  if (ocelli_test_rng_init(&rng, seed) != OCELLI_STATUS_OK) return 1;
  size_t len_v2 = ocelli_envelope_len_v2(&request);
  uint8_t *envelope_v2 = malloc(len_v2);
  if (!envelope_v2) return 1;
  size_t written_v2 = 0;
  s = ocelli_seal_envelope_v2(ocelli_test_rng_fill, &rng, &request, &left, &right, &hybrid_nodes,
                              &orb, envelope_v2, len_v2, &written_v2);
  ocelli_template_wipe(&left);
  ocelli_template_wipe(&right);
  memset(&orb, 0, sizeof orb);
  if (s != OCELLI_STATUS_OK) {
    fprintf(stderr, "version 2 seal failed (status %d)\n", (int)s);
    return 1;
  }
  if (write_file(argv[4], envelope_v2, written_v2)) return 1;
  free(envelope_v2);
  printf("%zu and %zu bytes\n", written, written_v2);
  return 0;
}
