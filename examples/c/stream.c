/* The smallest complete libmoe program: load a model, stream a completion, print statistics.
 *
 *   stream MODEL [PROMPT] [MAX_TOKENS]
 */
#include <moe_c.h>
#include <stdio.h>
#include <stdlib.h>

static int print_piece(int32_t token, const char* piece, size_t len, void* user_data) {
  (void)token;
  (void)user_data;
  fwrite(piece, 1, len, stdout);
  fflush(stdout);
  return 1; /* keep going */
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL [PROMPT] [MAX_TOKENS]\n", argv[0]);
    return 2;
  }
  const char* prompt = argc > 2 ? argv[2] : "Once upon a time";
  moe_model* model = NULL;
  moe_status s = moe_model_load(argv[1], NULL, &model);
  if (s != MOE_OK) {
    fprintf(stderr, "cannot load %s: %s (%s)\n", argv[1], moe_last_error(), moe_status_string(s));
    return 1;
  }
  moe_context* ctx = NULL;
  s = moe_context_create(model, NULL, &ctx);
  if (s != MOE_OK) {
    fprintf(stderr, "cannot create a context: %s\n", moe_last_error());
    moe_model_free(model);
    return 1;
  }
  moe_generate_params params = moe_generate_default_params();
  params.max_tokens = argc > 3 ? atoi(argv[3]) : 64;
  printf("%s", prompt);
  s = moe_generate(ctx, prompt, &params, print_piece, NULL);
  printf("\n");
  if (s != MOE_OK) fprintf(stderr, "generation failed: %s\n", moe_last_error());

  moe_stats stats = moe_default_stats();
  if (s == MOE_OK && moe_context_get_stats(ctx, &stats) == MOE_OK) {
    fprintf(stderr, "[%d tokens, %.1f tok/s, %.1f%% of parameters active per token]\n",
            stats.generated_tokens, stats.generate_tokens_per_second,
            100.0 * stats.active_fraction);
  }
  moe_context_free(ctx);
  moe_model_free(model);
  return s == MOE_OK ? 0 : 1;
}
