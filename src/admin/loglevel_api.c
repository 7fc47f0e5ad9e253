/* The log level over the admin API (loglevel_api.h): GET and PUT /v1/log-level. Changes
 * are ordered by the listener's settings lock (call->settings_mu). Never changes the level
 * before its audit row is synced. */
#include <pthread.h>
#include <string.h>
#include "admin/loglevel_api.h"
#include "core/log.h"

void ak_loglevel_api_get(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  ak_admin_json(call, 200, json_pack("{s:s}", "level", ak_log_level_name(ak_log_get_level())));
}

/* PUT /v1/log-level {"level": "debug|info|warning|error"}: in force at once, for this
 * process (a restart reads log.level again). The level lives in memory, so the change is
 * made only after its audit row is synced; the same level again writes nothing. */
void ak_loglevel_api_put(ak_admin_call_t *call, const ak_admin_path_t *path) {
  (void)path;
  json_t *b = call->body_len ? json_loadb(call->body, call->body_len, JSON_REJECT_DUPLICATES, NULL) : NULL;
  const char *want = json_string_value(json_object_get(b, "level"));
  int level = -1;
  for (int i = AK_LOG_DEBUG; want && i <= AK_LOG_ERROR; i++)
    if (!strcmp(want, ak_log_level_name((ak_log_level_t)i))) level = i;
  bool extra = json_is_object(b) && json_object_size(b) != 1;
  json_decref(b);
  if (level < 0 || extra) {
    ak_admin_json(call, 400, json_pack("{s:s,s:s,s:s}", "error", "invalid_log_level", "field",
                                       extra ? "body" : "level", "message",
                                       "expected {\"level\": \"debug|info|warning|error\"}"));
    return;
  }
  pthread_mutex_lock(call->settings_mu);
  ak_log_level_t cur = ak_log_get_level();
  const char *before = ak_log_level_name(cur), *after = ak_log_level_name((ak_log_level_t)level);
  int rc = 0;
  if ((int)cur != level) {
    ak_audit_entry_t ae = {.who = call->who, .action = "log_level.put", .subject = "log_level", .before = before,
                           .before_len = strlen(before), .after = after, .after_len = strlen(after)};
    rc = ak_audit_record(call->inst->audit, &ae);
    if (rc == 0) {
      ak_log_set_level((ak_log_level_t)level);
      /* at warning, so the change shows at any level it leaves behind */
      ak_log(AK_LOG_WARNING, "admin", "log level changed", "from=%s to=%s actor=%s request_id=%s", before, after,
             call->who->actor, call->request_id);
    }
  }
  pthread_mutex_unlock(call->settings_mu);
  if (rc != 0) {
    ak_admin_error(call, 503, "store_unavailable");
    return;
  }
  ak_admin_json(call, 200, json_pack("{s:s,s:s}", "level", after, "previous", before));
}
