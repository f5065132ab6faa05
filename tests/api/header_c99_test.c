/* Compiles moe_c.h as strict C99 and calls through it: the header must stay plain C. */
#include "moe_c.h"

#include <stdio.h>
#include <string.h>

int main(void) {
  moe_model_params mp = moe_model_default_params();
  moe_context_params cp = moe_context_default_params();
  moe_sampling_params sp = moe_sampling_default_params();
  moe_generate_params gp = moe_generate_default_params();
  moe_stats st = moe_default_stats();
  moe_model_info info = moe_model_default_info();
  moe_model* model = NULL;
  int failed = 0;
  (void)cp;
  (void)sp;
  (void)gp;
  (void)st;
  (void)info;
  if (mp.struct_size != sizeof(mp) || mp.use_mmap != 0) failed++;
  if (moe_model_load("/definitely/missing.moe", &mp, &model) != MOE_ERROR_NOT_FOUND) failed++;
  if (model != NULL || strlen(moe_last_error()) == 0) failed++;
  if (strcmp(moe_version_string(), MOE_VERSION_STRING) != 0) failed++;
  printf("%d passed, %d failed\n", 5 - failed, failed);
  return failed != 0;
}
