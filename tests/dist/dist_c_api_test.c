/* The C ABI's expert parallelism, run under mpirun (tests/dist/CMakeLists.txt: -np 2 and -np 4 on
 * this machine). Every rank loads its share of each model given; rank 0 drives a context over the
 * world and checks it against a context of its own over the whole model: the logits of a prompt,
 * of decode steps and after a truncation, greedy tokens and expert counts, all bit for bit; and,
 * with the dense weights on rank 0 only, a batching engine's tokens against one over the whole
 * model. Every
 * rank checks that it holds the weights every token needs and only its share of the experts.
 *
 *   dist_c_api_test MODEL...           the checks above; exit status non-zero on any failure
 *   dist_c_api_test --kill-rank1 MODEL rank 1 dies mid-generation: rank 0 must fail with an
 *                                      error within the timeout, not hang */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "moe_c.h"

static int failures = 0;
static int my_rank = -1;

static void check(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "rank %d: FAILED %s (%s)\n", my_rank, what, moe_last_error());
    ++failures;
  }
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct {
  int32_t tokens[64];
  int n;
} token_list;

static int keep_token(int32_t token, const char* piece, size_t len, void* user_data) {
  token_list* list = (token_list*)user_data;
  (void)piece;
  (void)len;
  if (token >= 0 && list->n < 64) list->tokens[list->n++] = token;
  return 1;
}

static moe_generate_params greedy(int32_t n, moe_sampling_params* sampling) {
  moe_generate_params g = moe_generate_default_params();
  *sampling = moe_sampling_default_params();
  sampling->temperature = 0;
  g.sampling = sampling;
  g.max_tokens = n;
  return g;
}

/* The logits of the last token of both contexts are the same bits. */
static void same_logits(moe_context* a, moe_context* b, const char* what) {
  const float *la = NULL, *lb = NULL;
  int32_t na = 0, nb = 0;
  check(moe_get_logits(a, &la, &na) == MOE_OK && moe_get_logits(b, &lb, &nb) == MOE_OK,
        "reading logits");
  check(na == nb && na > 0 && memcmp(la, lb, sizeof(float) * (size_t)na) == 0, what);
}

/* Rank 0: the context over the world against one over the whole model. */
static void drive(moe_dist* dist, moe_model* share, moe_model* whole, const moe_model_info* info) {
  moe_context_params cp = moe_context_default_params();
  cp.n_ctx = 128;
  cp.n_threads = 1;
  moe_context *world = NULL, *alone = NULL;
  check(moe_context_create(share, &cp, &world) == MOE_ERROR_INVALID_ARGUMENT,
        "a share of the experts refuses a context of its own");
  check(moe_dist_serve(dist, share, 1, 0) == MOE_ERROR_INVALID_ARGUMENT, "rank 0 does not serve");
  check(moe_dist_context_create(dist, share, &cp, &world) == MOE_OK, "context over the world");
  check(moe_context_create(whole, &cp, &alone) == MOE_OK, "context over the whole model");
  if (world == NULL || alone == NULL) return;

  int32_t prompt[13];
  for (int i = 0; i < 13; ++i) prompt[i] = (int32_t)((3 + i * 131) % info->n_vocab);
  check(moe_decode(world, prompt, 13) == MOE_OK && moe_decode(alone, prompt, 13) == MOE_OK,
        "prompt");
  same_logits(world, alone, "prompt logits");

  moe_sampling_params sw, sa;
  moe_generate_params gw = greedy(8, &sw), ga = greedy(8, &sa);
  token_list tw = {{0}, 0}, ta = {{0}, 0};
  check(moe_generate_tokens(world, NULL, 0, &gw, keep_token, &tw) == MOE_OK &&
            moe_generate_tokens(alone, NULL, 0, &ga, keep_token, &ta) == MOE_OK,
        "greedy generation");
  check(tw.n > 0 && tw.n == ta.n && memcmp(tw.tokens, ta.tokens, sizeof(int32_t) * tw.n) == 0,
        "greedy tokens");
  same_logits(world, alone, "logits after generation");
  moe_stats stats = moe_default_stats();
  check(moe_context_get_stats(world, &stats) == MOE_OK && stats.exchange_bytes > 0 &&
            stats.exchange_seconds > 0,
        "the exchanges are counted");

  size_t n_counts = (size_t)info->n_layer * (size_t)info->n_expert, len_w = 0, len_a = 0;
  int64_t* cw = calloc(n_counts, sizeof(int64_t));
  int64_t* ca = calloc(n_counts, sizeof(int64_t));
  check(moe_context_get_expert_counts(world, cw, n_counts, &len_w) == MOE_OK &&
            moe_context_get_expert_counts(alone, ca, n_counts, &len_a) == MOE_OK,
        "expert counts");
  check(len_w == len_a && memcmp(cw, ca, sizeof(int64_t) * len_w) == 0,
        "every choice counted once");
  free(cw);
  free(ca);

  check(moe_context_truncate(world, 6) == MOE_OK && moe_context_truncate(alone, 6) == MOE_OK,
        "truncation");
  int32_t next = prompt[12];
  check(moe_decode(world, &next, 1) == MOE_OK && moe_decode(alone, &next, 1) == MOE_OK,
        "decode after truncation");
  same_logits(world, alone, "logits after truncation");
  int32_t bad = info->n_vocab;
  check(moe_decode(world, &bad, 1) == MOE_ERROR_OUT_OF_RANGE, "a bad token is refused");
  check(moe_decode(world, &next, 1) == MOE_OK, "the world goes on after a refused token");
  moe_context_free(world);
  moe_context_free(alone);
}

/* Every rank: its share counts the whole model's parameters and holds the dense weights and
 * fewer than all experts. */
static void check_share(moe_model* share, const moe_model_info* whole, int size) {
  moe_model_info mine = moe_model_default_info();
  check(moe_model_get_info(share, &mine) == MOE_OK, "info of the share");
  check(mine.n_params_total == whole->n_params_total, "a share counts the whole model");
  check(mine.weight_bytes_total == whole->weight_bytes_total, "the whole model's bytes");
  check(whole->weight_bytes_held == whole->weight_bytes_total, "the whole model holds all");
  check(mine.weight_bytes_held < whole->weight_bytes_total, "a share holds fewer weights");
  check(mine.weight_bytes_held > whole->weight_bytes_total / (size + 1) / 2,
        "a share is not empty");
  printf("rank %d of %d: holds %.2f of %.2f MB of weights\n", my_rank, size,
         mine.weight_bytes_held / 1e6, whole->weight_bytes_total / 1e6);
}

/* A memory limit between a share's weights and the whole model's: the model does not load in
 * one process (MOE_MEMORY_FIT_ERROR) but loads spread over the ranks. */
static void check_fits_only_spread(moe_dist* dist, const char* path, moe_model* share,
                                   moe_model* whole, const moe_model_info* info) {
  moe_model_info mine = moe_model_default_info();
  moe_model_get_info(share, &mine);
  moe_model_params limited = moe_model_default_params();
  /* Loads keep a tenth more than the weights for the KV cache and activations. */
  limited.memory_limit_bytes =
      (uint64_t)((mine.weight_bytes_held + mine.weight_bytes_total) / 2 * 11 / 10);
  limited.memory_fit = MOE_MEMORY_FIT_ERROR;
  moe_model* too_big = NULL;
  check(moe_model_load(path, &limited, &too_big) == MOE_ERROR_OUT_OF_MEMORY,
        "the whole model does not fit the limit");
  moe_model_free(too_big);
  moe_model* fits = NULL;
  check(moe_dist_model_load(dist, path, &limited, NULL, &fits) == MOE_OK,
        "a share fits the same limit");
  /* And it runs: rank 0's context over it against the whole model's. */
  if (fits != NULL) {
    if (my_rank == 0) {
      drive(dist, fits, whole, info);
      check(moe_dist_stop_serving(dist) == MOE_OK, "stopping the limited model's serving");
    } else {
      check(moe_dist_serve(dist, fits, 1, 0) == MOE_OK, "serving the limited model");
    }
  }
  moe_model_free(fits);
}

/* Only rank 0 holds the dense weights (moe_dist_placement.dense_on_rank0): the others hold less
 * than a share with them, and rank 0's context is still the whole model's bit for bit. */
/* Greedy requests through an engine (submitted together, stepped by its own thread); their
 * tokens in got[request] (-1 past the last). */
static void engine_tokens(moe_engine* engine, int32_t got[4][8], int n_requests) {
  moe_request_id ids[4];
  moe_sampling_params sp;
  moe_generate_params g = greedy(8, &sp);
  for (int i = 0; i < n_requests; ++i) {
    int32_t prompt[6];
    for (int j = 0; j < 6; ++j) prompt[j] = 3 + (i * 131 + j * 17) % 200;
    moe_request_params rp = moe_request_default_params();
    rp.tokens = prompt;
    rp.n_tokens = (size_t)(3 + i);
    rp.generate = &g;
    check(moe_engine_submit(engine, &rp, NULL, NULL, &ids[i]) == MOE_OK, "submitting a request");
  }
  for (int i = 0; i < n_requests; ++i) {
    moe_request_result* r = NULL;
    memset(got[i], 0xff, sizeof(got[i]));
    if (moe_engine_wait(engine, ids[i], 60, &r) != MOE_OK) {
      check(0, "waiting for a request");
      continue;
    }
    size_t n = 0;
    const int32_t* t = moe_request_result_tokens(r, &n);
    check(n > 0 && n <= 8, "a request generates up to its 8 tokens");
    for (size_t j = 0; j < n && j < 8; ++j) got[i][j] = t[j];
    moe_request_result_free(r);
  }
}

/* Rank 0: a batching engine over the world gives its requests what an engine over the whole
 * model gives them. */
static void drive_engine(moe_dist* dist, moe_model* experts, moe_model* with_dense,
                         moe_model* whole) {
  moe_engine_params ep = moe_engine_default_params();
  ep.n_threads = 1;
  ep.n_ctx = 64;
  ep.max_step_tokens = 8; /* prompts in chunks beside the others' decode tokens */
  moe_engine* e = NULL;
  check(moe_dist_engine_create(dist, with_dense, &ep, &e) == MOE_ERROR_UNSUPPORTED && e == NULL,
        "an engine over ranks needs the dense weights on rank 0 only");
  check(moe_dist_engine_create(NULL, experts, &ep, &e) == MOE_ERROR_INVALID_ARGUMENT && e == NULL,
        "an engine over no world");
  check(moe_engine_create(experts, &ep, &e) != MOE_OK && e == NULL,
        "a share makes no engine of its own");
  int32_t want[4][8], got[4][8];
  check(moe_engine_create(whole, &ep, &e) == MOE_OK, "an engine over the whole model");
  if (e == NULL) return;
  engine_tokens(e, want, 4);
  moe_engine_free(e);
  e = NULL;
  check(moe_dist_engine_create(dist, experts, &ep, &e) == MOE_OK, "an engine over the world");
  if (e == NULL) return;
  engine_tokens(e, got, 4);
  moe_engine_stats st = moe_default_engine_stats();
  check(moe_engine_get_stats(e, &st) == MOE_OK && st.exchange_bytes > 0 &&
            st.mean_sequences_per_step > 1.0,
        "the engine's requests ran together and exchanged with the other ranks");
  moe_engine_free(e);
  check(memcmp(want, got, sizeof(want)) == 0, "the engine over the world gives the same tokens");
}

static void check_dense_on_rank0(moe_dist* dist, const char* path, moe_model* share,
                                 moe_model* whole, const moe_model_info* info) {
  moe_dist_placement placement = moe_dist_default_placement();
  check(placement.dense_on_rank0 == 0 && placement.expert_replicas == 0 &&
            placement.balance_profile_path == NULL,
        "placement defaults");
  placement.expert_replicas = -1;
  moe_model* bad = NULL;
  check(moe_dist_model_load_placed(dist, path, NULL, &placement, &bad) ==
                MOE_ERROR_INVALID_ARGUMENT &&
            bad == NULL,
        "negative replicas are refused");
  placement.expert_replicas = 0;
  placement.dense_on_rank0 = 1;
  moe_model* experts = NULL;
  check(moe_dist_model_load_placed(dist, path, NULL, &placement, &experts) == MOE_OK,
        "a share with the dense weights on rank 0 only");
  if (experts == NULL) return;
  moe_model_info with_dense = moe_model_default_info(), mine = moe_model_default_info();
  moe_model_get_info(share, &with_dense);
  moe_model_get_info(experts, &mine);
  check(mine.n_params_total == info->n_params_total, "it counts the whole model");
  if (my_rank == 0) {
    check(mine.weight_bytes_held == with_dense.weight_bytes_held, "rank 0 holds what it did");
    drive(dist, experts, whole, info);
    drive_engine(dist, experts, share, whole);
    check(moe_dist_stop_serving(dist) == MOE_OK, "stopping the serving ranks");
  } else {
    check(mine.weight_bytes_held < with_dense.weight_bytes_held,
          "a serving rank holds its experts alone");
    printf("rank %d: holds %.2f MB with the dense weights on rank 0 only\n", my_rank,
           mine.weight_bytes_held / 1e6);
    moe_context_params cp = moe_context_default_params();
    moe_context* ctx = NULL;
    check(moe_context_create(experts, &cp, &ctx) != MOE_OK && ctx == NULL,
          "experts alone make no context");
    check(moe_dist_serve(dist, experts, 1, 0) == MOE_OK, "serving rank 0's layers");
  }
  moe_model_free(experts);
}

static int kill_rank1(moe_dist* dist, const char* path) {
  moe_model* share = NULL;
  if (moe_dist_model_load(dist, path, NULL, NULL, &share) != MOE_OK) return 1;
  if (my_rank == 1) {
    alarm(1); /* SIGALRM ends this process a second into serving, mid-generation */
    moe_dist_serve(dist, share, 1, 0);
    return 1; /* not reached */
  }
  if (my_rank > 1) {
    /* Rank 1 may die before rank 0's first order reaches this rank through it: then only the
     * idle timeout ends the wait. */
    moe_status s = moe_dist_serve(dist, share, 1, 5000);
    printf("rank %d: serving ended: %s\n", my_rank, s == MOE_OK ? "ok" : moe_last_error());
    moe_model_free(share);
    return 0;
  }
  moe_context_params cp = moe_context_default_params();
  cp.n_ctx = 4096;
  cp.n_threads = 1;
  moe_context* ctx = NULL;
  int32_t prompt[2] = {1, 2};
  moe_sampling_params sp;
  moe_generate_params g = greedy(4000, &sp);
  token_list got = {{0}, 0};
  const double t0 = now_s();
  moe_status s = moe_dist_context_create(dist, share, &cp, &ctx);
  if (s == MOE_OK) s = moe_generate_tokens(ctx, prompt, 2, &g, keep_token, &got);
  const double waited = now_s() - t0;
  printf("rank 0: generation ended after %.2f s: %s: %s\n", waited, moe_status_string(s),
         moe_last_error());
  check(s == MOE_ERROR_TIMEOUT || s == MOE_ERROR_IO, "the dead rank is an error");
  check(waited < 1.0 + 2.0 + 1.5, "within the timeout of its death");
  if (ctx != NULL) {
    check(moe_decode(ctx, prompt, 1) != MOE_OK, "the broken world refuses later steps");
    moe_context_free(ctx);
  }
  moe_model_free(share);
  return failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  int kill = argc > 1 && strcmp(argv[1], "--kill-rank1") == 0;
  moe_dist* dist = NULL;
  if (moe_dist_create(kill ? 2000 : 30000, &dist) != MOE_OK) {
    fprintf(stderr, "moe_dist_create: %s\n", moe_last_error());
    return 1;
  }
  my_rank = moe_dist_rank(dist);
  const int size = moe_dist_size(dist);
  check(size >= 2, "run under mpirun with 2 or more ranks");
  if (kill) {
    int rc = kill_rank1(dist, argv[2]);
    /* The world is broken: MPI cannot end cleanly (mpirun reports the dead rank anyway). */
    fflush(stdout);
    _exit(rc);
  }
  for (int m = 1; m < argc; ++m) {
    /* Loaded as the share is (copied, re-laid alike), so the same kernels run. */
    moe_model *whole = NULL, *share = NULL;
    check(moe_model_load(argv[m], NULL, &whole) == MOE_OK, "the whole model");
    check(moe_dist_model_load(dist, argv[m], NULL, NULL, &share) == MOE_OK, "this rank's share");
    if (whole == NULL || share == NULL) return 1;
    moe_model_info info = moe_model_default_info();
    moe_model_get_info(whole, &info);
    check_share(share, &info, size);
    if (m == 1) {
      check_fits_only_spread(dist, argv[m], share, whole, &info);
      check_dense_on_rank0(dist, argv[m], share, whole, &info);
    }
    if (my_rank == 0) {
      drive(dist, share, whole, &info);
      check(moe_dist_stop_serving(dist) == MOE_OK, "stopping the serving ranks");
    } else {
      check(moe_dist_serve(dist, share, 1, 0) == MOE_OK, "serving until rank 0 stops");
      check(moe_dist_stop_serving(dist) == MOE_ERROR_INVALID_ARGUMENT, "only rank 0 stops");
    }
    moe_model_free(share);
    moe_model_free(whole);
  }
  moe_dist_free(dist);
  printf("rank %d of %d: %s\n", my_rank, size, failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
