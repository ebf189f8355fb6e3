/* train/files.h - files written whole: the atomic writer, the background writer of asynchronous saves, checksums, state bytes. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_FILES_H /* part */
#define TRAIN_FILES_H /* part */
#include "base.h" /* part */

TR__C_BEGIN /* part */
/* CRC-32C (Castagnoli), as TensorBoard's record framing uses it; tr_crc32c_masked is LevelDB's mask. */
TRAIN_API uint32_t tr_crc32c(const void *data, size_t n);
TRAIN_API uint32_t tr_crc32c_masked(const void *data, size_t n);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- files written whole: one atomic writer for checkpoints, loggers and plots (no section's own) ----
   tr__afile: a new temporary <path>.tmp.<tag>.<pid>.<n> made with O_CREAT|O_EXCL|O_NOFOLLOW (nothing
   planted there is ever written through), written, fsynced, renamed over path, the directory fsynced: a
   crash leaves the old file or the new one. Only a regular file at path is replaced (TR__AF_LINK_OK: a
   symlink too, itself); a killed writer's temporary is removed by the next write to path. A log keeps
   the temporary's descriptor (keep_fd), never reopened by name. tr__write_mine replaces nothing it did
   not write: the first write links the temporary where nothing is, later ones replace only the same
   device and inode (tr__file_id). docs/never_lost.md lists the guarantees and their tests. */
#if defined(O_NOFOLLOW)
#  define TR__O_NOFOLLOW O_NOFOLLOW
#elif defined(__O_NOFOLLOW)
#  define TR__O_NOFOLLOW __O_NOFOLLOW /* glibc under strict -std=c99 hides the name, not the flag */
#else
#  define TR__O_NOFOLLOW 0
#endif
#if defined(O_CLOEXEC)
#  define TR__O_CLOEXEC O_CLOEXEC
#elif defined(__O_CLOEXEC)
#  define TR__O_CLOEXEC __O_CLOEXEC
#else
#  define TR__O_CLOEXEC 0
#endif
#if defined(S_ISLNK)
#  define TR__S_ISLNK(m) S_ISLNK(m)
#elif defined(__S_IFLNK) && defined(__S_IFMT)
#  define TR__S_ISLNK(m) (((m) & __S_IFMT) == __S_IFLNK)
#else
#  define TR__S_ISLNK(m) 0
#endif

/* write() all of it; 0 or errno. *done (may be NULL) gets the bytes that were written. */
static int tr__fd_write_n(int fd, const void *data, size_t n, size_t *done) {
  size_t at = 0;
  int e = 0;
#ifdef TR__POSIX
  const char *p = (const char *)data;
  while (at < n) {
    ssize_t w = write(fd, p + at, n - at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) { e = w < 0 ? errno : EIO; break; }
    at += (size_t)w;
  }
#else
  (void)fd; (void)data; (void)n;
  e = ENOSYS;
#endif
  if (done) *done = at;
  return e;
}
static int tr__fd_write(int fd, const void *data, size_t n) { return tr__fd_write_n(fd, data, n, NULL); }

/* Is there an executable name on PATH? (system()'s shell says "not found" as exit status 127, which a
   failing command may return too.) Not known (no POSIX): 1. */
TR__SHARED int tr__on_path(const char *name) {
#ifdef TR__POSIX
  const char *p = getenv("PATH"), *end;
  char full[4200];
  if (!p) p = "/usr/bin:/bin";
  for (;; p = end + 1) {
    size_t n;
    end = strchr(p, ':');
    n = end ? (size_t)(end - p) : strlen(p);
    if (n < 4000) {
      snprintf(full, sizeof full, "%.*s%s%s", (int)n, p, n ? "/" : "", name);
      if (access(full, X_OK) == 0) return 1;
    }
    if (!end) return 0;
  }
#else
  (void)name;
  return 1;
#endif
}
/* system()'s answer as a shell says it: the command's exit status, or 128 + the signal that ended it */
TR__SHARED int tr__exit_status(int rc) {
#if defined(TR__POSIX) && defined(WIFEXITED)
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : WIFSIGNALED(rc) ? 128 + WTERMSIG(rc) : rc;
#else
  return rc;
#endif
}

#ifdef TR__POSIX
/* Only a process of the same boot, host name and PID namespace may judge a temporary's writer dead (pids
   of another host or container mean nothing here): a hash of the three in every temporary's name. */
static void tr__temp_tag(char tag[9]) {
  static const char *const files[] = { "/proc/sys/kernel/random/boot_id", "/proc/sys/kernel/hostname" };
  uint32_t h = 2166136261u; /* FNV-1a */
  char buf[256];
  size_t i, k, n;
  for (i = 0; i < 3; i++) {
    if (i < 2) {
      FILE *f = fopen(files[i], "r");
      n = f ? fread(buf, 1, sizeof buf, f) : 0;
      if (f) fclose(f);
    } else {
      ssize_t r = readlink("/proc/self/ns/pid", buf, sizeof buf); /* pid:[4026531836] */
      n = r > 0 ? (size_t)r : 0;
    }
    for (k = 0; k < n; k++) h = (h ^ (unsigned char)buf[k]) * 16777619u;
    h = (h ^ 0xffu) * 16777619u;
  }
  snprintf(tag, 9, "%08x", (unsigned)h);
}
/* path's temporaries whose process is gone, of our tag only (an untagged or foreign one is not ours to
   judge); unlink never follows a planted link. (kill is hidden by strict -std=c99.) */
static void tr__remove_stale_temps(const char *path) {
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  size_t dlen = slash ? (size_t)(slash - path) + (slash == path) : 1, blen = strlen(base);
  char dir[4096], file[4096 + 256];
  DIR *d;
  struct dirent *e;
  struct stat st;
  char tag[9];
  if (dlen >= sizeof dir || stat("/proc/self", &st) != 0) return;
  tr__temp_tag(tag);
  memcpy(dir, slash ? path : ".", dlen);
  dir[dlen] = 0;
  if (!(d = opendir(dir))) return;
  while ((e = readdir(d)) != NULL) {
    const char *tail = e->d_name + blen;
    char *end, proc[64];
    long pid;
    if (strncmp(e->d_name, base, blen) != 0 || strncmp(tail, ".tmp.", 5) != 0 || strncmp(tail + 5, tag, 8) != 0 || tail[13] != '.')
      continue;
    pid = strtol(tail + 14, &end, 10);
    if (end == tail + 14 || *end != '.' || pid <= 0 || pid == (long)getpid()) continue;
    snprintf(proc, sizeof proc, "/proc/%ld", pid);
    if (stat(proc, &st) == 0 || errno != ENOENT) continue; /* alive, or not ours to judge */
    if (snprintf(file, sizeof file, "%s/%s", dir, e->d_name) < (int)sizeof file) (void)unlink(file);
  }
  closedir(d);
}

static int tr__open_temp(const char *path, char *tmp, size_t cap) {
  static unsigned counter;
  int tries, fd = -1, flags = O_WRONLY | O_CREAT | O_EXCL | TR__O_NOFOLLOW | TR__O_CLOEXEC;
  char tag[9];
  tr__temp_tag(tag);
  for (tries = 0; tries < 100 && fd < 0; tries++) {
#if defined(__GNUC__) || defined(__clang__) /* the background writer opens temporaries too */
    unsigned n = __atomic_fetch_add(&counter, 1u, __ATOMIC_RELAXED);
#else
    unsigned n = counter++;
#endif
    snprintf(tmp, cap, "%s.tmp.%s.%ld.%u", path, tag, (long)getpid(), n);
    fd = open(tmp, flags, 0644); /* the umask applies, as to any new file */
    if (fd < 0 && errno != EEXIST && errno != EINTR) break;
  }
  return fd;
}

/* 1 when what is at path may be replaced: nothing, a regular file, a symlink with link_ok. */
static int tr__replaceable(const char *path, int link_ok) {
  struct stat st;
  if (lstat(path, &st) != 0) return 1; /* nothing there (or the rename will say why not) */
  return S_ISREG(st.st_mode) || (link_ok && TR__S_ISLNK(st.st_mode));
}
#endif

enum { TR__AF_LINK_OK = 1 };
/* The file a writer made (tr__write_mine): set once it is in place; its device and inode (POSIX). */
typedef struct tr__file_id { int set; uint64_t dev, ino; } tr__file_id;
typedef struct tr__afile {
  const char *path;
  char *tmp;           /* the temporary's name */
#ifdef TR__POSIX
  int fd;
  uint64_t dev, ino;   /* the temporary's (mine: the file's once it is in place) */
#else
  FILE *f;
#endif
  int err;             /* 0, or the errno of the first failure (EEXIST: path is not a regular file) */
  int special;         /* the failure: path is there and is not a regular file */
  int taken;           /* the failure (mine): path is there and is not the file of mine */
  const char *step;    /* what failed: "creating", "writing" or "renaming" */
  unsigned flags;
  tr__file_id *mine;   /* NULL: replace a regular file; else replace only this file, and set it */
  int done;            /* committed: the temporary is path now */
} tr__afile;

/* mine: what is at path? 0: nothing; 1: the file of mine; -1: anything else. */
static int tr__afile_whose(const tr__afile *a) {
#ifdef TR__POSIX
  struct stat st;
  if (lstat(a->path, &st) != 0) return 0; /* nothing there (or putting it there says why not) */
  return a->mine->set && S_ISREG(st.st_mode) && (uint64_t)st.st_dev == a->mine->dev && (uint64_t)st.st_ino == a->mine->ino ? 1 : -1;
#else
  FILE *f = fopen(a->path, "rb");
  if (!f) return 0;
  fclose(f);
  return a->mine->set ? 1 : -1;
#endif
}

static int tr__afile_start(tr__afile *a, const char *path, unsigned flags, tr__file_id *mine) {
  size_t cap = strlen(path) + 64;
  memset(a, 0, sizeof *a);
  a->path = path;
  a->flags = flags;
  a->mine = mine;
  a->step = "creating";
#ifdef TR__POSIX
  a->fd = -1;
#endif
  if (!(a->tmp = (char *)malloc(cap))) return a->err = ENOMEM;
#ifdef TR__POSIX
  a->tmp[0] = 0;
  if (mine ? tr__afile_whose(a) < 0 : !tr__replaceable(path, flags & TR__AF_LINK_OK)) { /* say so before writing anything */
    if (mine) a->taken = 1;
    else a->special = 1;
    return a->err = EEXIST;
  }
  tr__remove_stale_temps(path);
  a->fd = tr__open_temp(path, a->tmp, cap);
  if (a->fd < 0) a->err = errno ? errno : EIO;
#else
  snprintf(a->tmp, cap, "%s.tmp", path);
  a->f = fopen(a->tmp, "wb");
  if (!a->f) a->err = errno ? errno : EIO;
  if (!a->err && mine && tr__afile_whose(a) < 0) { a->taken = 1; a->err = EEXIST; }
#endif
  return a->err;
}
static int tr__afile_open(tr__afile *a, const char *path, unsigned flags) { return tr__afile_start(a, path, flags, NULL); }

static int tr__afile_write(tr__afile *a, const void *data, size_t n) {
  if (a->err || n == 0) return a->err;
#ifdef TR__POSIX
  a->err = tr__fd_write(a->fd, data, n);
#else
  if (fwrite(data, 1, n, a->f) != n) a->err = errno ? errno : EIO;
#endif
  if (a->err) a->step = "writing";
  return a->err;
}

/* Flush, check path, rename; keep_fd (may be NULL) gets the file's descriptor open at its end. On failure
   path is as it was once tr__afile_free (always called after) removed the temporary. 0 or errno. */
static int tr__afile_commit(tr__afile *a, int *keep_fd) {
  if (keep_fd) *keep_fd = -1;
#ifdef TR__POSIX
  if (a->fd >= 0) {
    if (!a->err) { /* an interrupted fsync (FUSE, NFS) is asked again */
      int r;
      while ((r = fsync(a->fd)) != 0 && errno == EINTR) {}
      if (r != 0) { a->err = errno; a->step = "writing"; }
    }
    if (!a->err && a->mine) { /* the file it will be: a later write replaces this one only */
      struct stat st;
      if (fstat(a->fd, &st) != 0) { a->err = errno; a->step = "writing"; }
      else { a->dev = (uint64_t)st.st_dev; a->ino = (uint64_t)st.st_ino; }
    }
    if ((!keep_fd || a->err) && close(a->fd) != 0 && !a->err) { a->err = errno; a->step = "writing"; }
    if (keep_fd && !a->err) *keep_fd = a->fd;
    a->fd = -1;
  }
  if (!a->err && a->mine) {
    int whose = tr__afile_whose(a);
    if (whose < 0) { a->err = EEXIST; a->taken = 1; a->step = "renaming"; }
    else if (whose == 0) { /* nothing there: a link, which fails when a file came in the meantime */
      if (link(a->tmp, a->path) == 0) { (void)unlink(a->tmp); a->tmp[0] = 0; }
      else if (errno == EEXIST) { a->err = EEXIST; a->taken = 1; a->step = "renaming"; }
      else if (tr__afile_whose(a) != 0) { a->err = EEXIST; a->taken = 1; a->step = "renaming"; } /* no hard links here */
      else if (rename(a->tmp, a->path) != 0) { a->err = errno; a->step = "renaming"; }
    } else if (rename(a->tmp, a->path) != 0) { a->err = errno; a->step = "renaming"; } /* its own file */
  } else {
    if (!a->err && !tr__replaceable(a->path, a->flags & TR__AF_LINK_OK)) { a->err = EEXIST; a->special = 1; a->step = "renaming"; }
    if (!a->err && rename(a->tmp, a->path) != 0) { a->err = errno; a->step = "renaming"; }
  }
#else
  if (a->f) {
    if (fflush(a->f) != 0 && !a->err) { a->err = errno ? errno : EIO; a->step = "writing"; }
    if (fclose(a->f) != 0 && !a->err) { a->err = errno ? errno : EIO; a->step = "writing"; }
    a->f = NULL;
  }
  if (!a->err && a->mine && tr__afile_whose(a) < 0) { a->err = EEXIST; a->taken = 1; a->step = "renaming"; }
  if (!a->err) remove(a->path); /* rename does not replace files everywhere */
  if (!a->err && rename(a->tmp, a->path) != 0) { a->err = errno; a->step = "renaming"; }
#endif
  if (a->err) {
#ifdef TR__POSIX
    if (keep_fd && *keep_fd >= 0) { close(*keep_fd); *keep_fd = -1; }
#endif
    return a->err; /* tr__afile_free removes the temporary */
  }
  a->done = 1;
  if (a->mine) {
    a->mine->set = 1;
#ifdef TR__POSIX
    a->mine->dev = a->dev;
    a->mine->ino = a->ino;
#endif
  }
#ifdef TR__POSIX
  { /* make the rename itself durable: fsync the directory (best effort) */
    const char *slash = strrchr(a->path, '/');
    int dfd;
    if (slash) {
      char *dir = (char *)malloc((size_t)(slash - a->path) + 2);
      size_t n = (size_t)(slash - a->path) + (slash == a->path);
      dfd = -1;
      if (dir) {
        memcpy(dir, a->path, n);
        dir[n] = 0;
        dfd = open(dir, O_RDONLY);
        free(dir);
      }
    } else dfd = open(".", O_RDONLY);
    if (dfd >= 0) {
      (void)fsync(dfd);
      close(dfd);
    }
  }
#endif
  return 0;
}

/* Release: an uncommitted temporary is removed. */
static void tr__afile_free(tr__afile *a) {
#ifdef TR__POSIX
  if (a->fd >= 0) close(a->fd);
  a->fd = -1;
#else
  if (a->f) fclose(a->f);
  a->f = NULL;
#endif
  if (!a->done && a->tmp && a->tmp[0]) remove(a->tmp);
  free(a->tmp);
  a->tmp = NULL;
}

/* Why a tr__afile failed, for a message ("cannot write ...: No space left on device", "... is not a
   regular file ...: it is not replaced"). */
static void tr__afile_why(const tr__afile *a, char *buf, size_t cap) {
  if (a->taken)
    snprintf(buf, cap, "%s is there and was not written by this logger (another run's, or a file of yours): it is not "
             "replaced", a->path);
  else if (a->special)
    snprintf(buf, cap, "%s is not a regular file (a symlink, a device, a FIFO or a directory): it is not replaced", a->path);
  else if (!strcmp(a->step, "renaming"))
    snprintf(buf, cap, "cannot rename %s to %s: %s", a->tmp ? a->tmp : "", a->path, strerror(a->err));
  else snprintf(buf, cap, "cannot %s %s: %s", !strcmp(a->step, "creating") ? "create" : "write",
                a->tmp && a->tmp[0] ? a->tmp : a->path, strerror(a->err));
}

/* The one checkpoint writer (tr_run_save's and tr_save's): fill writes the file into a, the new temporary file
   (tr__afile_write, or a stream: tr__afile_stream), which is then flushed to the disk and renamed over path;
   any failure removes the temporary file, leaves path as it was and says why. fill returns 0, or an errno-like
   code. path may be a symlink (replaced itself, never followed), never a device or a directory. */
static tr_err tr__write_checkpoint(const char *path, int (*fill)(tr__afile *a, void *user), void *user, char *why, size_t cap) {
  tr__afile a;
  int e;
  if (tr__afile_open(&a, path, TR__AF_LINK_OK) == 0) {
    int filled = fill(&a, user);
    if (filled && !a.err) { a.err = filled > 0 ? filled : EIO; a.step = "writing"; }
  }
  e = a.err ? a.err : tr__afile_commit(&a, NULL);
  if (e && !a.tmp) tr__msg(why, cap, "out of memory writing '%s'", path);
  else if (e && a.special) tr__msg(why, cap, "'%s' is not a regular file (a device, a FIFO or a directory): it is not replaced", path);
  else if (e && !strcmp(a.step, "renaming"))
    tr__msg(why, cap, "renaming '%s' to '%s' failed: %s (the previous '%s' is untouched)", a.tmp, path, strerror(e), path);
  else if (e) tr__msg(why, cap, "%s '%s' failed: %s (the previous '%s' is untouched)", a.step, a.tmp, strerror(e), path);
  tr__afile_free(&a);
  return !e ? TR_OK : e == ENOMEM ? TR_ERR_NOMEM : TR_ERR_IO;
}
/* A fill that writes through a stdio stream: the stream on a's temporary file, filled by fill, flushed and closed
   (its own descriptor: a keeps a.fd for fsync and rename). 0, or an errno-like code. */
static int tr__afile_stream(tr__afile *a, int (*fill)(FILE *f, void *user), void *user) {
  FILE *f = NULL;
  int e = 0;
#ifdef TR__POSIX
  int fd = dup(a->fd);
  if (fd < 0 || !(f = fdopen(fd, "wb"))) {
    e = errno ? errno : EIO;
    if (fd >= 0) close(fd);
    return e;
  }
#else
  f = a->f;
#endif
  e = fill(f, user);
  if (fflush(f) != 0 && !e) e = errno ? errno : EIO;
#ifdef TR__POSIX
  if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
#endif
  return e;
}
/* A whole file in one go: 0, or errno and why. tr__write_mine: only where nothing is or over mine (then
   mine is the new file); EEXIST when another file is there. */
static int tr__write_as(const char *path, const void *data, size_t n, unsigned flags, tr__file_id *mine, int *keep_fd,
                        char *why, size_t why_len) {
  tr__afile a;
  int e;
  if (tr__afile_start(&a, path, flags, mine) == 0) tr__afile_write(&a, data, n);
  e = a.err ? a.err : tr__afile_commit(&a, keep_fd);
  if (e && why) {
    if (a.tmp) tr__afile_why(&a, why, why_len);
    else snprintf(why, why_len, "out of memory");
  }
  tr__afile_free(&a);
  return e;
}
TR__SHARED int tr__write_whole(const char *path, const void *data, size_t n, unsigned flags, int *keep_fd, char *why, size_t why_len) {
  return tr__write_as(path, data, n, flags, NULL, keep_fd, why, why_len);
}
TR__SHARED int tr__write_mine(const char *path, const void *data, size_t n, tr__file_id *mine, int *keep_fd, char *why, size_t why_len) {
  return tr__write_as(path, data, n, 0, mine, keep_fd, why, why_len);
}
/* A resumed logger takes its file back: the regular file at path (no symlink) into out, its identity into
   mine. 0; ENOENT nothing there; EEXIST not a regular file; else errno. */
TR__SHARED int tr__read_mine(const char *path, hk_bytes *out, tr__file_id *mine) {
#ifdef TR__POSIX
  struct stat st;
  char buf[1 << 14];
  ssize_t n;
  int e = 0, fd = open(path, O_RDONLY | TR__O_NOFOLLOW | TR__O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? ENOENT : errno == ELOOP ? EEXIST : errno;
  if (fstat(fd, &st) != 0) e = errno;
  else if (!S_ISREG(st.st_mode)) e = EEXIST;
  while (!e && (n = read(fd, buf, sizeof buf)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) e = errno;
    else hk_bytes_put(out, buf, (size_t)n);
  }
  close(fd);
  if (!e && out->failed) e = ENOMEM;
  if (!e) { mine->set = 1; mine->dev = (uint64_t)st.st_dev; mine->ino = (uint64_t)st.st_ino; }
  return e;
#else
  (void)path; (void)out; (void)mine;
  return ENOENT;
#endif
}

/* Remove the file a writer made (mine: tr__read_mine's or tr__write_mine's), and nothing else: another file
   at path since is left as it is. 0, or errno. */
TR__SHARED int tr__remove_mine(const char *path, const tr__file_id *mine) {
#ifdef TR__POSIX
  struct stat st;
  if (lstat(path, &st) != 0) return errno;
  if (!mine->set || !S_ISREG(st.st_mode) || (uint64_t)st.st_dev != mine->dev || (uint64_t)st.st_ino != mine->ino) return EEXIST;
  return unlink(path) == 0 ? 0 : errno;
#else
  return mine->set && remove(path) == 0 ? 0 : EEXIST;
#endif
}
/* What is at path: 0 nothing, 1 mine (tr__write_mine's), -1 anything else. */
TR__SHARED int tr__whose(const char *path, const tr__file_id *mine) {
  tr__afile a;
  memset(&a, 0, sizeof a);
  a.path = path;
  a.mine = (tr__file_id *)mine; /* read only */
  return tr__afile_whose(&a);
}
/* lstat (declared at the top of the implementation where strict -std=c99 headers hide it): a symlink
   is seen as one, never as what it points to. */
#ifdef TR__POSIX
static int tr__lstat(const char *path, struct stat *st) { return lstat(path, st); }
#endif
TR__SHARED int tr__file_exists(const char *path) { /* a dangling symlink is a name too */
#ifdef TR__POSIX
  struct stat st;
  return tr__lstat(path, &st) == 0;
#else
  FILE *f = fopen(path, "rb");
  if (f) fclose(f);
  return f != NULL;
#endif
}
/* A regular file's stamp (never through a symlink): device, inode, size, modification and change time. What
   tells a file a writer left from one put at its path since (an inode may be given again). 0, or errno (EEXIST:
   not a regular file); ENOENT where not known (no POSIX). */
TR__SHARED int tr__file_stamp(const char *path, uint64_t stamp[5]) {
#ifdef TR__POSIX
  struct stat st;
  if (lstat(path, &st) != 0) return errno;
  if (!S_ISREG(st.st_mode)) return EEXIST;
  stamp[0] = (uint64_t)st.st_dev;
  stamp[1] = (uint64_t)st.st_ino;
  stamp[2] = (uint64_t)st.st_size;
  stamp[3] = (uint64_t)st.st_mtime;
  stamp[4] = (uint64_t)st.st_ctime;
  return 0;
#else
  (void)path; (void)stamp;
  return ENOENT;
#endif
}
/* Can files be made in dir? A probe file created exclusively and removed (what a write does first): 0, or
   errno (EROFS, EACCES, ...). Not known (no POSIX): 0. */
TR__SHARED int tr__probe_dir(const char *dir) {
#ifdef TR__POSIX
  size_t n = strlen(dir) + 64;
  char *probe = (char *)malloc(n);
  int fd, err = 0;
  if (!probe) return ENOMEM;
  snprintf(probe, n, "%s/.probe.%ld", dir, (long)getpid());
  fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | TR__O_NOFOLLOW | TR__O_CLOEXEC, 0600);
  if (fd < 0) err = errno == EEXIST ? 0 : errno;
  else { close(fd); (void)unlink(probe); }
  free(probe);
  return err;
#else
  (void)dir;
  return 0;
#endif
}
/* Make what was appended through fd durable (fsync): 0 or errno. */
TR__SHARED int tr__fd_sync(int fd) {
#ifdef TR__POSIX
  int r;
  while ((r = fsync(fd)) != 0 && errno == EINTR) {}
  return r ? errno : 0;
#else
  (void)fd;
  return 0;
#endif
}
/* Close a kept descriptor (tr__afile_commit's keep_fd); -1 does nothing. */
TR__SHARED void tr__fd_close(int *fd) {
#ifdef TR__POSIX
  if (*fd >= 0) close(*fd);
#endif
  *fd = -1;
}
TR__SHARED int tr__strcmp_p(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
/* The largest n of "<prefix><n>[.anything]" in dir (up to 15 digits), -1 for none. */
static int64_t tr__dir_max_number(const char *dir, const char *prefix) {
  int64_t max = -1;
#ifdef TR__POSIX
  size_t n = strlen(prefix);
  DIR *d = opendir(dir);
  struct dirent *e;
  if (!d) return -1;
  while ((e = readdir(d)) != NULL) {
    const char *p = e->d_name;
    int64_t v = 0;
    int digits = 0;
    if (strncmp(p, prefix, n)) continue;
    for (p += n; *p >= '0' && *p <= '9' && digits < 15; p++, digits++) v = v * 10 + (*p - '0');
    if (digits && (!*p || *p == '.') && v > max) max = v;
  }
  closedir(d);
#else
  (void)dir; (void)prefix;
#endif
  return max;
}

/* The names in dir starting with prefix, sorted, new strings in a new array (free each and it); -1 out of
   memory. */
TR__SHARED int tr__dir_names(const char *dir, const char *prefix, char ***names) {
  int n = 0;
#ifdef TR__POSIX
  size_t len = strlen(prefix);
  DIR *d = opendir(dir);
  struct dirent *e;
  *names = NULL;
  if (!d) return 0;
  while ((e = readdir(d)) != NULL) {
    char **grown;
    if (strncmp(e->d_name, prefix, len)) continue;
    if (!(grown = (char **)realloc(*names, (size_t)(n + 1) * sizeof *grown)) || !(grown[n] = (char *)malloc(strlen(e->d_name) + 1))) {
      if (grown) *names = grown;
      while (n-- > 0) free((*names)[n]);
      free(*names);
      *names = NULL;
      closedir(d);
      return -1;
    }
    strcpy(grown[n++], e->d_name);
    *names = grown;
  }
  closedir(d);
  if (n) qsort(*names, (size_t)n, sizeof **names, tr__strcmp_p);
#else
  (void)dir; (void)prefix;
  *names = NULL;
#endif
  return n;
}

/* ---- a run directory held: two processes never log into one ------------------------------------------
   Open dir (O_NOFOLLOW), check it is a directory, take flock's exclusive lock, held while the descriptor
   is open and dropped by the system however the process ends. 0; ENOENT; ENOTDIR (a symlink or not a
   directory); EWOULDBLOCK (another process holds it). No flock on the file system: nothing held. */
static int tr__dir_hold(const char *dir, int *fd, uint64_t *dev, uint64_t *ino) {
#ifdef TR__POSIX
  struct stat st;
  int e, d = open(dir, O_RDONLY | TR__O_NOFOLLOW | TR__O_CLOEXEC);
  *fd = -1;
  if (d < 0) return errno == ELOOP ? ENOTDIR : errno;
  if (fstat(d, &st) != 0 || !S_ISDIR(st.st_mode)) { close(d); return ENOTDIR; }
  if (flock(d, LOCK_EX | LOCK_NB) != 0 && (e = errno) != ENOLCK && e != EINVAL && e != ENOTSUP) {
    close(d);
    return e == EINTR ? EWOULDBLOCK : e;
  }
  *fd = d;
  *dev = (uint64_t)st.st_dev;
  *ino = (uint64_t)st.st_ino;
  return 0;
#else
  (void)dir; (void)dev; (void)ino;
  *fd = -1;
  return ENOSYS;
#endif
}
static void tr__dir_release(int fd) {
#ifdef TR__POSIX
  if (fd >= 0) close(fd); /* the lock goes with it */
#else
  (void)fd;
#endif
}

/* ---- asynchronous saves: the step copies the state, one background thread writes it -----------------
   A staging buffer (made at the first save, grown only with the state) handed to a writer thread that
   writes through tr__afile (the same guarantees and bytes); the loop collects the outcome at its next safe
   point (on_checkpoint_saved, or the run fails). One in flight, never coalesced. Without threads the
   writer runs in the caller and is collected the same way. */
typedef struct tr__asave tr__asave;
typedef void (*tr__asave_job)(tr__asave *as, tr__afile *a);  /* the writer's side: write the staged file */
typedef void (*tr__asave_done)(tr__asave *as, hk_ctx *ctx); /* the loop's side: on_checkpoint_saved or the error */
struct tr__asave {
  unsigned char *buf;      /* the staging buffer: the loop's while idle, the writer's while busy */
  size_t len, cap;
  char *path;              /* where it goes; ctx->path of its on_checkpoint_saved */
  size_t path_cap;
  tr__asave_job job;
  tr__asave_done done;
  void *owner;             /* the registry (run layer) or the trainer */
  void *job_user;          /* the job's own description (the trainer's snapshot), freed with this */
  int pending;             /* loop thread only: handed over, outcome not yet collected */
  int err;                 /* the write's outcome: 0 or errno; why says what */
  char why[640];
#ifdef TR__THREADS
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started, busy, quit; /* busy and quit under mu */
#endif
};

static void tr__asave_raw(tr__asave *as, tr__afile *a) { tr__afile_write(a, as->buf, as->len); }

/* The write itself, in whichever thread: the same steps and messages as a synchronous save. */
static void tr__asave_write(tr__asave *as) {
  tr__afile a;
  int e;
  if (tr__afile_open(&a, as->path, TR__AF_LINK_OK) == 0) as->job(as, &a);
  e = a.err ? a.err : tr__afile_commit(&a, NULL);
  as->why[0] = 0;
  if (e && !a.tmp) snprintf(as->why, sizeof as->why, "out of memory writing '%s'", as->path);
  else if (e && a.special)
    snprintf(as->why, sizeof as->why, "'%s' is not a regular file (a device, a FIFO or a directory): it is not replaced", as->path);
  else if (e) snprintf(as->why, sizeof as->why, "%s '%s' failed: %s (the previous '%s' is untouched)", a.step, a.tmp, strerror(e), as->path);
  tr__afile_free(&a);
  as->err = e;
}

#ifdef TR__THREADS
static void *tr__asave_main(void *p) {
  tr__asave *as = (tr__asave *)p;
  pthread_mutex_lock(&as->mu);
  for (;;) {
    while (!as->busy && !as->quit) pthread_cond_wait(&as->cv, &as->mu);
    if (!as->busy) break;
    pthread_mutex_unlock(&as->mu);
    tr__asave_write(as);
    pthread_mutex_lock(&as->mu);
    as->busy = 0;
    pthread_cond_broadcast(&as->cv);
  }
  pthread_mutex_unlock(&as->mu);
  return NULL;
}
#endif

static tr__asave *tr__asave_new(void) {
  tr__asave *as = (tr__asave *)calloc(1, sizeof *as);
#ifdef TR__THREADS
  if (as && pthread_mutex_init(&as->mu, NULL) != 0) { free(as); return NULL; }
  if (as && pthread_cond_init(&as->cv, NULL) != 0) { pthread_mutex_destroy(&as->mu); free(as); return NULL; }
#endif
  return as;
}

/* Room for n staged bytes (the bytes there are kept): 0 or ENOMEM. Only while nothing is in flight. */
static int tr__asave_reserve(tr__asave *as, size_t n) {
  unsigned char *p;
  if (n <= as->cap) return 0;
  if (!(p = (unsigned char *)realloc(as->buf, n))) return ENOMEM;
  as->buf = p;
  as->cap = n;
  return 0;
}
static int tr__asave_set_path(tr__asave *as, const char *path) {
  size_t n = strlen(path) + 1;
  if (n > as->path_cap) {
    char *p = (char *)realloc(as->path, n);
    if (!p) return ENOMEM;
    as->path = p;
    as->path_cap = n;
  }
  memcpy(as->path, path, n);
  return 0;
}

/* Hand the staged file over (buf, len, path, job, done, owner set): returns at once when the writer
   thread runs, else after writing it here. */
static void tr__asave_submit(tr__asave *as) {
  as->pending = 1;
  as->err = 0;
#ifdef TR__THREADS
  if (!as->started) {
#  ifdef TR__SIGMASK /* the thread inherits a mask with everything blocked; the caller's comes back */
    tr__sigset all, old;
    int masked = sigfillset(&all) == 0 && pthread_sigmask(TR__SIG_SETMASK, &all, &old) == 0;
    as->started = pthread_create(&as->th, NULL, tr__asave_main, as) == 0;
    if (masked) (void)pthread_sigmask(TR__SIG_SETMASK, &old, NULL);
#  else
    as->started = pthread_create(&as->th, NULL, tr__asave_main, as) == 0;
#  endif
  }
  if (as->started) {
    pthread_mutex_lock(&as->mu);
    as->busy = 1;
    pthread_cond_broadcast(&as->cv);
    pthread_mutex_unlock(&as->mu);
    return;
  }
#endif
  tr__asave_write(as);
}

/* 1 when the save handed over has ended (wait: once it has), outcome in err/why; 0: none, or still going. */
static int tr__asave_ended(tr__asave *as, int wait) {
  int busy = 0;
  (void)wait;
  if (!as || !as->pending) return 0;
#ifdef TR__THREADS
  if (as->started) {
    pthread_mutex_lock(&as->mu);
    while (wait && as->busy) pthread_cond_wait(&as->cv, &as->mu);
    busy = as->busy;
    pthread_mutex_unlock(&as->mu);
  }
#endif
  if (busy) return 0;
  as->pending = 0;
  return 1;
}

/* Collect the save in flight at a safe point (wait: until it is on disk): its done runs here, in the
   loop's thread. */
static void tr__asave_settle(tr__asave *as, hk_ctx *ctx, int wait) {
  if (as && as->pending && tr__asave_ended(as, wait)) as->done(as, ctx);
}

/* The last save finishes first; an outcome nobody collected (a registry destroyed in the middle of a
   run) is said on stderr, never lost silently. */
static void tr__asave_free(tr__asave *as) {
  if (!as) return;
  if (tr__asave_ended(as, 1) && as->err) fprintf(stderr, "train.h: a checkpoint written in the background failed: %s\n", as->why);
#ifdef TR__THREADS
  if (as->started) {
    pthread_mutex_lock(&as->mu);
    as->quit = 1;
    pthread_cond_broadcast(&as->cv);
    pthread_mutex_unlock(&as->mu);
    pthread_join(as->th, NULL);
  }
  pthread_cond_destroy(&as->cv);
  pthread_mutex_destroy(&as->mu);
#endif
  free(as->buf);
  free(as->path);
  free(as->job_user);
  free(as);
}

/* ---- text for files: numbers that read back exactly, UTF-8, JSON, CSV and YAML strings ----------- */
/* The shortest text that reads back as v (Python's repr); nan/inf as Python. 16 digits first: if they fail
   17 always work, if they work 15 may: the same answer as 15, 16, 17 in turn with one try fewer. */
static void tr__num(char *buf, size_t cap, double v) {
  char shorter[32];
  if (!hk_is_finite(v)) { snprintf(buf, cap, "%s", v != v ? "nan" : v > 0 ? "inf" : "-inf"); return; }
  if (v != 0 && v > -1e9 && v < 1e9 && v == (double)(long)v) { snprintf(buf, cap, "%ld", (long)v); return; } /* %.15g's text */
  snprintf(buf, cap, "%.16g", v);
  if (strtod(buf, NULL) != v) { snprintf(buf, cap, "%.17g", v); return; }
  snprintf(shorter, sizeof shorter, "%.15g", v);
  if (strtod(shorter, NULL) == v) snprintf(buf, cap, "%s", shorter);
}
/* The length of the UTF-8 sequence at p (1 to 4 bytes), 0 when it is not one: no overlong forms, no
   surrogates, nothing above U+10FFFF (RFC 3629). */
static size_t tr__utf8_len(const unsigned char *p) {
  unsigned c = p[0];
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return (p[1] & 0xC0) == 0x80 ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if ((p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
    if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F)) return 0; /* overlong; surrogates */
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if ((p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
    if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] > 0x8F)) return 0; /* overlong; above U+10FFFF */
    return 4;
  }
  return 0;
}
static int tr__utf8_ok(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t k;
  while (*p) {
    if ((k = tr__utf8_len(p)) == 0) return 0;
    p += k;
  }
  return 1;
}
/* Text into a growing buffer (hk_bytes: out of memory sets failed). */
static void tr__putf(hk_bytes *b, const char *fmt, ...) TR__PRINTF(2, 3);
static void tr__putf(hk_bytes *b, const char *fmt, ...) {
  char tmp[512];
  int n;
  va_list ap;
  va_start(ap, fmt);
  n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) { b->failed = 1; return; }
  if ((size_t)n < sizeof tmp) { hk_bytes_put(b, tmp, (size_t)n); return; }
  {
    char *big = (char *)malloc((size_t)n + 1);
    if (!big) { b->failed = 1; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    hk_bytes_put(b, big, (size_t)n);
    free(big);
  }
}
static void tr__put_s(hk_bytes *b, const char *s) { hk_bytes_put(b, s, strlen(s)); }

/* Text that must be UTF-8 (JSON, YAML, TensorBoard, SVG): valid sequences kept, any other byte as U+FFFD,
   so every reader decodes the file (metric names are checked by tr_log_set; this covers the rest). */
static const char *tr__utf8_next(const char *s, size_t *k) { /* the sequence at s: *k bytes, or U+FFFD */
  *k = tr__utf8_len((const unsigned char *)s);
  if (*k) return s;
  *k = 3;
  return "\xEF\xBF\xBD";
}

/* JSON string, escaped */
static void tr__json_str(hk_bytes *b, const char *s) {
  hk_bytes_put(b, "\"", 1);
  while (*s) {
    unsigned char c = (unsigned char)*s;
    size_t k;
    const char *seq;
    if (c == '"' || c == '\\') { char e[2] = { '\\', (char)c }; hk_bytes_put(b, e, 2); s++; continue; }
    if (c < 0x20) { tr__putf(b, "\\u%04x", c); s++; continue; }
    seq = tr__utf8_next(s, &k);
    hk_bytes_put(b, seq, k);
    s += seq == s ? k : 1;
  }
  hk_bytes_put(b, "\"", 1);
}
TR__SHARED void tr__utf8_put(hk_bytes *b, const char *s) { /* plain text, U+FFFD for bad bytes */
  while (*s) {
    size_t k;
    const char *seq = tr__utf8_next(s, &k);
    hk_bytes_put(b, seq, k);
    s += seq == s ? k : 1;
  }
}
TR__SHARED void tr__json_num(hk_bytes *b, double v) {
  char n[40];
  if (!hk_is_finite(v)) { tr__put_s(b, v != v ? "\"NaN\"" : v > 0 ? "\"Infinity\"" : "\"-Infinity\""); return; }
  tr__num(n, sizeof n, v);
  tr__put_s(b, n);
}
/* CSV cell: quoted when it holds a comma, a quote or a line break (a metric name: UTF-8 already) */
TR__SHARED void tr__csv_cell(hk_bytes *b, const char *s) {
  if (!strpbrk(s, ",\"\r\n")) { tr__put_s(b, s); return; }
  hk_bytes_put(b, "\"", 1);
  for (; *s; s++) {
    if (*s == '"') hk_bytes_put(b, "\"\"", 2);
    else hk_bytes_put(b, s, 1);
  }
  hk_bytes_put(b, "\"", 1);
}
/* YAML scalar: quoted unless plain text YAML reads as a string (not "1.10", "-2", ".inf", nor a YAML 1.1
   boolean or null word such as "no", "Off", "y") */
TR__SHARED void tr__yaml_str(hk_bytes *b, const char *s) {
  static const char *const words[] = { "y", "n", "yes", "no", "true", "false", "on", "off", "null" };
  const char *p;
  char low[8];
  size_t i, n = strlen(s);
  int plain = s[0] != 0 && !(s[0] >= '0' && s[0] <= '9') && s[0] != '-' && s[0] != '.';
  for (p = s; *p && plain; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("_./-", *p))) plain = 0;
  if (plain && n < sizeof low) {
    for (i = 0; i <= n; i++) low[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
    for (i = 0; i < sizeof words / sizeof words[0] && plain; i++) if (!strcmp(low, words[i])) plain = 0;
  }
  if (plain) tr__put_s(b, s);
  else tr__json_str(b, s); /* a JSON string is a YAML double-quoted scalar */
}

/* ---- strings, state bytes and directories: what the run layer and the batteries share ---- */
#define TR__CB_MAX_STR 4096 /* the longest string a callback's state may hold */

static char *tr__strdup(const char *s) {
  size_t n = strlen(s ? s : "") + 1;
  char *p = (char *)malloc(n);
  if (p) memcpy(p, s ? s : "", n);
  return p;
}
/* A hk_state_sink that appends each state to an hk_bytes (user): u32 key length | key | u64 length | state. */
TR__SHARED hk_err tr__state_sink(const char *key, const void *data, size_t len, void *user) {
  hk_bytes *b = (hk_bytes *)user;
  unsigned char x[8];
  size_t klen = strlen(key);
  tr__le(x, (uint64_t)klen, 4); hk_bytes_put(b, x, 4);
  hk_bytes_put(b, key, klen);
  tr__le(x, (uint64_t)len, 8); hk_bytes_put(b, x, 8);
  hk_bytes_put(b, data, len);
  return HK_OK;
}
/* State bytes: little-endian integers, doubles as their bit patterns, strings as u32 length + bytes. */
static void tr__put_u64(hk_bytes *b, uint64_t v) { unsigned char x[8]; tr__le(x, v, 8); hk_bytes_put(b, x, 8); }
TR__SHARED void tr__put_i64(hk_bytes *b, int64_t v) { tr__put_u64(b, (uint64_t)v); }
TR__SHARED void tr__put_f64(hk_bytes *b, double v) { uint64_t u; memcpy(&u, &v, 8); tr__put_u64(b, u); }
TR__SHARED void tr__put_str(hk_bytes *b, const char *s) {
  size_t n = strlen(s ? s : "");
  unsigned char x[4];
  tr__le(x, (uint64_t)n, 4);
  hk_bytes_put(b, x, 4);
  hk_bytes_put(b, s ? s : "", n);
}
static int tr__get_u64(hk_reader *r, uint64_t *v) {
  unsigned char x[8];
  if (hk_read(r, x, 8)) return -1;
  *v = tr__get(x, 8);
  return 0;
}
static int tr__get_i64(hk_reader *r, int64_t *v) { uint64_t u; if (tr__get_u64(r, &u)) return -1; *v = (int64_t)u; return 0; }
TR__SHARED int tr__get_f64(hk_reader *r, double *v) { uint64_t u; if (tr__get_u64(r, &u)) return -1; memcpy(v, &u, 8); return 0; }
static int tr__get_str(hk_reader *r, char **out) { /* a new string in *out; -1 when bad or out of memory */
  unsigned char x[4];
  uint64_t n;
  char *s;
  if (hk_read(r, x, 4)) return -1;
  n = tr__get(x, 4);
  if (n > TR__CB_MAX_STR || n > r->len - r->pos) return -1;
  s = (char *)malloc((size_t)n + 1);
  if (!s) return -1;
  if (hk_read(r, s, (size_t)n) || memchr(s, 0, (size_t)n)) { free(s); return -1; }
  s[n] = 0;
  *out = s;
  return 0;
}
/* mkdir -p; 0 on success */
static int tr__mkdirs(const char *dir) {
#ifdef TR__POSIX
  char buf[TR__CB_MAX_STR];
  size_t i, n = strlen(dir);
  if (n == 0 || n >= sizeof buf) return n == 0 ? 0 : -1;
  memcpy(buf, dir, n + 1);
  for (i = 1; i <= n; i++) {
    if (buf[i] == '/' || buf[i] == 0) {
      char c = buf[i];
      buf[i] = 0;
      if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
      buf[i] = c;
    }
  }
  return 0;
#else
  (void)dir;
  return 0;
#endif
}

/* A run id: 128 random bits in hex, from the system, else time, pid and addresses through splitmix64
   (tells runs apart; nothing secret). */
TR__SHARED void tr__random_id(char out[33]) {
  static uint64_t counter;
  unsigned char b[16];
  size_t got = 0, i;
  tr_rng r;
  uint64_t w[2];
#ifdef TR__POSIX
  FILE *f = fopen("/dev/urandom", "rb");
  if (f) { got = fread(b, 1, sizeof b, f); fclose(f); }
  r.state = (uint64_t)getpid() << 32;
#else
  r.state = 0;
#endif
  if (got != sizeof b) {
    r.state ^= (uint64_t)time(NULL) ^ (uint64_t)clock() << 20 ^ (uint64_t)(uintptr_t)&r ^ (uint64_t)(uintptr_t)out ^ ++counter << 48;
    w[0] = tr_rng_u64(&r);
    w[1] = tr_rng_u64(&r);
    for (i = 0; i < 16; i++) b[i] = (unsigned char)(w[i / 8] >> (8 * (i % 8)));
  }
  for (i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", (unsigned)b[i]);
}

/* CRC-32C (0x82F63B78) a nibble at a time: a 16-entry table, 4x faster than bitwise (bench-log). */
TRAIN_API uint32_t tr_crc32c(const void *data, size_t n) {
  static const uint32_t nibble[16] = {
    0x00000000u, 0x105EC76Fu, 0x20BD8EDEu, 0x30E349B1u, 0x417B1DBCu, 0x5125DAD3u, 0x61C69362u, 0x7198540Du,
    0x82F63B78u, 0x92A8FC17u, 0xA24BB5A6u, 0xB21572C9u, 0xC38D26C4u, 0xD3D3E1ABu, 0xE330A81Au, 0xF36E6F75u };
  const unsigned char *p = (const unsigned char *)data;
  uint32_t crc = 0xFFFFFFFFu;
  size_t i;
  for (i = 0; i < n; i++) {
    crc ^= p[i];
    crc = (crc >> 4) ^ nibble[crc & 15u];
    crc = (crc >> 4) ^ nibble[crc & 15u];
  }
  return crc ^ 0xFFFFFFFFu;
}
TRAIN_API uint32_t tr_crc32c_masked(const void *data, size_t n) {
  uint32_t c = tr_crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

/* ---- what the process uses (device_stats): the POSIX seam ------------------------------------------
   Resident and peak memory, CPU time, load; NaN where unknown. Linux: /proc/self/status, /proc/loadavg,
   getrusage; elsewhere getrusage's peak and CPU time. */
typedef struct tr__host_use {
  double rss, peak;             /* bytes */
  double cpu;                   /* user + system seconds since the process began */
  double load1;                 /* the 1-minute load average */
} tr__host_use;
#if defined(TR__POSIX) && defined(__linux__)
/* a small /proc file's text, NUL-terminated; its length, or -1 */
static long tr__proc_read(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | TR__O_CLOEXEC);
  ssize_t n;
  if (fd < 0) return -1;
  do n = read(fd, buf, cap - 1); while (n < 0 && errno == EINTR);
  close(fd);
  if (n < 0) return -1;
  buf[n] = 0;
  return (long)n;
}
static double tr__proc_kb(const char *text, const char *key) { /* "VmRSS:\t  1234 kB" in bytes */
  const char *p = strstr(text, key);
  return p ? 1024.0 * strtod(p + strlen(key), NULL) : NAN;
}
#endif
TR__SHARED void tr__host_read(tr__host_use *u) {
#ifdef TR__POSIX
  struct rusage ru;
#endif
#if defined(TR__POSIX) && defined(__linux__)
  char buf[4096];
#endif
  u->rss = u->peak = u->cpu = u->load1 = NAN;
#ifdef TR__POSIX
  if (getrusage(RUSAGE_SELF, &ru) == 0) {
    u->cpu = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
             1e-6 * (double)ru.ru_stime.tv_usec;
#  ifdef __APPLE__
    u->peak = (double)ru.ru_maxrss; /* bytes there, kilobytes on Linux and the BSDs */
#  else
    u->peak = 1024.0 * (double)ru.ru_maxrss;
#  endif
  }
#endif
#if defined(TR__POSIX) && defined(__linux__)
  if (tr__proc_read("/proc/self/status", buf, sizeof buf) > 0) {
    double hwm = tr__proc_kb(buf, "VmHWM:");
    u->rss = tr__proc_kb(buf, "VmRSS:");
    if (hk_is_finite(hwm)) u->peak = hwm;
  }
  if (tr__proc_read("/proc/loadavg", buf, sizeof buf) > 0) u->load1 = strtod(buf, NULL);
#endif
}
#if defined(TRAIN_CUDA) && defined(TR__POSIX)
/* A library loaded at run time (NVML: no link-time dependency); NULL and why when it is not there. */
TR__SHARED void *tr__dl_open(const char *name, char *why, size_t cap) {
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  const char *e = h ? NULL : dlerror();
  if (!h) snprintf(why, cap, "%s", e ? e : "not found");
  return h;
}
/* a function of it, or NULL (a function pointer from dlsym's void *: memcpy, as ISO C allows no cast) */
TR__SHARED int tr__dl_fn(void *lib, const char *name, void *fn, size_t size) {
  void *p = dlsym(lib, name);
  if (!p || size != sizeof p) return -1;
  memcpy(fn, &p, size);
  return 0;
}
TR__SHARED void tr__dl_close(void *lib) { if (lib) dlclose(lib); }
#endif
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
