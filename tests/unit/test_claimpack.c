/* The claim check's formats (sinks/claimpack.h): claim ids and their canonical text,
 * refs, object keys, the pack's ZIP layout and the lookup of a claim in it, and the put
 * of a pack to the first claim store that takes it. A pack is also written to a file
 * and opened with Python's zipfile, the reader a consumer would use. And the LocalFS
 * retention sweep of the claim_check module (admin/claims.h). */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>
#include "admin/claims.h"
#include "blob/blob.h"
#include "core/instance.h"
#include "fixture.h"
#include "sinks/claimpack.h"

/* 2026-12-02T07:55:26.123Z */
#define MS 1796198126123ll

static void sha_hex(const uint8_t *p, size_t n, char out[65]) {
  uint8_t d[32];
  SHA256(p, n, d);
  for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

Test(claimpack, id_bit_layout) {
  ak_claim_id_t pack, c, back;
  ak_claim_pack_id(MS, &pack);
  cr_assert_eq(ak_claim_id_ms(&pack), MS);
  cr_assert_eq(ak_claim_id_pos(&pack), 0);
  ak_claim_id_at(&pack, 0xbeef, &c);
  cr_assert_eq(ak_claim_id_pos(&c), 0xbeef);
  cr_assert_eq(ak_claim_id_ms(&c), MS);
  cr_assert_eq(c.b[14], 0xbe);
  cr_assert_eq(c.b[15], 0xef);
  cr_assert_eq(memcmp(c.b, pack.b, 14), 0, "only the position bits differ");
  ak_claim_id_pack(&c, &back);
  cr_assert_eq(memcmp(back.b, pack.b, 16), 0, "pack id = claim id with the position zeroed");
  /* big-endian ms in the first 6 bytes */
  cr_assert_eq(pack.b[0], (uint8_t)(MS >> 40));
  cr_assert_eq(pack.b[5], (uint8_t)MS);
  /* random bits differ between two pack ids of the same ms */
  ak_claim_id_t other;
  ak_claim_pack_id(MS, &other);
  cr_assert_neq(memcmp(other.b + 6, pack.b + 6, 8), 0);
}

Test(claimpack, crockford_round_trip_and_known_value) {
  ak_claim_id_t id, back;
  memset(&id, 0, sizeof id);
  char s[AK_CLAIM_ID_LEN + 1];
  ak_claim_id_format(&id, s);
  cr_assert_str_eq(s, "00000000000000000000000000");
  memset(&id, 0xff, sizeof id);
  ak_claim_id_format(&id, s);
  cr_assert_str_eq(s, "7ZZZZZZZZZZZZZZZZZZZZZZZZZ");
  cr_assert_eq(ak_claim_id_parse(s, strlen(s), &back), 0);
  cr_assert_eq(memcmp(back.b, id.b, 16), 0);
  /* the ULID README's example: ulid(1469918176385) starts 01ARYZ6S41 */
  memset(&id, 0, sizeof id);
  ak_claim_pack_id(1469918176385ll, &id);
  ak_claim_id_format(&id, s);
  cr_assert_eq(strncmp(s, "01ARYZ6S41", 10), 0, "got %s", s);
  for (int i = 0; i < 1000; i++) {
    ak_claim_id_t r, p;
    ak_claim_pack_id(MS + i, &r);
    ak_claim_id_at(&r, (uint16_t)(i * 65), &r);
    ak_claim_id_format(&r, s);
    cr_assert(s[0] >= '0' && s[0] <= '7');
    cr_assert_eq(ak_claim_id_parse(s, AK_CLAIM_ID_LEN, &p), 0);
    cr_assert_eq(memcmp(p.b, r.b, 16), 0);
  }
}

Test(claimpack, crockford_refuses_non_canonical) {
  ak_claim_id_t id;
  const char *good = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
  cr_assert_eq(ak_claim_id_parse(good, 26, &id), 0);
  cr_assert_eq(ak_claim_id_parse("01arz3ndektsv4rrffq69g5fav", 26, &id), -1, "lowercase");
  cr_assert_eq(ak_claim_id_parse("81ARZ3NDEKTSV4RRFFQ69G5FAV", 26, &id), -1, "first char above 7");
  cr_assert_eq(ak_claim_id_parse("01ARZ3NDEKTSV4RRFFQ69G5FAI", 26, &id), -1, "I");
  cr_assert_eq(ak_claim_id_parse("01ARZ3NDEKTSV4RRFFQ69G5FAL", 26, &id), -1, "L");
  cr_assert_eq(ak_claim_id_parse("01ARZ3NDEKTSV4RRFFQ69G5FAO", 26, &id), -1, "O");
  cr_assert_eq(ak_claim_id_parse("01ARZ3NDEKTSV4RRFFQ69G5FAU", 26, &id), -1, "U");
  cr_assert_eq(ak_claim_id_parse("01ARZ3NDEKTSV4RRFFQ69G5FA", 25, &id), -1, "short");
  cr_assert_eq(ak_claim_id_parse("01ARZ3NDEKTSV4RRFFQ69G5FAVV", 27, &id), -1, "long");
  cr_assert_eq(ak_claim_id_parse("01ARZ3NDEK-SV4RRFFQ69G5FAV", 26, &id), -1, "dash");
}

Test(claimpack, tenants) {
  cr_assert(ak_claim_tenant_ok("acme_1-x", 8));
  cr_assert(!ak_claim_tenant_ok("", 0));
  cr_assert(!ak_claim_tenant_ok("a.b", 3));
  cr_assert(!ak_claim_tenant_ok("a/b", 3));
  cr_assert(!ak_claim_tenant_ok("a:b", 3));
  char t65[66];
  memset(t65, 'a', 65);
  t65[65] = 0;
  cr_assert(ak_claim_tenant_ok(t65, 64));
  cr_assert(!ak_claim_tenant_ok(t65, 65));
}

Test(claimpack, refs) {
  ak_claim_id_t pack, id, back;
  ak_claim_pack_id(MS, &pack);
  ak_claim_id_at(&pack, 7, &id);
  char ref[AK_CLAIM_REF_MAX], ids[AK_CLAIM_ID_LEN + 1], tenant[65];
  cr_assert_eq(ak_claim_ref_format("acme", 4, &id, ref, sizeof ref), 0);
  ak_claim_id_format(&id, ids);
  char want[AK_CLAIM_REF_MAX];
  snprintf(want, sizeof want, "urn:ankusa:claim:v1:acme:%s", ids);
  cr_assert_str_eq(ref, want);
  cr_assert_eq(ak_claim_ref_parse(ref, strlen(ref), tenant, &back), 0);
  cr_assert_str_eq(tenant, "acme");
  cr_assert_eq(memcmp(back.b, id.b, 16), 0);
  cr_assert_eq(ak_claim_ref_format("a.b", 3, &id, ref, sizeof ref), -1);
  /* a 64-character tenant fits AK_CLAIM_REF_MAX */
  char t64[65];
  memset(t64, 'z', 64);
  t64[64] = 0;
  cr_assert_eq(ak_claim_ref_format(t64, 64, &id, ref, sizeof ref), 0);
  cr_assert_eq(ak_claim_ref_parse(ref, strlen(ref), tenant, &back), 0);
  cr_assert_str_eq(tenant, t64);
  /* refusals */
  char bad[200];
  snprintf(bad, sizeof bad, "urn:ankusa:claim:v2:acme:%s", ids);
  cr_assert_eq(ak_claim_ref_parse(bad, strlen(bad), tenant, &back), -1, "v2");
  snprintf(bad, sizeof bad, "urn:ankusa:claim:v1::%s", ids);
  cr_assert_eq(ak_claim_ref_parse(bad, strlen(bad), tenant, &back), -1, "empty tenant");
  snprintf(bad, sizeof bad, "urn:ankusa:claim:v1:ac.me:%s", ids);
  cr_assert_eq(ak_claim_ref_parse(bad, strlen(bad), tenant, &back), -1, "tenant form");
  snprintf(bad, sizeof bad, "urn:ankusa:claim:v1:acme:%s:x", ids);
  cr_assert_eq(ak_claim_ref_parse(bad, strlen(bad), tenant, &back), -1, "trailing part");
  snprintf(bad, sizeof bad, "urn:ankusa:claim:v1:acme:%.25s", ids);
  cr_assert_eq(ak_claim_ref_parse(bad, strlen(bad), tenant, &back), -1, "short id");
  for (char *p = ref; *p; p++)
    if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
  cr_assert_eq(ak_claim_ref_parse(ref, strlen(ref), tenant, &back), -1, "lowercase id");
}

Test(claimpack, key_is_the_packs_utc_day) {
  ak_claim_id_t pack, id;
  ak_claim_pack_id(MS, &pack);
  ak_claim_id_at(&pack, 12, &id);
  char key[AK_CLAIM_KEY_MAX], ids[AK_CLAIM_ID_LEN + 1], want[AK_CLAIM_KEY_MAX];
  cr_assert_eq(ak_claim_key("acme", &id, key, sizeof key), 0);
  ak_claim_id_format(&pack, ids);
  snprintf(want, sizeof want, "claims/tenant=acme/dt=2026-12-02/%s", ids);
  cr_assert_str_eq(key, want);
  /* 23:59:59.999 UTC stays on its day */
  ak_claim_pack_id(1796255999999ll, &pack);
  cr_assert_eq(ak_claim_key("acme", &pack, key, sizeof key), 0);
  cr_assert(strstr(key, "/dt=2026-12-02/"), "%s", key);
  cr_assert_eq(ak_claim_key("ac/me", &pack, key, sizeof key), -1);
  cr_assert(ak_blob_key_ok(want));
}

/* n items of distinct sizes (item i is i * 37 % 300 bytes of i's pattern, some empty). */
static ak_claim_item_t *items_of(size_t n, uint8_t ***bodies) {
  ak_claim_item_t *it = calloc(n, sizeof *it);
  *bodies = calloc(n, sizeof **bodies);
  for (size_t i = 0; i < n; i++) {
    size_t len = (i * 37) % 300;
    uint8_t *b = malloc(len ? len : 1);
    for (size_t k = 0; k < len; k++) b[k] = (uint8_t)(i * 7 + k);
    (*bodies)[i] = b;
    it[i].body = b;
    it[i].len = len;
    it[i].hook_id[0] = (uint8_t)i;
    it[i].hook_id[6] = 0x70;
    it[i].content_type = i % 2 ? "application/json" : NULL;
    it[i].content_type_len = i % 2 ? 16 : 0;
    it[i].received_at_ms = MS + (int64_t)i;
    sha_hex(b, len, it[i].sha256);
  }
  return it;
}

static void items_free(ak_claim_item_t *it, uint8_t **bodies, size_t n) {
  for (size_t i = 0; i < n; i++) free(bodies[i]);
  free(bodies);
  free(it);
}

static uint32_t rd32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

Test(claimpack, build_then_locate_every_position) {
  size_t n = 300;
  uint8_t **bodies;
  ak_claim_item_t *it = items_of(n, &bodies);
  ak_claim_id_t pack;
  ak_claim_pack_id(MS, &pack);
  size_t len = 0;
  uint8_t *z = ak_claim_pack_build(&pack, it, n, &len);
  cr_assert_not_null(z);
  cr_assert_eq(rd32(z), 0x04034b50u);
  cr_assert_eq(memcmp(z + 30, "index.bin", 9), 0);
  cr_assert_eq(z[12], 0x21, "DOS date 1980-01-01");
  cr_assert_eq(z[13], 0);
  for (size_t pos = 0; pos < n; pos++) {
    size_t hl = ak_claim_head_len((uint16_t)pos);
    cr_assert_eq(hl, 30 + 9 + (pos + 1) * 8);
    uint32_t off = 0, l = 0;
    cr_assert_eq(ak_claim_locate(z, hl, (uint16_t)pos, &off, &l), 0);
    cr_assert_eq(l, it[pos].len);
    cr_assert_leq(off + l, len);
    cr_assert_eq(memcmp(z + off, it[pos].body, l), 0, "position %zu", pos);
    ak_claim_id_t cid;
    ak_claim_id_at(&pack, (uint16_t)pos, &cid);
    cr_assert_eq(ak_claim_entry_check(z + off - AK_CLAIM_ENTRY_HEAD, AK_CLAIM_ENTRY_HEAD, &cid, l), 0);
    ak_claim_id_t other;
    ak_claim_id_at(&pack, (uint16_t)(pos + 1), &other);
    cr_assert_eq(ak_claim_entry_check(z + off - AK_CLAIM_ENTRY_HEAD, AK_CLAIM_ENTRY_HEAD, &other, l), -1);
    /* a head one byte short is not found */
    cr_assert_eq(ak_claim_locate(z, hl - 1, (uint16_t)pos, &off, &l), -1);
  }
  uint32_t off, l;
  cr_assert_eq(ak_claim_locate(z, len, (uint16_t)n, &off, &l), -1, "a position past the index");
  /* the manifest, found from the tail */
  size_t tl = ak_claim_manifest_tail_len();
  uint64_t moff = 0;
  uint32_t mlen = 0;
  cr_assert_eq(ak_claim_manifest_find(z + len - tl, tl, len, &moff, &mlen), 0);
  json_error_t je;
  json_t *m = json_loadb((const char *)z + moff, mlen, 0, &je);
  cr_assert_not_null(m, "%s", je.text);
  cr_assert_eq(json_integer_value(json_object_get(m, "v")), 1);
  json_t *cl = json_object_get(m, "claims");
  cr_assert_eq(json_array_size(cl), n);
  for (size_t i = 0; i < n; i++) {
    json_t *row = json_array_get(cl, i);
    ak_claim_id_t cid;
    char ids[AK_CLAIM_ID_LEN + 1];
    ak_claim_id_at(&pack, (uint16_t)i, &cid);
    ak_claim_id_format(&cid, ids);
    cr_assert_str_eq(json_string_value(json_object_get(row, "claim_id")), ids);
    cr_assert_str_eq(json_string_value(json_object_get(row, "sha256")), it[i].sha256);
    cr_assert_eq(json_integer_value(json_object_get(row, "length")), (json_int_t)it[i].len);
    cr_assert_eq(json_integer_value(json_object_get(row, "received_at")), MS + (json_int_t)i);
    uint32_t o2, l2;
    ak_claim_locate(z, ak_claim_head_len((uint16_t)i), (uint16_t)i, &o2, &l2);
    cr_assert_eq(json_integer_value(json_object_get(row, "offset")), o2);
    if (i % 2) cr_assert_str_eq(json_string_value(json_object_get(row, "content_type")), "application/json");
    else cr_assert(json_is_null(json_object_get(row, "content_type")));
    cr_assert_eq(strlen(json_string_value(json_object_get(row, "id"))), 36);
  }
  json_decref(m);
  /* a tail that is not a pack's */
  z[len - 22] ^= 1;
  cr_assert_eq(ak_claim_manifest_find(z + len - tl, tl, len, &moff, &mlen), -1);
  z[len - 22] ^= 1;
  cr_assert_eq(ak_claim_manifest_find(z + len - tl, tl, len + 1, &moff, &mlen), -1, "wrong size");
  /* a head that is not a pack's */
  z[30] = 'X';
  cr_assert_eq(ak_claim_locate(z, len, 0, &off, &l), -1);
  free(z);
  items_free(it, bodies, n);
}

Test(claimpack, empty_and_limits) {
  ak_claim_id_t pack;
  ak_claim_pack_id(MS, &pack);
  size_t len = 0;
  uint8_t *z = ak_claim_pack_build(&pack, NULL, 0, &len);
  cr_assert_not_null(z);
  uint32_t off, l;
  cr_assert_eq(ak_claim_locate(z, len, 0, &off, &l), -1);
  free(z);
  ak_claim_item_t one = {.body = (const uint8_t *)"x", .len = 1};
  cr_assert_null(ak_claim_pack_build(&pack, &one, AK_CLAIM_PACK_MAX_CLAIMS + 1, &len));
  cr_assert_eq(len, 0);
}

/* The pack as a file, read by Python's zipfile: names in order, every CRC checked
 * (testzip), stored entries, the 1980-01-01 date, no extra fields. */
Test(claimpack, python_zipfile_reads_the_pack) {
  size_t n = 40;
  uint8_t **bodies;
  ak_claim_item_t *it = items_of(n, &bodies);
  ak_claim_id_t pack;
  ak_claim_pack_id(MS, &pack);
  size_t len = 0;
  uint8_t *z = ak_claim_pack_build(&pack, it, n, &len);
  cr_assert_not_null(z);
  char dir[] = "/tmp/claimpack-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char path[256], bdir[256];
  snprintf(path, sizeof path, "%s/pack.zip", dir);
  snprintf(bdir, sizeof bdir, "%s/bodies", dir);
  mkdir(bdir, 0700);
  FILE *f = fopen(path, "wb");
  cr_assert_eq(fwrite(z, 1, len, f), len);
  fclose(f);
  for (size_t i = 0; i < n; i++) {
    char bp[300];
    snprintf(bp, sizeof bp, "%s/%zu", bdir, i);
    f = fopen(bp, "wb");
    if (it[i].len) fwrite(it[i].body, 1, it[i].len, f);
    fclose(f);
  }
  char ids[AK_CLAIM_ID_LEN + 1];
  ak_claim_id_format(&pack, ids);
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 -c '\n"
           "import zipfile, json, sys, os\n"
           "z = zipfile.ZipFile(sys.argv[1])\n"
           "assert z.testzip() is None\n"
           "infos = z.infolist()\n"
           "names = [i.filename for i in infos]\n"
           "assert names[0] == \"index.bin\" and names[-1] == \"manifest.json\", names\n"
           "assert len(names) == %zu + 2, len(names)\n"
           "for i in infos:\n"
           "    assert i.compress_type == zipfile.ZIP_STORED\n"
           "    assert i.date_time == (1980, 1, 1, 0, 0, 0), i.date_time\n"
           "    assert i.extra == b\"\"\n"
           "m = json.loads(z.read(\"manifest.json\"))\n"
           "assert m[\"v\"] == 1\n"
           "for k, c in enumerate(m[\"claims\"]):\n"
           "    assert names[1 + k] == c[\"claim_id\"]\n"
           "    assert z.read(c[\"claim_id\"]) == open(os.path.join(sys.argv[2], str(k)), \"rb\").read()\n"
           "assert names[1][:24] == sys.argv[3][:24]\n"
           "' %s %s %s",
           n, path, bdir, ids);
  int rc = system(cmd);
  cr_assert_eq(rc, 0, "python's zipfile refused the pack (rc %d)", rc);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
  free(z);
  items_free(it, bodies, n);
}

Test(claimpack, stores_put_fails_over_in_order) {
  char dir[] = "/tmp/claimstores-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char a[256], b[256], err[512];
  snprintf(a, sizeof a, "%s/a", dir);
  snprintf(b, sizeof b, "%s/b", dir);
  ak_blob_t *sa = ak_blob_local_new(a, err, sizeof err), *sb = ak_blob_local_new(b, err, sizeof err);
  cr_assert(sa && sb);
  ak_blob_t *v[2] = {sa, sb};
  ak_claim_stores_t s = {.v = v, .n = 2};
  size_t used = 9;
  cr_assert_eq(ak_claim_stores_put(&s, "claims/tenant=t/dt=2026-12-02/K1", "abc", 3, &used, err, sizeof err), 0);
  cr_assert_eq(used, 0);
  /* the first store's root becomes a file: its writes fail, the second takes the pack */
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s && touch %s", a, a);
  cr_assert_eq(system(cmd), 0);
  cr_assert_eq(ak_claim_stores_put(&s, "claims/tenant=t/dt=2026-12-02/K2", "abcd", 4, &used, err, sizeof err), 0);
  cr_assert_eq(used, 1);
  uint8_t *got = NULL;
  size_t gl = 0;
  cr_assert_eq(ak_blob_get(sb, "claims/tenant=t/dt=2026-12-02/K2", &got, &gl, err, sizeof err), AK_BLOB_OK);
  cr_assert_eq(gl, 4);
  free(got);
  /* both failing: -1 with every store's failure */
  snprintf(cmd, sizeof cmd, "rm -rf %s && touch %s", b, b);
  cr_assert_eq(system(cmd), 0);
  cr_assert_eq(ak_claim_stores_put(&s, "claims/tenant=t/dt=2026-12-02/K3", "x", 1, &used, err, sizeof err), -1);
  cr_assert(strstr(err, "store 0") && strstr(err, "store 1"), "%s", err);
  ak_claim_stores_t none = {0};
  cr_assert_eq(ak_claim_stores_put(&none, "k", "x", 1, NULL, err, sizeof err), -1);
  cr_assert_str_eq(err, "no claim store");
  ak_blob_free(sa);
  ak_blob_free(sb);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
}

/* The LocalFS retention sweep (admin/claims.c): with now 2026-12-02T07:55Z and 2 days of
 * retention the cutoff day is 2026-11-30; the days before it go, it and later stay, and
 * what does not parse is left alone. */
Test(claimpack, sweep_removes_days_before_the_cutoff_day) {
  char dir[] = "/tmp/claimsweep-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  const char *made[] = {"tenant=acme/dt=2026-11-28", "tenant=acme/dt=2026-11-29", "tenant=acme/dt=2026-11-30",
                        "tenant=acme/dt=2026-12-02", "tenant=b_2/dt=2020-01-01", "tenant=acme/dt=2026-02-30",
                        "tenant=acme/dt=2026-1-01", "tenant=a.b/dt=2020-01-01", "other/dt=2020-01-01",
                        "tenant=acme/dt=2020-01-01x"};
  char cmd[1024];
  for (size_t i = 0; i < sizeof made / sizeof *made; i++) {
    snprintf(cmd, sizeof cmd, "mkdir -p %s/claims/%s && echo x > %s/claims/%s/PACK", dir, made[i], dir, made[i]);
    cr_assert_eq(system(cmd), 0);
  }
  snprintf(cmd, sizeof cmd, "echo x > %s/claims/tenant=acme/dt=2019-01-01", dir);
  cr_assert_eq(system(cmd), 0);
  cr_assert_eq(ak_claims_sweep_root(dir, MS, 2), 3);
  bool gone[] = {true, true, false, false, true, false, false, false, false, false};
  for (size_t i = 0; i < sizeof made / sizeof *made; i++) {
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/claims/%s", dir, made[i]);
    cr_expect_eq(stat(p, &st) != 0, gone[i], "%s", made[i]);
  }
  char f[512];
  struct stat st;
  snprintf(f, sizeof f, "%s/claims/tenant=acme/dt=2019-01-01", dir);
  cr_expect_eq(stat(f, &st), 0, "a file named like a day is not removed");
  cr_assert_eq(ak_claims_sweep_root(dir, MS, 2), 0, "a second sweep finds nothing");
  char none[600];
  snprintf(none, sizeof none, "%s/absent", dir);
  cr_assert_eq(ak_claims_sweep_root(none, MS, 2), 0);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
}

/* One HTTP/1.0 exchange with 127.0.0.1:port: the whole answer (malloc'd, NUL-terminated). */
static char *http10(int port, const char *req, size_t *n) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  cr_assert_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
  size_t cap = 1 << 20, len = 0;
  char *out = malloc(cap);
  ssize_t r;
  while ((r = read(fd, out + len, cap - 1 - len)) > 0) len += (size_t)r;
  close(fd);
  out[len] = 0;
  *n = len;
  return out;
}

/* The claim_check module on a node of the claim_check role alone, opened with no store
 * module at all: it serves claims and /health, and no RocksDB store is made. */
Test(claimpack, gateway_node_without_a_store) {
  ak_fx_t fx;
  ak_fx_tmp(&fx, "claimgw");
  char yaml[1024], root[300];
  snprintf(root, sizeof root, "%s/claimroot", fx.dir);
  snprintf(yaml, sizeof yaml, "node: {roles: [claim_check]}\nclaim_check: {port: 0, store: {type: local, root: %s}}\n",
           root);
  static const char *const only[] = {"node", "log", "httpc", "claim_check", NULL};
  ak_fx_open(&fx, yaml, only);
  cr_assert_null(fx.inst->store);
  cr_assert_not_null(fx.inst->claims);
  cr_assert_eq(fx.inst->claims->n, 1);
  size_t n = 3;
  uint8_t **bodies;
  ak_claim_item_t *it = items_of(n, &bodies);
  ak_claim_id_t pack, id;
  ak_claim_pack_id(MS, &pack);
  size_t len = 0;
  uint8_t *z = ak_claim_pack_build(&pack, it, n, &len);
  char key[AK_CLAIM_KEY_MAX], err[256];
  cr_assert_eq(ak_claim_key("acme", &pack, key, sizeof key), 0);
  size_t used = 9;
  cr_assert_eq(ak_claim_stores_put(fx.inst->claims, key, z, len, &used, err, sizeof err), 0, "%s", err);
  cr_assert_eq(used, 0);
  char *e = NULL;
  cr_assert_eq(ak_node_start(&fx.node, &e), 0, "%s", e ? e : "");
  int port = ak_claims_port(fx.inst);
  cr_assert_gt(port, 0);
  ak_claim_id_at(&pack, 2, &id);
  char ids[AK_CLAIM_ID_LEN + 1], req[256];
  ak_claim_id_format(&id, ids);
  snprintf(req, sizeof req, "GET /v1/claims/acme/%s HTTP/1.0\r\n\r\n", ids);
  size_t got = 0;
  char *resp = http10(port, req, &got);
  cr_assert(!strncmp(resp, "HTTP/1.1 200 ", 13), "%.200s", resp);
  char *body = strstr(resp, "\r\n\r\n");
  cr_assert_not_null(body);
  body += 4;
  cr_assert_eq((size_t)(resp + got - body), it[2].len);
  cr_assert_eq(memcmp(body, it[2].body, it[2].len), 0);
  free(resp);
  resp = http10(port, "GET /health HTTP/1.0\r\n\r\n", &got);
  cr_assert(strstr(resp, "{\"status\":\"ok\"}"), "%s", resp);
  free(resp);
  ak_fx_close(&fx);
  struct stat st;
  cr_assert_neq(stat(fx.store_path, &st), 0, "no RocksDB store was made");
  free(z);
  items_free(it, bodies, n);
  ak_fx_rm(&fx);
}
