/* Embedding nibble from C: open a GGUF file through the C API, run y = W x for one of its
 * tensors on the program's own thread pool (pthreads, passed to nibble as parallel_for), and
 * check the result against nibble_dequantize + a plain dot product.
 *
 *   cc -std=c99 embed.c $(pkg-config --cflags --libs nibble) -lpthread -o embed
 *   ./embed model.gguf [tensor-name]
 *
 * Without a tensor name the first 2-D tensor in a format nibble can multiply is used. The test
 * suite builds this file and runs it on tests/data/capi_small.gguf.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nibble/nibble.h>

/* ---- a small persistent thread pool ---- */

#define POOL_MAX_THREADS 16

typedef struct pool {
  pthread_t threads[POOL_MAX_THREADS];
  int nthreads;
  pthread_mutex_t call_mu; /* one parallel_for at a time */
  pthread_mutex_t mu;      /* guards everything below */
  pthread_cond_t work_cv, done_cv;
  void (*task)(void*, int64_t);
  void* task_ctx;
  int64_t n, next, done;
  int stop;
  long calls; /* parallel_for calls served, for the report */
} pool;

static void* pool_worker(void* arg) {
  pool* p = (pool*)arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->next >= p->n) pthread_cond_wait(&p->work_cv, &p->mu);
    if (p->stop) break;
    {
      const int64_t i = p->next++;
      void (*task)(void*, int64_t) = p->task;
      void* ctx = p->task_ctx;
      pthread_mutex_unlock(&p->mu);
      task(ctx, i);
      pthread_mutex_lock(&p->mu);
      if (++p->done == p->n) pthread_cond_signal(&p->done_cv);
    }
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

static int pool_init(pool* p, int nthreads) {
  int t;
  memset(p, 0, sizeof *p);
  if (nthreads < 1) nthreads = 1;
  if (nthreads > POOL_MAX_THREADS) nthreads = POOL_MAX_THREADS;
  pthread_mutex_init(&p->call_mu, NULL);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->work_cv, NULL);
  pthread_cond_init(&p->done_cv, NULL);
  for (t = 0; t < nthreads; ++t) {
    if (pthread_create(&p->threads[t], NULL, pool_worker, p) != 0) break;
    p->nthreads++;
  }
  return p->nthreads > 0 ? 0 : -1;
}

static void pool_destroy(pool* p) {
  int t;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->mu);
  for (t = 0; t < p->nthreads; ++t) pthread_join(p->threads[t], NULL);
  pthread_cond_destroy(&p->work_cv);
  pthread_cond_destroy(&p->done_cv);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->call_mu);
}

/* The nibble_parallel_for hook: run task(task_ctx, i) for i in [0, n) on the pool's workers and
 * return when all are done. */
static void pool_parallel_for(void* handle, int64_t n, void (*task)(void*, int64_t),
                              void* task_ctx) {
  pool* p = (pool*)handle;
  if (n <= 0) return;
  pthread_mutex_lock(&p->call_mu);
  pthread_mutex_lock(&p->mu);
  p->task = task;
  p->task_ctx = task_ctx;
  p->done = 0;
  p->next = 0;
  p->n = n;
  p->calls++;
  pthread_cond_broadcast(&p->work_cv);
  while (p->done < p->n) pthread_cond_wait(&p->done_cv, &p->mu);
  p->n = 0; /* nothing left to take */
  p->next = 0;
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_unlock(&p->call_mu);
}

/* ---- the example ---- */

#define CHECK(call)                                                                                \
  do {                                                                                             \
    nibble_status st_ = (call);                                                                    \
    if (st_ != NIBBLE_OK) {                                                                        \
      fprintf(stderr, "%s failed: %s: %s\n", #call, nibble_status_name(st_), nibble_last_error()); \
      goto done;                                                                                   \
    }                                                                                              \
  } while (0)

static int usable(const nibble_gguf_tensor* t) {
  return t->n_dims == 2 && t->format >= 0 && strcmp(nibble_format_name(t->format), "f32") != 0;
}

int main(int argc, char** argv) {
  nibble_gguf* file = NULL;
  nibble_gguf_tensor t;
  nibble_context ctx;
  pool workers;
  int have_pool = 0, rc = 1, isa = 0;
  float *x = NULL, *y = NULL, *y_default = NULL, *w = NULL;
  const char* arch = "?";
  int64_t i, r, c, index = -1;
  double worst = 0.0;

  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE.gguf [TENSOR]\n", argv[0]);
    return 2;
  }
  printf("nibble %s (header %d.%d.%d)\n", nibble_version(), NIBBLE_VERSION_MAJOR,
         NIBBLE_VERSION_MINOR, NIBBLE_VERSION_PATCH);
  CHECK(nibble_gguf_open(argv[1], &file));
  if (nibble_gguf_get_string(file, "general.architecture", &arch) != NIBBLE_OK) arch = "?";
  printf("%s: architecture %s, %lld tensors, %lld metadata keys\n", argv[1], arch,
         (long long)nibble_gguf_tensor_count(file), (long long)nibble_gguf_metadata_count(file));

  if (argc > 2) {
    CHECK(nibble_gguf_find_tensor(file, argv[2], &index));
    CHECK(nibble_gguf_tensor_info(file, index, &t));
    if (!usable(&t)) {
      fprintf(stderr, "tensor %s is not a 2-D tensor in a nibble weight format\n", argv[2]);
      goto done;
    }
  } else {
    for (i = 0; i < nibble_gguf_tensor_count(file) && index < 0; ++i) {
      CHECK(nibble_gguf_tensor_info(file, i, &t));
      if (usable(&t)) index = i;
    }
    if (index < 0) {
      fprintf(stderr, "no 2-D tensor in a nibble weight format\n");
      goto done;
    }
  }
  printf("tensor %s: %s, %lld x %lld\n", t.name, nibble_format_name(t.format), (long long)t.rows,
         (long long)t.cols);

  x = (float*)malloc((size_t)t.cols * sizeof(float));
  y = (float*)malloc((size_t)t.rows * sizeof(float));
  y_default = (float*)malloc((size_t)t.rows * sizeof(float));
  w = (float*)malloc((size_t)t.rows * (size_t)t.cols * sizeof(float));
  if (!x || !y || !y_default || !w) {
    fprintf(stderr, "out of memory\n");
    goto done;
  }
  for (c = 0; c < t.cols; ++c) x[c] = (float)sin(0.05 * (double)c + 0.3);

  if (pool_init(&workers, 4) != 0) {
    fprintf(stderr, "cannot start threads\n");
    goto done;
  }
  have_pool = 1;
  memset(&ctx, 0, sizeof ctx);          /* best ISA ... */
  ctx.threads = workers.nthreads;       /* split the rows for this many workers ... */
  ctx.parallel_for = pool_parallel_for; /* ... of our own pool */
  ctx.pool = &workers;
  CHECK(nibble_best_isa(&ctx, &isa));
  CHECK(nibble_gemv(&ctx, t.format, t.data, t.rows, t.cols, x, y));
  CHECK(nibble_gemv(NULL, t.format, t.data, t.rows, t.cols, x, y_default));
  printf("gemv on %s, %d pool threads, %ld parallel_for calls\n", nibble_isa_name(isa),
         workers.nthreads, workers.calls);

  if (t.rows * t.cols >= 65536 && workers.calls == 0) {
    fprintf(stderr, "the pool was never used\n");
    goto done;
  }
  /* Check: results do not depend on the pool, and match dequantize + dot within the error of
   * quantizing the activations to 8 bits. */
  CHECK(nibble_dequantize(t.format, t.data, t.rows, t.cols, w));
  for (r = 0; r < t.rows; ++r) {
    double ref = 0.0, mag = 0.0, err;
    for (c = 0; c < t.cols; ++c) {
      ref += (double)w[r * t.cols + c] * (double)x[c];
      mag += fabs((double)w[r * t.cols + c] * (double)x[c]);
    }
    if (memcmp(&y[r], &y_default[r], sizeof(float)) != 0) {
      fprintf(stderr, "row %lld: own pool %.9g != default pool %.9g\n", (long long)r, y[r],
              y_default[r]);
      goto done;
    }
    err = fabs((double)y[r] - ref) / (mag + 1e-30);
    if (err > worst) worst = err;
    if (err > 1e-2) {
      fprintf(stderr, "row %lld: gemv %.9g vs dequantize+dot %.9g\n", (long long)r, y[r], ref);
      goto done;
    }
  }
  printf("embed ok: %lld rows match dequantize + dot (worst relative error %.2e)\n",
         (long long)t.rows, worst);
  rc = 0;
done:
  if (have_pool) pool_destroy(&workers);
  free(x);
  free(y);
  free(y_default);
  free(w);
  nibble_gguf_close(file);
  return rc;
}
