/* The backup section and its two modules (docs/backup.md): `restore`, before the store
 * opens, restores the newest backup into an empty store directory or refuses the boot;
 * `backup` uploads a checkpoint every backup.interval_ms, reads the newest back every
 * backup.verify_interval_ms and takes a last one on a clean stop. Plus the CLI's
 * `ankusa backup list|verify|now` and `ankusa restore --to DIR`. */
#ifndef AK_BACKUP_MODULE_H
#define AK_BACKUP_MODULE_H

#include <stdbool.h>
#include <stdint.h>
#include "core/config.h"
#include "core/module.h"

typedef struct ak_backup_cfg {
  bool enabled;
  int64_t interval_ms, keep, verify_interval_ms;
  const char *signing_key;
} ak_backup_cfg_t;

const ak_backup_cfg_t *ak_backup_cfg(const ak_config_t *cfg);

extern const ak_module_t ak_mod_restore; /* before ak_mod_store */
extern const ak_module_t ak_mod_backup;  /* after the modules whose last writes it must hold */

/* `ankusa backup list|verify|now` (args after "backup") and `ankusa restore --to DIR
 * [--id ID]` against cfg: an exit code. */
int ak_backup_cmd(const ak_config_t *cfg, int argc, char **argv);
int ak_restore_cmd(const ak_config_t *cfg, int argc, char **argv);

#endif
