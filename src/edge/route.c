/* Catch-URL resolution. Empty path segments are dropped (as the Elixir router does);
 * segments are compared raw: the listener does not percent-decode, so "%2F" or "a%2Fb"
 * never matches a source id. */
#include <string.h>
#include "edge/route.h"

bool ak_tenant_valid(const char *s, size_t len) {
  if (len == 0 || len > 64) return false;
  for (size_t i = 0; i < len; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  }
  return true;
}

bool ak_header_value_ok(const char *s, size_t len) {
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!(c == '\t' || (c >= 0x20 && c <= 0x7E))) return false;
  }
  return true;
}

/* next non-empty segment starting at *p; returns its length, 0 at the end */
static size_t next_seg(const char **p, const char **seg) {
  const char *s = *p;
  while (*s == '/') s++;
  const char *e = s;
  while (*e && *e != '/') e++;
  *seg = s;
  *p = e;
  return (size_t)(e - s);
}

ak_route_status_t ak_route_parse(const ak_http_cfg_t *hc, const char *path, ak_route_t *out) {
  memset(out, 0, sizeof *out);
  const char *p = path, *seg, *pre = hc->prefix, *pseg;
  /* every prefix part must match, in order */
  for (;;) {
    size_t pl = next_seg(&pre, &pseg);
    if (pl == 0) break;
    size_t sl = next_seg(&p, &seg);
    if (sl != pl || memcmp(seg, pseg, pl) != 0) return AK_ROUTE_NOT_FOUND;
  }
  const char *segs[3];
  size_t lens[3];
  int n = 0;
  for (;;) {
    size_t sl = next_seg(&p, &seg);
    if (sl == 0) break;
    if (n == 3) return AK_ROUTE_UNKNOWN_SOURCE;
    segs[n] = seg;
    lens[n++] = sl;
  }
  int want = hc->routing == AK_ROUTING_TENANT_PATH ? 2 : 1;
  if (n != want) return n == 0 && hc->prefix[0] == 0 ? AK_ROUTE_NOT_FOUND : AK_ROUTE_UNKNOWN_SOURCE;
  const char *src = segs[want - 1];
  size_t sl = lens[want - 1];
  if (!ak_tenant_valid(src, sl)) return AK_ROUTE_UNKNOWN_SOURCE; /* ids share the tenant alphabet */
  memcpy(out->source_id, src, sl);
  if (want == 2) {
    if (!ak_tenant_valid(segs[0], lens[0])) return AK_ROUTE_UNKNOWN_SOURCE;
    memcpy(out->url_tenant, segs[0], lens[0]);
  }
  return AK_ROUTE_OK;
}

ak_route_status_t ak_route_bind_source(const ak_http_cfg_t *hc, const ak_route_t *r, const ak_source_cfg_t *src,
                                       const char **tenant_out) {
  if (!src) return AK_ROUTE_UNKNOWN_SOURCE;
  const char *tenant = src->tenant;
  if (hc->routing == AK_ROUTING_TENANT_PATH) {
    if (strcmp(src->tenant, "default") == 0) tenant = r->url_tenant; /* shared source */
    else if (strcmp(src->tenant, r->url_tenant) != 0) return AK_ROUTE_UNKNOWN_SOURCE;
  }
  *tenant_out = tenant;
  return AK_ROUTE_OK;
}

ak_route_status_t ak_route_bind(const ak_http_cfg_t *hc, const ak_config_t *cfg, const ak_route_t *r,
                                const ak_source_cfg_t **src_out, const char **tenant_out) {
  const ak_source_cfg_t *src = ak_source_cfg_find(cfg, r->source_id);
  ak_route_status_t st = ak_route_bind_source(hc, r, src, tenant_out);
  if (st == AK_ROUTE_OK) *src_out = src;
  return st;
}
