/* bench/bench_compile.c - how long an implementation translation unit takes to compile, side by side
   with stb_image.h's (the reference a C programmer knows), in one run (make bench-compile).

   Each row is one file with an implementation define and its flags (the table below); each is
   compiled with -c at -O2 and at -O3 -march=native, rows interleaved round by round (one of each row
   per round) so that a busy machine slows every row alike. A compile is timed by the compiler's CPU
   time, user + system of the driver and what it ran (cc1, as), from getrusage(RUSAGE_CHILDREN) before
   and after it: the wall clock of a shared machine counts the time other processes hold the core and
   moved the ratios by about 20% run to run. Printed: the median CPU seconds, and the ratio to
   stb_image.h's compile in the same round at the same flags, as the median over the rounds with its
   min-max beside it, and the size of the -O2 object's code and data (`size`: text + data; the file's
   size where `size` is missing). No thresholds. Last, bench/compile_reach.sh: how much of the 7-battery
   row's code examples/own_loop.c, built with that row's defines, can reach (the rest the linker drops).

     build/bench_compile CC STB_INC [rounds]     (rounds: default 5; CC may be "gcc" or "clang" ...)

   A row whose define its header does not mention (a section define not written yet) is listed as such
   instead of timed, so rows for planned defines can stand in the table before the code exists. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

typedef enum { SRC_STB, SRC_HOOKS, SRC_TRAIN } src_kind;

/* The rows. A row is a label, which file it compiles, and its flags (space-separated: -D, or an -O that
   overrides the column's). SEVEN_BATTERIES: a loop of your own with 7 batteries, as own_loop.c builds it. */
#define SEVEN_BATTERIES "-DTRAIN_NO_MATH -DTRAIN_NO_SWEEP -DTRAIN_ONLY_SPECIFIC_BATTERIES -DTRAIN_ENABLE_NAN_GUARD " \
  "-DTRAIN_ENABLE_GRADIENT_MONITOR -DTRAIN_ENABLE_EARLY_STOPPING -DTRAIN_ENABLE_MODEL_CHECKPOINT -DTRAIN_ENABLE_CSV " \
  "-DTRAIN_ENABLE_TENSORBOARD -DTRAIN_ENABLE_PROGRESS_BAR"
typedef struct row { const char *label; src_kind src; const char *defines; } row;
static const row rows[] = {
  { "stb_image.h (the reference)",        SRC_STB,   "" },
  { "hooks.h",                            SRC_HOOKS, "" },
  { "train.h, whole",                     SRC_TRAIN, "" },
  { "train.h, TRAIN_NO_SIMD",             SRC_TRAIN, "-DTRAIN_NO_SIMD" },
  { "train.h, no trainer",                SRC_TRAIN, "-DTRAIN_NO_TRAINER" },
  { "own loop: run layer, callbacks, loggers", SRC_TRAIN, "-DTRAIN_NO_MATH -DTRAIN_NO_SWEEP" },
  { "own loop: 4 callbacks, 2 loggers, bar", SRC_TRAIN, SEVEN_BATTERIES },
  /* the same at -O1 (a row's flags come after the column's, so it wins in both columns): how far a lower
     optimisation level alone would go */
  { "the same at -O1 (both columns)",     SRC_TRAIN, "-O1 " SEVEN_BATTERIES },
  { "own loop: run layer, callbacks",     SRC_TRAIN, "-DTRAIN_NO_MATH -DTRAIN_NO_SWEEP -DTRAIN_NO_LOGGERS" },
  { "the run layer alone",                SRC_TRAIN, "-DTRAIN_NO_MATH -DTRAIN_NO_SWEEP -DTRAIN_NO_CALLBACKS -DTRAIN_NO_LOGGERS" },
};
#define N_ROWS ((int)(sizeof rows / sizeof rows[0]))

/* The columns: flags after -std=c99 -c. */
static const char *const columns[] = { "-O2", "-O3 -march=native" };
#define N_COLS 2
#define MAX_ROUNDS 15
#define MAX_ARGS 64

static const char *g_cc, *g_stb_inc, *g_dir = "build/bench_compile_tu";

static const char *src_header(src_kind k) { return k == SRC_STB ? NULL : k == SRC_HOOKS ? "hooks.h" : "train.h"; }

/* The file a row compiles: the implementation define(s) and the include. */
static int write_source(const char *path, src_kind k) {
  FILE *f = fopen(path, "w");
  if (!f) { perror(path); return -1; }
  if (k == SRC_STB) fputs("#define STB_IMAGE_IMPLEMENTATION\n#include <stb/stb_image.h>\n", f);
  else if (k == SRC_HOOKS) fputs("#define HOOKS_IMPLEMENTATION\n#include \"hooks.h\"\n", f);
  else fputs("#define HOOKS_IMPLEMENTATION\n#define TRAIN_IMPLEMENTATION\n#include \"train.h\"\n", f);
  return fclose(f) == 0 ? 0 : -1;
}

/* 1 when every -D name of the row appears in its header's text (a define the header knows). */
static int defines_known(const row *r, char *missing, size_t cap) {
  const char *h = src_header(r->src), *p = r->defines;
  static char text[1 << 22];
  size_t n;
  FILE *f;
  missing[0] = 0;
  if (!h || !*p) return 1;
  if (!(f = fopen(h, "rb"))) return 0;
  n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  while ((p = strstr(p, "-D")) != NULL) {
    char name[128];
    size_t k = 0;
    p += 2;
    while (*p && *p != ' ' && *p != '=' && k + 1 < sizeof name) name[k++] = *p++;
    name[k] = 0;
    if (!strstr(text, name)) { snprintf(missing, cap, "%s is not in %s yet", name, h); return 0; }
  }
  return 1;
}

/* Splits s (a copy) on spaces into argv from *n on. */
static void add_words(char *s, char **argv, int *n) {
  char *w = strtok(s, " ");
  for (; w && *n < MAX_ARGS - 1; w = strtok(NULL, " ")) argv[(*n)++] = w;
}

/* user + system CPU seconds of every child waited for so far (and of the children they waited for) */
static double children_cpu(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_CHILDREN, &ru) != 0) return -1;
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
         (double)ru.ru_stime.tv_usec * 1e-6;
}

/* Compiles src into obj with the column's flags and the row's defines; the compiler's CPU time, or -1. */
static double compile(const char *src, const char *obj, const char *col, const char *defines) {
  char cc[256], colbuf[256], defbuf[512], inc[512], *argv[MAX_ARGS];
  int n = 0, status = 0;
  double t0, t1;
  pid_t pid;
  snprintf(cc, sizeof cc, "%s", g_cc);
  snprintf(colbuf, sizeof colbuf, "%s", col);
  snprintf(defbuf, sizeof defbuf, "%s", defines);
  snprintf(inc, sizeof inc, "-I%s", g_stb_inc);
  add_words(cc, argv, &n);
  argv[n++] = (char *)"-std=c99";
  add_words(colbuf, argv, &n);
  add_words(defbuf, argv, &n);
  argv[n++] = (char *)"-I.";
  argv[n++] = inc;
  argv[n++] = (char *)"-c";
  argv[n++] = (char *)src;
  argv[n++] = (char *)"-o";
  argv[n++] = (char *)obj;
  argv[n] = NULL;
  fflush(NULL);
  if ((t0 = children_cpu()) < 0) { perror("getrusage"); return -1; }
  pid = fork();
  if (pid < 0) { perror("fork"); return -1; }
  if (pid == 0) { execvp(argv[0], argv); perror(argv[0]); _exit(127); }
  if (waitpid(pid, &status, 0) != pid) return -1;
  t1 = children_cpu();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "bench-compile: %s %s %s -c %s failed\n", g_cc, col, defines, src);
    return -1;
  }
  return t1 - t0;
}

/* The object's text + data in bytes (`size`, Berkeley format), else its file size. */
static long object_bytes(const char *obj) {
  char cmd[600], line[512];
  long text = 0, data = 0;
  struct stat st;
  FILE *p;
  snprintf(cmd, sizeof cmd, "size '%s' 2>/dev/null", obj);
  if ((p = popen(cmd, "r")) != NULL) {
    int ok = fgets(line, sizeof line, p) && fgets(line, sizeof line, p) && sscanf(line, "%ld %ld", &text, &data) == 2;
    if (pclose(p) == 0 && ok) return text + data;
  }
  return stat(obj, &st) == 0 ? (long)st.st_size : -1;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
/* sorts v; its median */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* "1.23 (1.20-1.31)": the median of row r's per-round ratios to stb_image.h's, and their min-max */
static const char *ratio_text(char *buf, size_t cap, double (*t)[MAX_ROUNDS], double (*stb)[MAX_ROUNDS], int c, int rounds) {
  double q[MAX_ROUNDS], m;
  int k;
  for (k = 0; k < rounds; k++) q[k] = t[c][k] / stb[c][k];
  m = median(q, rounds);
  snprintf(buf, cap, "%.2f (%.2f-%.2f)", m, q[0], q[rounds - 1]);
  return buf;
}

int main(int argc, char **argv) {
  static double t[N_ROWS][N_COLS][MAX_ROUNDS], med[N_ROWS][N_COLS];
  static char missing[N_ROWS][160];
  long bytes[N_ROWS];
  int known[N_ROWS], rounds = 5, r, c, k;
  char src[N_ROWS][256], obj[N_ROWS][N_COLS][256], version[256] = "";
  FILE *p;
  if (argc < 3) { fprintf(stderr, "usage: %s CC STB_INC [rounds]\n", argv[0]); return 2; }
  g_cc = argv[1];
  g_stb_inc = argv[2];
  if (argc > 3) rounds = atoi(argv[3]);
  if (rounds < 1 || rounds > MAX_ROUNDS) { fprintf(stderr, "bench-compile: rounds must be 1..%d\n", MAX_ROUNDS); return 2; }
  mkdir("build", 0777);
  mkdir(g_dir, 0777);
  for (r = 0; r < N_ROWS; r++) {
    known[r] = defines_known(&rows[r], missing[r], sizeof missing[r]);
    snprintf(src[r], sizeof src[r], "%s/row%d.c", g_dir, r);
    for (c = 0; c < N_COLS; c++) snprintf(obj[r][c], sizeof obj[r][c], "%s/row%d-%d.o", g_dir, r, c);
    if (known[r] && write_source(src[r], rows[r].src)) return 1;
  }
  {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "%s --version 2>/dev/null", g_cc);
    if ((p = popen(cmd, "r")) != NULL) {
      if (!fgets(version, sizeof version, p)) version[0] = 0;
      pclose(p);
    }
    version[strcspn(version, "\n")] = 0;
  }
  printf("compile time of one implementation TU: %s -std=c99 -c, the compiler's CPU time (user + sys), %d rounds, rows interleaved\n",
         version[0] ? version : g_cc, rounds);
  for (k = 0; k < rounds; k++)
    for (c = 0; c < N_COLS; c++)
      for (r = 0; r < N_ROWS; r++) {
        if (!known[r]) continue;
        t[r][c][k] = compile(src[r], obj[r][c], columns[c], rows[r].defines);
        if (t[r][c][k] < 0) return 1;
      }
  for (r = 0; r < N_ROWS; r++) {
    if (!known[r]) continue;
    for (c = 0; c < N_COLS; c++) { /* on a copy: t keeps the rounds' order for the ratios */
      double v[MAX_ROUNDS];
      memcpy(v, t[r][c], sizeof v);
      med[r][c] = median(v, rounds);
    }
    bytes[r] = object_bytes(obj[r][0]);
  }
  if (!known[0]) { fprintf(stderr, "bench-compile: stb_image.h not found\n"); return 1; }
  printf("\n  %-42s %6s  %-17s   %6s  %-17s   %10s\n", "", columns[0], "", columns[1], "", "code+data");
  printf("  %-42s %6s  %-17s   %6s  %-17s   %10s\n", "implementation TU", "s", "x stb (min-max)", "s", "x stb (min-max)",
         "KB (-O2)");
  for (r = 0; r < N_ROWS; r++) {
    char q0[64], q1[64];
    if (!known[r]) { printf("  %-42s   (%s)\n", rows[r].label, missing[r]); continue; }
    printf("  %-42s %6.2f  %-17s   %6.2f  %-17s   %10.1f\n", rows[r].label, med[r][0],
           ratio_text(q0, sizeof q0, t[r], t[0], 0, rounds), med[r][1], ratio_text(q1, sizeof q1, t[r], t[0], 1, rounds),
           (double)bytes[r] / 1024.0);
  }
  printf("\ns: median CPU seconds; x stb: the compile's CPU time over stb_image.h's in the same round, the median\n"
         "over the rounds and (min-max) the spread of those ratios.\n");
  printf("\ntrain.h's rows include hooks.h's implementation (one file, as a program builds it). Defines:\n");
  for (r = 0; r < N_ROWS; r++)
    if (rows[r].defines[0]) printf("  %-42s %s\n", rows[r].label, rows[r].defines);
  { /* how much of that row's code a real loop of your own can reach (bench/compile_reach.sh) */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "sh bench/compile_reach.sh '%s' %s", g_cc, SEVEN_BATTERIES);
    fflush(NULL);
    if (system(cmd) != 0) { fprintf(stderr, "bench-compile: %s failed\n", cmd); return 1; }
  }
  return 0;
}
