/* A program built against an installed libmoe (pkg-config or find_package): checks that header
 * and library agree, loads MODEL and generates a few tokens. */
#include <moe_c.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  if (strcmp(moe_version_string(), MOE_VERSION_STRING) != 0) {
    fprintf(stderr, "header %s but library %s\n", MOE_VERSION_STRING, moe_version_string());
    return 1;
  }
  if (argc < 2) return 0;
  moe_model* model = NULL;
  moe_context* ctx = NULL;
  moe_generate_params params = moe_generate_default_params();
  params.max_tokens = 4;
  moe_stats stats = moe_default_stats();
  if (moe_model_load(argv[1], NULL, &model) != MOE_OK ||
      moe_context_create(model, NULL, &ctx) != MOE_OK ||
      moe_generate(ctx, "Hello", &params, NULL, NULL) != MOE_OK ||
      moe_context_get_stats(ctx, &stats) != MOE_OK) {
    fprintf(stderr, "consumer: %s\n", moe_last_error());
    moe_context_free(ctx);
    moe_model_free(model);
    return 1;
  }
  printf("consumer: libmoe %s generated %d tokens\n", moe_version_string(), stats.generated_tokens);
  moe_context_free(ctx);
  moe_model_free(model);
  return 0;
}
