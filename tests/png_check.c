/* tests/png_check.c - is a PNG (rsvg-convert's rendering of a plot) a real picture?
     png_check FILE.png [RRGGBB ...]
   Fails unless the image is at least 200x100, between 1% and 60% of its pixels are not white, it has
   at least 8 distinct colours, and each colour given appears in at least 50 pixels (the curves). */
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#include <stb/stb_image.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  int w, h, n, i, a, distinct = 0;
  long ink = 0;
  static unsigned char seen[1 << 15];
  unsigned char *px;
  if (argc < 2) { fprintf(stderr, "usage: png_check FILE.png [RRGGBB ...]\n"); return 2; }
  px = stbi_load(argv[1], &w, &h, &n, 3);
  if (!px) { fprintf(stderr, "png_check: %s: %s\n", argv[1], stbi_failure_reason()); return 1; }
  for (i = 0; i < w * h; i++) {
    unsigned char *p = px + 3 * i;
    int key = (p[0] >> 3) << 10 | (p[1] >> 3) << 5 | (p[2] >> 3);
    if (p[0] < 250 || p[1] < 250 || p[2] < 250) ink++;
    if (!seen[key]) { seen[key] = 1; distinct++; }
  }
  printf("png_check: %s: %dx%d, %.1f%% ink, %d colours\n", argv[1], w, h, 100.0 * (double)ink / (w * h), distinct);
  if (w < 200 || h < 100 || ink * 100 < (long)w * h || ink * 100 > 60L * w * h || distinct < 8) {
    fprintf(stderr, "png_check: %s looks empty or broken\n", argv[1]);
    return 1;
  }
  for (a = 2; a < argc; a++) {
    unsigned c = (unsigned)strtoul(argv[a], NULL, 16);
    long hits = 0;
    for (i = 0; i < w * h; i++) {
      unsigned char *p = px + 3 * i;
      if (abs(p[0] - (int)(c >> 16)) < 8 && abs(p[1] - (int)(c >> 8 & 255)) < 8 && abs(p[2] - (int)(c & 255)) < 8) hits++;
    }
    if (hits < 50) { fprintf(stderr, "png_check: colour %s is in only %ld pixels: a curve is missing\n", argv[a], hits); return 1; }
  }
  stbi_image_free(px);
  return 0;
}
