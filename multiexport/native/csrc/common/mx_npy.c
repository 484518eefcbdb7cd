/* .npy reader and writer; see mx_npy.h and NumPy's format spec (numpy.lib.format). */
#define _POSIX_C_SOURCE 200809L
#include "mx_npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

int64_t mx_num_elements(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

static void *aligned_alloc64(size_t n) {
  void *p = NULL;
  /* 64-byte alignment lets runtimes alias the buffer (PJRT CPU zero-copy wants aligned host memory). */
  if (posix_memalign(&p, 64, n ? n : 1) != 0) return NULL;
  return p;
}

/* Finds `'key':` in the header dict and returns a pointer just past the colon, or NULL. */
static const char *dict_value(const char *header, const char *key) {
  char quoted[32];
  snprintf(quoted, sizeof quoted, "'%s'", key);
  const char *at = strstr(header, quoted);
  if (!at) return NULL;
  at += strlen(quoted);
  while (*at == ' ') at++;
  if (*at != ':') return NULL;
  at++;
  while (*at == ' ') at++;
  return at;
}

/* Parses the header dict, a Python literal like {'descr': '<f4', 'fortran_order': False, 'shape': (8, 16), }. */
static int parse_header(const char *header, mx_npy *out, char *err, size_t err_len) {
  const char *d = dict_value(header, "descr");
  if (!d || *d != '\'') { snprintf(err, err_len, "no 'descr' string in the header"); return -1; }
  const char *end = strchr(d + 1, '\'');
  if (!end || (size_t)(end - d - 1) >= sizeof out->descr) {
    snprintf(err, err_len, "unsupported descr (structured dtypes are not read)");
    return -1;
  }
  memcpy(out->descr, d + 1, (size_t)(end - d - 1));
  out->descr[end - d - 1] = '\0';

  const char *f = dict_value(header, "fortran_order");
  if (!f) { snprintf(err, err_len, "no 'fortran_order' in the header"); return -1; }
  if (strncmp(f, "False", 5) != 0) { snprintf(err, err_len, "Fortran-ordered array: save it C-contiguous"); return -1; }

  const char *s = dict_value(header, "shape");
  if (!s || *s != '(') { snprintf(err, err_len, "no 'shape' tuple in the header"); return -1; }
  s++;
  out->ndim = 0;
  for (;;) {
    while (*s == ' ' || *s == ',') s++;
    if (*s == ')') break;
    char *after;
    long long dim = strtoll(s, &after, 10);
    if (after == s || dim < 0) { snprintf(err, err_len, "bad 'shape' in the header"); return -1; }
    if (out->ndim == MX_NPY_MAX_DIMS) { snprintf(err, err_len, "more than %d dimensions", MX_NPY_MAX_DIMS); return -1; }
    out->shape[out->ndim++] = dim;
    s = after;
  }
  return 0;
}

/* Bytes per element of a NumPy descr like '<f4' or '|b1' (the digits after the kind letter). */
static long descr_itemsize(const char *descr) {
  size_t n = strlen(descr);
  if (n < 3) return -1;
  return strtol(descr + 2, NULL, 10);
}

int mx_npy_read(const char *path, mx_npy *out, char *err, size_t err_len) {
  memset(out, 0, sizeof *out);
  FILE *fh = fopen(path, "rb");
  if (!fh) { snprintf(err, err_len, "cannot open %s", path); return -1; }
  unsigned char pre[12];
  int rc = -1;
  char *header = NULL;
  if (fread(pre, 1, 10, fh) != 10 || memcmp(pre, MAGIC, 6) != 0) {
    snprintf(err, err_len, "%s: not a .npy file", path);
    goto done;
  }
  size_t header_len;
  if (pre[6] == 1) {
    header_len = pre[8] | (size_t)pre[9] << 8;
  } else if (pre[6] == 2 || pre[6] == 3) { /* 4-byte header length */
    if (fread(pre + 10, 1, 2, fh) != 2) { snprintf(err, err_len, "%s: truncated header", path); goto done; }
    header_len = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
  } else {
    snprintf(err, err_len, "%s: unknown .npy version %d", path, pre[6]);
    goto done;
  }
  header = (char *)malloc(header_len + 1);
  if (!header || fread(header, 1, header_len, fh) != header_len) {
    snprintf(err, err_len, "%s: truncated header", path);
    goto done;
  }
  header[header_len] = '\0';
  char why[160];
  if (parse_header(header, out, why, sizeof why) != 0) {
    snprintf(err, err_len, "%s: %s", path, why);
    goto done;
  }
  long itemsize = descr_itemsize(out->descr);
  if (itemsize <= 0) { snprintf(err, err_len, "%s: unsupported descr '%s'", path, out->descr); goto done; }
  out->nbytes = (size_t)mx_num_elements(out->ndim, out->shape) * (size_t)itemsize;
  out->data = aligned_alloc64(out->nbytes);
  if (!out->data) { snprintf(err, err_len, "%s: out of memory for %zu bytes", path, out->nbytes); goto done; }
  if (fread(out->data, 1, out->nbytes, fh) != out->nbytes) {
    snprintf(err, err_len, "%s: expected %zu bytes of data after the header", path, out->nbytes);
    goto done;
  }
  rc = 0;
done:
  free(header);
  fclose(fh);
  if (rc != 0) mx_npy_free(out);
  return rc;
}

int mx_npy_write(const char *path, const char *descr, int ndim, const int64_t *shape, const void *data,
                 size_t nbytes, char *err, size_t err_len) {
  char dict[1024];
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int i = 0; i < ndim && n < (int)sizeof dict; i++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, ndim == 1 ? "%lld," : (i ? ", %lld" : "%lld"), (long long)shape[i]);
  if (n < (int)sizeof dict) n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
  if (n >= (int)sizeof dict - 64) { snprintf(err, err_len, "%s: header too long", path); return -1; }
  /* Version 1.0: magic + 2 version bytes + 2-byte length, the dict space-padded so that the data
     starts on a 64-byte boundary, ending in a newline (what np.save writes). */
  size_t total = 10 + (size_t)n + 1;
  size_t pad = (64 - total % 64) % 64;
  size_t header_len = (size_t)n + pad + 1;
  FILE *fh = fopen(path, "wb");
  if (!fh) { snprintf(err, err_len, "cannot create %s", path); return -1; }
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(header_len & 0xFF),
                           (unsigned char)(header_len >> 8)};
  int ok = fwrite(pre, 1, 10, fh) == 10 && fwrite(dict, 1, (size_t)n, fh) == (size_t)n;
  for (size_t i = 0; ok && i < pad; i++) ok = fputc(' ', fh) != EOF;
  ok = ok && fputc('\n', fh) != EOF && fwrite(data, 1, nbytes, fh) == nbytes;
  ok = (fclose(fh) == 0) && ok;
  if (!ok) { snprintf(err, err_len, "cannot write %s", path); return -1; }
  return 0;
}

void mx_npy_free(mx_npy *array) {
  free(array->data);
  array->data = NULL;
  array->nbytes = 0;
}
