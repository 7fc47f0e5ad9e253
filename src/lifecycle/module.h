/* The `lifecycle` section and the publisher's lifecycle (inst->lifecycle): present with
 * sinks means lifecycle events are on (docs/lifecycle.md). */
#ifndef AK_LIFECYCLE_MODULE_H
#define AK_LIFECYCLE_MODULE_H

#include <jansson.h>
#include "core/module.h"

typedef struct ak_lifecycle_cfg {
  const json_t *sinks; /* lifecycle.sinks (checked), NULL when the section is absent or null */
} ak_lifecycle_cfg_t;

extern const ak_module_t ak_mod_lifecycle;

#endif
