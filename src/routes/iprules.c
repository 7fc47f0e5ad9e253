/* IP rules (iprules.h): parsed once into the 16-byte form of core/netaddr.h, matched by
 * a walk in order. The family of a rule is kept, so an IPv6 rule like ::/0 never matches
 * an IPv4 client through its mapped form. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "routes/iprules.h"

static const uint8_t mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static bool is_v4(const ak_netaddr_t *a) { return memcmp(a->a, mapped_prefix, 12) == 0; }

bool ak_iprules_parse_cidr(const char *s, ak_cidr_t *out, bool *v6, const char **why) {
  const char *w = NULL;
  if (!s || !*s) {
    *why = "must not be empty";
    return false;
  }
  if (!ak_netaddr_parse_cidr(s, out, &w)) {
    *why = w ? w : "is not an address or CIDR";
    return false;
  }
  *v6 = strchr(s, ':') != NULL;
  if (*v6 && out->bits >= 96 && is_v4(&out->net)) {
    *why = "is inside ::ffff:0:0/96 (IPv4-mapped): write the IPv4 CIDR instead";
    return false;
  }
  return true;
}

bool ak_iprule_matches(const ak_iprule_t *rule, const ak_netaddr_t *a) {
  if (rule->v6 == is_v4(a)) return false;
  return ak_netaddr_in(&rule->cidr, a);
}

int ak_iprules_eval(const ak_iprules_t *r, const ak_netaddr_t *a, bool *allow) {
  for (size_t i = 0; i < r->n; i++)
    if (ak_iprule_matches(&r->v[i], a)) {
      *allow = r->v[i].allow;
      return (int)i;
    }
  *allow = r->def_allow;
  return -1;
}

void ak_iprules_free(ak_iprules_t *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n; i++) free(r->v[i].text);
  free(r->v);
  free(r);
}

static int action_of(const json_t *v, bool *allow) {
  const char *s = json_string_value(v);
  if (s && !strcmp(s, "allow")) *allow = true;
  else if (s && !strcmp(s, "deny")) *allow = false;
  else return -1;
  return 0;
}

ak_iprules_t *ak_iprules_from_json(const json_t *j, bool require_both, char *err, size_t errlen) {
  if (!json_is_object(j)) {
    snprintf(err, errlen, "expected an object {default, rules}");
    return NULL;
  }
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)j, k, v) {
    if (strcmp(k, "default") && strcmp(k, "rules")) {
      snprintf(err, errlen, "unknown key \"%.64s\"", k);
      return NULL;
    }
  }
  json_t *def = json_object_get(j, "default"), *rules = json_object_get(j, "rules");
  if (require_both && (!def || !rules)) {
    snprintf(err, errlen, "%s: required", !def ? "default" : "rules");
    return NULL;
  }
  ak_iprules_t *r = calloc(1, sizeof *r);
  if (!r) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  r->def_allow = true;
  if (def && !json_is_null(def) && action_of(def, &r->def_allow) != 0) {
    snprintf(err, errlen, "default: expected allow or deny");
    goto bad;
  }
  if (rules && !json_is_null(rules)) {
    if (!json_is_array(rules)) {
      snprintf(err, errlen, "rules: expected a list");
      goto bad;
    }
    size_t n = json_array_size(rules);
    if (n > AK_IPRULES_MAX) {
      snprintf(err, errlen, "rules: at most %d", AK_IPRULES_MAX);
      goto bad;
    }
    r->v = calloc(n ? n : 1, sizeof *r->v);
    if (!r->v) {
      snprintf(err, errlen, "out of memory");
      goto bad;
    }
    for (size_t i = 0; i < n; i++) {
      json_t *e = json_array_get(rules, i);
      if (!json_is_object(e)) {
        snprintf(err, errlen, "rules[%zu]: expected an object {action, cidr}", i);
        goto bad;
      }
      json_object_foreach(e, k, v) {
        if (strcmp(k, "action") && strcmp(k, "cidr")) {
          snprintf(err, errlen, "rules[%zu]: unknown key \"%.64s\"", i, k);
          goto bad;
        }
      }
      ak_iprule_t *ru = &r->v[r->n];
      if (action_of(json_object_get(e, "action"), &ru->allow) != 0) {
        snprintf(err, errlen, "rules[%zu].action: expected allow or deny", i);
        goto bad;
      }
      const char *c = json_string_value(json_object_get(e, "cidr")), *why = NULL;
      if (!c) {
        snprintf(err, errlen, "rules[%zu].cidr: expected a string", i);
        goto bad;
      }
      if (!ak_iprules_parse_cidr(c, &ru->cidr, &ru->v6, &why)) {
        snprintf(err, errlen, "rules[%zu].cidr: \"%.64s\" %s", i, c, why);
        goto bad;
      }
      if (!(ru->text = strdup(c))) {
        snprintf(err, errlen, "out of memory");
        goto bad;
      }
      r->n++;
    }
  }
  return r;
bad:
  ak_iprules_free(r);
  return NULL;
}

ak_iprules_t *ak_iprules_copy(const ak_iprules_t *s) {
  if (!s) return NULL;
  ak_iprules_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->def_allow = s->def_allow;
  r->v = calloc(s->n ? s->n : 1, sizeof *r->v);
  if (!r->v) {
    free(r);
    return NULL;
  }
  for (; r->n < s->n; r->n++) {
    r->v[r->n] = s->v[r->n];
    if (!(r->v[r->n].text = strdup(s->v[r->n].text))) {
      ak_iprules_free(r);
      return NULL;
    }
  }
  return r;
}

json_t *ak_iprules_to_json(const ak_iprules_t *r) {
  json_t *rules = json_array();
  for (size_t i = 0; r && i < r->n; i++)
    json_array_append_new(rules, json_pack("{s:s,s:s}", "action", r->v[i].allow ? "allow" : "deny", "cidr", r->v[i].text));
  return json_pack("{s:s,s:o}", "default", !r || r->def_allow ? "allow" : "deny", "rules", rules);
}
