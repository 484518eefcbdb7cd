/* mx_load.h: the load loops of `multiexport load` in C, for a native consumer that can run several requests at
 * once (header-only: only the programs that have a load loop include it, and they link with -pthread).
 *
 * The scenarios are multiexport's (multiexport/measure/load.py), after MLPerf Inference's LoadGen:
 *  - Offline: every lane calls back to back for --load-seconds; prints the calls per second.
 *  - Server: requests arrive at the offsets of --load-schedule (a .npy of float64 seconds, the Poisson schedule the
 *    Python harness draws, so both sides serve the same arrivals); a request waits in a FIFO queue until a lane is
 *    free; its latency runs from its scheduled arrival to its completion, written to --load-latencies (.npy of
 *    float64 ns, +inf for a request never run because the run passed its deadline: --load-slack x the schedule's
 *    length + 1 s).
 *  - MultiStream (--load-samples-per-query K): a query of K samples is issued when the previous one completed, its
 *    samples spread over the lanes; its latency runs from its issue to its last sample's completion. Queries for
 *    --load-seconds and at least --load-min-queries; the latencies go to --load-latencies.
 * A lane is one request in flight: a thread with its own context (the program's binding or request), calling
 * `call(context)` synchronously. `call` dies (mx_die) on a failure: a load loop that failed has no figure.
 */
#ifndef MX_LOAD_H
#define MX_LOAD_H

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "common/mx_npy.h"
#include "common/mx_util.h"

typedef struct {
  int lanes;              /* 0: no load loop */
  double seconds;         /* Offline and MultiStream length (default 2) */
  const char *schedule;   /* Server: the arrivals (.npy float64 s) */
  const char *latencies;  /* Server, MultiStream: where each request's (query's) latency goes (.npy float64 ns) */
  double slack;           /* Server: the deadline in schedule lengths (default 2, as the Python driver) */
  int samples_per_query;  /* MultiStream: K (0: not MultiStream) */
  int min_queries;        /* MultiStream: at least this many queries (default 100) */
} mx_load_flags;

#define MX_LOAD_USAGE                                                                                          \
  "  --load-lanes N: run a load loop instead (N requests in flight, one thread each), as multiexport load does:\n" \
  "    Offline (default): back to back for --load-seconds S (default 2), prints calls/s as JSON;\n"                \
  "    Server: --load-schedule FILE (.npy float64 arrival offsets in s) --load-latencies OUT (.npy float64 ns,\n"   \
  "    from each scheduled arrival to completion; +inf: past the deadline, --load-slack X schedule lengths + 1 s);\n" \
  "    MultiStream: --load-samples-per-query K --load-latencies OUT: a query of K samples issued when the last\n"   \
  "    completed, for S seconds and at least --load-min-queries (default 100) queries.\n"

static double mx_load_number(const char *flag, const char *value, double low, double high) {
  char *end = NULL;
  double v = strtod(value, &end);
  if (!*value || *end || !(v >= low && v <= high)) mx_die("%s | got '%s', expected a number in %g..%g", flag, value, low, high);
  return v;
}

/* An `extra` for mx_parse_options: the --load-* flags into `f` (1: taken, 0: not a load flag). */
static int mx_load_flag(const char *flag, const char *value, mx_load_flags *f) {
  if (strcmp(flag, "--load-lanes") == 0) f->lanes = (int)mx_load_number(flag, value, 1, 1024);
  else if (strcmp(flag, "--load-seconds") == 0) f->seconds = mx_load_number(flag, value, 1e-3, 86400);
  else if (strcmp(flag, "--load-schedule") == 0) f->schedule = value;
  else if (strcmp(flag, "--load-latencies") == 0) f->latencies = value;
  else if (strcmp(flag, "--load-slack") == 0) f->slack = mx_load_number(flag, value, 1, 1000);
  else if (strcmp(flag, "--load-samples-per-query") == 0) f->samples_per_query = (int)mx_load_number(flag, value, 1, 1 << 20);
  else if (strcmp(flag, "--load-min-queries") == 0) f->min_queries = (int)mx_load_number(flag, value, 1, 1 << 24);
  else return 0;
  return 1;
}

typedef void (*mx_load_call)(void *context);

/* The queue in front of the lanes: requests are released in index order; a lane takes the next one released. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t released_cv, completed_cv;
  size_t released, taken, completed;
  int closed;
  int64_t deadline_ns;      /* past it a lane runs no more requests (Server) */
  int64_t *done_ns;         /* per request: its completion (0: never run) */
  mx_load_call call;
} mx_load_queue;

typedef struct {
  mx_load_queue *queue;
  void *context;
  /* Offline */
  int64_t until_ns, last_ns;
  long calls;
} mx_load_lane;

static void *mx_load_serve(void *user) {
  mx_load_lane *lane = (mx_load_lane *)user;
  mx_load_queue *q = lane->queue;
  for (;;) {
    pthread_mutex_lock(&q->mu);
    while (q->taken >= q->released && !q->closed) pthread_cond_wait(&q->released_cv, &q->mu);
    if (q->taken >= q->released) {
      pthread_mutex_unlock(&q->mu);
      return NULL;
    }
    size_t index = q->taken++;
    pthread_mutex_unlock(&q->mu);
    int64_t now = mx_now_ns();
    if (!q->deadline_ns || now <= q->deadline_ns) {
      q->call(lane->context);
      now = mx_now_ns();
      if (q->done_ns) q->done_ns[index] = now;
    }
    pthread_mutex_lock(&q->mu);
    q->completed++;
    pthread_cond_signal(&q->completed_cv);
    pthread_mutex_unlock(&q->mu);
  }
}

static void *mx_load_back_to_back(void *user) {
  mx_load_lane *lane = (mx_load_lane *)user;
  while (mx_now_ns() < lane->until_ns) {
    lane->queue->call(lane->context);
    lane->calls++;
    lane->last_ns = mx_now_ns();
  }
  return NULL;
}

static void mx_load_sleep_until(int64_t when_ns) {
  struct timespec ts = {(time_t)(when_ns / 1000000000), (long)(when_ns % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
  }
}

static void mx_load_write(const char *path, const double *values, size_t n) {
  char err[MX_ERR];
  int64_t shape[1] = {(int64_t)n};
  if (mx_npy_write(path, "<f8", 1, shape, values, n * sizeof *values, err, sizeof err) != 0)
    mx_die("--load-latencies '%s' | %s", path, err);
}

static void mx_load_start(mx_load_lane *lanes, pthread_t *threads, int n, void *(*body)(void *)) {
  for (int k = 0; k < n; k++)
    if (pthread_create(&threads[k], NULL, body, &lanes[k]) != 0) mx_die("load loop | cannot start lane %d", k);
}

/* Runs the scenario `f` names over `n` lanes (contexts[k] is lane k's) and prints one JSON line:
 * {"consumer", "scenario", "lanes", "calls" (or "requests" / "queries"), "seconds", "calls_per_s", <extra>}. */
static void mx_load_run(const mx_load_flags *f, void **contexts, mx_load_call call, const char *consumer,
                        const char *extra_json) {
  int n = f->lanes;
  double seconds = f->seconds > 0 ? f->seconds : 2.0;
  mx_load_queue q;
  memset(&q, 0, sizeof q);
  pthread_mutex_init(&q.mu, NULL);
  pthread_cond_init(&q.released_cv, NULL);
  pthread_cond_init(&q.completed_cv, NULL);
  q.call = call;
  mx_load_lane *lanes = (mx_load_lane *)calloc((size_t)n, sizeof *lanes);
  pthread_t *threads = (pthread_t *)calloc((size_t)n, sizeof *threads);
  for (int k = 0; k < n; k++) {
    lanes[k].queue = &q;
    lanes[k].context = contexts[k];
  }
  if (f->schedule && f->samples_per_query) mx_die("--load-schedule | Server and MultiStream at once, expected one");
  if ((f->schedule || f->samples_per_query) && !f->latencies)
    mx_die("--load-latencies | missing, expected the file each request's latency goes to");
  if (f->schedule) { /* Server */
    mx_npy arrivals;
    char err[MX_ERR];
    if (mx_npy_read(f->schedule, &arrivals, err, sizeof err) != 0) mx_die("--load-schedule '%s' | %s", f->schedule, err);
    if (strcmp(arrivals.descr, "<f8") != 0 || arrivals.ndim != 1 || arrivals.shape[0] < 1)
      mx_die("--load-schedule '%s' | got %s of %d dimension(s), expected a 1-D float64 array of arrival offsets in s",
             f->schedule, arrivals.descr, arrivals.ndim);
    size_t count = (size_t)arrivals.shape[0];
    const double *offsets = (const double *)arrivals.data;
    int64_t *scheduled = (int64_t *)calloc(count, sizeof *scheduled);
    for (size_t i = 0; i < count; i++) {
      if (!(offsets[i] >= 0 && offsets[i] < 86400) || (i && offsets[i] < offsets[i - 1]))
        mx_die("--load-schedule '%s' | offset %zu is %g, expected ascending seconds >= 0", f->schedule, i, offsets[i]);
      scheduled[i] = (int64_t)(offsets[i] * 1e9);
    }
    q.done_ns = (int64_t *)calloc(count, sizeof *q.done_ns);
    int64_t start = mx_now_ns() + 5000000; /* 5 ms ahead, while the lanes start (as the Python driver) */
    q.deadline_ns = start + (int64_t)((f->slack > 0 ? f->slack : 2.0) * (double)scheduled[count - 1] + 1e9);
    mx_load_start(lanes, threads, n, mx_load_serve);
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); /* wake at the arrival, not up to 50 us after it */
    for (size_t i = 0; i < count;) {
      mx_load_sleep_until(start + scheduled[i]);
      size_t due = i + 1; /* every request whose arrival has passed: one wake-up releases them all */
      for (int64_t now = mx_now_ns(); due < count && start + scheduled[due] <= now;) due++;
      pthread_mutex_lock(&q.mu);
      q.released = due;
      if (due - i > 1) pthread_cond_broadcast(&q.released_cv);
      else pthread_cond_signal(&q.released_cv);
      pthread_mutex_unlock(&q.mu);
      i = due;
    }
    pthread_mutex_lock(&q.mu);
    q.closed = 1;
    pthread_cond_broadcast(&q.released_cv);
    pthread_mutex_unlock(&q.mu);
    for (int k = 0; k < n; k++) pthread_join(threads[k], NULL);
    double *latency = (double *)calloc(count, sizeof *latency);
    int64_t last = start;
    size_t run = 0;
    for (size_t i = 0; i < count; i++) {
      latency[i] = q.done_ns[i] ? (double)(q.done_ns[i] - (start + scheduled[i])) : INFINITY;
      if (q.done_ns[i]) run++;
      if (q.done_ns[i] > last) last = q.done_ns[i];
    }
    mx_load_write(f->latencies, latency, count);
    double span = (double)(last - start) / 1e9;
    printf("{\"consumer\": \"%s\", \"scenario\": \"server\", \"lanes\": %d, \"requests\": %zu, \"completed\": %zu, "
           "\"seconds\": %.6f, \"calls_per_s\": %.3f%s%s}\n",
           consumer, n, count, run, span, span > 0 ? (double)run / span : 0.0, *extra_json ? ", " : "", extra_json);
    free(latency);
    free(scheduled);
    free(q.done_ns);
    mx_npy_free(&arrivals);
  } else if (f->samples_per_query) { /* MultiStream */
    size_t k = (size_t)f->samples_per_query, cap = 1024, count = 0;
    int minimum = f->min_queries > 0 ? f->min_queries : 100;
    double *latency = (double *)malloc(cap * sizeof *latency);
    mx_load_start(lanes, threads, n, mx_load_serve);
    int64_t start = mx_now_ns(), until = start + (int64_t)(seconds * 1e9), now = start;
    while (now < until || count < (size_t)minimum) {
      int64_t issued = mx_now_ns();
      pthread_mutex_lock(&q.mu);
      q.released += k;
      pthread_cond_broadcast(&q.released_cv);
      while (q.completed < q.released) pthread_cond_wait(&q.completed_cv, &q.mu);
      pthread_mutex_unlock(&q.mu);
      now = mx_now_ns();
      if (count == cap) latency = (double *)realloc(latency, (cap *= 2) * sizeof *latency);
      latency[count++] = (double)(now - issued);
    }
    pthread_mutex_lock(&q.mu);
    q.closed = 1;
    pthread_cond_broadcast(&q.released_cv);
    pthread_mutex_unlock(&q.mu);
    for (int j = 0; j < n; j++) pthread_join(threads[j], NULL);
    mx_load_write(f->latencies, latency, count);
    double span = (double)(now - start) / 1e9;
    printf("{\"consumer\": \"%s\", \"scenario\": \"multistream\", \"lanes\": %d, \"queries\": %zu, "
           "\"samples_per_query\": %zu, \"seconds\": %.6f, \"calls_per_s\": %.3f%s%s}\n",
           consumer, n, count, k, span, span > 0 ? (double)(count * k) / span : 0.0, *extra_json ? ", " : "",
           extra_json);
    free(latency);
  } else { /* Offline */
    int64_t start = mx_now_ns();
    for (int j = 0; j < n; j++) lanes[j].until_ns = start + (int64_t)(seconds * 1e9);
    mx_load_start(lanes, threads, n, mx_load_back_to_back);
    long calls = 0;
    int64_t last = start;
    for (int j = 0; j < n; j++) {
      pthread_join(threads[j], NULL);
      calls += lanes[j].calls;
      if (lanes[j].last_ns > last) last = lanes[j].last_ns;
    }
    double span = (double)(last - start) / 1e9;
    printf("{\"consumer\": \"%s\", \"scenario\": \"offline\", \"lanes\": %d, \"calls\": %ld, \"seconds\": %.6f, "
           "\"calls_per_s\": %.3f%s%s}\n",
           consumer, n, calls, span, span > 0 ? (double)calls / span : 0.0, *extra_json ? ", " : "", extra_json);
  }
  fflush(stdout);
  pthread_mutex_destroy(&q.mu);
  pthread_cond_destroy(&q.released_cv);
  pthread_cond_destroy(&q.completed_cv);
  free(lanes);
  free(threads);
}

#endif
