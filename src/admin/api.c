/* The handler contract's helpers (api.h): the replies every admin answer goes through
 * (on the server layer, http/server.h), the query arguments a call owns, and the
 * source-to-tenant checks. Owns no state and no routes; never includes a handler's or
 * the router's header, and never puts a token or a secret in a reply. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "admin/api.h"
#include "core/sources.h"

void ak_admin_reply(ak_admin_call_t *call, unsigned status, const char *ctype, const char *body, size_t len) {
  if (call->answered) return;
  call->answered = true;
  if (call->request_id) ak_hreq_add_header(call->req, "X-Request-Id", call->request_id);
  if (status == 503) ak_hreq_add_header(call->req, "Retry-After", "1");
  if (status == 401) ak_hreq_add_header(call->req, "WWW-Authenticate", "Bearer realm=\"ankusa-admin\"");
  ak_hreq_reply(call->req, status, ctype, body, len);
}

void ak_admin_json(ak_admin_call_t *call, unsigned status, json_t *j) {
  char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(j);
  if (!s) {
    /* out of memory, or a view that could not be built: the client still gets an answer */
    static const char internal[] = "{\"error\":\"internal\"}";
    ak_admin_reply(call, 500, "application/json", internal, sizeof internal - 1);
    return;
  }
  ak_admin_reply(call, status, "application/json", s, strlen(s));
  free(s);
}

void ak_admin_error(ak_admin_call_t *call, unsigned status, const char *code) {
  ak_admin_json(call, status, json_pack("{s:s}", "error", code));
}

void ak_admin_forbidden(ak_admin_call_t *call, ak_scope_t scope, const char *tenant) {
  json_t *j = json_pack("{s:s,s:s}", "error", "forbidden", "scope", ak_auth_scope_name(scope));
  if (j && tenant) json_object_set_new(j, "tenant", json_string(tenant));
  ak_admin_json(call, 403, j);
}

void ak_admin_forbidden_tenant(ak_admin_call_t *call, const char *tenant) {
  ak_admin_forbidden(call, call->route ? call->route->scope : AK_SCOPE_OPEN, tenant ? tenant : "*");
}

void ak_admin_invalid_filter(ak_admin_call_t *call, const char *field) {
  ak_admin_json(call, 400, json_pack("{s:s,s:s}", "error", "invalid_filter", "field", field));
}

void ak_admin_role_not_enabled(ak_admin_call_t *call, const char *role) {
  ak_admin_json(call, 409, json_pack("{s:s,s:s}", "error", "role_not_enabled", "role", role));
}

/* ------------------------------------------------------- query arguments ---- */

/* The decoded arguments of one call: one copy of the query string, decoded in place,
 * and each argument's name (with its length: a decoded %00 may sit inside) and value
 * (NULL for a name without '='). */
typedef struct query_arg {
  const char *name;
  size_t name_len;
  const char *value;
} query_arg_t;

struct ak_admin_query {
  char *text;
  size_t n;
  query_arg_t args[];
};

static int hexdigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

size_t ak_admin_unescape(char *s, size_t len, bool plus) {
  size_t o = 0;
  for (size_t i = 0; i < len; i++) {
    int hi, lo;
    if (plus && s[i] == '+') {
      s[o++] = ' ';
    } else if (s[i] == '%' && i + 2 < len && (hi = hexdigit(s[i + 1])) >= 0 && (lo = hexdigit(s[i + 2])) >= 0) {
      s[o++] = (char)(hi << 4 | lo);
      i += 2;
    } else {
      s[o++] = s[i];
    }
  }
  s[o] = 0;
  return o;
}

int ak_admin_call_query(ak_admin_call_t *call, const char *q, size_t len) {
  call->query = NULL;
  if (!q || !len) return 0;
  size_t n = 1;
  for (size_t i = 0; i < len; i++) n += q[i] == '&';
  struct ak_admin_query *aq = malloc(sizeof *aq + n * sizeof aq->args[0]);
  char *text = aq ? malloc(len + 1) : NULL;
  if (!text) {
    free(aq);
    return -1;
  }
  memcpy(text, q, len);
  text[len] = 0;
  aq->text = text;
  aq->n = 0;
  /* "a=1&b&c=" : a = "1", b without a value, c = "". An empty piece names nothing. */
  for (char *p = text, *end = text + len; p < end;) {
    char *amp = memchr(p, '&', (size_t)(end - p));
    char *stop = amp ? amp : end;
    *stop = 0;
    if (stop > p) {
      char *eq = memchr(p, '=', (size_t)(stop - p));
      query_arg_t *a = &aq->args[aq->n++];
      a->name = p;
      a->name_len = ak_admin_unescape(p, (size_t)((eq ? eq : stop) - p), true);
      a->value = NULL;
      if (eq) {
        ak_admin_unescape(eq + 1, (size_t)(stop - eq - 1), true);
        a->value = eq + 1;
      }
    }
    p = stop + 1;
  }
  call->query = aq;
  return 0;
}

void ak_admin_call_release(ak_admin_call_t *call) {
  if (!call->query) return;
  free(call->query->text);
  free(call->query);
  call->query = NULL;
}

static bool same_name(const char *a, const char *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
    if (x >= 'A' && x <= 'Z') x = (unsigned char)(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = (unsigned char)(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

const char *ak_admin_arg(ak_admin_call_t *call, const char *key) {
  if (!call->query || !key) return NULL;
  size_t kl = strlen(key);
  for (size_t i = 0; i < call->query->n; i++) {
    const query_arg_t *a = &call->query->args[i];
    if (a->name_len == kl && same_name(a->name, key, kl)) return a->value;
  }
  return NULL;
}

bool ak_admin_parse_i64(const char *s, int64_t *out) {
  if (!s || !*s) return false;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || (s[0] != '-' && (s[0] < '0' || s[0] > '9'))) return false;
  *out = v;
  return true;
}

/* API-managed sources come and go: the tenant is copied out of the version looked up
 * (ids are at most 64 characters) into this thread's buffer, valid until its next call. */
const char *ak_admin_source_tenant(ak_instance_t *inst, const char *source_id) {
  static __thread char tenant[80];
  ak_source_t *s = source_id && inst->sources ? ak_sources_get(inst->sources, source_id, strlen(source_id)) : NULL;
  if (!s) return NULL;
  snprintf(tenant, sizeof tenant, "%s", s->cfg.tenant);
  ak_source_release(s);
  return tenant;
}

bool ak_admin_may_source(ak_admin_call_t *call, const char *source_id, const char **tenant) {
  const char *t = ak_admin_source_tenant(call->inst, source_id);
  if (tenant) *tenant = t;
  return !t || ak_tenant_scope_has(call->scope, t, strlen(t));
}
