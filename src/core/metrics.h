/* Metrics registry: counters, gauges, histograms and summaries (sum and count only) with fixed label sets, rendered in
 * the Prometheus text format. Owns the series; the hot path only does atomic adds on
 * pointers it looked up once. Never creates a series from unauthenticated input: label
 * values come from code (status codes, reason names), not from requests. */
#ifndef AK_CORE_METRICS_H
#define AK_CORE_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A summary is rendered as _sum and _count (no quantiles); observe it with ak_histogram_observe. */
typedef enum { AK_METRIC_COUNTER, AK_METRIC_GAUGE, AK_METRIC_HISTOGRAM, AK_METRIC_SUMMARY } ak_metric_type_t;

#define AK_METRICS_MAX_LABELS 4

typedef struct ak_metrics ak_metrics_t;
typedef struct ak_family ak_family_t;

typedef struct ak_series {
  struct ak_series *next;
  char *labels;              /* rendered `a="x",b="y"` */
  _Atomic uint64_t value;    /* counter: count; gauge: double bits */
  _Atomic uint64_t *buckets; /* histogram: cumulative counts per bound (+Inf last) */
  _Atomic uint64_t sum_bits; /* histogram: double bits of the sum */
  _Atomic uint64_t count;    /* histogram */
  const ak_family_t *fam;
} ak_series_t;

ak_metrics_t *ak_metrics_new(void);
void ak_metrics_free(ak_metrics_t *m);

/* label names: NULL-terminated list (may be empty). bounds: histogram upper bounds, sorted. */
ak_family_t *ak_metrics_family(ak_metrics_t *m, const char *name, const char *help,
                               ak_metric_type_t type, const char *const *labels,
                               const double *bounds, size_t nbounds);
/* Get or create the series for these label values (same count as the family's names). */
ak_series_t *ak_metrics_series(ak_family_t *f, const char *const *values);

/* Drop every series of a family (for top-N gauges whose label set changes). Only for a
 * family whose series pointers nobody else holds. */
void ak_metrics_family_clear(ak_family_t *f);

/* The one series of a family labelled only by instance: most gauges and counters. */
ak_series_t *ak_metrics_instance_series(ak_metrics_t *m, const char *instance, const char *name, const char *help,
                                       ak_metric_type_t type);

/* metrics.detail (the metrics section, core/gauges.c): at "source" the source_id and
 * tenant_id labels carry the ids; at "tenant" (the default) they carry AK_METRICS_ALL, so
 * the series count does not grow with the number of sources and tenants. */
#define AK_METRICS_ALL "_all"
void ak_metrics_set_detail(ak_metrics_t *m, bool per_id);
bool ak_metrics_per_id(const ak_metrics_t *m);
/* The value of a source_id or tenant_id label for this id at the node's detail. */
const char *ak_metrics_id_label(const ak_metrics_t *m, const char *id);

void ak_counter_add(ak_series_t *s, uint64_t n);
void ak_gauge_set(ak_series_t *s, double v);
double ak_gauge_get(const ak_series_t *s);
uint64_t ak_counter_get(const ak_series_t *s);
void ak_histogram_observe(ak_series_t *s, double v);

/* Prometheus text format 0.0.4; malloc'd, NULL out of memory. */
char *ak_metrics_render(ak_metrics_t *m, size_t *len);

extern const double ak_latency_bounds[];
extern const size_t ak_latency_nbounds;
extern const double ak_batch_bounds[];
extern const size_t ak_batch_nbounds;

#endif
