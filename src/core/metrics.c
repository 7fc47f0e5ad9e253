/* The metrics registry. A mutex guards only family/series creation and rendering;
 * updates are lock-free atomics on series the callers hold. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/buf.h"
#include "core/metrics.h"

const double ak_latency_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                    0.1,    0.25,  0.5,    1,     2.5,  5,     10};
const size_t ak_latency_nbounds = sizeof ak_latency_bounds / sizeof ak_latency_bounds[0];
const double ak_batch_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
const size_t ak_batch_nbounds = sizeof ak_batch_bounds / sizeof ak_batch_bounds[0];

struct ak_family {
  struct ak_family *next;
  char *name, *help;
  ak_metric_type_t type;
  char *labels[AK_METRICS_MAX_LABELS];
  size_t nlabels;
  double *bounds;
  size_t nbounds;
  ak_series_t *series;
  ak_metrics_t *owner;
};

struct ak_metrics {
  pthread_mutex_t mu;
  ak_family_t *families, *tail;
  _Atomic bool per_id; /* metrics.detail: source */
};

void ak_metrics_set_detail(ak_metrics_t *m, bool per_id) { atomic_store(&m->per_id, per_id); }
bool ak_metrics_per_id(const ak_metrics_t *m) { return atomic_load((_Atomic bool *)&m->per_id); }
const char *ak_metrics_id_label(const ak_metrics_t *m, const char *id) {
  return ak_metrics_per_id(m) && id ? id : AK_METRICS_ALL;
}

ak_metrics_t *ak_metrics_new(void) {
  ak_metrics_t *m = calloc(1, sizeof *m);
  if (m) pthread_mutex_init(&m->mu, NULL);
  return m;
}

static void series_free_all(ak_series_t *s) {
  while (s) {
    ak_series_t *sn = s->next;
    free(s->labels);
    free((void *)s->buckets);
    free(s);
    s = sn;
  }
}

void ak_metrics_free(ak_metrics_t *m) {
  if (!m) return;
  ak_family_t *f = m->families;
  while (f) {
    ak_family_t *fn = f->next;
    series_free_all(f->series);
    for (size_t i = 0; i < f->nlabels; i++) free(f->labels[i]);
    free(f->name);
    free(f->help);
    free(f->bounds);
    free(f);
    f = fn;
  }
  pthread_mutex_destroy(&m->mu);
  free(m);
}

void ak_metrics_family_clear(ak_family_t *f) {
  pthread_mutex_lock(&f->owner->mu);
  ak_series_t *s = f->series;
  f->series = NULL;
  pthread_mutex_unlock(&f->owner->mu);
  series_free_all(s);
}

ak_family_t *ak_metrics_family(ak_metrics_t *m, const char *name, const char *help,
                               ak_metric_type_t type, const char *const *labels,
                               const double *bounds, size_t nbounds) {
  pthread_mutex_lock(&m->mu);
  for (ak_family_t *f = m->families; f; f = f->next)
    if (strcmp(f->name, name) == 0) {
      pthread_mutex_unlock(&m->mu);
      return f;
    }
  ak_family_t *f = calloc(1, sizeof *f);
  f->name = strdup(name);
  f->help = strdup(help);
  f->type = type;
  f->owner = m;
  for (size_t i = 0; labels && labels[i] && i < AK_METRICS_MAX_LABELS; i++) f->labels[f->nlabels++] = strdup(labels[i]);
  if (type == AK_METRIC_HISTOGRAM) {
    f->bounds = malloc(sizeof(double) * (nbounds ? nbounds : 1));
    memcpy(f->bounds, bounds, sizeof(double) * nbounds);
    f->nbounds = nbounds;
  }
  if (m->tail) m->tail->next = f;
  else m->families = f;
  m->tail = f;
  pthread_mutex_unlock(&m->mu);
  return f;
}

static void escape_into(char *dst, size_t cap, size_t *pos, const char *v) {
  for (; *v && *pos + 3 < cap; v++) {
    if (*v == '"' || *v == '\\') dst[(*pos)++] = '\\';
    if (*v == '\n') {
      dst[(*pos)++] = '\\';
      dst[(*pos)++] = 'n';
      continue;
    }
    dst[(*pos)++] = *v;
  }
  dst[*pos] = 0;
}

ak_series_t *ak_metrics_series(ak_family_t *f, const char *const *values) {
  char buf[512];
  size_t pos = 0;
  buf[0] = 0;
  for (size_t i = 0; i < f->nlabels; i++) {
    pos += (size_t)snprintf(buf + pos, sizeof buf - pos, "%s%s=\"", i ? "," : "", f->labels[i]);
    escape_into(buf, sizeof buf, &pos, values && values[i] ? values[i] : "");
    if (pos + 2 < sizeof buf) buf[pos++] = '"';
    buf[pos] = 0;
  }
  ak_metrics_t *m = f->owner;
  pthread_mutex_lock(&m->mu);
  ak_series_t *s = f->series, *last = NULL;
  for (; s; last = s, s = s->next)
    if (strcmp(s->labels, buf) == 0) break;
  if (!s) {
    s = calloc(1, sizeof *s);
    s->labels = strdup(buf);
    s->fam = f;
    if (f->type == AK_METRIC_HISTOGRAM || f->type == AK_METRIC_SUMMARY)
      s->buckets = calloc(f->nbounds + 1, sizeof(uint64_t));
    if (last) last->next = s;
    else f->series = s;
  }
  pthread_mutex_unlock(&m->mu);
  return s;
}

ak_series_t *ak_metrics_instance_series(ak_metrics_t *m, const char *instance, const char *name, const char *help,
                                       ak_metric_type_t type) {
  const char *const labels[] = {"instance", NULL};
  const char *const values[] = {instance};
  return ak_metrics_series(ak_metrics_family(m, name, help, type, labels, NULL, 0), values);
}

void ak_counter_add(ak_series_t *s, uint64_t n) { atomic_fetch_add_explicit(&s->value, n, memory_order_relaxed); }
uint64_t ak_counter_get(const ak_series_t *s) { return atomic_load((_Atomic uint64_t *)&s->value); }

static uint64_t dbits(double v) {
  uint64_t b;
  memcpy(&b, &v, sizeof b);
  return b;
}
static double bitsd(uint64_t b) {
  double v;
  memcpy(&v, &b, sizeof v);
  return v;
}

void ak_gauge_set(ak_series_t *s, double v) { atomic_store(&s->value, dbits(v)); }
double ak_gauge_get(const ak_series_t *s) { return bitsd(atomic_load((_Atomic uint64_t *)&s->value)); }

void ak_histogram_observe(ak_series_t *s, double v) {
  const ak_family_t *f = s->fam;
  size_t i = 0;
  while (i < f->nbounds && v > f->bounds[i]) i++;
  atomic_fetch_add_explicit(&s->buckets[i], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&s->count, 1, memory_order_relaxed);
  uint64_t old = atomic_load(&s->sum_bits);
  while (!atomic_compare_exchange_weak(&s->sum_bits, &old, dbits(bitsd(old) + v))) {
  }
}

static void fmt_double(char *out, size_t n, double v) {
  if (isinf(v)) snprintf(out, n, v > 0 ? "+Inf" : "-Inf");
  else if (v == floor(v) && fabs(v) < 1e15) snprintf(out, n, "%.0f", v);
  else snprintf(out, n, "%.9g", v);
}

char *ak_metrics_render(ak_metrics_t *m, size_t *len) {
  ak_buf_t b = AK_BUF_INIT;
  ak_buf_reserve(&b, 8192);
  static const char *tn[] = {"counter", "gauge", "histogram", "summary"};
  pthread_mutex_lock(&m->mu);
  for (ak_family_t *f = m->families; f; f = f->next) {
    ak_buf_printf(&b, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, tn[f->type]);
    for (ak_series_t *s = f->series; s; s = s->next) {
      const char *open = s->labels[0] ? "{" : "", *close = s->labels[0] ? "}" : "";
      char num[64];
      if (f->type == AK_METRIC_COUNTER) {
        ak_buf_printf(&b, "%s%s%s%s %llu\n", f->name, open, s->labels, close,
                  (unsigned long long)atomic_load(&s->value));
      } else if (f->type == AK_METRIC_GAUGE) {
        fmt_double(num, sizeof num, ak_gauge_get(s));
        ak_buf_printf(&b, "%s%s%s%s %s\n", f->name, open, s->labels, close, num);
      } else {
        uint64_t cum = 0;
        const char *sep = s->labels[0] ? "," : "";
        for (size_t i = 0; f->type == AK_METRIC_HISTOGRAM && i <= f->nbounds; i++) {
          cum += atomic_load(&s->buckets[i]);
          if (i < f->nbounds) fmt_double(num, sizeof num, f->bounds[i]);
          else snprintf(num, sizeof num, "+Inf");
          ak_buf_printf(&b, "%s_bucket{%s%sle=\"%s\"} %llu\n", f->name, s->labels, sep, num, (unsigned long long)cum);
        }
        fmt_double(num, sizeof num, bitsd(atomic_load(&s->sum_bits)));
        ak_buf_printf(&b, "%s_sum%s%s%s %s\n", f->name, open, s->labels, close, num);
        ak_buf_printf(&b, "%s_count%s%s%s %llu\n", f->name, open, s->labels, close,
                  (unsigned long long)atomic_load(&s->count));
      }
    }
  }
  pthread_mutex_unlock(&m->mu);
  return ak_buf_take(&b, len);
}
