/* Routes, snapshots and the table (table.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "routes/table.h"

const char *const ak_rmethod_names[] = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", NULL};

uint32_t ak_rmethod_bit(const char *m) {
  for (int i = 0; ak_rmethod_names[i]; i++)
    if (!strcmp(m, ak_rmethod_names[i])) return 1u << i;
  return 0;
}

bool ak_rroute_id_valid(const char *id) {
  size_t n = 0;
  for (; id[n]; n++) {
    char c = id[n];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
          c == '.'))
      return false;
  }
  return n >= 1 && n <= AK_ROUTE_ID_MAX;
}

static bool tenant_valid(const char *t, size_t n) {
  if (n < 1 || n > 64) return false;
  for (size_t i = 0; i < n; i++) {
    char c = t[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  }
  return true;
}

static void route_free(ak_rroute_t *r) {
  if (!r) return;
  free(r->id);
  free(r->tenant);
  ak_rpattern_free(r->pat);
  ak_iprules_free(r->ip);
  json_decref(r->json);
  free(r);
}

ak_rroute_t *ak_rroute_ref(ak_rroute_t *r) {
  if (r) atomic_fetch_add(&r->refs, 1);
  return r;
}

void ak_rroute_unref(ak_rroute_t *r) {
  if (r && atomic_fetch_sub(&r->refs, 1) == 1) route_free(r);
}

#define BAD(...)                         \
  do {                                   \
    snprintf(err, errlen, __VA_ARGS__);  \
    goto bad;                            \
  } while (0)

ak_rroute_t *ak_rroute_from_json(const json_t *j, const char *id, char *err, size_t errlen) {
  ak_rroute_t *r = calloc(1, sizeof *r);
  if (!r) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  atomic_init(&r->refs, 1);
  json_t *methods = NULL, *meta = NULL;
  if (!json_is_object(j)) BAD("expected a JSON object");
  static const char *const keys[] = {"id", "path", "methods", "enabled", "ip_rules", "metadata", "tenant", NULL};
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)j, k, v) {
    int i = 0;
    while (keys[i] && strcmp(keys[i], k)) i++;
    if (!keys[i]) BAD("unknown key \"%.64s\"", k);
  }
  json_t *jid = json_object_get(j, "id");
  if (jid && !json_is_string(jid)) BAD("id: expected a string");
  if (id && jid && strcmp(json_string_value(jid), id)) BAD("id: \"%.64s\" does not match the URL's", json_string_value(jid));
  const char *rid = id ? id : json_string_value(jid);
  if (!rid) BAD("id: required");
  if (!ak_rroute_id_valid(rid)) BAD("id: expected [A-Za-z0-9_.-]{1,64}");
  if (!(r->id = strdup(rid))) BAD("out of memory");

  const char *path = json_string_value(json_object_get(j, "path")), *why = NULL;
  if (!path) BAD("path: required (a string)");
  if (!(r->pat = ak_rpattern_compile(path, &why))) BAD("path: %s", why);

  methods = json_array();
  json_t *jm = json_object_get(j, "methods");
  if (jm && !json_is_null(jm)) {
    if (!json_is_array(jm) || json_array_size(jm) == 0) BAD("methods: expected a non-empty list, or null for every method");
    size_t i;
    json_array_foreach(jm, i, v) {
      const char *m = json_string_value(v);
      uint32_t bit = m ? ak_rmethod_bit(m) : 0;
      if (!bit) BAD("methods[%zu]: expected one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS", i);
      r->methods |= bit;
    }
    for (int b = 0; ak_rmethod_names[b]; b++)
      if (r->methods & (1u << b)) json_array_append_new(methods, json_string(ak_rmethod_names[b]));
  }

  json_t *je = json_object_get(j, "enabled");
  if (je && !json_is_null(je) && !json_is_boolean(je)) BAD("enabled: expected a boolean");
  r->enabled = !je || json_is_null(je) || json_is_true(je);

  json_t *ji = json_object_get(j, "ip_rules");
  if (ji && !json_is_null(ji)) {
    char e2[200];
    if (!(r->ip = ak_iprules_from_json(ji, false, e2, sizeof e2))) BAD("ip_rules: %s", e2);
  }

  meta = json_object();
  json_t *jmeta = json_object_get(j, "metadata");
  if (jmeta && !json_is_null(jmeta)) {
    if (!json_is_object(jmeta)) BAD("metadata: expected an object of strings");
    if (json_object_size(jmeta) > AK_ROUTE_META_MAX_KEYS) BAD("metadata: at most %d keys", AK_ROUTE_META_MAX_KEYS);
    json_object_foreach(jmeta, k, v) {
      if (!json_is_string(v) || json_string_length(v) > AK_ROUTE_META_MAX_VALUE || strlen(k) > 128)
        BAD("metadata.%.64s: expected a string of at most %d bytes", k, AK_ROUTE_META_MAX_VALUE);
      json_object_set(meta, k, v);
    }
  }

  /* the tenant: the `tenant` key, else /webhooks/<tenant>/<more> */
  const char *pt = NULL;
  size_t ptl = 0;
  const ak_rpattern_t *p = r->pat;
  if (p->nseg >= 3 && p->seg[0].kind == AK_RSEG_LIT && p->seg[0].len == 8 && !memcmp(p->seg[0].text, "webhooks", 8) &&
      p->seg[1].kind == AK_RSEG_LIT && tenant_valid(p->seg[1].text, p->seg[1].len)) {
    pt = p->seg[1].text;
    ptl = p->seg[1].len;
  }
  json_t *jt = json_object_get(j, "tenant");
  if (jt && !json_is_null(jt)) {
    const char *t = json_string_value(jt);
    if (!t || !tenant_valid(t, strlen(t))) BAD("tenant: expected [A-Za-z0-9_-]{1,64}");
    if (pt && (strlen(t) != ptl || memcmp(t, pt, ptl))) BAD("tenant: \"%s\" contradicts the path's tenant", t);
    r->tenant = strdup(t);
  } else if (pt) {
    r->tenant = strndup(pt, ptl);
  }
  if ((jt && !json_is_null(jt)) || pt)
    if (!r->tenant) BAD("out of memory");

  r->json = json_pack("{s:s,s:s,s:o,s:b,s:o,s:o,s:o}", "id", r->id, "path", path, "methods",
                      r->methods ? methods : json_null(), "enabled", r->enabled, "ip_rules",
                      r->ip ? ak_iprules_to_json(r->ip) : json_null(), "metadata", meta, "tenant",
                      r->tenant ? json_string(r->tenant) : json_null());
  if (!r->methods) json_decref(methods);
  methods = meta = NULL;
  if (!r->json) BAD("out of memory");
  return r;
bad:
  json_decref(methods);
  json_decref(meta);
  route_free(r);
  return NULL;
}

bool ak_rroute_method_ok(const ak_rroute_t *r, const char *method) {
  if (!r->methods) return true;
  uint32_t b = ak_rmethod_bit(method);
  return b && (r->methods & b);
}

static int match_order(const void *a, const void *b) {
  const ak_rroute_t *x = *(ak_rroute_t *const *)a, *y = *(ak_rroute_t *const *)b;
  int d = ak_rpattern_cmp(x->pat, y->pat);
  return d ? d : strcmp(x->id, y->id);
}

ak_rsnap_t *ak_rsnap_new(ak_rroute_t *const *v, size_t n, ak_iprules_t *global, uint64_t gen) {
  ak_rsnap_t *s = calloc(1, sizeof *s);
  if (s) s->v = malloc((n ? n : 1) * sizeof *s->v);
  if (!s || !s->v || !global) {
    if (s) free(s->v);
    free(s);
    ak_iprules_free(global);
    return NULL;
  }
  atomic_init(&s->refs, 1);
  s->gen = gen;
  s->global = global;
  for (size_t i = 0; i < n; i++) s->v[i] = ak_rroute_ref(v[i]);
  s->n = n;
  qsort(s->v, n, sizeof *s->v, match_order);
  return s;
}

void ak_rsnap_unref(ak_rsnap_t *s) {
  if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
  for (size_t i = 0; i < s->n; i++) ak_rroute_unref(s->v[i]);
  free(s->v);
  ak_iprules_free(s->global);
  free(s);
}

ak_rroute_t *ak_rsnap_get(const ak_rsnap_t *s, const char *id) {
  for (size_t i = 0; i < s->n; i++)
    if (!strcmp(s->v[i]->id, id)) return s->v[i];
  return NULL;
}

ak_rfind_t ak_rsnap_find(const ak_rsnap_t *s, const char *method, const char *path, size_t len, size_t *idx) {
  ak_rfind_t best = AK_RFIND_NONE;
  for (size_t i = 0; i < s->n; i++) {
    const ak_rroute_t *r = s->v[i];
    if (!ak_rpattern_match(r->pat, path, len)) continue;
    if (!r->enabled) {
      if (best == AK_RFIND_NONE) best = AK_RFIND_DISABLED, *idx = i;
      continue;
    }
    if (ak_rroute_method_ok(r, method)) {
      *idx = i;
      return AK_RFIND_ROUTE;
    }
    if (best != AK_RFIND_METHOD) best = AK_RFIND_METHOD, *idx = i;
  }
  return best;
}

void ak_rtable_init(ak_rtable_t *t, ak_rsnap_t *first) {
  pthread_mutex_init(&t->mu, NULL);
  t->cur = first;
}

void ak_rtable_destroy(ak_rtable_t *t) {
  ak_rsnap_unref(t->cur);
  t->cur = NULL;
  pthread_mutex_destroy(&t->mu);
}

ak_rsnap_t *ak_rtable_get(ak_rtable_t *t) {
  pthread_mutex_lock(&t->mu);
  ak_rsnap_t *s = t->cur;
  atomic_fetch_add(&s->refs, 1);
  pthread_mutex_unlock(&t->mu);
  return s;
}

void ak_rtable_swap(ak_rtable_t *t, ak_rsnap_t *s) {
  pthread_mutex_lock(&t->mu);
  ak_rsnap_t *old = t->cur;
  t->cur = s;
  pthread_mutex_unlock(&t->mu);
  ak_rsnap_unref(old);
}
