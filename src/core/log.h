/* Structured logging: one logfmt event per line on stderr. Owns the level threshold
 * (the process's one logger; changed at runtime by the admin API later). Never formats
 * a secret: callers pass only ids, names, sizes and reasons. */
#ifndef AK_CORE_LOG_H
#define AK_CORE_LOG_H

#include "core/module.h"

typedef enum { AK_LOG_DEBUG = 0, AK_LOG_INFO = 1, AK_LOG_WARNING = 2, AK_LOG_ERROR = 3 } ak_log_level_t;

/* The `log` section; its open sets the process's level. */
typedef struct ak_log_cfg {
  ak_log_level_t level;
} ak_log_cfg_t;
extern const ak_module_t ak_mod_log;

void ak_log_set_level(ak_log_level_t level);
ak_log_level_t ak_log_get_level(void);
const char *ak_log_level_name(ak_log_level_t level);

/* fields: printf format producing `k=v k2=v2` (values with spaces must be quoted by the
 * caller with %s around ak_log_quote output, or avoided). */
void ak_log(ak_log_level_t level, const char *component, const char *msg, const char *fields, ...)
  __attribute__((format(printf, 4, 5)));

#endif
