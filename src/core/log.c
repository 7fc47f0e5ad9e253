/* logfmt lines on stderr, written with one write(2) each so concurrent threads never
 * interleave inside a line. Never blocks on anything but the write itself. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/instance.h"
#include "core/log.h"

static _Atomic int threshold = AK_LOG_INFO;

void ak_log_set_level(ak_log_level_t level) { atomic_store(&threshold, (int)level); }
ak_log_level_t ak_log_get_level(void) { return (ak_log_level_t)atomic_load(&threshold); }

const char *ak_log_level_name(ak_log_level_t level) {
  switch (level) {
    case AK_LOG_DEBUG: return "debug";
    case AK_LOG_INFO: return "info";
    case AK_LOG_WARNING: return "warning";
    default: return "error";
  }
}

void ak_log(ak_log_level_t level, const char *component, const char *msg, const char *fields, ...) {
  if ((int)level < atomic_load(&threshold)) return;
  char line[2048];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(line, sizeof line, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s component=%s msg=\"",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                   ts.tv_nsec / 1000000, ak_log_level_name(level), component);
  /* msg is ours (a constant), but escape quotes anyway so a line always parses */
  for (const char *p = msg; *p && n < (int)sizeof line - 4; p++) {
    if (*p == '"' || *p == '\\') line[n++] = '\\';
    line[n++] = (*p == '\n') ? ' ' : *p;
  }
  line[n++] = '"';
  if (fields && *fields && n < (int)sizeof line - 2) {
    line[n++] = ' ';
    va_list ap;
    va_start(ap, fields);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fields, ap);
    va_end(ap);
    if (m > 0) n += (m < (int)sizeof line - n - 1) ? m : (int)sizeof line - n - 2;
  }
  for (int i = 0; i < n; i++)
    if (line[i] == '\n') line[i] = ' ';
  line[n++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, (size_t)n);
  (void)w;
}

/* ------------------------------------------------------------------- the module ---- */

static const ak_opt_t log_rows[] = {
  {.key = "level", .type = AK_OPT_ENUM, .def = "info", .enum_vals = "debug|info|warning|error",
   .env = "ANKUSA_LOG_LEVEL", .doc = "lowest level written to stderr", AK_AT(ak_log_cfg_t, level)},
  {0},
};

static int log_open(ak_instance_t *inst, char **err) {
  (void)err;
  const ak_log_cfg_t *lc = ak_config_of(inst->cfg, &ak_mod_log);
  if (lc) ak_log_set_level(lc->level);
  return 0;
}

const ak_module_t ak_mod_log = {
  .name = "log",
  .section = "log",
  .doc = "logging",
  .options = log_rows,
  .cfg_size = sizeof(ak_log_cfg_t),
  .open = log_open,
};
