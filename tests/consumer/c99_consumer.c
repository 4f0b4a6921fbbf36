/* A C99 consumer of an installed nibble through pkg-config (tests/consumer/run.cmake builds it
 * with cc -std=c99 -Wall -Werror -pedantic $(pkg-config --cflags --libs nibble) -lm): quantize,
 * dequantize, gemv against a plain dot product, and a bad call that must fail with a message and
 * write nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nibble/nibble.h>

#define ROWS 8
#define COLS 512

int main(void) {
  static float w[ROWS * COLS], dq[ROWS * COLS], x[COLS], y[ROWS];
  unsigned char* q;
  unsigned char guard[64];
  size_t rb;
  int i, r, f;
  nibble_status st;
  nibble_context ctx = {0};

  if (strcmp(nibble_version(), "") == 0) return 1;
  f = nibble_format_from_name("q4_K");
  if (f < 0 || strcmp(nibble_format_name(f), "q4_K") != 0) return 2;
  rb = nibble_row_bytes(f, COLS);
  if (rb != 2 * 144) return 3;
  q = (unsigned char*)malloc(rb * ROWS);
  if (!q) return 4;
  for (i = 0; i < ROWS * COLS; ++i) w[i] = (float)sin(0.37 * i);
  for (i = 0; i < COLS; ++i) x[i] = (float)cos(0.11 * i);
  if (nibble_quantize(f, w, ROWS, COLS, q, NULL) != NIBBLE_OK) return 5;
  if (nibble_dequantize(f, q, ROWS, COLS, dq) != NIBBLE_OK) return 6;
  ctx.threads = 2;
  if (nibble_gemv(&ctx, f, q, ROWS, COLS, x, y) != NIBBLE_OK) return 7;
  for (r = 0; r < ROWS; ++r) {
    double ref = 0, mag = 0;
    for (i = 0; i < COLS; ++i) {
      ref += (double)dq[r * COLS + i] * x[i];
      mag += fabs((double)dq[r * COLS + i] * x[i]);
    }
    if (fabs(ref - y[r]) > 1e-2 * mag) {
      printf("row %d: gemv %f vs %f\n", r, y[r], ref);
      return 8;
    }
  }
  /* cols not a multiple of 256: an error code and a message, nothing written */
  memset(guard, 0x5A, sizeof guard);
  st = nibble_quantize(f, w, 1, 100, guard, NULL);
  if (st != NIBBLE_ERROR_INVALID_ARGUMENT || strstr(nibble_last_error(), "100") == NULL) return 9;
  for (i = 0; i < (int)sizeof guard; ++i)
    if (guard[i] != 0x5A) return 10;
  printf("c99 consumer ok (nibble %s, error message: %s)\n", nibble_version(), nibble_last_error());
  free(q);
  return 0;
}
