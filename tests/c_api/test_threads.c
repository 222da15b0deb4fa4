/* tpar's C ABI from two threads, as a C host uses it: tickets waited on a thread other
 * than the one that calls, while that one keeps calling (tpar.h, THREADS), and
 * tpar_comm_abort from another thread (a ready point that never comes).
 *
 *   deferred tickets waited on a second thread: two devices, depth 8, 80 calls of 256
 *     values each into buffers of their own, two of every three with TPAR_ALLREDUCE_DEFER;
 *     each ticket goes to a second thread that waits on it (tpar_ticket_wait) while the
 *     first thread makes the next calls. Every one of the 160 results must be exact, and
 *     ThreadSanitizer (scripts/sanitize.sh thread) must report nothing: a wait on a
 *     deferred ticket submits the calls deferred before it, on the waiting thread, under
 *     the communicator's own lock.
 *   abort: calls whose ready point never comes, one waited on another thread, one
 *     deferred, and the calling thread blocked in tpar_allreduce for a slot set still in
 *     use; tpar_comm_abort from a third thread ends all of them with TPAR_ERROR_ABORTED
 *     well within the communicator's timeout, which is long; the communicator reports the
 *     abort, refuses new calls, and is destroyed without waiting out its timeout.
 *
 * Usage: test_threads [deferred|abort] (both when none is named). Exit code 0 only when
 * every check passed and the validation layer reported no error. */
#define _POSIX_C_SOURCE 200809L

#include "support.h"

enum { CALLS = 80, VALUES = 256, DEVICES = 2 };

/* Call c's input on device d: integers, different for every call, so that a result that
 * is another call's, or half of one, shows. */
static float call_value(int call, int device, size_t i) {
  return (float)((int)((i * 7 + (size_t)device * 13 + (size_t)call * 5) % 61) - 30);
}

/* ---- A queue of tickets to the waiting thread --------------------------------------- */

typedef struct waiter {
  pthread_mutex_t mutex;
  pthread_cond_t cv;
  tpar_ticket* tickets[CALLS];
  int pushed, taken, closed;
  int waited, failed; /* tickets waited on, and of those, waits that did not succeed */
  tpar_result first_failure;
  char message[512];
} waiter;

static void waiter_push(waiter* w, tpar_ticket* t) {
  pthread_mutex_lock(&w->mutex);
  w->tickets[w->pushed++] = t;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mutex);
}

static void waiter_close(waiter* w) {
  pthread_mutex_lock(&w->mutex);
  w->closed = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mutex);
}

static void* waiter_run(void* arg) {
  waiter* w = arg;
  for (;;) {
    tpar_ticket* t;
    tpar_result r;
    pthread_mutex_lock(&w->mutex);
    while (w->taken == w->pushed && !w->closed) pthread_cond_wait(&w->cv, &w->mutex);
    if (w->taken == w->pushed) {
      pthread_mutex_unlock(&w->mutex);
      return NULL;
    }
    t = w->tickets[w->taken++];
    pthread_mutex_unlock(&w->mutex);
    r = tpar_ticket_wait(t, TPAR_TIMEOUT_DEFAULT);
    pthread_mutex_lock(&w->mutex);
    ++w->waited;
    if (r != TPAR_SUCCESS && !w->failed++) {
      w->first_failure = r;
      snprintf(w->message, sizeof w->message, "%s", tpar_last_error_message());
    }
    pthread_mutex_unlock(&w->mutex);
    tpar_ticket_free(t);
  }
}

/* ---- The group ---------------------------------------------------------------------- */

static tpar_group* make_group(tpar_device_info* infos) {
  tpar_group_options go;
  tpar_group* group = NULL;
  memset(&go, 0, sizeof go);
  go.virtual_count = DEVICES;
  go.validation = g_validation;
  go.no_sync_validation = 1; /* as tests/c_api/test_c_api.c, for the same reason */
  go.on_validation = on_validation;
  go.application_name = "tpar C threads test";
  if (!OK(tpar_group_create(&go, &group))) return NULL;
  for (int d = 0; d < DEVICES; ++d)
    if (!OK(tpar_group_device_info(group, (uint32_t)d, &infos[d]))) {
      tpar_group_destroy(group);
      return NULL;
    }
  return group;
}

/* ---- Deferred tickets waited on a second thread ------------------------------------- */

static int test_deferred(tpar_group* group, const tpar_device_info* infos, tpar_sync sync) {
  static host_buffer bufs[CALLS][DEVICES];
  tpar_buffer_span spans[DEVICES];
  tpar_comm_options co;
  tpar_comm* comm = NULL;
  tpar_comm_info info;
  waiter w;
  pthread_t thread;
  int made = 0, bad = 0, calls = 0;

  memset(&w, 0, sizeof w);
  pthread_mutex_init(&w.mutex, NULL);
  pthread_cond_init(&w.cv, NULL);
  for (int c = 0; c < CALLS; ++c)
    for (int d = 0; d < DEVICES; ++d) {
      REQUIRE(buffer_create(&bufs[c][d], infos[d].physical, infos[d].device, VALUES * sizeof(float)));
      for (size_t i = 0; i < VALUES; ++i) bufs[c][d].data[i] = call_value(c, d, i);
      ++made;
    }
  memset(&co, 0, sizeof co);
  co.sync = sync;
  co.depth = 8;
  co.timeout_ns = test_timeout_ns;
  REQUIRE(OK(tpar_comm_create(group, &co, &comm)));
  CHECK(OK(tpar_comm_get_info(comm, &info)));
  printf("  sync %s, depth 8, %d calls of %d values, two of three deferred\n",
         info.sync == TPAR_SYNC_NATIVE ? "NativeImport" : "ProxyBridge", CALLS, VALUES);
  REQUIRE(pthread_create(&thread, NULL, waiter_run, &w) == 0);
  for (int c = 0; c < CALLS; ++c) {
    tpar_allreduce_args args;
    tpar_ticket* t = NULL;
    memset(&args, 0, sizeof args);
    if (c % 3 != 2) args.flags = TPAR_ALLREDUCE_DEFER;
    for (int d = 0; d < DEVICES; ++d) {
      spans[d].buffer = bufs[c][d].buffer;
      spans[d].offset = 0;
      spans[d].count = VALUES;
      spans[d].buffer_size = bufs[c][d].size;
    }
    if (!OK(tpar_allreduce(comm, spans, DEVICES, &args, &t))) break;
    ++calls;
    waiter_push(&w, t);
  }
  waiter_close(&w);
  pthread_join(thread, NULL);
  CHECK(calls == CALLS);
  CHECK(w.waited == calls);
  if (w.failed) fprintf(stderr, "  %d waits failed, the first with %s: %s\n", w.failed, tpar_result_string(w.first_failure), w.message);
  CHECK(w.failed == 0);
  CHECK(OK(tpar_comm_status(comm)));
  /* Every wait succeeded, so every result is in its buffers: each must be exact. */
  for (int c = 0; c < calls; ++c)
    for (int d = 0; d < DEVICES; ++d) {
      int wrong = 0;
      for (size_t i = 0; i < VALUES; ++i) {
        float want = 0.0f;
        for (int s = 0; s < DEVICES; ++s) want += call_value(c, s, i);
        if (bufs[c][d].data[i] != want) {
          if (!wrong)
            fprintf(stderr, "  call %d (%s), device %d, value %zu: %g, expected %g\n", c, c % 3 != 2 ? "deferred" : "submitted", d, i,
                    (double)bufs[c][d].data[i], (double)want);
          ++wrong;
        }
      }
      bad += wrong != 0;
    }
  if (bad) fprintf(stderr, "  %d of the %d results are wrong although every wait returned success\n", bad, calls * DEVICES);
  CHECK(bad == 0);
  tpar_comm_destroy(comm);
  for (int c = 0; c < CALLS; ++c)
    for (int d = 0; d < DEVICES; ++d)
      if (made-- > 0) buffer_destroy(&bufs[c][d]);
  pthread_cond_destroy(&w.cv);
  pthread_mutex_destroy(&w.mutex);
  return 1;
}

/* ---- Abort ------------------------------------------------------------------------- */

typedef struct abort_waits {
  tpar_ticket* tickets[2];
  tpar_result results[2];
  double ended[2]; /* now_s() when each wait returned */
} abort_waits;

static void* wait_both(void* arg) {
  abort_waits* a = arg;
  for (int i = 0; i < 2; ++i) {
    a->results[i] = tpar_ticket_wait(a->tickets[i], TPAR_TIMEOUT_DEFAULT);
    a->ended[i] = now_s();
  }
  return NULL;
}

typedef struct aborter {
  tpar_comm* comm;
  tpar_result result;
  double at; /* now_s() just before tpar_comm_abort */
} aborter;

static void* abort_soon(void* arg) {
  aborter* a = arg;
  const struct timespec pause = {0, 300 * 1000 * 1000};
  nanosleep(&pause, NULL); /* the calling thread is blocked in its third call by then */
  a->at = now_s();
  a->result = tpar_comm_abort(a->comm);
  return NULL;
}

/* What the calls behind the point use stays alive, and reachable, to the end: device 0's
 * queue still holds their batches (static, so LeakSanitizer sees it kept, not lost). */
static host_buffer g_abort_buffers[3][DEVICES];
static VkSemaphore g_never;

static int test_abort(tpar_group* group, const tpar_device_info* infos) {
  host_buffer (*bufs)[DEVICES] = g_abort_buffers;
  tpar_buffer_span spans[3][DEVICES];
  tpar_timeline_point ready[DEVICES];
  tpar_allreduce_args args;
  tpar_comm_options co;
  tpar_comm* comm = NULL;
  tpar_ticket *refused = NULL, *blocked = NULL;
  abort_waits waits;
  aborter ab;
  pthread_t waiter_thread, abort_thread;
  const VkSemaphore never = g_never = timeline_create(infos[0].device, 0);
  uint32_t is_ready = 7;
  tpar_result third;
  double returned, destroy_began, destroyed;
  const double bound = 10.0; /* seconds after the abort: far below the timeout, far above a loaded machine's delays */

  REQUIRE(never != VK_NULL_HANDLE);
  memset(&waits, 0, sizeof waits);
  memset(&ab, 0, sizeof ab);
  for (int c = 0; c < 3; ++c)
    for (int d = 0; d < DEVICES; ++d) {
      REQUIRE(buffer_create(&bufs[c][d], infos[d].physical, infos[d].device, VALUES * sizeof(float)));
      for (size_t i = 0; i < VALUES; ++i) bufs[c][d].data[i] = call_value(c, d, i);
      spans[c][d].buffer = bufs[c][d].buffer;
      spans[c][d].offset = 0;
      spans[c][d].count = VALUES;
      spans[c][d].buffer_size = bufs[c][d].size;
    }
  memset(&co, 0, sizeof co);
  co.sync = TPAR_SYNC_PROXY;
  co.depth = 2;
  co.timeout_ns = test_timeout_ns; /* 60 s: the abort, not the timeout, must end everything */
  REQUIRE(OK(tpar_comm_create(group, &co, &comm)));
  memset(ready, 0, sizeof ready);
  ready[0].semaphore = never;
  ready[0].value = 1;
  memset(&args, 0, sizeof args);
  args.ready = ready;
  args.ready_count = DEVICES;
  /* Two calls behind a point that never comes, the second deferred: both slot sets in
   * use, so the third call blocks in tpar_allreduce until the first is done. */
  REQUIRE(OK(tpar_allreduce(comm, spans[0], DEVICES, &args, &waits.tickets[0])));
  args.flags = TPAR_ALLREDUCE_DEFER;
  REQUIRE(OK(tpar_allreduce(comm, spans[1], DEVICES, &args, &waits.tickets[1])));
  REQUIRE(pthread_create(&waiter_thread, NULL, wait_both, &waits) == 0);
  ab.comm = comm;
  REQUIRE(pthread_create(&abort_thread, NULL, abort_soon, &ab) == 0);
  args.flags = 0;
  third = tpar_allreduce(comm, spans[2], DEVICES, &args, &blocked);
  returned = now_s();
  printf("  the blocked call returned %.3f s after the abort: %s\n", returned - ab.at, tpar_last_error_message());
  pthread_join(abort_thread, NULL);
  pthread_join(waiter_thread, NULL);
  CHECK(ab.result == TPAR_SUCCESS);
  CHECK(third == TPAR_ERROR_ABORTED);
  CHECK(blocked == NULL);
  CHECK(ab.at > 0 && returned >= ab.at && returned - ab.at < bound);
  for (int i = 0; i < 2; ++i) {
    printf("  %s ticket's wait returned %s %.3f s after the abort\n", i ? "the deferred" : "the submitted",
           tpar_result_string(waits.results[i]), waits.ended[i] - ab.at);
    CHECK(waits.results[i] == TPAR_ERROR_ABORTED);
    CHECK(waits.ended[i] >= ab.at && waits.ended[i] - ab.at < bound);
  }
  FAILS(tpar_comm_status(comm), TPAR_ERROR_ABORTED);
  FAILS(tpar_ticket_ready(waits.tickets[0], &is_ready), TPAR_ERROR_ABORTED);
  CHECK(is_ready == 0);
  FAILS(tpar_ticket_wait(waits.tickets[1], TPAR_TIMEOUT_DEFAULT), TPAR_ERROR_ABORTED);
  FAILS(tpar_allreduce(comm, spans[2], DEVICES, NULL, &refused), TPAR_ERROR_FAILED);
  CHECK(refused == NULL);
  CHECK(OK(tpar_comm_abort(comm))); /* again: nothing more happens */
  FAILS(tpar_comm_abort(NULL), TPAR_ERROR_INVALID_ARGUMENT);
  /* Nothing of the calls reached a buffer: the first two wait on the point, the third was
   * refused with nothing enqueued. */
  for (int c = 0; c < 3; ++c)
    for (int d = 0; d < DEVICES; ++d) {
      int changed = 0;
      for (size_t i = 0; i < VALUES; ++i) changed += bufs[c][d].data[i] != call_value(c, d, i);
      CHECK(changed == 0);
    }
  tpar_ticket_free(waits.tickets[0]);
  tpar_ticket_free(waits.tickets[1]);
  destroy_began = now_s();
  tpar_comm_destroy(comm); /* its work on the queues stays behind the point, held in tpar's remains */
  destroyed = now_s();
  printf("  destroyed in %.3f s\n", destroyed - destroy_began);
  CHECK(destroyed - destroy_began < bound);
  /* Work already on device 0's queue still waits behind the point (Vulkan cannot take
   * a batch back): the host that gave up on the point signals it, as tpar.h says, or its
   * device never idles (NVIDIA's driver then waits for it at exit: this program hung
   * there on an H200, 2026-12-03). Then the queue drains, the next communicator made
   * frees what the first left, and the buffers and the point can go. */
  CHECK(timeline_signal(infos[0].device, never, 1) == VK_SUCCESS);
  for (int d = 0; d < DEVICES; ++d) CHECK(vkDeviceWaitIdle(infos[d].device) == VK_SUCCESS);
  {
    tpar_comm* next = NULL;
    memset(&co, 0, sizeof co);
    co.sync = TPAR_SYNC_PROXY;
    CHECK(OK(tpar_comm_create(group, &co, &next)));
    tpar_comm_destroy(next);
  }
  for (int c = 0; c < 3; ++c)
    for (int d = 0; d < DEVICES; ++d) buffer_destroy(&bufs[c][d]);
  vkDestroySemaphore(infos[0].device, never, NULL);
  g_never = VK_NULL_HANDLE;
  return 1;
}

/* ---- main --------------------------------------------------------------------------- */

int main(int argc, char** argv) {
  const char* verbose = getenv("TPAR_C_API_VERBOSE");
  const char* only = argc > 1 ? argv[1] : NULL;
  tpar_device_info infos[DEVICES];
  tpar_group* group;
  setvbuf(stdout, NULL, _IOLBF, 0);
  g_verbose = verbose && *verbose && strcmp(verbose, "0") != 0;
  if (argc > 2 || (only && strcmp(only, "deferred") != 0 && strcmp(only, "abort") != 0)) {
    fprintf(stderr, "usage: %s [deferred|abort]\n", argv[0]);
    return 2;
  }
  g_validation = getenv("TPAR_TEST_NO_VALIDATION") == NULL;
  if (g_validation && (g_layer_version = validation_layer_version()) == 0) {
    fprintf(stderr, "the Khronos validation layer is not installed (apt-get install vulkan-validationlayers)\n");
    return 1;
  }
  printf("tpar %s C API from two threads: %d virtual devices, validation layer %s\n", tpar_version_string(), DEVICES,
         g_validation ? "on" : "off (TPAR_TEST_NO_VALIDATION)");
  if (!OK(tpar_set_log_callback(on_log, NULL))) return 1;
  group = make_group(infos);
  if (!group) return 1;

  if (!only || strcmp(only, "deferred") == 0) {
    section("deferred tickets waited on a second thread, ProxyBridge");
    if (!test_deferred(group, infos, TPAR_SYNC_PROXY)) ++g_failures;
    section("deferred tickets waited on a second thread, automatic sync");
    if (!test_deferred(group, infos, TPAR_SYNC_AUTO)) ++g_failures;
  }
  if (!only || strcmp(only, "abort") == 0) {
    section("abort from a third thread: a ready point that never comes");
    if (!test_abort(group, infos)) ++g_failures;
  }
  section(NULL);
  tpar_group_destroy(group);
  CHECK(OK(tpar_set_log_callback(NULL, NULL)));

  pthread_mutex_lock(&g_log_mutex);
  printf("validation errors: %d; tpar log: %d warnings, %d errors\n", g_validation_errors, g_log_warnings, g_log_errors);
  if (g_validation_errors) ++g_failures;
  pthread_mutex_unlock(&g_log_mutex);
  printf("%s: %d checks, %d failed\n", g_failures ? "FAILED" : "PASSED", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
