/* YAML text -> jansson tree for the config loader (part of the config module, hence the
 * ak_config_ prefix). Owns the scalar resolution rules only;
 * it knows nothing of the schema and never interpolates ${VAR} or reads the environment.
 *
 * Plain scalars resolve like the YAML 1.2 core schema, conservatively: ~, null, Null,
 * NULL and the empty plain scalar become JSON null; true/false (any of the three YAML
 * spellings) become booleans; canonical decimal integers that fit int64 become integers;
 * decimal floats become reals. Every other scalar, and every quoted one, stays a string,
 * so "4000" (quoted) and 4000 (plain) both reach the validator, which coerces; only the
 * way an error renders the value ("4000" vs 4000) differs. */
#ifndef AK_CORE_YAMLTREE_H
#define AK_CORE_YAMLTREE_H

#include <stddef.h>
#include <jansson.h>

/* Parse one YAML document whose top level is a mapping. An empty stream or an empty
 * document gives {}. Anchors, aliases, several documents, duplicate keys and non-scalar
 * keys are refused. 0 with *out (new reference); -1 with *err (malloc'd, one line,
 * naming line and column where libyaml gives them). */
int ak_config_yaml_parse(const char *text, size_t len, json_t **out, char **err);

#endif
