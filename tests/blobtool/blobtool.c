/* blobtool: drives one blob store (blob/blob.h) from the command line, so e2e tests can
 * hold each adapter against a real or stand-in server (tests/e2e/test_blob_*.py).
 *
 *   blobtool STORE.json put KEY FILE        (FILE "-" reads stdin)
 *   blobtool STORE.json put-file KEY PATH [--sha256=HEX] [--size=N]
 *                                           (ak_blob_put_file: PATH streamed; its SHA-256
 *                                            computed first unless given, size the file's
 *                                            unless given: a test's wrong hash or short file)
 *   blobtool STORE.json stream KEY          (ak_blob_stream: "SIZE SHA256" of what it read)
 *   blobtool STORE.json get KEY             (the bytes on stdout)
 *   blobtool STORE.json range KEY OFF LEN
 *   blobtool STORE.json head KEY            (the size)
 *   blobtool STORE.json list PREFIX [MAX]   (every key, one a line, then "pages N")
 *   blobtool STORE.json del KEY
 *   blobtool STORE.json claimpack TENANT [--ms=MS] FILE...
 *                                           (one pack of the files, claim i = FILE i, written
 *                                            under its claims/ key, never prefixed; prints the
 *                                            key, then per claim "<claim_id> <ref> <sha256>")
 *
 * STORE.json is a store mapping as the config holds it ({type, root, s3: {...}, gcs: {...}}).
 * Exit 0 on success, 2 for not found, 1 for an error (on stderr). Test builds only. */
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "blob/blob.h"
#include "core/clock.h"
#include "net/httpc.h"
#include "sinks/claimpack.h"

static int fail(const char *what, const char *err) {
  fprintf(stderr, "blobtool: %s: %s\n", what, err);
  return 1;
}

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
  if (!f) return NULL;
  size_t cap = 65536, n = 0;
  uint8_t *b = malloc(cap);
  size_t r;
  while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) {
      uint8_t *nb = realloc(b, cap *= 2);
      if (!nb) {
        free(b);
        b = NULL;
      }
      b = nb;
    }
  }
  if (f != stdin) fclose(f);
  *len = n;
  return b;
}

/* claimpack: the pack of the files (claim i is files[i]) under its key in b. */
static int claimpack(ak_blob_t *b, const char *tenant, int nf, char **files, char *err, size_t errlen) {
  int64_t ms = ak_now_ms();
  if (nf > 0 && !strncmp(files[0], "--ms=", 5)) {
    ms = strtoll(files[0] + 5, NULL, 10);
    files++;
    nf--;
  }
  if (nf < 1 || nf > AK_CLAIM_PACK_MAX_CLAIMS || !ak_claim_tenant_ok(tenant, strlen(tenant))) {
    snprintf(err, errlen, "claimpack: a valid tenant and 1 to %d files", AK_CLAIM_PACK_MAX_CLAIMS);
    return AK_BLOB_ERROR;
  }
  ak_claim_item_t *it = calloc((size_t)nf, sizeof *it);
  uint8_t **bodies = calloc((size_t)nf, sizeof *bodies);
  int rc = AK_BLOB_ERROR;
  if (!it || !bodies) goto out;
  for (int i = 0; i < nf; i++) {
    bodies[i] = slurp(files[i], &it[i].len);
    if (!bodies[i]) {
      snprintf(err, errlen, "%s: cannot read", files[i]);
      goto out;
    }
    it[i].body = bodies[i];
    it[i].hook_id[0] = (uint8_t)i;
    it[i].content_type = "application/octet-stream";
    it[i].content_type_len = strlen(it[i].content_type);
    it[i].received_at_ms = ms;
    uint8_t d[32];
    SHA256(bodies[i], it[i].len, d);
    for (int k = 0; k < 32; k++) sprintf(it[i].sha256 + 2 * k, "%02x", d[k]);
  }
  ak_claim_id_t pack;
  ak_claim_pack_id(ms, &pack);
  size_t len = 0;
  uint8_t *z = ak_claim_pack_build(&pack, it, (size_t)nf, &len);
  char key[AK_CLAIM_KEY_MAX];
  if (!z || ak_claim_key(tenant, &pack, key, sizeof key) != 0) {
    snprintf(err, errlen, "claimpack: cannot build the pack");
    free(z);
    goto out;
  }
  rc = ak_blob_put(b, key, z, len, err, errlen);
  free(z);
  if (rc != AK_BLOB_OK) goto out;
  printf("%s\n", key);
  for (int i = 0; i < nf; i++) {
    ak_claim_id_t id;
    ak_claim_id_at(&pack, (uint16_t)i, &id);
    char ids[AK_CLAIM_ID_LEN + 1], ref[AK_CLAIM_REF_MAX];
    ak_claim_id_format(&id, ids);
    ak_claim_ref_format(tenant, strlen(tenant), &id, ref, sizeof ref);
    printf("%s %s %s\n", ids, ref, it[i].sha256);
  }
out:
  for (int i = 0; bodies && i < nf; i++) free(bodies[i]);
  free(bodies);
  free(it);
  return rc;
}

static void hex_of(const unsigned char *d, unsigned n, char *out) {
  for (unsigned i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

/* put-file: the file's hash the way a backup computes it (one pass, 1 MiB at a time),
 * then the streamed put. */
static int put_file(ak_blob_t *b, const char *key, int nargs, char **args, char *err, size_t errlen) {
  const char *sha = NULL, *size_arg = NULL;
  for (int i = 1; i < nargs; i++) {
    if (!strncmp(args[i], "--sha256=", 9)) sha = args[i] + 9;
    else if (!strncmp(args[i], "--size=", 7)) size_arg = args[i] + 7;
  }
  int fd = open(args[0], O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    snprintf(err, errlen, "%s: cannot open", args[0]);
    if (fd >= 0) close(fd);
    return AK_BLOB_ERROR;
  }
  uint64_t size = size_arg ? strtoull(size_arg, NULL, 10) : (uint64_t)st.st_size;
  char hex[65];
  if (!sha) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    uint8_t *buf = malloc(1 << 20);
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    ssize_t n;
    while (buf && (n = read(fd, buf, 1 << 20)) > 0) EVP_DigestUpdate(c, buf, (size_t)n);
    unsigned char d[32];
    unsigned dl = 0;
    EVP_DigestFinal_ex(c, d, &dl);
    EVP_MD_CTX_free(c);
    free(buf);
    hex_of(d, 32, hex);
    sha = hex;
    /* the put reads with pread: where read left the offset does not matter */
  }
  int rc = ak_blob_put_file(b, key, fd, size, sha, err, errlen);
  close(fd);
  return rc;
}

static int stream_cb(void *ctx, const uint8_t *p, size_t n) {
  return EVP_DigestUpdate(ctx, p, n) == 1 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: blobtool STORE.json put|put-file|get|stream|range|head|list|del|claimpack KEY [ARGS]\n");
    return 1;
  }
  json_error_t je;
  json_t *cfg = json_load_file(argv[1], 0, &je);
  if (!cfg) return fail(argv[1], je.text);
  char err[512] = "";
  ak_httpc_t *hc = ak_httpc_new(&(ak_httpc_opts_t){.name = "blobtool"}, err, sizeof err);
  if (!hc) return fail("http client", err);
  ak_blob_t *b = ak_blob_open(cfg, "/tmp/blobtool-root", hc, err, sizeof err);
  if (!b) {
    /* freed so that the sanitizer run reports the adapters' leaks, not ours */
    ak_httpc_free(hc);
    json_decref(cfg);
    return fail("open", err);
  }
  const char *op = argv[2], *key = argv[3];
  int rc = AK_BLOB_ERROR;
  if (!strcmp(op, "put") && argc >= 5) {
    size_t len = 0;
    uint8_t *data = slurp(argv[4], &len);
    if (!data) return fail(argv[4], "cannot read");
    rc = ak_blob_put(b, key, data, len, err, sizeof err);
    free(data);
  } else if (!strcmp(op, "put-file") && argc >= 5) {
    rc = put_file(b, key, argc - 4, argv + 4, err, sizeof err);
  } else if (!strcmp(op, "stream")) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    uint64_t total = 0;
    rc = ak_blob_stream(b, key, stream_cb, c, &total, err, sizeof err);
    unsigned char d[32];
    unsigned dl = 0;
    EVP_DigestFinal_ex(c, d, &dl);
    EVP_MD_CTX_free(c);
    char hex[65];
    hex_of(d, 32, hex);
    if (rc == AK_BLOB_OK) printf("%llu %s\n", (unsigned long long)total, hex);
  } else if (!strcmp(op, "get") || (!strcmp(op, "range") && argc >= 6)) {
    uint8_t *data = NULL;
    size_t got = 0;
    if (!strcmp(op, "get")) rc = ak_blob_get(b, key, &data, &got, err, sizeof err);
    else
      rc = ak_blob_get_range(b, key, strtoull(argv[4], NULL, 10), strtoull(argv[5], NULL, 10), &data, &got, err,
                             sizeof err);
    if (rc == AK_BLOB_OK) fwrite(data, 1, got, stdout);
    free(data);
  } else if (!strcmp(op, "head")) {
    uint64_t size = 0;
    rc = ak_blob_head(b, key, &size, err, sizeof err);
    if (rc == AK_BLOB_OK) printf("%llu\n", (unsigned long long)size);
  } else if (!strcmp(op, "list")) {
    size_t max = argc >= 5 ? strtoull(argv[4], NULL, 10) : 1000, pages = 0;
    char *after = NULL;
    do {
      ak_blob_list_t l;
      rc = ak_blob_list(b, key, after, max, &l, err, sizeof err);
      free(after);
      after = NULL;
      if (rc != AK_BLOB_OK) break;
      pages++;
      for (size_t i = 0; i < l.n; i++) printf("%s\n", l.keys[i]);
      if (l.next) after = strdup(l.next);
      ak_blob_list_clear(&l);
    } while (after);
    if (rc == AK_BLOB_OK) printf("pages %zu\n", pages);
  } else if (!strcmp(op, "claimpack")) {
    rc = claimpack(b, key, argc - 4, argv + 4, err, sizeof err);
  } else if (!strcmp(op, "del")) {
    rc = ak_blob_delete(b, key, err, sizeof err);
  } else {
    fprintf(stderr, "blobtool: unknown op %s\n", op);
    return 1;
  }
  ak_blob_free(b);
  ak_httpc_free(hc);
  json_decref(cfg);
  if (rc == AK_BLOB_NOT_FOUND) {
    fprintf(stderr, "blobtool: %s: not found\n", key);
    return 2;
  }
  return rc == AK_BLOB_OK ? 0 : fail(op, err);
}
